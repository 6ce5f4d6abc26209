"""A delay message: stored now, delivered no earlier than 3 s later (the topic's type is DELAY)."""

import asyncio
import os
import sys
import time

import thrust

ENDPOINTS = os.environ.get("ROCKETMQ_ENDPOINTS", "127.0.0.1:8081")
TOPIC = os.environ.get("TOPIC", "reminders")
GROUP = os.environ.get("GROUP", "notifier")


async def main() -> None:
    async with thrust.SimpleConsumer(
        endpoints=ENDPOINTS, group=GROUP, subscriptions={TOPIC: "*"}, await_duration=5
    ) as consumer:
        async with thrust.Producer(endpoints=ENDPOINTS, topics=[TOPIC]) as producer:
            sent = time.time()
            receipt = await producer.send(thrust.Message(topic=TOPIC, body=b"wake up", delay=3.0))
        async with asyncio.timeout(60):
            got: list[thrust.ReceivedMessage] = []
            while not got:
                got = await consumer.receive(1)
        await consumer.ack(got[0])
    waited = time.time() - sent
    print(f"{receipt.message_id} delivered {waited:.1f} s after it was sent")
    if got[0].message_id != receipt.message_id or waited < 2.5:
        sys.exit("delivered too early, or another message")


asyncio.run(main())
