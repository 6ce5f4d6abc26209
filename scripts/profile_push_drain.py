"""Where does a PushConsumer's CPU go while it drains a backlog?

Starts `thrust serve` as a child process (so the server's CPU is not in the profile), stores a backlog of
N messages of SIZE bytes with `send_batch`, then drains it in this process with a default PushConsumer
and a trivial sync listener, and prints the drain's messages per second and this process's CPU time per
message (`time.process_time`, every thread). With `--raw`, the same backlog is drained by the bare grpc.aio
ReceiveMessage(32) + AckMessage(32) loops of `thrust bench` (thrust.bench.raw), the ceiling it is compared
with, over a 4 s window inside the backlog.

To see where the time goes, run it under py-spy and fold the samples by layer with `--fold`:

    .venv/bin/py-spy record --native --rate 250 --format raw -o drain.txt -- \\
        .venv/bin/python scripts/profile_push_drain.py --messages 30000 --size 1024
    .venv/bin/python scripts/profile_push_drain.py --fold drain.txt

The fold assigns each sample to the innermost frame that names a layer: grpc's C core (libgrpc, cygrpc's
.so), grpc's Python wrapper (grpc/aio), protobuf (upb and google/protobuf), asyncio and selectors,
threading (locks, queues: the listener pool's hand-offs), thrust itself (by package), and the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import thrust
from thrust.bench.cpu import NATIVE_THREAD, thread_cpu_seconds

TOPIC = "drain"
GROUP = "drain-g"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def _fill(endpoint: str, messages: int, size: int) -> None:
    body = b"x" * size
    async with thrust.Producer(endpoints=endpoint, topics=[TOPIC]) as p:
        batch = 64
        for i in range(0, messages, batch):
            n = min(batch, messages - i)
            await p.send_batch([thrust.Message(topic=TOPIC, body=body) for _ in range(n)])


async def _drain_push(
    endpoint: str, messages: int, threads: int, per_queue: int, ack_batch_size: int | None
) -> tuple[float, float]:
    """Wall time until the last message reached the listener; CPU until the consumer closed (its acks
    flushed: they are part of the drain's cost)."""
    loop = asyncio.get_running_loop()
    finished = asyncio.Event()
    lock = threading.Lock()
    count = 0

    def listener(m: thrust.ReceivedMessage) -> thrust.ConsumeResult:
        nonlocal count
        with lock:
            count += 1
            if count == messages:
                loop.call_soon_threadsafe(finished.set)
        return thrust.ConsumeResult.SUCCESS

    # How many ReceiveMessage calls the drain made: the RPC count, not the bytes, is what grpc charges for.
    from thrust._io.session import ClientSession

    receives = 0
    original = ClientSession.receive

    async def counted(self: ClientSession, *args: Any, **kwargs: Any) -> Any:
        nonlocal receives
        receives += 1
        return await original(self, *args, **kwargs)

    ClientSession.receive = counted  # type: ignore[method-assign]
    # How often the native transport woke the loop (each wake-up drains every completion queued since).
    from thrust._io.native import NativeHub

    hub_wakes = 0
    wake = NativeHub._wake

    def counted_wake(self: NativeHub) -> None:
        nonlocal hub_wakes
        hub_wakes += 1
        wake(self)

    NativeHub._wake = counted_wake  # type: ignore[method-assign]
    gc_time = [0.0, 0.0, 0.0]
    gc_runs = [0, 0, 0]
    gc_started = 0.0

    def on_gc(phase: str, info: dict[str, int]) -> None:
        nonlocal gc_started
        if phase == "start":
            gc_started = time.perf_counter()
        else:
            gc_runs[info["generation"]] += 1
            gc_time[info["generation"]] += time.perf_counter() - gc_started

    gc.callbacks.append(on_gc)
    consumer = thrust.PushConsumer(
        endpoints=endpoint,
        group=GROUP,
        subscriptions={TOPIC: "*"},
        listener=listener,
        consumption_thread_count=threads,
        receives_per_queue=per_queue,
        **({} if ack_batch_size is None else {"ack_batch_size": ack_batch_size}),
    )
    async with consumer:
        cpu0, t0 = time.process_time(), time.monotonic()
        threads0 = _thread_cpu()
        await finished.wait()
        wall = time.monotonic() - t0
        stats = consumer.stats()
        executor = consumer._executor
        wakeups = executor.stats.wakeups if executor is not None else 0
        split = _thread_cpu()  # while the listener threads still exist
    cpu = time.process_time() - cpu0
    for name, seconds in threads0.items():
        split[name] -= seconds
    ClientSession.receive = original  # type: ignore[method-assign]
    NativeHub._wake = wake  # type: ignore[method-assign]
    gc.callbacks.remove(on_gc)
    print(
        "  collections by generation "
        + ", ".join(f"{n} in {t * 1e3:.0f} ms" for n, t in zip(gc_runs, gc_time, strict=True))
    )
    print(
        "  client CPU per message by thread: "
        + ", ".join(f"{name} {seconds / messages * 1e6:.1f} us" for name, seconds in split.items())
    )
    print(
        f"  {receives} receives ({messages / max(receives, 1):.1f} messages each), "
        f"{stats.ack_rpcs} ack RPCs ({stats.acked / max(stats.ack_rpcs, 1):.1f} entries each), "
        f"{len(stats.queues)} queues, {wakeups / max(messages, 1):.2f} wake-ups of the loop by the listener"
        f" threads per message, {hub_wakes / max(receives, 1):.2f} by the native transport per receive"
    )
    return wall, cpu


def _thread_cpu() -> dict[str, float]:
    """CPU seconds of this process's threads so far, by kind: the event loop's (the main thread), the
    listener pool's, the native transport's tokio thread, and the rest (grpc's); an exited thread's CPU
    is lost, so read it while the consumer is open."""
    main = threading.main_thread().native_id
    listeners = {t.native_id for t in threading.enumerate() if t.name.startswith("thrust-consume")}
    out = {"loop": 0.0, "listeners": 0.0, "tokio": 0.0, "other": 0.0}
    for tid, (name, seconds) in thread_cpu_seconds().items():
        if tid == main:
            kind = "loop"
        elif tid in listeners:
            kind = "listeners"
        elif name == NATIVE_THREAD:
            kind = "tokio"
        else:
            kind = "other"
        out[kind] += seconds
    return out


async def _drain_raw(endpoint: str, messages: int) -> tuple[int, float, float]:
    """The bench's raw loops (8 of them, as its ceiling row) over a window that ends before the backlog
    does: messages, seconds and CPU seconds of the window."""
    from thrust.bench.raw import raw_consume

    out = await raw_consume(
        endpoint, TOPIC, GROUP, loops=8, warmup=1.0, window=4.0, on_start=lambda: None, on_end=lambda: None
    )
    print(f"  {out.total} messages received in all (warm-up and window)")
    return out.count, out.seconds, out.cpu


def _start_profiler(out: str) -> subprocess.Popen[bytes]:
    """py-spy attached to this process from now on (the drain only, not the start-up or the fill)."""
    spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    proc = subprocess.Popen(
        [spy, "record", "--native", "--rate", "100", "--format", "raw", "-o", out, "--pid", str(os.getpid())],
        stderr=subprocess.DEVNULL,
    )
    time.sleep(1.0)  # attached before the drain starts
    return proc


def run(
    messages: int,
    size: int,
    raw: bool,
    profile: str | None,
    threads: int,
    receives: int,
    ack_batch_size: int | None,
) -> None:
    port = _free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "thrust.cli.main",
            "serve",
            "--port",
            str(port),
            "--topic",
            f"{TOPIC}:8",
            "--group",
            GROUP,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        server.stdout.readline()  # "listening on ..."
        endpoint = f"127.0.0.1:{port}"
        asyncio.run(_fill(endpoint, messages, size))
        spy = _start_profiler(profile) if profile else None
        if raw:
            messages, wall, cpu = asyncio.run(_drain_raw(endpoint, messages))
            what = "raw Receive(32)+Ack(32), 8 loops"
        else:
            wall, cpu = asyncio.run(_drain_push(endpoint, messages, threads, receives, ack_batch_size))
            what = f"PushConsumer, {threads} listener threads, {receives} receives per queue"
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(30)
        print(
            f"{what}: {messages} x {size} B in {wall:.2f} s = {messages / wall:,.0f} msg/s; "
            f"client CPU {cpu:.2f} s = {cpu / messages * 1e6:.0f} us/msg; load {os.getloadavg()[0]:.1f}"
        )
    finally:
        server.terminate()
        server.wait(10)


# Innermost-first: the first rule that matches a frame, scanning from the leaf, names the sample's layer.
_LAYERS: list[tuple[str, re.Pattern[str]]] = [
    ("GIL wait", re.compile(r"take_gil")),
    ("garbage collector", re.compile(r"gc_collect")),
    ("threading: locks, conditions", re.compile(r"threading\.py|queue\.py|concurrent/futures")),
    ("protobuf", re.compile(r"google/protobuf|_upb|upb_")),
    ("grpc C core", re.compile(r"libgrpc|cygrpc\.cpython|grpc_core|gpr_|tsi_|\(grpc/_cython")),
    ("grpc Python wrapper", re.compile(r"grpc/aio/|grpc/_")),
    ("thrust _push", re.compile(r"thrust/_push/")),
    ("thrust _io", re.compile(r"thrust/_io/")),
    ("thrust _core", re.compile(r"thrust/_core/")),
    ("thrust _codec", re.compile(r"thrust/_codec/")),
    ("thrust other", re.compile(r"thrust/")),
    ("asyncio + selectors", re.compile(r"asyncio/|selectors\.py|uvloop")),
]
# A thread blocked on a condition or in epoll is idle, not spending CPU: left out of the shares (a thread
# blocked on the GIL is counted, as "GIL wait", since that is contention the design can cause).
_IDLE = re.compile(r"Condition\.wait|epoll_wait|select_epoll_poll|sock_recv|clock_nanosleep")
_NOT_DRAIN = re.compile(r"\b_fill\b|<frozen importlib|\(profile_push_drain\.py:\d+\)$")


def fold(path: str) -> None:
    """Print the share of the busy samples per layer from a py-spy `--format raw` file (collapsed stacks),
    leaving out idle threads and the backlog's fill."""
    counts: collections.Counter[str] = collections.Counter()
    total = idle = other_phase = 0
    for line in open(path):
        stack, _, n = line.rstrip("\n").rpartition(" ")
        if not stack:
            continue
        samples = int(n)
        if _NOT_DRAIN.search(stack):
            other_phase += samples
            continue
        frames = stack.split(";")
        if "take_gil" not in stack and _IDLE.search(";".join(frames[-6:])):
            idle += samples
            continue
        total += samples
        layer = "other (interpreter, C library)"
        for frame in reversed(frames):
            hit = next((name for name, rx in _LAYERS if rx.search(frame)), None)
            if hit is not None:
                layer = hit
                break
        counts[layer] += samples
    for layer, n in counts.most_common():
        print(f"{layer:36s} {n:8d}  {100 * n / total:5.1f} %")
    print(f"{'busy samples':36s} {total:8d}  (idle {idle}, start-up and fill {other_phase})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=30_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--threads", type=int, default=20, help="the listener's threads (default 20, Java's)")
    ap.add_argument("--receives", type=int, default=2, help="receives_per_queue (default 2, thrust's)")
    ap.add_argument(
        "--ack-batch-size", type=int, default=None, help="the consumer's ack_batch_size (default: its own)"
    )
    ap.add_argument("--raw", action="store_true", help="drain with the bare grpc.aio loop instead")
    ap.add_argument("--fold", metavar="RAW_FILE", help="fold a py-spy raw profile by layer and exit")
    ap.add_argument("--profile", metavar="RAW_FILE", help="record the drain alone with py-spy into this file")
    ap.add_argument(
        "--gc",
        choices=["default", "freeze", "off", "gen0"],
        default="default",
        help="the collector in this process during the drain: as is, gc.freeze() after start-up, disabled,"
        " or a gen-0 threshold of 50,000 allocations instead of 700",
    )
    args = ap.parse_args()
    if args.gc == "off":
        gc.disable()
    elif args.gc == "freeze":
        gc.freeze()
    elif args.gc == "gen0":
        gc.set_threshold(50_000, *gc.get_threshold()[1:])
    if args.fold:
        fold(args.fold)
    else:
        run(
            args.messages, args.size, args.raw, args.profile, args.threads, args.receives, args.ack_batch_size
        )


if __name__ == "__main__":
    main()
