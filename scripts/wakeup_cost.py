"""What a Python call, a system call and a wake-up of another thread cost on this machine, and what one
unary call costs each of the client's two threads on the native transport.

The first part times, with this process's CPU clock: an empty Python function call, `getppid()`, a
pipe's write and read on one thread, and a round trip between two threads over two pipes (each side
blocks in `read` until the other writes: two wake-ups per round trip). The second starts `thrust serve` in a
child process and sends QueryRoute calls through one `NativeRpcClient`, one at a time and in bursts of
32 started in one loop iteration, and reads the CPU of the event loop's thread (`time.thread_time`) and
of the tokio thread (`thrust.bench.cpu.thread_cpu_seconds`) per call. On a virtual machine the wake-ups
dwarf the Python work (docs/benchmarks.md, "Python calls on the consume and send paths").

    .venv/bin/python scripts/wakeup_cost.py [--calls 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import time

import thrust
from thrust._core.endpoints import parse_endpoint
from thrust._io.metadata import Metadata
from thrust._io.native import NativeHub, NativeRpcClient
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.bench.cpu import thread_cpu_seconds
from thrust.testing import ServerProcess


def _nothing() -> None:
    pass


def machine(n: int = 100_000) -> None:
    t = time.process_time()
    for _ in range(10 * n):
        _nothing()
    print(f"a Python function call: {(time.process_time() - t) / (10 * n) * 1e6:.3f} us")
    t = time.process_time()
    for _ in range(n):
        os.getppid()
    print(f"getppid(): {(time.process_time() - t) / n * 1e6:.2f} us")
    r, w = os.pipe()
    t = time.process_time()
    for _ in range(n):
        os.write(w, b"x")
        os.read(r, 1)
    print(f"a pipe's write and read, one thread: {(time.process_time() - t) / n * 1e6:.2f} us")
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    rounds = n // 5

    def peer() -> None:
        for _ in range(rounds):
            os.read(r1, 1)
            os.write(w2, b"y")

    thread = threading.Thread(target=peer)
    thread.start()
    process, this = time.process_time(), time.thread_time()
    for _ in range(rounds):
        os.write(w1, b"x")
        os.read(r2, 1)
    thread.join()
    process, this = time.process_time() - process, time.thread_time() - this
    print(
        f"a round trip between two threads: {process / rounds * 1e6:.1f} us of the process "
        f"({this / rounds * 1e6:.1f} us on this side)"
    )
    for fd in (r, w, r1, w1, r2, w2):
        os.close(fd)


def _tokio_cpu() -> float:
    return sum(seconds for name, seconds in thread_cpu_seconds().values() if name == "thrust-native")


async def _calls(endpoint: str, calls: int) -> None:
    config = thrust.ClientConfig(endpoint)
    client = NativeRpcClient(parse_endpoint(endpoint), config, Metadata(config, "wakeups"), NativeHub())
    host, _, port = endpoint.rpartition(":")
    request = s.QueryRouteRequest(
        topic=pb.Resource(name="t"), endpoints=pb.Endpoints(addresses=[pb.Address(host=host, port=int(port))])
    )
    try:
        for _ in range(200):  # connected, and the code paths warm
            await client.unary("QueryRoute", request, 10.0)
        for burst in (1, 32):
            tokio, loop = _tokio_cpu(), time.thread_time()
            for _ in range(calls // burst):
                await asyncio.gather(*(client.unary("QueryRoute", request, 10.0) for _ in range(burst)))
            tokio, loop = _tokio_cpu() - tokio, time.thread_time() - loop
            print(
                f"QueryRoute, {'one at a time' if burst == 1 else f'bursts of {burst}'}: "
                f"the loop's thread {loop / calls * 1e6:.1f} us, "
                f"the tokio thread {tokio / calls * 1e6:.1f} us per call"
            )
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args()
    machine()
    with ServerProcess(topics=["t:4"]) as server:
        asyncio.run(_calls(server.endpoints[0], args.calls))


if __name__ == "__main__":
    main()
