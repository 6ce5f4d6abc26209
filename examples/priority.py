"""Priority messages: on a topic created as PRIORITY, waiting messages of a higher priority are received
first.

The rule (Apache RocketMQ 5.4+ and thrust's embedded server alike): the broker stores a message of
priority P in queue min(P, QUEUES - 1) of the topic, and a receive takes the highest queue first. So a
topic of QUEUES queues has QUEUES levels, 0 .. QUEUES-1; higher priorities share the top level, in send
order. This script uses 1, 3 and 2, distinct on a topic of 4 queues or more.

Auto-created topics are never PRIORITY: create it first,
    thrust serve --topic tickets:PRIORITY --group support      (4 queues; tickets:8:PRIORITY for 8)
or, on a real cluster, thrust cluster --topic tickets:PRIORITY --group support (8 queues).
"""

import asyncio
import os
import sys

import thrust

ENDPOINTS = os.environ.get("ROCKETMQ_ENDPOINTS", "127.0.0.1:8081")
TOPIC = os.environ.get("TOPIC", "tickets")
GROUP = os.environ.get("GROUP", "support")


async def main() -> None:
    async with thrust.Producer(endpoints=ENDPOINTS, topics=[TOPIC]) as producer:
        # Sent lowest first: they come back highest first.
        for name, priority in (("routine", 1), ("urgent", 3), ("normal", 2)):
            try:
                await producer.send(thrust.Message(topic=TOPIC, body=name.encode(), priority=priority))
            except thrust.ValidationError as exc:
                sys.exit(f"{TOPIC} takes no priority messages ({exc}): create it as PRIORITY (see the top)")
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
    if [p for _, p in order] != [3, 2, 1]:
        sys.exit("not in priority order")


asyncio.run(main())
