"""Send ten messages in one SendMessage call (same topic, one message type): a receipt for each."""

import asyncio
import os
import sys

import thrust

ENDPOINTS = os.environ.get("ROCKETMQ_ENDPOINTS", "127.0.0.1:8081")
TOPIC = os.environ.get("TOPIC", "orders")


async def main() -> None:
    async with thrust.Producer(endpoints=ENDPOINTS, topics=[TOPIC]) as producer:
        batch = [thrust.Message(topic=TOPIC, body=f"line {i}".encode(), keys=[f"k{i}"]) for i in range(10)]
        receipts = await producer.send_batch(batch)
    for r in receipts:
        print(r.message_id, r.offset)
    if len({r.message_id for r in receipts}) != 10:
        sys.exit("expected ten receipts")


asyncio.run(main())
