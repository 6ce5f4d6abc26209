"""A PushConsumer with an `async def` listener: it runs on the event loop (at most `async_concurrency`
at once), so it can await other I/O without a thread per message."""

import asyncio
import os

import thrust

ENDPOINTS = os.environ.get("ROCKETMQ_ENDPOINTS", "127.0.0.1:8081")
TOPIC = os.environ.get("TOPIC", "orders")
GROUP = os.environ.get("GROUP", "billing")


async def main() -> None:
    received: asyncio.Queue[str] = asyncio.Queue()

    async def handle(message: thrust.ReceivedMessage) -> thrust.ConsumeResult:
        await asyncio.sleep(0.01)  # e.g. an HTTP call or a database write
        await received.put(message.body.decode())
        return thrust.ConsumeResult.SUCCESS

    async with thrust.PushConsumer(
        endpoints=ENDPOINTS, group=GROUP, subscriptions={TOPIC: "*"}, listener=handle, async_concurrency=16
    ):
        async with thrust.Producer(endpoints=ENDPOINTS, topics=[TOPIC]) as producer:
            for i in range(10):
                await producer.send(thrust.Message(topic=TOPIC, body=f"event {i}".encode()))
        bodies = {await asyncio.wait_for(received.get(), 60) for _ in range(10)}
    print(f"consumed {len(bodies)} distinct messages")


asyncio.run(main())
