"""A SimpleConsumer as an async iterator: each message is acknowledged after it was handled; one that is
not acknowledged comes back after its invisible duration."""

import asyncio
import os

import thrust

ENDPOINTS = os.environ.get("ROCKETMQ_ENDPOINTS", "127.0.0.1:8081")
TOPIC = os.environ.get("TOPIC", "orders")
GROUP = os.environ.get("GROUP", "billing")


async def main() -> None:
    async with thrust.Producer(endpoints=ENDPOINTS, topics=[TOPIC]) as producer:
        for i in range(5):
            await producer.send(thrust.Message(topic=TOPIC, body=f"order {i}".encode()))
    handled = 0
    async with thrust.SimpleConsumer(
        endpoints=ENDPOINTS, group=GROUP, subscriptions={TOPIC: "*"}, await_duration=5, invisible_duration=30
    ) as consumer:
        async with asyncio.timeout(60):
            async for message in consumer:
                print("handling", message.body.decode(), "attempt", message.delivery_attempt)
                await message.ack()
                handled += 1
                if handled == 5:
                    break
    print(f"handled {handled} messages")


asyncio.run(main())
