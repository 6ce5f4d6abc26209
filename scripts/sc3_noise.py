"""Is scenario 3's spread the client's doing or the machine's? Runs scenario 3's thrust side (8 senders
on topic "h" of broker 0) for 12 one-second buckets, alternately with the slow send at the start of
bucket 4 (broker 1's settings reply held 3 s) and without it (an A/A control), and prints the healthy
sends per second, this process's and the server's CPU per second, and what the session did (telemetry
streams opened, transports replaced).

    .venv/bin/python scripts/sc3_noise.py [--runs 3]

Sends per second that swing as much in the A/A runs as in the slow ones, with client and server CPU
falling together, mean the machine took the CPU away; a client blocked by the handshake would show
fewer sends with its own CPU idle only in the slow runs, or telemetry reopened / transports replaced.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time

from thrust.bench import scenarios
from thrust.message import Message
from thrust.producer import Producer

_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


async def _one(slow_on: bool) -> None:
    body = b"x" * 64
    with scenarios._sc3_server() as server:
        async with Producer(endpoints=server.endpoints[0], topics=["h"]) as producer:
            done: list[float] = []
            stop = asyncio.Event()

            async def sender() -> None:
                while not stop.is_set():
                    await producer.send(Message(topic="h", body=body))
                    done.append(time.monotonic())

            async def slow_send() -> None:
                with contextlib.suppress(Exception):
                    await producer.send(Message(topic="slow", body=body))

            senders = [asyncio.create_task(sender()) for _ in range(8)]
            await asyncio.sleep(1.0)
            t0 = time.monotonic()
            c0, s0 = time.process_time(), _cpu_seconds(server.pid)
            cpu: list[tuple[int, int]] = []
            slow: asyncio.Task[None] | None = None
            for k in range(12):
                if k == 3 and slow_on:
                    slow = asyncio.create_task(slow_send())
                await asyncio.sleep(1.0)
                c1, s1 = time.process_time(), _cpu_seconds(server.pid)
                cpu.append((round((c1 - c0) * 100), round((s1 - s0) * 100)))
                c0, s0 = c1, s1
            if slow is not None:
                await slow
            stop.set()
            await asyncio.gather(*senders, return_exceptions=True)
            session = producer.session
            opened = [s.opened for ep in session.open_sessions() if (s := session.telemetry(ep)) is not None]
            recoveries = session.transport_recoveries
    per_second = [sum(1 for e in done if t0 + i <= e < t0 + i + 1) for i in range(12)]
    print(
        f"{'slow' if slow_on else 'A/A '} load {os.getloadavg()[0]:.2f} sends/s {per_second}"
        f" telemetry opened {opened} transports replaced {recoveries}"
    )
    print(f"     CPU % (client, server) per second {cpu}", flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for _ in range(args.runs):
        for slow_on in (True, False):
            await _one(slow_on)


if __name__ == "__main__":
    asyncio.run(main())
