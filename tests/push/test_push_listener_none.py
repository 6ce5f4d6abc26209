"""A push listener that returns None (it just returns) has its message acked, not redelivered."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

import pytest

import thrust
from tests.engines import Engine
from tests.push._util import run, send_all, until


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["plain", "async"])
def test_a_listener_returning_none_acks(embedded_engine: Engine, kind: str) -> None:
    engine = embedded_engine
    topic, group = engine.topic(queues=2), engine.group()
    calls: Counter[str] = Counter()
    lock = threading.Lock()

    def plain(m: thrust.ReceivedMessage) -> None:
        with lock:
            calls[m.message_id] += 1

    async def coro(m: thrust.ReceivedMessage) -> None:
        await asyncio.sleep(0)
        calls[m.message_id] += 1

    async def main() -> None:
        consumer = thrust.PushConsumer(
            endpoints=engine.endpoint,
            group=group,
            subscriptions={topic: "*"},
            listener=plain if kind == "plain" else coro,
        )
        async with thrust.Producer(endpoints=engine.endpoint, topics=[topic]) as producer, consumer:
            ids = await send_all(producer, [thrust.Message(topic=topic, body=b"%d" % i) for i in range(20)])
            await until(lambda: consumer.stats().acked == 20, timeout=20)
            # Past the first redelivery backoff (1 s): a nacked message would be back by now.
            await asyncio.sleep(3)
            stats = consumer.stats()
        assert set(calls) == set(ids)
        assert all(n == 1 for n in calls.values()), calls
        assert stats.consume_failures == 0 and stats.acked == 20

    run(main())
