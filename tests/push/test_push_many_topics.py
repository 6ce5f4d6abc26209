"""A push consumer of many topics, one of them busy (docs/benchmarks.md, "A consumer of a thousand
topics"): the cache goes to the queue with messages, and idle queues keep one long poll each."""

from __future__ import annotations

import threading

from tests.push._util import run, send_all, until
from thrust.message import ConsumeResult, Message, ReceivedMessage
from thrust.producer import Producer
from thrust.push_consumer import PushConsumer
from thrust.testing import embedded_server

TOPICS = 50


def test_busy_topic_among_idle_ones_gets_the_cache_and_idle_queues_poll_once() -> None:
    """100 messages on one of 50 topics with a cache of 100: split evenly, each queue's share was 2 and
    draining them took at least 50 receives; split by demand, the busy queue asks for a batch. Every idle
    queue keeps one long poll, not `receives_per_queue` (2)."""

    async def main() -> None:
        async with embedded_server(default_queues=1) as srv:
            ep = srv.endpoints[0]
            topics = [f"m{i}" for i in range(TOPICS)]
            lock = threading.Lock()
            seen: list[str] = []

            def listener(m: ReceivedMessage) -> ConsumeResult:
                with lock:
                    seen.append(m.message_id)
                return ConsumeResult.SUCCESS

            consumer = PushConsumer(
                endpoints=ep,
                group="g",
                subscriptions=dict.fromkeys(topics, "*"),
                listener=listener,
                max_cache_message_count=100,
            )
            async with Producer(endpoints=ep, topics=["m0"]) as producer:
                ids = await send_all(producer, [Message(topic="m0", body=b"%d" % i) for i in range(100)])
            async with consumer:
                await until(lambda: len(set(seen)) >= 100)
                assert set(ids) <= set(seen)
                hot = [r for r in srv.stats.receives if r.topic == "m0"]
                assert len(hot) < 20, len(hot)
                await until(lambda: len(consumer.stats().queues) == TOPICS)
                await until(lambda: srv.pending_polls("g") >= TOPICS - 1)
                # one long poll per idle queue, not `receives_per_queue`
                quiet = [q for q in consumer.stats().queues if q.topic != "m0"]
                assert len(quiet) == TOPICS - 1
                assert all(q.receives_in_flight == 1 for q in quiet)
                for topic in topics[1:]:
                    assert srv.pending_polls("g", topic=topic) <= 1

    run(main)
