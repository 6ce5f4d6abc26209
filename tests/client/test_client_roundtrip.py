"""Producer and SimpleConsumer against the embedded server, where the embedded server's counters are the
point (calls per batch, no call for invalid input). Every message type's round trip runs on both servers
in tests/both/test_roundtrip.py."""

from __future__ import annotations

import asyncio

import pytest

import thrust
from tests.client._util import run
from thrust.testing import embedded_server


def test_batch_send_pipelined_and_iteration() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=5
                ) as c,
                thrust.Producer(endpoints=ep, topics=["t"], max_in_flight=8) as p,
            ):
                receipts = await p.send_batch([thrust.Message(topic="t", body=b"b%d" % i) for i in range(5)])
                assert len({r.message_id for r in receipts}) == 5
                assert srv.stats.calls["SendMessage"] == 1
                futures = [await p.send_async(thrust.Message(topic="t", body=b"p%d" % i)) for i in range(50)]
                ids = {r.message_id for r in await asyncio.gather(*futures)} | {
                    r.message_id for r in receipts
                }
                seen: set[str] = set()
                async for m in c:
                    seen.add(m.message_id)
                    await m.ack()
                    if len(seen) == len(ids):
                        break
                assert seen == ids

    run(scenario)


def test_validation_before_io() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv:
            async with thrust.Producer(endpoints=srv.endpoints[0], topics=["t"]) as p:
                calls = srv.stats.calls["SendMessage"]
                # Some are refused as the message is built, the rest by send (body size, delivery time).
                bad = [
                    lambda: thrust.Message(topic="t", body=b""),
                    lambda: thrust.Message(topic="t", body=b"x", tag="a|b"),
                    lambda: thrust.Message(topic="bad topic", body=b"x"),
                    lambda: thrust.Message(topic="t", body=b"x", properties={"UNIQ_KEY": "x"}),
                    lambda: thrust.Message(topic="t", body=b"x", message_group="g", delay=5),
                    lambda: thrust.Message(topic="t", body=b"x", delay=3 * 86400),
                    lambda: thrust.Message(topic="t", body=b"x" * (4 * 1024 * 1024 + 1)),
                ]
                for build in bad:
                    with pytest.raises(thrust.ValidationError) as info:
                        await p.send(build())
                    assert info.value.code is not None and not info.value.retriable
                assert srv.stats.calls["SendMessage"] == calls

    run(scenario)
