"""The `thrust.sync` facade for threaded code: one Producer shared by several threads (it runs its own
event loop on a background thread), and a SimpleConsumer whose messages are acknowledged from a thread."""

import os
import sys
from concurrent.futures import ThreadPoolExecutor

import thrust
import thrust.sync

ENDPOINTS = os.environ.get("ROCKETMQ_ENDPOINTS", "127.0.0.1:8081")
TOPIC = os.environ.get("TOPIC", "orders")
GROUP = os.environ.get("GROUP", "billing")


def main() -> None:
    with thrust.sync.Producer(endpoints=ENDPOINTS, topics=[TOPIC]) as producer:
        with ThreadPoolExecutor(max_workers=4) as pool:
            receipts = list(
                pool.map(
                    lambda i: producer.send(thrust.Message(topic=TOPIC, body=f"job {i}".encode())), range(8)
                )
            )
    print(f"sent {len(receipts)} from 4 threads")
    acked: set[str] = set()
    with thrust.sync.SimpleConsumer(
        endpoints=ENDPOINTS, group=GROUP, subscriptions={TOPIC: "*"}, await_duration=5
    ) as consumer:
        for _ in range(20):
            for message in consumer.receive(8):
                message.ack()  # blocks until the server confirmed it
                acked.add(message.message_id)
            if len(acked) == 8:
                break
    print(f"acknowledged {len(acked)}")
    if acked != {r.message_id for r in receipts}:
        sys.exit("not every message came back")


main()
