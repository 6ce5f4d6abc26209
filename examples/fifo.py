"""FIFO: messages of one message group are delivered in the order they were sent (the topic's type is
FIFO and the consumer group is created as a FIFO group)."""

import asyncio
import os
import sys

import thrust

ENDPOINTS = os.environ.get("ROCKETMQ_ENDPOINTS", "127.0.0.1:8081")
TOPIC = os.environ.get("TOPIC", "orders")
GROUP = os.environ.get("GROUP", "billing")


async def main() -> None:
    async with thrust.Producer(endpoints=ENDPOINTS, topics=[TOPIC]) as producer:
        for i in range(3):
            for customer in ("alice", "bob"):
                body = f"{customer}-step-{i}".encode()
                await producer.send(thrust.Message(topic=TOPIC, body=body, message_group=customer))
    seen: dict[str, list[str]] = {"alice": [], "bob": []}
    async with thrust.SimpleConsumer(
        endpoints=ENDPOINTS, group=GROUP, subscriptions={TOPIC: "*"}, await_duration=5
    ) as consumer:
        async with asyncio.timeout(60):
            while sum(len(v) for v in seen.values()) < 6:
                for m in await consumer.receive(16):
                    assert m.message_group is not None
                    seen[m.message_group].append(m.body.decode())
                    await consumer.ack(m)  # a FIFO group's next message comes after this one is acked
    for customer, steps in seen.items():
        print(customer, steps)
        if steps != [f"{customer}-step-{i}" for i in range(3)]:
            sys.exit(f"out of order: {steps}")


asyncio.run(main())
