"""The pytest plugin (entry point `pytest11`, loaded when thrust is installed): a `thrust_server` fixture.

    def test_orders(thrust_server):
        producer = thrust.sync.Producer(endpoints=thrust_server.endpoint, topics=["orders"])
        ...

`thrust_server` is a `thrust.testing.ServerThread`: the embedded server on a free port of 127.0.0.1,
fresh for each test, on a thread of its own (so sync tests, `asyncio.run` and pytest-asyncio all reach
it), stopped after the test. Unknown topics are created on first use. Options come from the
`thrust_server` marker, with `thrust.testing.embedded_server`'s keywords:

    @pytest.mark.thrust_server(topics=["orders:8:FIFO"], groups=["billing:fifo:max-attempts=3"], brokers=2)
    def test_fifo(thrust_server): ...

The library never imports this module; pytest does.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from thrust.testing import ServerThread

__all__ = ["pytest_configure", "thrust_server"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "thrust_server(**options): options of the `thrust_server` fixture's embedded server "
        "(thrust.testing.embedded_server keywords: topics, groups, brokers, auto_create, ...)",
    )


@pytest.fixture
def thrust_server(request: pytest.FixtureRequest) -> Iterator[ServerThread]:
    """An embedded RocketMQ 5 server for this test (`thrust.testing.ServerThread`)."""
    marker = request.node.get_closest_marker("thrust_server")
    options = dict(marker.kwargs) if marker is not None else {}
    with ServerThread(**options) as server:
        yield server
