"""Soak run (reliability catalogue L5): steady load with periodic network faults, sampling resources.

    python -m thrust.reliability.soak --duration 3600            # the catalogue's hour
    python -m thrust.reliability.soak --duration 180 --json out.json

One process holds the embedded server, a FaultProxy in front of it (listening on 127.0.0.2 with the
server's port, so the routes the server hands out lead through the proxy too), a producer sending
`--rate` messages/s with random bodies of 1 B..64 KiB, a PushConsumer and a SimpleConsumer in two groups
(each group must get every message). Every `--fault-interval` seconds a fault is switched on for half
the interval and healed for the other half (chaos style), cycling through connection reset (F4), black
hole (F5) and refused connections (F6). Every `--sample-interval` seconds the process's RSS, open file
descriptors, threads and asyncio tasks and the push consumer's cache are sampled.

At the end the load stops, faults heal, both groups drain, and the history checker gives P1-P4 per group.
P5 is judged from the samples: RSS growth after the warm-up <= 10 %, fds and tasks back to their
baseline +- 5 after the last heal, push cache never above its byte limit plus one batch. The summary goes
to stdout (and `--json`); the exit status is 0 when every verdict holds.

RSS, fds and tasks are those of this process: client and server together, unless `--server-process` runs
the server as a `thrust serve` child (then they are the client's alone). The in-memory server retains
every message up to its per-queue retention (256 MiB), so in-process its memory grows with the load.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import thrust
from thrust.errors import ConnectionError, ThrustError, TimeoutError
from thrust.reliability.history import HistoryRecorder, Report, check
from thrust.reliability.proxy import PASS, Blackhole, FaultProxy, Mode, Refuse
from thrust.testing import ServerProcess, embedded_server

__all__ = ["Sample", "main", "soak"]

TOPIC = "soak"
PUSH_GROUP = "soak-push"
SIMPLE_GROUP = "soak-simple"
MAX_BODY = 64 * 1024
PUSH_CACHE_BYTES = 64 * 1024 * 1024
FAULTS: tuple[tuple[str, Mode | None], ...] = (
    ("reset", None),
    ("blackhole", Blackhole()),
    ("refuse", Refuse()),
)


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the start
    rss_mib: float
    fds: int
    threads: int
    tasks: int
    push_cached_bytes: int
    sent_ok: int
    fault: str  # the active fault, "" when healed


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _body(pid: str, rng: random.Random) -> bytes:
    head = pid.encode() + b"|"
    return head + rng.randbytes(rng.randint(0, MAX_BODY - len(head)))


def _pid(message: thrust.ReceivedMessage) -> str:
    return message.body.split(b"|", 1)[0].decode()


class _Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.push_rec = HistoryRecorder()
        self.simple_rec = HistoryRecorder()
        self.samples: list[Sample] = []
        self.fault = ""
        self.stopping = False
        self.sent_ok = 0
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.max_cached = 0
        self.slow_sends = 0
        self.untyped_errors: list[str] = []
        self.windows: list[tuple[str, float, float]] = []

    async def produce(self, producer: thrust.Producer) -> None:
        interval = 1.0 / self.args.rate
        i = 0
        pending: set[asyncio.Task[None]] = set()
        next_at = time.monotonic()
        while not self.stopping:
            pid = f"s{i}"
            i += 1
            task = asyncio.create_task(self._send_one(producer, pid))
            pending.add(task)
            task.add_done_callback(pending.discard)
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        if pending:
            await asyncio.gather(*pending)

    async def _send_one(self, producer: thrust.Producer, pid: str) -> None:
        ops = [(rec, rec.invoke(pid)) for rec in (self.push_rec, self.simple_rec)]
        t0 = time.monotonic()
        try:
            receipt = await producer.send(thrust.Message(topic=TOPIC, body=_body(pid, self.rng)))
        except (TimeoutError, ConnectionError) as exc:
            for rec, op in ops:
                rec.unknown(op, error=type(exc).__name__)
        except ThrustError as exc:
            for rec, op in ops:
                rec.fail(op, error=type(exc).__name__)
        except BaseException as exc:
            # Not a typed error: recorded (and reported) rather than lost from the history.
            self.untyped_errors.append(f"{pid}: {exc!r}")
            for rec, op in ops:
                rec.unknown(op, error=type(exc).__name__)
            raise
        else:
            self.sent_ok += 1
            for rec, op in ops:
                rec.ok(op, receipt.message_id)
        if time.monotonic() - t0 > self.args.send_bound:
            self.slow_sends += 1

    def on_push(self, m: thrust.ReceivedMessage) -> thrust.ConsumeResult:
        with self.lock:
            ref = self.push_rec.delivered(_pid(m), m.message_id, attempt=m.delivery_attempt, consumer="push")
            self.push_rec.acked(ref)  # SUCCESS: the consumer acks (ack failures show up as redeliveries)
        return thrust.ConsumeResult.SUCCESS

    async def consume_simple(self, consumer: thrust.SimpleConsumer) -> None:
        while not self.stopping:
            await self._receive_once(consumer)

    async def _receive_once(self, consumer: thrust.SimpleConsumer) -> int:
        try:
            batch = await consumer.receive(32, 15)
        except ThrustError:
            await asyncio.sleep(0.2)
            return 0
        refs = [
            self.simple_rec.delivered(_pid(m), m.message_id, attempt=m.delivery_attempt, consumer="simple")
            for m in batch
        ]
        for ref, err in zip(refs, await consumer.ack_many(batch), strict=True):
            if err is None:
                self.simple_rec.acked(ref)
            else:
                self.simple_rec.ack_failed(ref, error=type(err).__name__)
        return len(batch)

    async def chaos(self, proxy: FaultProxy) -> None:
        if self.args.fault_interval <= 0:
            return
        k = 0
        half = self.args.fault_interval / 2
        while not self.stopping:
            await asyncio.sleep(half)
            if self.stopping:
                break
            name, mode = FAULTS[k % len(FAULTS)]
            k += 1
            self.fault = name
            began = time.monotonic() - self.started
            for rec in (self.push_rec, self.simple_rec):
                rec.fault_started(name)
            if mode is None:
                proxy.reset_connections()
            else:
                proxy.set_mode(mode)
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(half)
            # Heal for new connections (a black-holed live connection stays dead: the client must notice).
            proxy.set_mode(PASS, scope="new" if name == "blackhole" else "all")
            self.fault = ""
            self.windows.append((name, round(began, 1), round(time.monotonic() - self.started, 1)))
            for rec in (self.push_rec, self.simple_rec):
                rec.fault_healed(name)

    async def sample(self, push: thrust.PushConsumer) -> None:
        while not self.stopping:
            cached = push.stats().cached_bytes
            self.max_cached = max(self.max_cached, cached)
            s = Sample(
                t=round(time.monotonic() - self.started, 1),
                rss_mib=round(_rss_mib(), 1),
                fds=_fds(),
                threads=threading.active_count(),
                tasks=len(asyncio.all_tasks()),
                push_cached_bytes=cached,
                sent_ok=self.sent_ok,
                fault=self.fault,
            )
            self.samples.append(s)
            if self.args.verbose:
                print(
                    f"t={s.t:7.1f}s rss={s.rss_mib:7.1f}MiB fds={s.fds:4d} threads={s.threads:3d} "
                    f"tasks={s.tasks:4d} push_cache={s.push_cached_bytes:>9d}B sent_ok={s.sent_ok} "
                    f"{s.fault}",
                    flush=True,
                )
            await asyncio.sleep(self.args.sample_interval)


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    """Run one soak; returns the figures (also printed by `main`)."""
    state = _Soak(args)
    async with contextlib.AsyncExitStack() as stack:
        if args.server_process:
            # The server in its own process: the sampled RSS / fds / tasks are the client's alone.
            proc = stack.enter_context(
                ServerProcess(["--topic", f"{TOPIC}:8", "--group", PUSH_GROUP, "--group", SIMPLE_GROUP])
            )
            port = proc.ports[0]
        else:
            srv = await stack.enter_async_context(
                embedded_server(topics=[f"{TOPIC}:8"], groups=[PUSH_GROUP, SIMPLE_GROUP])
            )
            port = srv.ports[0]
        async with FaultProxy(target=("127.0.0.1", port), host="127.0.0.2", port=port) as proxy:
            ep = f"127.0.0.2:{port}"
            producer = thrust.Producer(endpoints=ep, topics=[TOPIC], request_timeout=args.request_timeout)
            simple = thrust.SimpleConsumer(
                endpoints=ep,
                group=SIMPLE_GROUP,
                subscriptions={TOPIC: "*"},
                await_duration=5,
                request_timeout=args.request_timeout,
            )
            push = thrust.PushConsumer(
                endpoints=ep,
                group=PUSH_GROUP,
                subscriptions={TOPIC: "*"},
                listener=state.on_push,
                request_timeout=args.request_timeout,
                max_cache_message_bytes=PUSH_CACHE_BYTES,
            )
            async with producer, simple, push:
                state.started = time.monotonic()
                tasks = [
                    asyncio.create_task(state.produce(producer), name="soak-produce"),
                    asyncio.create_task(state.consume_simple(simple), name="soak-simple"),
                    asyncio.create_task(state.chaos(proxy), name="soak-chaos"),
                    asyncio.create_task(state.sample(push), name="soak-sample"),
                ]
                await asyncio.sleep(args.duration)
                state.stopping = True
                await tasks[0]
                for t in tasks[1:]:
                    t.cancel()
                for t in tasks[1:]:
                    with contextlib.suppress(asyncio.CancelledError):
                        await t
                proxy.set_mode(PASS)
                # Drain: messages of lost receive replies come back after their invisible time (15 s).
                quiet = 0.0
                deadline = time.monotonic() + args.drain
                while time.monotonic() < deadline and quiet < 20.0:
                    t0 = time.monotonic()
                    got = await state._receive_once(simple)
                    quiet = 0.0 if got else quiet + (time.monotonic() - t0)
                    if push.stats().cached_bytes:
                        quiet = 0.0
                await asyncio.sleep(2.0)
                final = push.stats()
            # Closed clients: resources should be back at the level of the first sample.
            await asyncio.sleep(1.0)
            end_fds, end_tasks = _fds(), len(asyncio.all_tasks())
    return _figures(state, final, end_fds, end_tasks)


def _figures(state: _Soak, final: Any, end_fds: int, end_tasks: int) -> dict[str, Any]:
    args = state.args
    samples = state.samples
    warm = [s for s in samples if s.t >= args.warmup] or samples[-1:]
    base_rss = warm[0].rss_mib if warm else 0.0
    peak_rss = max((s.rss_mib for s in warm), default=0.0)
    healed = [s for s in samples if not s.fault]
    base_fds = samples[0].fds if samples else end_fds
    base_tasks = samples[0].tasks if samples else end_tasks
    # require_ack=False: an ack whose reply a fault swallowed has an unknown outcome (the server usually
    # applied it, and then never redelivers); P1 is the catalogue's lost = 0 and unexpected = 0.
    reports: dict[str, Report] = {
        "push": check(state.push_rec, recovery_bound=30.0, copies_per_send=3, require_ack=False),
        "simple": check(state.simple_rec, recovery_bound=30.0, copies_per_send=3, require_ack=False),
    }
    rss_growth = (peak_rss - base_rss) / base_rss if base_rss else 0.0
    p5 = {
        "rss_growth_after_warmup": round(rss_growth, 4),
        "rss_ok": rss_growth <= 0.10,
        "fds_while_healed_max_delta": max((abs(s.fds - base_fds) for s in healed), default=0),
        "tasks_while_healed_max_delta": max((abs(s.tasks - base_tasks) for s in healed), default=0),
        "fds_after_close": end_fds,
        "tasks_after_close": end_tasks,
        "push_cache_max_bytes": state.max_cached,
        "push_cache_ok": state.max_cached <= PUSH_CACHE_BYTES + 32 * MAX_BODY,
    }
    figures: dict[str, Any] = {
        "duration_s": args.duration,
        "rate_per_s": args.rate,
        "fault_interval_s": args.fault_interval,
        "sent_ok": state.sent_ok,
        "slow_sends": state.slow_sends,
        "push_acked": final.acked,
        "untyped_send_errors": state.untyped_errors[:10],
        "hung_sends": _hung(state.simple_rec)[:10],
        "samples": [asdict(s) for s in samples],
        "rss_mib": {
            "first": samples[0].rss_mib if samples else None,
            "after_warmup": base_rss,
            "peak_after_warmup": peak_rss,
            "last": samples[-1].rss_mib if samples else None,
        },
        "p5": p5,
        "reports": {name: r.summary for name, r in reports.items()},
        "recovery_times_s": {name: [round(x, 2) for x in r.recovery_times] for name, r in reports.items()},
        "fault_windows_s": state.windows,
        "ok": all(r.ok for r in reports.values())
        and bool(p5["rss_ok"])
        and bool(p5["push_cache_ok"])
        and state.slow_sends == 0,
    }
    return figures


def _hung(rec: HistoryRecorder) -> list[str]:
    events = rec.snapshot().events
    completed = {e.ref for e in events if e.kind in ("ok", "fail", "unknown")}
    return [f"{e.payload_id}@{e.t:.1f}" for e in events if e.kind == "invoke" and e.seq not in completed]


def _print(figures: dict[str, Any]) -> None:
    print(
        f"soak: {figures['duration_s']:g}s at {figures['rate_per_s']:g} msg/s, faults every "
        f"{figures['fault_interval_s']:g}s; {figures['sent_ok']} sends ok, {figures['slow_sends']} past "
        f"the P3 bound, push acked {figures['push_acked']}"
    )
    rss = figures["rss_mib"]
    print(
        f"RSS MiB: first {rss['first']}, after warm-up {rss['after_warmup']}, peak after warm-up "
        f"{rss['peak_after_warmup']}, last {rss['last']}"
    )
    if figures["hung_sends"] or figures["untyped_send_errors"]:
        print(f"hung sends: {figures['hung_sends']}; untyped errors: {figures['untyped_send_errors']}")
    print("P5: " + ", ".join(f"{k}={v}" for k, v in figures["p5"].items()))
    print(f"fault windows (name, from s, healed s): {figures['fault_windows_s']}")
    print(f"recovery times after each heal (s): {figures['recovery_times_s']}")
    for name, summary in figures["reports"].items():
        print(f"[{name} group]\n{summary}")
    print("SOAK " + ("OK" if figures["ok"] else "FAILED"))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m thrust.reliability.soak", description=__doc__.split("\n")[0])
    p.add_argument("--duration", type=float, default=3600.0, help="seconds of load (default 3600)")
    p.add_argument("--rate", type=float, default=200.0, help="messages per second (default 200)")
    p.add_argument("--fault-interval", type=float, default=60.0, help="fault cycle in seconds; 0: none")
    p.add_argument("--sample-interval", type=float, default=10.0, help="seconds between samples")
    p.add_argument("--warmup", type=float, default=None, help="RSS baseline time (default min(300, d/5))")
    p.add_argument("--request-timeout", type=float, default=3.0)
    p.add_argument("--send-bound", type=float, default=11.0, help="P3 bound of one send in seconds")
    p.add_argument("--drain", type=float, default=120.0, help="max seconds to drain at the end")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--server-process",
        action="store_true",
        help="run the server as a `thrust serve` subprocess, so the samples measure the client alone",
    )
    p.add_argument("--json", default=None, help="write the figures to this file")
    p.add_argument("-q", "--quiet", dest="verbose", action="store_false", help="no per-sample lines")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.warmup is None:
        args.warmup = min(300.0, args.duration / 5)
    if args.rate <= 0 or args.duration <= 0 or args.sample_interval <= 0:
        print("duration, rate and sample interval must be > 0", file=sys.stderr)
        return 2
    figures = asyncio.run(soak(args))
    _print(figures)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
    return 0 if figures["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
