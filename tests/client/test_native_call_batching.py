"""On the native transport, the unary calls started during one iteration of the event loop reach the
channel together (`NativeRpcClient._start`, `Channel.unary_many`): tokio wakes once for them and their
frames go out together (docs/architecture.md, "The native transport")."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import thrust
from tests.client._util import run
from tests.server._wire import message
from thrust._core.endpoints import parse_endpoint
from thrust._io.metadata import Metadata
from thrust._io.native import NativeHub, NativeRpcClient
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.testing import embedded_server

pytestmark = pytest.mark.native

CALLS = 32


class _Recording:
    """The real channel, recording how many calls each `unary_many` handed over."""

    def __init__(self, channel: Any) -> None:
        self.channel = channel
        self.batches: list[int] = []

    def unary_many(self, calls: list[Any]) -> None:
        self.batches.append(len(calls))
        self.channel.unary_many(calls)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.channel, name)


def test_calls_started_in_one_iteration_reach_the_channel_together_and_each_gets_its_own_answer() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            config = thrust.ClientConfig(srv.endpoints[0])
            hub = NativeHub()
            client = NativeRpcClient(parse_endpoint(srv.endpoints[0]), config, Metadata(config, "batch"), hub)
            recording = _Recording(client._channel)
            client._channel = recording
            try:
                # Tasks started together take their first step in the same iteration of the loop.
                responses = await asyncio.gather(
                    *(
                        client.unary("SendMessage", s.SendMessageRequest(messages=[message("t")]), 10.0)
                        for _ in range(CALLS)
                    )
                )
                assert recording.batches == [CALLS]
                assert len({r.entries[0].message_id for r in responses}) == CALLS
                assert srv.stats.calls["SendMessage"] == CALLS
                # One call alone is a batch of one; a call with an invalid header fails alone, typed,
                # and the call handed over with it still goes through.
                await client.unary("SendMessage", s.SendMessageRequest(messages=[message("t")]), 10.0)
                assert recording.batches == [CALLS, 1]
                metadata = client._metadata
                made = 0

                def second_call_has_a_bad_header() -> tuple[tuple[str, str], ...]:
                    nonlocal made
                    made += 1
                    headers = metadata()
                    return (*headers, ("bad header", "x")) if made == 2 else headers

                client._metadata = second_call_has_a_bad_header  # type: ignore[assignment]
                outcomes = await asyncio.gather(
                    client.unary("SendMessage", s.SendMessageRequest(messages=[message("t")]), 10.0),
                    client.unary("SendMessage", s.SendMessageRequest(messages=[message("t")]), 10.0),
                    return_exceptions=True,
                )
                assert recording.batches == [CALLS, 1, 2]
                assert outcomes[0].entries[0].message_id  # type: ignore[union-attr]
                assert isinstance(outcomes[1], thrust.ThrustError), repr(outcomes[1])
                assert "bad header" in str(outcomes[1])
                assert srv.stats.calls["SendMessage"] == CALLS + 2
            finally:
                await client.close(0.1)
                hub.close()

    run(scenario)
