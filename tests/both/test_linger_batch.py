"""The producer's linger batch against both servers (tests/engines.py): per-message receipts from a batch
answered with ONE SendResultEntry (the real proxy: SendMessageActivity.convertToSendMessageResponse gets
one SendResult for a SEND_BATCH_MESSAGE), and FIFO groups in call order."""

from __future__ import annotations

import asyncio

import thrust
from tests.both.test_roundtrip import consumer
from tests.client._util import receive_n, run
from tests.engines import Engine


def test_linger_batch_gives_each_send_the_receipt_of_its_own_message(engine: Engine) -> None:
    topic, group = engine.topic(), engine.group()

    async def scenario() -> None:
        async with (
            consumer(engine, group, {topic: "*"}) as c,
            thrust.Producer(endpoints=engine.endpoint, topics=[topic], batch_max_messages=16) as p,
        ):
            bodies = [b"m%d" % i for i in range(40)]
            receipts = await asyncio.gather(*(p.send(thrust.Message(topic=topic, body=b)) for b in bodies))
            assert p.linger_stats is not None and p.linger_stats[0] < 40  # batched
            assert len({r.message_id for r in receipts}) == 40
            got = {m.message_id: m for m in await receive_n(c, 40, invisible_duration=30)}
            assert set(got) == {r.message_id for r in receipts}
            for body, receipt in zip(bodies, receipts, strict=True):
                m = got[receipt.message_id]
                assert m.body == body  # the receipt names this caller's own message
                assert m.queue_offset == receipt.offset
            await c.ack_many(list(got.values()))

    run(scenario)


def test_linger_batch_keeps_each_fifo_group_in_call_order(engine: Engine) -> None:
    topic, group = engine.topic("FIFO"), engine.group(fifo=True)

    async def scenario() -> None:
        async with (
            consumer(engine, group, {topic: "*"}) as c,
            thrust.Producer(endpoints=engine.endpoint, topics=[topic], batch_max_messages=16) as p,
        ):
            futures = []
            for i in range(10):
                for key in ("a", "b", "c"):
                    m = thrust.Message(topic=topic, body=f"{key}{i}".encode(), message_group=key)
                    futures.append(await p.send_async(m))  # all in flight at once
            await asyncio.gather(*futures)
            order: dict[str, list[int]] = {"a": [], "b": [], "c": []}
            while sum(map(len, order.values())) < 30:
                batch = await c.receive(32, 30)
                for m in batch:
                    order[m.message_group or ""].append(int(m.body[1:]))
                assert await c.ack_many(batch) == [None] * len(batch)
            assert order == {k: list(range(10)) for k in "abc"}

    run(scenario)
