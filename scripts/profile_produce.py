"""Where does a Producer's CPU go while it sends unbatched at full rate?

Starts `thrust serve` in a child process, then sends N messages of SIZE bytes from this process with one
Producer, `send_async` with at most 128 sends pending (as `thrust bench`'s produce scenario keeps them:
a slot taken before each send, given back by its receipt), and prints the rate and this process's CPU
time per send (`time.process_time`, every thread). The transport is the one `$THRUST_TRANSPORT` (or
`--transport`) picks. Under py-spy it shows where a send's client CPU goes:

    .venv/bin/python scripts/profile_produce.py --messages 40000 --transport native
    .venv/bin/py-spy record --native --rate 250 --format raw -o produce.txt -- \\
        .venv/bin/python scripts/profile_produce.py --messages 40000 --transport native
    .venv/bin/python scripts/profile_push_drain.py --fold produce.txt
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import threading
import time
from typing import Any, Literal, cast

import thrust
from thrust.bench.cpu import NATIVE_THREAD, thread_cpu_seconds

TOPIC = "produce"
IN_FLIGHT = 128


async def _produce(
    endpoint: str, messages: int, size: int, transport: Literal["auto", "native", "grpcio"]
) -> None:
    body = b"x" * size
    slots = asyncio.Semaphore(IN_FLIGHT)
    done = asyncio.Event()
    receipts = errors = 0

    def settled(fut: asyncio.Future[Any]) -> None:
        nonlocal receipts, errors
        slots.release()
        if fut.cancelled() or fut.exception() is not None:
            errors += 1
        else:
            receipts += 1
        if receipts + errors == messages:
            done.set()

    async with thrust.Producer(
        endpoints=endpoint, topics=[TOPIC], max_in_flight=2 * IN_FLIGHT, transport=transport
    ) as producer:
        # Warm up the connection and the code paths before the clock starts.
        for _ in range(200):
            await producer.send(thrust.Message(topic=TOPIC, body=body))
        cpu0, t0 = time.process_time(), time.monotonic()
        threads0 = _thread_cpu()
        for _ in range(messages):
            await slots.acquire()
            fut = await producer.send_async(thrust.Message(topic=TOPIC, body=body))
            fut.add_done_callback(settled)
        await done.wait()
        wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
        split = _thread_cpu()
        print(f"transport {producer.stats().transport}")
        print(
            "client CPU per send by thread: "
            + ", ".join(f"{name} {(split[name] - threads0[name]) / messages * 1e6:.1f} us" for name in split)
        )
    print(
        f"{messages} x {size} B in {wall:.2f} s = {messages / wall:,.0f} msg/s, {errors} errors; "
        f"client CPU {cpu:.2f} s = {cpu / messages * 1e6:.0f} us/send"
    )


def _thread_cpu() -> dict[str, float]:
    """CPU seconds of this process's threads so far: the event loop's (the main thread), the native
    transport's tokio thread, and the rest (grpc's)."""
    main = threading.main_thread().native_id
    out = {"loop": 0.0, "tokio": 0.0, "other": 0.0}
    for tid, (name, seconds) in thread_cpu_seconds().items():
        out["loop" if tid == main else "tokio" if name == NATIVE_THREAD else "other"] += seconds
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=40_000)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--transport", choices=("auto", "native", "grpcio"), default="auto")
    args = parser.parse_args()
    server = subprocess.Popen(
        [sys.executable, "-m", "thrust.cli.main", "serve", "--port", "0", "--topic", f"{TOPIC}:4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert server.stdout is not None
        found = re.search(r":(\d+)", server.stdout.readline().decode())
        assert found is not None, "thrust serve did not start"
        transport = cast('Literal["auto", "native", "grpcio"]', args.transport)
        asyncio.run(_produce(f"127.0.0.1:{found.group(1)}", args.messages, args.size, transport))
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
