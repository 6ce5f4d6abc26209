"""`embedded_server()` and `ServerProcess()` agree: both create unknown topics and consumer groups on first
use unless given `auto_create=False` (then TOPIC_NOT_FOUND and CONSUMER_GROUP_NOT_FOUND, as `thrust serve`
without `--auto-create`, and as a proxy whose broker has `autoCreateSubscriptionGroup=false`)."""

from __future__ import annotations

import pytest

from tests.server._wire import Wire, run, status_of
from thrust._codec.status import Code
from thrust.testing import ServerProcess, embedded_server


async def _route_codes(endpoint: str) -> tuple[int, int]:
    """QueryRoute of a topic nobody created, then of one created at start (`known`)."""
    async with Wire(endpoint) as w:
        return (await w.route("never-created")).status.code, (await w.route("known")).status.code


async def _unknown_group_codes(endpoint: str) -> tuple[int, int, int, int]:
    """For a group nobody created, on the created topic `known`: the Telemetry settings reply,
    QueryAssignment, a receive; then a receive of the created group `billing`."""
    async with Wire(endpoint) as w:
        call = await w.consumer("typo-group", "known")  # asserts the settings reply is OK
        assignment = (await w.assignment("known", "typo-group")).status.code
        unknown = status_of(await w.receive("typo-group", "known", polling=0.5)).code
        known = status_of(await w.receive("billing", "known", polling=0.5)).code
        call.cancel()
        return Code.OK, assignment, unknown, known


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


def test_embedded_server_auto_create_false_refuses_an_unknown_group_at_its_first_receive() -> None:
    # The proxy reads a group's config for the settings and the assignment and keeps its defaults when
    # there is none; the broker's pop refuses the group (PopMessageProcessor, SUBSCRIPTION_GROUP_NOT_EXIST).
    async def scenario() -> tuple[int, int, int, int]:
        async with embedded_server(topics=["known"], groups=["billing"], auto_create=False) as srv:
            codes = await _unknown_group_codes(srv.endpoints[0])
            assert [g.name for g in srv.catalog.groups()] == ["billing"], "the typo was created"
            return codes

    # An empty long poll of the created group answers MESSAGE_NOT_FOUND.
    assert run(scenario()) == (Code.OK, Code.OK, Code.CONSUMER_GROUP_NOT_FOUND, Code.MESSAGE_NOT_FOUND)


def test_embedded_server_creates_an_unknown_group_at_its_first_receive_by_default() -> None:
    async def scenario() -> tuple[tuple[int, int, int, int], list[str]]:
        async with embedded_server(topics=["known"], groups=["billing"]) as srv:
            codes = await _unknown_group_codes(srv.endpoints[0])
            return codes, [g.name for g in srv.catalog.groups()]

    codes, groups = run(scenario())
    assert codes == (Code.OK, Code.OK, Code.MESSAGE_NOT_FOUND, Code.MESSAGE_NOT_FOUND)
    assert groups == ["billing", "typo-group"]


@pytest.mark.slow
def test_serve_without_auto_create_refuses_an_unknown_group() -> None:
    with ServerProcess(topics=["known"], groups=["billing"], auto_create=False) as proc:
        codes = run(_unknown_group_codes(proc.endpoints[0]))
    assert codes == (Code.OK, Code.OK, Code.CONSUMER_GROUP_NOT_FOUND, Code.MESSAGE_NOT_FOUND)


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
