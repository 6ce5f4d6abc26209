"""Deep pipelining: a full window of sends in flight against the embedded server over real gRPC."""

from __future__ import annotations

import asyncio

import pytest

import thrust
from tests.client._util import run
from thrust.testing import embedded_server


@pytest.mark.slow
def test_5000_pipelined_sends_with_a_window_of_1024_all_get_receipts() -> None:
    """gRPC core's server backlog protection used to cancel calls the asyncio server had not picked up yet
    once ~1000 were queued: sends failed with CANCELLED at about 1024 in flight.

    What is asserted is that a full window gets through, not how fast: the server shares this loop, so a
    window of 1024 calls waits for the server to work through the ones before it, which on a loaded machine
    takes longer than the default 3 s request timeout (calls then fail with DEADLINE_EXCEEDED, a client
    working as designed). Hence a request timeout far above that queueing time, and a single attempt per
    message, so that no retry hides a cancelled or refused call (with the server's former default of 1024
    streams per connection, the full window plus the Telemetry stream had ~30 of 5000 sends refused:
    `ServerConfig.max_concurrent_streams`)."""

    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv:
            async with thrust.Producer(
                endpoints=srv.endpoints[0],
                topics=["t"],
                max_in_flight=1024,
                max_attempts=1,
                request_timeout=40,
            ) as p:
                futures = []
                in_flight = 0
                for i in range(5000):
                    futures.append(await p.send_async(thrust.Message(topic="t", body=b"m%d" % i)))
                    in_flight = max(in_flight, sum(not f.done() for f in futures[-1024:]))
                # The window was full: 1024 sends in flight at once.
                assert in_flight == 1024
                receipts = await asyncio.gather(*futures)
                assert len(receipts) == 5000
                assert len({r.message_id for r in receipts}) == 5000
                # One call per message: nothing was cancelled and retried.
                assert srv.stats.calls["SendMessage"] == 5000
                assert srv.stats.entries["SendMessage"] == 5000

    run(scenario, timeout=80)


def test_default_window_is_1024() -> None:
    assert thrust.Producer(endpoints="127.0.0.1:1")._max_in_flight == 1024
