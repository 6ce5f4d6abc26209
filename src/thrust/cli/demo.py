"""`make run`: the embedded server in a subprocess and messages pushed through it end to end.

It starts `thrust serve` as a child process (the same command a user runs), then drives it with
thrust's own clients over real gRPC: normal, tagged, FIFO and delay messages go out through a
`Producer`; a `SimpleConsumer` receives them in batches and acknowledges them; every message is
accounted for at the end. It prints what happened and exits non-zero if anything went missing.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import thrust
from thrust.testing import ServerProcess

TOPIC = "demo"
FIFO_TOPIC = "demo-fifo"
GROUP = "demo-group"


async def _run(count: int, endpoints: str) -> int:
    sent: dict[str, str] = {}  # message id -> kind of message
    started = time.perf_counter()
    async with thrust.Producer(endpoints=endpoints, topics=[TOPIC, FIFO_TOPIC]) as producer:
        # Pipelined sends: many in flight at once, bounded by the producer's window.
        futures = [
            await producer.send_async(
                thrust.Message(
                    topic=TOPIC, body=f"normal-{i}".encode(), tag="a" if i % 2 else "b", keys=[f"k{i}"]
                )
            )
            for i in range(count)
        ]
        for future in futures:
            receipt = await future
            sent[receipt.message_id] = "normal"
        for i in range(10):
            receipt = await producer.send(
                thrust.Message(topic=FIFO_TOPIC, body=f"fifo-{i}".encode(), message_group=f"g{i % 2}")
            )
            sent[receipt.message_id] = "fifo"
        delayed = await producer.send(thrust.Message(topic=TOPIC, body=b"delayed", delay=1.0))
        sent[delayed.message_id] = "delay"
    produced_in = time.perf_counter() - started
    print(f"sent {count} normal, 10 FIFO and 1 delay message(s) in {produced_in:.2f} s")

    received: set[str] = set()
    attempts: dict[int, int] = {}
    started = time.perf_counter()
    # One consumer per topic: a simple consumer long-polls the topic it asks, so mixing a drained
    # topic into the rotation would make every other receive wait out the poll.
    for topic in (TOPIC, FIFO_TOPIC):
        async with thrust.SimpleConsumer(
            endpoints=endpoints, group=GROUP, subscriptions={topic: "*"}, await_duration=5.0
        ) as consumer:
            expected = {mid for mid, kind in sent.items() if (kind == "fifo") == (topic == FIFO_TOPIC)}
            deadline = time.monotonic() + 30.0
            while not expected <= received and time.monotonic() < deadline:
                batch = await consumer.receive(max_messages=32, invisible_duration=30)
                for message in batch:
                    received.add(message.message_id)
                    attempts[message.delivery_attempt] = attempts.get(message.delivery_attempt, 0) + 1
                if batch:
                    failures = await consumer.ack_many(batch)
                    if any(failures):
                        print(f"ack failures: {[f for f in failures if f]}")
    consumed_in = time.perf_counter() - started
    missing = set(sent) - received
    unexpected = received - set(sent)
    print(
        f"received and acked {len(received)} message(s) in {consumed_in:.2f} s; delivery attempts {attempts}"
    )
    print(f"missing: {len(missing)}, unexpected: {len(unexpected)}")
    return 0 if not missing and not unexpected else 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m thrust.cli.demo`."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=1000, help="normal messages to send")
    ns = parser.parse_args(argv)
    print("starting `thrust serve` in a subprocess ...")
    with ServerProcess(["--auto-create", "--topic", f"{FIFO_TOPIC}:4:FIFO"]) as server:
        print(f"server listening on {', '.join(server.endpoints)} (pid {server.pid})")
        code = asyncio.run(_run(ns.count, server.endpoints[0]))
    print("server stopped" + ("" if code == 0 else "; FAILED"))
    return code


if __name__ == "__main__":
    sys.exit(main())
