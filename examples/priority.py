"""Priority messages: on a PRIORITY topic, a message with a higher priority is delivered ahead of waiting
ones with a lower priority (thrust's embedded server; Apache RocketMQ 5.4.0 has no PRIORITY topics)."""

import asyncio
import os
import sys

import thrust

ENDPOINTS = os.environ.get("ROCKETMQ_ENDPOINTS", "127.0.0.1:8081")
TOPIC = os.environ.get("TOPIC", "tickets")
GROUP = os.environ.get("GROUP", "support")


async def main() -> None:
    async with thrust.Producer(endpoints=ENDPOINTS, topics=[TOPIC]) as producer:
        for name, priority in (("routine", 1), ("urgent", 9), ("normal", 5)):
            await producer.send(thrust.Message(topic=TOPIC, body=name.encode(), priority=priority))
    async with thrust.SimpleConsumer(
        endpoints=ENDPOINTS, group=GROUP, subscriptions={TOPIC: "*"}, await_duration=5
    ) as consumer:
        order: list[tuple[str, int | None]] = []
        async with asyncio.timeout(60):
            while len(order) < 3:
                for m in await consumer.receive(1):
                    order.append((m.body.decode(), m.priority))
                    await consumer.ack(m)
    print("delivered:", order)
    if [p for _, p in order] != sorted((p for _, p in order), key=lambda p: -(p or 0)):
        sys.exit("not in priority order")


asyncio.run(main())
