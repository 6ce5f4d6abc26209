"""Deep pipelining: a full window of sends in flight against the embedded server over real gRPC."""

from __future__ import annotations

import asyncio

import thrust
from tests.client._util import run
from thrust.testing import embedded_server


def test_5000_pipelined_sends_with_a_window_of_1024_all_get_receipts() -> None:
    # gRPC core's server backlog protection used to cancel calls the asyncio server had not picked up
    # yet once ~1000 were queued: sends failed with CANCELLED at about 1024 in flight.
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv:
            async with thrust.Producer(endpoints=srv.endpoints[0], topics=["t"], max_in_flight=1024) as p:
                futures = [
                    await p.send_async(thrust.Message(topic="t", body=b"m%d" % i)) for i in range(5000)
                ]
                receipts = await asyncio.gather(*futures)
                assert len(receipts) == 5000
                assert len({r.message_id for r in receipts}) == 5000
                assert srv.stats.calls["SendMessage"] >= 5000

    run(scenario)


def test_default_window_is_1024() -> None:
    assert thrust.Producer(endpoints="127.0.0.1:1")._max_in_flight == 1024
