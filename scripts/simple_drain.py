"""How long does one SimpleConsumer take to drain a backlog spread over several brokers?

Starts `thrust.testing.embedded_server` in-process with `--brokers 3 --topic orders:8` (the shape of
`thrust serve --brokers 3 --topic orders:8`), sends N messages with a Producer (round robin over the
route's queues, so about N/3 per broker), then one SimpleConsumer (await_duration 5 s, batches of 32,
each batch acked) receives until all N arrived, or until --max-seconds. It prints, per backlog: the
receives, the empty receives (each one is a long poll held for await_duration), the receives per broker
and the seconds until the last message arrived.

    .venv/bin/python scripts/simple_drain.py [--messages 30,300] [--brokers 3] [--queues 8] [--await 5]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import time

import thrust
from thrust.testing import embedded_server


async def drain(messages: int, brokers: int, queues: int, await_duration: float, max_seconds: float) -> str:
    async with embedded_server(brokers=brokers, topics=[f"orders:{queues}"], auto_create=False) as srv:
        endpoint = srv.endpoints[0]
        async with thrust.Producer(endpoints=endpoint, topics=["orders"]) as producer:
            for i in range(messages):
                await producer.send(thrust.Message(topic="orders", body=b"%d" % i))
        async with thrust.SimpleConsumer(
            endpoints=endpoint, group="drain", subscriptions={"orders": "*"}, await_duration=await_duration
        ) as consumer:
            received: set[str] = set()
            receives = empties = 0
            per_broker: collections.Counter[str] = collections.Counter()
            start = time.monotonic()
            calls_before = srv.stats.calls["ReceiveMessage"]
            while len(received) < messages and time.monotonic() - start < max_seconds:
                batch = await consumer.receive(32)
                receives += 1
                if not batch:
                    empties += 1
                for m in batch:
                    received.add(m.message_id)
                    per_broker[str(m.endpoint)] += 1
                if batch:
                    await consumer.ack_many(batch)
            elapsed = time.monotonic() - start
            calls = srv.stats.calls["ReceiveMessage"] - calls_before
    brokers_seen = ", ".join(f"{n}" for _, n in sorted(per_broker.items()))
    return (
        f"messages={messages} received={len(received)} receives={receives} empty={empties} "
        f"server_receive_calls={calls} per_broker=[{brokers_seen}] seconds={elapsed:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", default="30,300", help="comma-separated backlog sizes (default 30,300)")
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--queues", type=int, default=8)
    parser.add_argument("--await", dest="await_duration", type=float, default=5.0)
    parser.add_argument("--max-seconds", type=float, default=180.0, help="give up a backlog after this")
    args = parser.parse_args()
    for n in (int(x) for x in args.messages.split(",")):
        print(
            asyncio.run(drain(n, args.brokers, args.queues, args.await_duration, args.max_seconds)),
            flush=True,
        )


if __name__ == "__main__":
    main()
