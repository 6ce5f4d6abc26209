"""On the native transport a channel paces its connection attempts (native/src/lib.rs, `ConnectPace`).

tonic connects again for every call that comes after a failed connection attempt, so calls waiting for a
server that is down each made attempts of their own, at their own retry pace: a producer with 128 sends
waiting opened about 128 connections per round. The channel now makes at most one attempt per step of its
backoff (50 ms doubling to 1 s), the calls between steps fail at once with the last attempt's error (and
retry within their budget, as before), and a server that comes up is reached at the next step.
"""

from __future__ import annotations

import asyncio
import time

import pytest

import thrust
from tests.client._util import run
from tests.client.test_client_unreachable import _free_port
from tests.server._wire import message
from thrust._core.endpoints import parse_endpoint
from thrust._io.metadata import Metadata
from thrust._io.native import NativeHub, NativeRpcClient
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.testing import embedded_server

pytestmark = pytest.mark.native

CALLS = 32
STEPS_MS = (50, 100, 200, 400, 800)  # then 1,000 each (`backoff` in native/src/lib.rs)


def _attempts_within(elapsed: float) -> int:
    """The most connection attempts one paced channel can make in `elapsed` seconds: one at once, then one
    at the end of each backoff step that fits."""
    attempts, t = 1, 0.0
    for step in (*STEPS_MS, *([1000] * int(elapsed + 1))):
        t += step / 1000
        if t > elapsed:
            break
        attempts += 1
    return attempts


def test_calls_waiting_for_a_server_that_is_down_share_the_channels_connection_attempts() -> None:
    async def scenario() -> None:
        port = _free_port()
        endpoint = f"127.0.0.1:{port}"
        config = thrust.ClientConfig(endpoint)
        hub = NativeHub()
        client = NativeRpcClient(parse_endpoint(endpoint), config, Metadata(config, "pace"), hub)
        try:
            began = time.monotonic()
            outcomes = await asyncio.gather(
                *(client.unary("QueryRoute", s.QueryRouteRequest(), 2.0) for _ in range(CALLS)),
                return_exceptions=True,
            )
            elapsed = time.monotonic() - began
            # Every call still fails as a call that could not connect does: typed, retriable, with the cause.
            for outcome in outcomes:
                assert isinstance(outcome, thrust.ConnectionError), repr(outcome)
                assert outcome.retriable and "refused" in str(outcome).lower(), str(outcome)
            attempts = client.connects_attempted
            # Retried (the calls waited within their budget), but paced by the channel: without the pace
            # each of the 32 calls made about six attempts of its own in these 2 s.
            assert 2 <= attempts <= _attempts_within(elapsed), (attempts, elapsed)

            # The server comes up: a call waiting meanwhile reaches it at the channel's next step, and the
            # pace starts again from its first step after the connection is made.
            call = asyncio.ensure_future(
                client.unary("SendMessage", s.SendMessageRequest(messages=[message("t")]), 30.0)
            )
            async with embedded_server(topics=["t"], groups=["g"], port=port) as srv:
                response = await call
                assert response.entries[0].message_id
                assert srv.stats.calls["SendMessage"] == 1
        finally:
            await client.close(0.1)
            hub.close()

    run(scenario)
