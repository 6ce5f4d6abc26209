"""A PushConsumer with a plain function as its listener: it runs on a pool of threads (so it may block),
and returning normally acknowledges the message (ConsumeResult.FAILURE, or an exception, redelivers it)."""

import asyncio
import os
import threading

import thrust

ENDPOINTS = os.environ.get("ROCKETMQ_ENDPOINTS", "127.0.0.1:8081")
TOPIC = os.environ.get("TOPIC", "orders")
GROUP = os.environ.get("GROUP", "billing")

done = threading.Event()
seen: set[str] = set()
lock = threading.Lock()


def handle(message: thrust.ReceivedMessage) -> thrust.ConsumeResult:
    with lock:
        seen.add(message.message_id)
        if len(seen) == 10:
            done.set()
    return thrust.ConsumeResult.SUCCESS


async def main() -> None:
    async with thrust.PushConsumer(
        endpoints=ENDPOINTS,
        group=GROUP,
        subscriptions={TOPIC: "*"},
        listener=handle,
        consumption_thread_count=4,
    ) as consumer:
        async with thrust.Producer(endpoints=ENDPOINTS, topics=[TOPIC]) as producer:
            for i in range(10):
                await producer.send(thrust.Message(topic=TOPIC, body=f"event {i}".encode()))
        await asyncio.wait_for(asyncio.to_thread(done.wait), 60)
        print(f"consumed {len(seen)} messages; stats: {consumer.stats()}")


asyncio.run(main())
