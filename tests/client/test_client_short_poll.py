"""SimpleConsumer with an await duration below the proxy's 5 s minimum long poll (docs/protocol.md §6.2)."""

from __future__ import annotations

import logging

import pytest

import thrust
from tests.client._util import receive_n, run
from thrust._core.settings import receive_deadline
from thrust.testing import embedded_server


def test_receive_deadline_covers_the_proxys_minimum_poll() -> None:
    assert receive_deadline(1.0, 3.0) == 8.0
    assert receive_deadline(0.1, 0.5) == 5.5
    assert receive_deadline(20.0, 3.0) == 23.0


@pytest.mark.slow
def test_short_await_duration_receives_instead_of_illegal_polling_time() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=1
                ) as c,
                thrust.Producer(endpoints=ep, topics=["t"]) as p,
            ):
                # An empty poll: answered (within the 8 s deadline the client gives it), not refused.
                assert await c.receive(8) == []
                receipt = await p.send(thrust.Message(topic="t", body=b"x"))
                [m] = await receive_n(c, 1)
                assert m.message_id == receipt.message_id
                await m.ack()

    run(scenario)


def _await_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "thrust.consumer" and "await_duration" in r.getMessage()]


def test_await_duration_below_the_minimum_long_poll_warns_once_per_consumer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """1 s becomes the server's 5 s minimum without the server saying so: one warning when the consumer is
    made, none per receive, none for 5 s or more."""
    caplog.set_level(logging.WARNING, logger="thrust")

    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with thrust.Producer(endpoints=ep, topics=["t"]) as p:
                async with thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=1
                ) as c:
                    [warning] = _await_warnings(caplog)
                    assert warning.levelno == logging.WARNING
                    assert "await_duration=1 s" in warning.getMessage()
                    assert "minimum long poll of 5 s" in warning.getMessage()
                    for i in range(3):  # three receives, each answered by a message: no more warnings
                        await p.send(thrust.Message(topic="t", body=b"%d" % i))
                        for m in await receive_n(c, 1):
                            await m.ack()
                assert len(_await_warnings(caplog)) == 1
                for seconds in (5, 5.0, 20):
                    async with thrust.SimpleConsumer(
                        endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=seconds
                    ) as c:
                        await p.send(thrust.Message(topic="t", body=b"x"))
                        for m in await receive_n(c, 1):
                            await m.ack()
                assert len(_await_warnings(caplog)) == 1

    run(scenario)
