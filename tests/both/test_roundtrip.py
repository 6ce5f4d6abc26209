"""Producer and SimpleConsumer against both servers (tests/engines.py): every message type, same code.

Each test runs twice: against thrust's embedded server and against a real Apache RocketMQ proxy. Limits
are the proxy's (receive invisible duration >= 10 s, long polls 5-20 s).
"""

from __future__ import annotations

import asyncio
import time

import pytest

import thrust
from tests.client._util import receive_n, run
from tests.engines import Engine


def consumer(
    engine: Engine, group: str, subscriptions: dict[str, object], **kw: object
) -> thrust.SimpleConsumer:
    kw.setdefault("await_duration", 5)
    return thrust.SimpleConsumer(endpoints=engine.endpoint, group=group, subscriptions=subscriptions, **kw)  # type: ignore[arg-type]


async def dead_letter_consumer(
    engine: Engine, group: str, dlq_group: str, group_consumer: thrust.SimpleConsumer | None = None
) -> thrust.SimpleConsumer:
    """A started consumer of `%DLQ%<group>`, once the topic is routable (up to 50 s).

    The broker creates that topic with the first dead letter, and the real proxy dead-letters a message
    only when a receive of its group pops it after its last attempt (apache/rocketmq proxy
    `PopMessageResultFilterImpl`, TO_DLQ; docs/interop-findings.md I2). The broker's revive makes a
    message visible again a few seconds after its invisible time, sometimes later than one long poll.
    So while the route is missing, `group_consumer` (when given) keeps receiving, and must get nothing:
    a single receive could end before the message came back, and then nothing would dead-letter it."""
    deadline = asyncio.get_running_loop().time() + 50.0
    while True:
        dlq = consumer(engine, dlq_group, {f"%DLQ%{group}": "*"})
        try:
            await dlq.start()
            return dlq
        except thrust.NotFoundError:
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"%DLQ%{group} never became routable") from None
            if group_consumer is not None:
                # Invisible 10 s, the proxy's minimum; each waits the consumer's await_duration.
                assert await group_consumer.receive(32, 10) == []
            else:
                await asyncio.sleep(0.5)


def test_normal_round_trip_with_all_fields(engine: Engine) -> None:
    topic, group = engine.topic(), engine.group()

    async def scenario() -> None:
        async with (
            consumer(engine, group, {topic: "*"}) as c,
            thrust.Producer(endpoints=engine.endpoint, topics=[topic]) as p,
        ):
            sent = thrust.Message(
                topic=topic, body=b"hello", tag="a", keys=["k1", "k2"], properties={"p": "v"}
            )
            receipt = await p.send(sent)
            assert len(receipt.message_id) == 34 and receipt.message_id == receipt.message_id.upper()
            [m] = await receive_n(c, 1)
            assert m.message_id == receipt.message_id
            assert (m.topic, m.body, m.tag, m.keys) == (topic, b"hello", "a", ("k1", "k2"))
            assert dict(m.properties) == {"p": "v"}
            assert m.delivery_attempt == 1
            assert m.message_type is thrust.MessageType.NORMAL
            assert m.born_timestamp is not None and abs(m.born_timestamp - time.time()) < 60
            await m.ack()

    run(scenario)


def test_batch_send_pipelined_sends_and_iteration(engine: Engine) -> None:
    topic, group = engine.topic(), engine.group()

    async def scenario() -> None:
        async with (
            consumer(engine, group, {topic: "*"}) as c,
            thrust.Producer(endpoints=engine.endpoint, topics=[topic], max_in_flight=8) as p,
        ):
            receipts = await p.send_batch([thrust.Message(topic=topic, body=b"b%d" % i) for i in range(5)])
            assert len({r.message_id for r in receipts}) == 5
            futures = [await p.send_async(thrust.Message(topic=topic, body=b"p%d" % i)) for i in range(50)]
            ids = {r.message_id for r in await asyncio.gather(*futures)} | {r.message_id for r in receipts}
            seen: set[str] = set()
            where: dict[str, tuple[int | None, int | None]] = {}
            async for m in c:
                seen.add(m.message_id)
                where[m.message_id] = (m.queue_id, m.queue_offset)
                await m.ack()
                if len(seen) == len(ids):
                    break
            assert seen == ids
            # A batch lands in one queue at consecutive offsets, which its receipts report.
            assert len({where[r.message_id][0] for r in receipts}) == 1
            assert [where[r.message_id][1] for r in receipts] == [r.offset for r in receipts]
            assert [r.offset for r in receipts] == list(range(receipts[0].offset, receipts[0].offset + 5))

    run(scenario)


def test_fifo_order_per_message_group(engine: Engine) -> None:
    topic, group = engine.topic("FIFO"), engine.group(fifo=True)

    async def scenario() -> None:
        async with (
            consumer(engine, group, {topic: "*"}) as c,
            thrust.Producer(endpoints=engine.endpoint, topics=[topic]) as p,
        ):
            for i in range(10):
                for key in ("a", "b"):
                    await p.send(thrust.Message(topic=topic, body=f"{key}{i}".encode(), message_group=key))
            order: dict[str, list[int]] = {"a": [], "b": []}
            while sum(map(len, order.values())) < 20:
                batch = await c.receive(32, 30)
                for m in batch:
                    assert m.message_type is thrust.MessageType.FIFO
                    order[m.message_group or ""].append(int(m.body[1:]))
                assert await c.ack_many(batch) == [None] * len(batch)
            assert order == {"a": list(range(10)), "b": list(range(10))}

    run(scenario)


@pytest.mark.slow
def test_fifo_group_waits_for_its_unacked_head(engine: Engine) -> None:
    """A FIFO group's next message is not delivered while its head is received and not acked."""
    topic, group = engine.topic("FIFO"), engine.group(fifo=True)

    async def scenario() -> None:
        async with (
            consumer(engine, group, {topic: "*"}) as c,
            thrust.Producer(endpoints=engine.endpoint, topics=[topic]) as p,
        ):
            for i in range(3):
                await p.send(thrust.Message(topic=topic, body=b"%d" % i, message_group="k"))
            first: list[thrust.ReceivedMessage] = []
            while not first:
                first = await c.receive(1, 20)
            assert [m.body for m in first] == [b"0"]
            # The head is in flight: the group is blocked, whatever else is asked for.
            assert await c.receive(32, 20) == []
            await first[0].ack()
            rest = await receive_n(c, 2, invisible_duration=20)
            assert [m.body for m in rest] == [b"1", b"2"]
            await c.ack_many(rest)

    run(scenario)


@pytest.mark.slow
def test_delay_is_delivered_at_its_time_and_recall_cancels_one(engine: Engine) -> None:
    topic, group = engine.topic("DELAY"), engine.group()

    async def scenario() -> None:
        async with (
            consumer(engine, group, {topic: "*"}) as c,
            thrust.Producer(endpoints=engine.endpoint, topics=[topic]) as p,
        ):
            at = time.time() + 3
            kept = await p.send(thrust.Message(topic=topic, body=b"later", delivery_time=at))
            recalled = await p.send(thrust.Message(topic=topic, body=b"never", delivery_time=at))
            assert recalled.recall_handle
            assert await p.recall(topic, recalled.recall_handle) == recalled.message_id
            [m] = await receive_n(c, 1)
            arrived = time.time()
            assert m.message_id == kept.message_id
            assert m.message_type is thrust.MessageType.DELAY
            assert m.delivery_timestamp is not None and abs(m.delivery_timestamp - at) < 0.01
            # Not early: the real broker's timer wheel ticks in 1 s slots (timerPrecisionMs), so the
            # message may come up to one slot before the exact time, never earlier.
            assert arrived >= at - 1.0
            await m.ack()
            assert await c.receive(32) == []

    run(scenario)


@pytest.mark.slow
def test_transaction_commit_rollback_and_orphan_resolved_by_the_checker(engine: Engine) -> None:
    topic, group = engine.topic("TRANSACTION"), engine.group()
    asked: list[str] = []

    def checker(msg: thrust.ReceivedMessage) -> thrust.TransactionResolution:
        # Like a real checker, answer from the local outcome: the real broker may ask about a transaction
        # the producer already ended, when it checks before that end's op is written (5.4.0 batches them).
        asked.append(msg.message_id)
        if msg.body == b"rollback":
            return thrust.TransactionResolution.ROLLBACK
        return thrust.TransactionResolution.COMMIT

    async def scenario() -> None:
        async with (
            consumer(engine, group, {topic: "*"}) as c,
            thrust.Producer(endpoints=engine.endpoint, topics=[topic], transaction_checker=checker) as p,
        ):
            async with p.transaction() as t:
                committed = await t.send(thrust.Message(topic=topic, body=b"commit"))
            with pytest.raises(RuntimeError):
                async with p.transaction() as t:
                    rolled_back = await t.send(thrust.Message(topic=topic, body=b"rollback"))
                    raise RuntimeError("local work failed")
            # An orphan: the client never ends it; the server asks the checker, which commits.
            orphan = await p.transaction().send(thrust.Message(topic=topic, body=b"orphan"))
            # At least once: the real broker may check a transaction whose commit it has not written to
            # its op queue yet (TransactionalOpBatchService batches those ops), and the checker commits
            # it again, so the committed message can come twice. The rolled-back one never comes.
            wanted = {committed.message_id, orphan.message_id}
            seen: set[str] = set()
            while not wanted <= seen:
                got = await c.receive(32)
                assert all(m.message_type is thrust.MessageType.TRANSACTION for m in got)
                seen |= {m.message_id for m in got}
                assert await c.ack_many(got) == [None] * len(got)
            assert seen == wanted
            assert orphan.message_id in asked
            # The rolled-back message stays undelivered: keep receiving until a whole long poll comes back
            # empty; only (at-least-once) repeats of the two committed messages may still come.
            while got := await c.receive(32):
                assert {m.message_id for m in got} <= wanted, [m.body for m in got]
                assert await c.ack_many(got) == [None] * len(got)
            assert rolled_back.message_id not in seen
            if not engine.real:
                # The embedded server never checks a transaction its producer ended (a real broker may,
                # before the op of the rollback is written: docs/protocol.md §5.8), so neither the check
                # nor the checker kept it away: the rollback did.
                assert rolled_back.message_id not in asked

    run(scenario, timeout=90)


@pytest.mark.slow
def test_tag_and_sql92_filters(engine: Engine) -> None:
    topic, by_tag, by_sql = engine.topic(), engine.group(), engine.group()

    async def scenario() -> None:
        async with (
            consumer(engine, by_tag, {topic: "a||b"}) as ct,
            consumer(engine, by_sql, {topic: thrust.FilterExpression.sql("price > 10")}) as cs,
            thrust.Producer(endpoints=engine.endpoint, topics=[topic]) as p,
        ):
            for tag, price in (("a", 5), ("b", 20), ("c", 30)):
                await p.send(
                    thrust.Message(topic=topic, body=tag.encode(), tag=tag, properties={"price": str(price)})
                )
            tagged = await receive_n(ct, 2)
            priced = await receive_n(cs, 2)
            assert sorted(m.tag or "" for m in tagged) == ["a", "b"]
            assert sorted(m.body for m in priced) == [b"b", b"c"]
            await ct.ack_many(tagged)
            await cs.ack_many(priced)
            assert await ct.receive(32) == [] and await cs.receive(32) == []

    run(scenario)


@pytest.mark.slow
def test_ack_many_and_a_second_ack_of_the_same_handle(engine: Engine) -> None:
    topic, group = engine.topic(), engine.group()

    async def scenario() -> None:
        async with (
            consumer(engine, group, {topic: "*"}) as c,
            thrust.Producer(endpoints=engine.endpoint, topics=[topic]) as p,
        ):
            await p.send_batch([thrust.Message(topic=topic, body=b"%d" % i) for i in range(10)])
            got = await receive_n(c, 10, invisible_duration=15)
            assert await c.ack_many(got) == [None] * 10
            # Nothing comes back after the invisible time: the acks settled on the server.
            assert await c.receive(32, 15) == []

    run(scenario)


@pytest.mark.slow
def test_change_invisible_duration_brings_a_message_back_with_the_next_attempt(engine: Engine) -> None:
    topic, group = engine.topic(), engine.group()

    async def scenario() -> None:
        async with (
            consumer(engine, group, {topic: "*"}) as c,
            thrust.Producer(endpoints=engine.endpoint, topics=[topic]) as p,
        ):
            sent = await p.send(thrust.Message(topic=topic, body=b"again"))
            [first] = await receive_n(c, 1, invisible_duration=30)
            assert first.delivery_attempt == 1
            await c.change_invisible_duration(first, 1)  # a nack: back in about a second
            [second] = await receive_n(c, 1, invisible_duration=30)
            assert second.message_id == sent.message_id
            assert second.delivery_attempt == 2
            await second.ack()
            # The first handle is stale now; the message stays acked.
            assert await c.receive(32) == []

    run(scenario)


@pytest.mark.slow
@pytest.mark.timeout(150)  # up to 50 s of receives before the DLQ is routable (dead_letter_consumer)
def test_nacked_until_max_attempts_then_the_dead_letter_queue(engine: Engine) -> None:
    topic, group = engine.topic(), engine.group(max_attempts=2)
    dlq_group = engine.group()

    async def scenario() -> None:
        async with (
            consumer(engine, group, {topic: "*"}) as c,
            thrust.Producer(endpoints=engine.endpoint, topics=[topic]) as p,
        ):
            sent = await p.send(thrust.Message(topic=topic, body=b"poison"))
            attempts = []
            for _ in range(2):
                [m] = await receive_n(c, 1, invisible_duration=30)
                attempts.append(m.delivery_attempt)
                await c.change_invisible_duration(m, 1)
            assert attempts == [1, 2]
            # Nothing further on the topic: the message goes to %DLQ%<group>.
            assert await c.receive(32, 10) == []
            async with await dead_letter_consumer(engine, group, dlq_group, c) as dlq:
                [dead] = await receive_n(dlq, 1)
                assert dead.body == b"poison"
                assert dead.message_id == sent.message_id
                await dead.ack()

    run(scenario, timeout=140)


def test_a_new_group_receives_messages_sent_before_it_first_consumed(engine: Engine) -> None:
    """The README's quickstart: send first, then consume with a group that never consumed."""
    topic, group = engine.topic(), engine.group()

    async def scenario() -> None:
        async with thrust.Producer(endpoints=engine.endpoint, topics=[topic]) as p:
            sent = {(await p.send(thrust.Message(topic=topic, body=b"%d" % i))).message_id for i in range(5)}
        async with consumer(engine, group, {topic: "*"}) as c:
            got = await receive_n(c, 5)
            assert {m.message_id for m in got} == sent
            await c.ack_many(got)

    run(scenario)
