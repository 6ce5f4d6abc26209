"""Memory per client and per 10,000 in-flight messages, on the grpcio and the native transport.

What it measures: the resident set (VmRSS in /proc/self/status) of a fresh Python process, in three
measurements, each in a process of its own with THRUST_TRANSPORT=grpcio or =native and against a `thrust
serve` child process of its own (started here, so every measurement begins on an empty server):

- producers: the process starts 1, then 10, then 50 Producers (each started: route, heartbeat, its
  Telemetry stream; one connection each), RSS read after each step;
- consumers: it starts 1, then 10 PushConsumers, each of its own group so that each gets the whole topic
  assigned (the embedded server assigns a topic per broker, as the proxy does in POP mode: one assignment)
  and has its receive long-polling, RSS read after each step;
- inflight: one PushConsumer (max_cache_message_count raised to 20,000 and its byte limit to 256 MiB, so
  that the cache can hold them all) is started and idle; RSS is read; then this
  script sends 10,000 messages of --size bytes from its own process, and the consumer's listener (a plain
  function on the default 20 threads) blocks on a threading.Event until every message has arrived: 20
  messages in listener calls, the rest cached, none acknowledged. RSS is read again once the consumer's
  `stats().received` is 10,000; then the event is set, the messages are acked, and RSS is read a third
  time (what the process kept after they were released).

Before each reading the process waits --settle seconds and runs gc.collect(). Each repetition runs every
measurement on both transports, alternating which goes first; the table gives medians with [min-max].
With --tracemalloc every measurement runs once more per transport with tracemalloc on (in its own
processes, so that the tracing's own memory is not in the RSS figures): the growth of the Python heap,
and so how much of the RSS growth is native (grpc's C core, or thrust_native's Rust, tokio and their
allocations). With --by-mapping each step's growth is also printed per mapping of /proc/self/smaps, with
the transparent huge pages (AnonHugePages) apart: that is how the native transport's excess was found
in mimalloc's arena (docs/benchmarks.md, "Memory per client and per 10,000 in-flight messages").

Run (about 10 s per process):

    .venv/bin/python scripts/memory_per_client.py --repeat 5 --tracemalloc
    .venv/bin/python scripts/memory_per_client.py --repeat 5 --json memory.json
    .venv/bin/python scripts/memory_per_client.py --repeat 1 --modes producers --by-mapping
    MIMALLOC_ALLOW_THP=0 .venv/bin/python scripts/memory_per_client.py --repeat 3

The children are this script run with --child MODE; they print one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

TOPIC = "mem"
QUEUES = 8
CONSUMER_GROUPS = 10
IN_FLIGHT = 10_000
MODES = ("producers", "consumers", "inflight")
TRANSPORTS = ("grpcio", "native")


def status_kib(*fields: str) -> dict[str, int]:
    """Fields of /proc/self/status, in KiB (VmRSS, RssAnon, ...)."""
    out: dict[str, int] = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            name, _, rest = line.partition(":")
            if name in fields:
                out[name] = int(rest.split()[0])
    return out


def mappings_kib() -> dict[str, int]:
    """Rss and AnonHugePages (transparent huge pages) of this process by kind of mapping, from
    /proc/self/smaps: a file's base name, [heap], [stack], or an anonymous mapping by size (mimalloc's
    arena, thrust_native's allocator, is the one of 64 MiB or more)."""
    out: dict[str, int] = {}
    name = ""
    with open("/proc/self/smaps") as fh:
        for line in fh:
            parts = line.split()
            if parts and not parts[0].endswith(":"):  # a mapping's header line
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                kib = (hi - lo) // 1024
                if len(parts) > 5:
                    name = os.path.basename(parts[5])
                else:
                    name = "[anon >= 64 MiB]" if kib >= 65536 else "[anon < 64 MiB]"
            elif parts and parts[0] in ("Rss:", "AnonHugePages:"):
                key = name if parts[0] == "Rss:" else f"{name} huge pages"
                out[key] = out.get(key, 0) + int(parts[1])
    return out


class Probe:
    """Readings of this process's memory: RSS (and anonymous RSS), and the Python heap when traced."""

    def __init__(self, settle: float, traced: bool, by_mapping: bool = False) -> None:
        self.settle = settle
        self.traced = traced
        self.by_mapping = by_mapping
        self.readings: dict[str, dict[str, int]] = {}
        self.mappings: dict[str, dict[str, int]] = {}

    async def read(self, label: str) -> None:
        await asyncio.sleep(self.settle)
        gc.collect()
        reading = status_kib("VmRSS", "RssAnon", "Threads")
        if self.traced:
            import tracemalloc

            reading["py_heap"] = tracemalloc.get_traced_memory()[0] // 1024
        self.readings[label] = reading
        if self.by_mapping:
            self.mappings[label] = mappings_kib()


async def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.05)


async def child_producers(endpoint: str, probe: Probe) -> dict[str, Any]:
    import thrust

    producers: list[thrust.Producer] = []
    await probe.read("0")
    for target in (1, 10, 50):
        while len(producers) < target:
            p = thrust.Producer(endpoints=endpoint, topics=[TOPIC])
            await p.start()
            producers.append(p)
        await probe.read(str(target))
    transport = producers[0].stats().transport
    await asyncio.gather(*(p.close() for p in producers))
    return {"transport": transport}


async def child_consumers(endpoint: str, probe: Probe) -> dict[str, Any]:
    import thrust

    consumers: list[thrust.PushConsumer] = []
    await probe.read("0")
    for target in (1, CONSUMER_GROUPS):
        while len(consumers) < target:
            c = thrust.PushConsumer(
                endpoints=endpoint,
                group=f"mem-g{len(consumers)}",
                subscriptions={TOPIC: "*"},
                listener=lambda m: thrust.ConsumeResult.SUCCESS,
            )
            await c.start()
            consumers.append(c)
        # connected: the topic assigned, and its receives waiting on the server
        await _wait_for(
            lambda: all(len(c.stats().queues) > 0 and c.stats().receives_in_flight > 0 for c in consumers),
            30,
            "the consumers' queues and receives",
        )
        await probe.read(str(target))
    transport = consumers[0].stats().transport
    await asyncio.gather(*(c.close() for c in consumers))
    return {"transport": transport}


async def child_inflight(endpoint: str, probe: Probe) -> dict[str, Any]:
    import thrust

    release = threading.Event()

    def listener(message: thrust.ReceivedMessage) -> thrust.ConsumeResult:
        release.wait()
        return thrust.ConsumeResult.SUCCESS

    consumer = thrust.PushConsumer(
        endpoints=endpoint,
        group="mem-g0",
        subscriptions={TOPIC: "*"},
        listener=listener,
        max_cache_message_count=2 * IN_FLIGHT,
        max_cache_message_bytes=256 << 20,
    )
    await consumer.start()
    await _wait_for(
        lambda: len(consumer.stats().queues) > 0 and consumer.stats().receives_in_flight > 0,
        30,
        "the consumer's queues and receives",
    )
    await probe.read("idle")
    # The parent fills the topic now; it reads this line on the child's stdout.
    print("READY", flush=True)
    await _wait_for(lambda: consumer.stats().received >= IN_FLIGHT, 120, "10,000 messages received")
    await probe.read("holding")
    stats = consumer.stats()
    held = {
        "received": stats.received,
        "cached_messages": stats.cached_messages,
        "cached_bytes": stats.cached_bytes,
        "listeners_in_flight": stats.listeners_in_flight,
        "acked_while_held": stats.acked,
    }
    release.set()
    await _wait_for(lambda: consumer.stats().acked >= IN_FLIGHT, 120, "10,000 acks")
    await probe.read("released")
    transport = consumer.stats().transport
    await consumer.close()
    return {"transport": transport, **held}


def child(mode: str, endpoint: str, settle: float, traced: bool, by_mapping: bool) -> None:
    import thrust
    import thrust._io.native  # noqa: F401

    if traced:
        import tracemalloc

        tracemalloc.start()
    probe = Probe(settle, traced, by_mapping)
    run = {"producers": child_producers, "consumers": child_consumers, "inflight": child_inflight}[mode]
    extra = asyncio.run(run(endpoint, probe))
    out = {"mode": mode, "readings": probe.readings, **extra}
    if by_mapping:
        out["mappings"] = probe.mappings
    print(json.dumps(out), flush=True)


# -- the parent -------------------------------------------------------------------------------------------


async def _fill(endpoint: str, count: int, size: int) -> None:
    import thrust

    body = b"x" * size
    async with thrust.Producer(endpoints=endpoint, topics=[TOPIC]) as p:
        for i in range(0, count, 64):
            n = min(64, count - i)
            await p.send_batch([thrust.Message(topic=TOPIC, body=body) for _ in range(n)])


def run_child(mode: str, transport: str, args: argparse.Namespace, traced: bool) -> dict[str, Any]:
    from thrust.bench.server import BenchServer

    groups = [x for i in range(CONSUMER_GROUPS) for x in ("--group", f"mem-g{i}")]
    server = BenchServer(["--log-level", "WARNING", "--topic", f"{TOPIC}:{QUEUES}", *groups])
    try:
        cmd = [sys.executable, __file__, "--child", mode, "--endpoint", server.endpoints[0]]
        cmd += ["--settle", str(args.settle)] + (["--tracemalloc"] if traced else [])
        cmd += ["--by-mapping"] if args.by_mapping else []
        env = dict(os.environ, THRUST_TRANSPORT=transport)
        load = os.getloadavg()[0]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
        assert proc.stdout is not None
        if mode == "inflight":
            line = proc.stdout.readline()
            if line.strip() != "READY":
                proc.kill()
                raise RuntimeError(f"child: {line!r}")
            asyncio.run(_fill(server.endpoints[0], IN_FLIGHT, args.size))
        out, _ = proc.communicate(timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"child {mode} {transport} exited {proc.returncode}")
        result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
        result["load"] = [load, os.getloadavg()[0]]
        if result["transport"] != transport:
            raise RuntimeError(f"asked for {transport}, the child used {result['transport']}")
        return result
    finally:
        server.close()


def _growth(result: dict[str, Any], mode: str, key: str) -> dict[str, float]:
    """KiB figures of one child: the growths the table reports."""
    r = {label: reading[key] for label, reading in result["readings"].items()}
    if mode == "producers":
        return {
            "first producer": r["1"] - r["0"],
            "each of producers 2-10": (r["10"] - r["1"]) / 9,
            "each of producers 11-50": (r["50"] - r["10"]) / 40,
            "50 producers in all": r["50"] - r["0"],
        }
    if mode == "consumers":
        n = CONSUMER_GROUPS
        return {
            "first push consumer": r["1"] - r["0"],
            f"each of push consumers 2-{n}": (r[str(n)] - r["1"]) / (n - 1),
            f"{n} push consumers in all": r[str(n)] - r["0"],
        }
    return {
        "10,000 held messages": r["holding"] - r["idle"],
        "kept after their acks": r["released"] - r["idle"],
    }


def _by_mapping(mappings: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Per step between two readings (producers 1 -> 10, ...), the mappings whose RSS moved."""
    labels = list(mappings)
    out: dict[str, dict[str, int]] = {}
    for a, b in itertools.pairwise(labels):
        before, after = mappings[a], mappings[b]
        moved = {k: after.get(k, 0) - before.get(k, 0) for k in set(before) | set(after)}
        out[f"{a} -> {b}"] = {k: v for k, v in sorted(moved.items()) if v}
    return out


def _cell(values: list[float]) -> str:
    if not values:
        return "-"
    med = statistics.median(values)

    def fmt(v: float) -> str:
        return f"{v / 1024:.2f} MiB" if abs(v) >= 1024 else f"{v:.0f} KiB"

    return f"{fmt(med)} [{fmt(min(values))} .. {fmt(max(values))}]" if len(values) > 1 else fmt(med)


def table(results: list[dict[str, Any]], key: str) -> list[str]:
    rows: dict[str, dict[str, list[float]]] = {}
    for res in results:
        for name, value in _growth(res, res["mode"], key).items():
            rows.setdefault(name, {t: [] for t in TRANSPORTS})[res["transport"]].append(value)
    lines = ["| growth | " + " | ".join(TRANSPORTS) + " | native / grpcio |", "|---|---|---|---|"]
    for name, cells in rows.items():
        g, n = (statistics.median(cells[t]) if cells[t] else 0.0 for t in TRANSPORTS)
        ratio = f"{n / g:.2f}x" if g > 0 else "-"
        lines.append(f"| {name} | " + " | ".join(_cell(cells[t]) for t in TRANSPORTS) + f" | {ratio} |")
    return lines


def parent(args: argparse.Namespace) -> None:
    print(f"load {os.getloadavg()}, size {args.size} B, settle {args.settle} s", flush=True)
    plain: list[dict[str, Any]] = []
    traced: list[dict[str, Any]] = []
    modes = args.modes.split(",")
    for rep in range(args.repeat):
        order = TRANSPORTS if rep % 2 == 0 else TRANSPORTS[::-1]
        for mode in modes:
            for transport in order:
                res = run_child(mode, transport, args, traced=False)
                plain.append(res)
                print(f"rep {rep} {mode} {transport}: {json.dumps(_growth(res, mode, 'VmRSS'))} "
                      f"threads {res['readings'][max(res['readings'])]['Threads']} load {res['load']}",
                      flush=True)  # fmt: skip
                if args.by_mapping:
                    print(f"  growth by mapping (KiB): {_by_mapping(res['mappings'])}", flush=True)
    if args.tracemalloc:
        for mode in modes:
            for transport in TRANSPORTS:
                res = run_child(mode, transport, args, traced=True)
                traced.append(res)
                print(f"traced {mode} {transport}: {json.dumps(_growth(res, mode, 'py_heap'))}", flush=True)
    print(f"\nRSS growth (VmRSS), medians of {args.repeat} [min .. max]; load now {os.getloadavg()}")
    print("\n".join(table(plain, "VmRSS")))
    print("\nanonymous RSS growth (RssAnon)")
    print("\n".join(table(plain, "RssAnon")))
    if traced:
        print("\nPython heap growth (tracemalloc, one run each)")
        print("\n".join(table(traced, "py_heap")))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rss": plain, "traced": traced, "size": args.size}, fh, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5, help="repetitions per transport (default 5)")
    ap.add_argument("--modes", default=",".join(MODES), help=f"some of {','.join(MODES)}")
    ap.add_argument("--size", type=int, default=1024, help="body bytes of the in-flight messages")
    ap.add_argument("--settle", type=float, default=1.0, help="seconds before each reading (default 1)")
    ap.add_argument("--tracemalloc", action="store_true", help="also one traced run per measurement")
    ap.add_argument("--json", default=None, help="write every reading here")
    ap.add_argument(
        "--by-mapping",
        action="store_true",
        help="also print each step's RSS growth by mapping (/proc/self/smaps), huge pages apart",
    )
    ap.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    ap.add_argument("--endpoint", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child, args.endpoint, args.settle, args.tracemalloc, args.by_mapping)
    else:
        parent(args)


if __name__ == "__main__":
    main()
