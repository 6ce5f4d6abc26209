"""Python function calls per consumed message in a PushConsumer drain, a figure the machine cannot blur.

CPU per message on these machines spreads by ±15 % between runs of the same code; a count of calls moves
by about 1 % (how many acks share an AckMessage depends on timing). A `sys.setprofile` /
`threading.setprofile` hook counts every Python call on the loop thread and the listener threads while a
default PushConsumer drains N 1 KiB messages (sent beforehand, not counted) from `thrust serve` in a child
process (`thrust.testing.ServerProcess`) with one topic of 4 queues. Run it with each install's Python to
compare two versions (docs/benchmarks.md#two-versions-of-thrust-side-by-side):

    ../before/.venv/bin/python scripts/push_calls.py > before.txt
    .venv/bin/python scripts/push_calls.py > after.txt

It prints the calls per message, then the functions most called, per message. `--messages N` (8,000) and
`--top K` (60) set the size of the run and of the list. The hook costs several times the client's CPU, so
the CPU figure it prints is only there to show that.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import threading
import time
from types import FrameType
from typing import Any

import thrust
from thrust.message import ConsumeResult, ReceivedMessage
from thrust.testing import ServerProcess

_counts: collections.Counter[tuple[str, str]] = collections.Counter()
_on = False


def _hook(frame: FrameType, event: str, arg: Any) -> None:
    if _on and event == "call":
        code = frame.f_code
        # The path below site-packages or src/, so that two installs' lines compare.
        where = code.co_filename.split("site-packages/")[-1].split("/src/")[-1]
        _counts[(where, code.co_name)] += 1


async def _drain(endpoint: str, n: int) -> float:
    global _on
    async with thrust.Producer(endpoints=endpoint, topics=["t"]) as producer:
        for _ in range(0, n, 32):
            await asyncio.gather(
                *(producer.send(thrust.Message(topic="t", body=b"x" * 1024)) for _ in range(32))
            )
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    got = 0

    def listener(message: ReceivedMessage) -> ConsumeResult:
        nonlocal got
        got += 1
        if got == n:
            loop.call_soon_threadsafe(done.set_result, None)
        return ConsumeResult.SUCCESS

    sys.setprofile(_hook)
    threading.setprofile(_hook)
    _on = True
    started = time.process_time()
    async with thrust.PushConsumer(
        endpoints=endpoint, group="g", subscriptions={"t": "*"}, listener=listener
    ) as consumer:
        await done
        while consumer.stats().acked < n:  # noqa: ASYNC110 (stats() is a snapshot, with no event)
            await asyncio.sleep(0.01)
        _on = False
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=8000)
    parser.add_argument("--top", type=int, default=60)
    args = parser.parse_args()
    n = args.messages
    with ServerProcess(topics=["t:4"], groups=["g"]) as server:
        cpu = asyncio.run(_drain(server.endpoints[0], n))
    total = sum(_counts.values())
    print(f"calls per message {total / n:.1f} (client CPU under the hook {cpu / n * 1e6:.0f} µs)")
    for (where, name), count in _counts.most_common(args.top):
        print(f"{count / n:8.2f} {where}:{name}")


if __name__ == "__main__":
    main()
