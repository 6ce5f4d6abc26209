"""Send one message with a tag, keys and user properties, and print its receipt."""

import asyncio
import os

import thrust

ENDPOINTS = os.environ.get("ROCKETMQ_ENDPOINTS", "127.0.0.1:8081")
TOPIC = os.environ.get("TOPIC", "orders")


async def main() -> None:
    async with thrust.Producer(endpoints=ENDPOINTS, topics=[TOPIC]) as producer:
        receipt = await producer.send(
            thrust.Message(
                topic=TOPIC,
                body=b'{"order": 42, "total": 9.99}',
                tag="created",
                keys=["order-42"],
                properties={"region": "eu"},
            )
        )
        print(f"sent {receipt.message_id} to {receipt.topic} at offset {receipt.offset}")


asyncio.run(main())
