"""`embedded_server()` and `ServerProcess()` agree: both create unknown topics on first use unless given
`auto_create=False` (then TOPIC_NOT_FOUND, as `thrust serve` without `--auto-create`)."""

from __future__ import annotations

import pytest

from tests.server._wire import Wire, run
from thrust._codec.status import Code
from thrust.testing import ServerProcess, embedded_server


async def _route_codes(endpoint: str) -> tuple[int, int]:
    """QueryRoute of a topic nobody created, then of one created at start (`known`)."""
    async with Wire(endpoint) as w:
        return (await w.route("never-created")).status.code, (await w.route("known")).status.code


def test_embedded_server_creates_unknown_topics_by_default() -> None:
    async def scenario() -> tuple[int, int]:
        async with embedded_server(topics=["known"]) as srv:
            return await _route_codes(srv.endpoints[0])

    assert run(scenario()) == (Code.OK, Code.OK)


def test_embedded_server_auto_create_false_answers_topic_not_found() -> None:
    async def scenario() -> tuple[int, int]:
        async with embedded_server(topics=["known"], auto_create=False) as srv:
            return await _route_codes(srv.endpoints[0])

    assert run(scenario()) == (Code.TOPIC_NOT_FOUND, Code.OK)


@pytest.mark.slow
def test_server_process_creates_unknown_topics_by_default() -> None:
    with ServerProcess(topics=["known"]) as proc:
        assert run(_route_codes(proc.endpoints[0])) == (Code.OK, Code.OK)
        assert "--auto-create" in proc.command()


@pytest.mark.slow
def test_server_process_auto_create_false_answers_topic_not_found() -> None:
    with ServerProcess(topics=["known"], auto_create=False) as proc:
        assert run(_route_codes(proc.endpoints[0])) == (Code.TOPIC_NOT_FOUND, Code.OK)
        assert "--auto-create" not in proc.command()
