"""Python function calls per `send_async` of a Producer, a figure the shared machine cannot blur.

The producer's counterpart of `scripts/push_calls.py`: a `sys.setprofile` / `threading.setprofile` hook
counts every Python call while one Producer sends N unbatched 64 B messages with at most 128 pending (as
`scripts/profile_produce.py` and the bench's produce scenario keep them) to `thrust serve` in a child
process (`thrust.testing.ServerProcess`), after 200 sends of warm-up that are not counted. It prints the
calls per send, those of thrust's own code apart (the rest is asyncio and this script's semaphore, whose
share moves with how many completions each loop iteration handles), and the functions most called:

    .venv/bin/python scripts/produce_calls.py [--sends 3000] [--top 60] [--transport native]

Run it with each install's Python (or `PYTHONPATH=<other src>`) to compare two versions.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import threading
from types import FrameType
from typing import Any, Literal, cast

import thrust
from thrust.testing import ServerProcess

TOPIC = "t"
PENDING = 128


def _name(frame: FrameType) -> str:
    code = frame.f_code
    path = code.co_filename
    for marker in ("/src/", "site-packages/"):
        if marker in path:
            return f"{path.split(marker)[-1]}:{code.co_name}"
    if "/lib/python3" in path:  # the standard library: asyncio/base_events.py, threading.py
        path = path.split("/lib/python3", 1)[1].split("/", 1)[-1]
    return f"{path}:{code.co_name}"


async def _count(
    endpoint: str, sends: int, transport: Literal["auto", "native", "grpcio"]
) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()

    def hook(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            counts[_name(frame)] += 1

    body = b"x" * 64
    slots = asyncio.Semaphore(PENDING)
    done = asyncio.Event()
    settled_count = 0

    def settled(_: asyncio.Future[Any]) -> None:
        nonlocal settled_count
        slots.release()
        settled_count += 1
        if settled_count == sends:
            done.set()

    async with thrust.Producer(
        endpoints=endpoint, topics=[TOPIC], max_in_flight=2 * PENDING, transport=transport
    ) as producer:
        for _ in range(200):
            await producer.send(thrust.Message(topic=TOPIC, body=body))
        sys.setprofile(hook)
        threading.setprofile(hook)
        try:
            for _ in range(sends):
                await slots.acquire()
                future = await producer.send_async(thrust.Message(topic=TOPIC, body=body))
                future.add_done_callback(settled)
            await done.wait()
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
        print(f"transport {producer.stats().transport}")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sends", type=int, default=3000)
    parser.add_argument("--top", type=int, default=60)
    parser.add_argument("--transport", choices=("auto", "native", "grpcio"), default="auto")
    args = parser.parse_args()
    transport = cast('Literal["auto", "native", "grpcio"]', args.transport)
    with ServerProcess(topics=[f"{TOPIC}:4"]) as server:
        counts = asyncio.run(_count(server.endpoints[0], args.sends, transport))
    total = sum(counts.values()) / args.sends
    own = sum(n for name, n in counts.items() if name.startswith("thrust/")) / args.sends
    print(f"calls per send {total:.1f}, of thrust's own code {own:.1f}")
    for name, n in counts.most_common(args.top):
        print(f"  {n / args.sends:6.2f} {name}")


if __name__ == "__main__":
    main()
