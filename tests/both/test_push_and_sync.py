"""PushConsumer (sync and async listeners, batched acks, FIFO, retries to the DLQ) and the `thrust.sync`
facade against both servers (tests/engines.py), same code."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import thrust
import thrust.sync
from tests.both.test_roundtrip import dead_letter_consumer
from tests.client._util import receive_n
from tests.engines import Engine
from tests.push._util import run, send_all, until


def test_push_with_a_sync_listener_acks_in_batches(engine: Engine) -> None:
    topic, group = engine.topic(queues=2), engine.group()

    async def main() -> None:
        seen: set[str] = set()
        threads: set[str] = set()
        lock = threading.Lock()

        def listener(m: thrust.ReceivedMessage) -> thrust.ConsumeResult:
            with lock:
                seen.add(m.message_id)
                threads.add(threading.current_thread().name)
            return thrust.ConsumeResult.SUCCESS

        consumer = thrust.PushConsumer(
            endpoints=engine.endpoint, group=group, subscriptions={topic: "*"}, listener=listener
        )
        async with thrust.Producer(endpoints=engine.endpoint, topics=[topic]) as producer, consumer:
            ids = await send_all(producer, [thrust.Message(topic=topic, body=b"%d" % i) for i in range(200)])
            await until(lambda: consumer.stats().acked == 200, timeout=40)
            stats = consumer.stats()
        assert seen == set(ids)
        # Listeners run off the event loop, and acks travel in batches, not one RPC per message.
        assert threading.main_thread().name not in threads
        assert stats.ack_rpcs <= 200 / 2, stats
        assert stats.consume_failures == 0

    run(main())


def test_push_with_an_async_listener_and_a_tag_filter(engine: Engine) -> None:
    topic, group = engine.topic(), engine.group()

    async def main() -> None:
        got: list[str] = []

        async def listener(m: thrust.ReceivedMessage) -> thrust.ConsumeResult:
            await asyncio.sleep(0)
            got.append(m.tag or "")
            return thrust.ConsumeResult.SUCCESS

        consumer = thrust.PushConsumer(
            endpoints=engine.endpoint, group=group, subscriptions={topic: "keep"}, listener=listener
        )
        async with thrust.Producer(endpoints=engine.endpoint, topics=[topic]) as producer, consumer:
            for i in range(20):
                await producer.send(thrust.Message(topic=topic, body=b"x", tag="keep" if i % 2 else "drop"))
            await until(lambda: consumer.stats().acked == 10, timeout=30)
        assert got == ["keep"] * 10

    run(main())


def test_push_fifo_keeps_order_per_group_with_a_local_retry(engine: Engine) -> None:
    topic, group = engine.topic("FIFO", queues=2), engine.group(fifo=True, max_attempts=5)

    async def main() -> None:
        seen: list[tuple[str, int]] = []
        failed: set[str] = set()
        lock = threading.Lock()

        def listener(m: thrust.ReceivedMessage) -> thrust.ConsumeResult:
            n = int(m.body)
            with lock:
                seen.append((m.message_group or "", n))
                if n == 3 and m.message_id not in failed:
                    failed.add(m.message_id)
                    return thrust.ConsumeResult.FAILURE
            return thrust.ConsumeResult.SUCCESS

        consumer = thrust.PushConsumer(
            endpoints=engine.endpoint, group=group, subscriptions={topic: "*"}, listener=listener
        )
        async with thrust.Producer(endpoints=engine.endpoint, topics=[topic]) as producer, consumer:
            for n in range(8):
                for key in ("a", "b"):
                    await producer.send(thrust.Message(topic=topic, body=b"%d" % n, message_group=key))
            await until(lambda: consumer.stats().acked == 16, timeout=40)
        for key in ("a", "b"):
            # In send order, the failed message repeated right away, before the next one.
            assert [n for k, n in seen if k == key] == [0, 1, 2, 3, 3, 4, 5, 6, 7]

    run(main())


@pytest.mark.slow
def test_push_failures_are_retried_then_dead_lettered(engine: Engine) -> None:
    topic, group = engine.topic(), engine.group(max_attempts=2)
    dlq_group = engine.group()

    async def main() -> None:
        attempts: list[int] = []

        def listener(m: thrust.ReceivedMessage) -> thrust.ConsumeResult:
            attempts.append(m.delivery_attempt)
            return thrust.ConsumeResult.FAILURE

        consumer = thrust.PushConsumer(
            endpoints=engine.endpoint, group=group, subscriptions={topic: "*"}, listener=listener
        )
        async with thrust.Producer(endpoints=engine.endpoint, topics=[topic]) as producer:
            async with consumer:
                sent = await producer.send(thrust.Message(topic=topic, body=b"poison"))
                # Attempt 1 fails and is nacked with the group's backoff; attempt 2 is the last.
                # Not FIFO: each failure is nacked, and the server dead-letters the message when the
                # last attempt's nack comes in (the client forwards only FIFO messages itself).
                await until(lambda: consumer.stats().nacked == 2, timeout=40)
            assert attempts == [1, 2]
        async with await dead_letter_consumer(engine, group, dlq_group) as dlq:
            [dead] = await receive_n(dlq, 1)
            assert dead.message_id == sent.message_id and dead.body == b"poison"
            await dead.ack()
        assert attempts == [1, 2]

    run(main())


def test_sync_facade_producer_simple_and_push_consumers(engine: Engine) -> None:
    topic, simple_group, push_group = engine.topic(), engine.group(), engine.group()
    with thrust.sync.Producer(endpoints=engine.endpoint, topics=[topic]) as producer:
        sent = [producer.send(thrust.Message(topic=topic, body=b"s%d" % i)).message_id for i in range(10)]
    with thrust.sync.SimpleConsumer(
        endpoints=engine.endpoint, group=simple_group, subscriptions={topic: "*"}, await_duration=5
    ) as consumer:
        got: list[thrust.ReceivedMessage] = []
        while len(got) < 10:
            got += consumer.receive(32, 15)
        assert sorted(m.message_id for m in got) == sorted(sent)
        assert consumer.ack_many(got) == [None] * 10

    seen: set[str] = set()
    lock = threading.Lock()

    def listener(m: thrust.ReceivedMessage) -> thrust.ConsumeResult:
        with lock:
            seen.add(m.message_id)
        return thrust.ConsumeResult.SUCCESS

    with thrust.sync.PushConsumer(
        endpoints=engine.endpoint, group=push_group, subscriptions={topic: "*"}, listener=listener
    ):
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            with lock:
                if seen >= set(sent):
                    break
            time.sleep(0.05)
    assert seen == set(sent)
