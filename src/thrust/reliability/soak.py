"""Soak run (L5, docs/reliability.md §2): steady load with periodic network faults, sampling resources.

Why one module of ~890 lines (docs/CONVENTIONS.md): it is one command (load, faults, sampling, the P5
figures and their printout) whose parts share the `_Soak` state of a single run; its long docstring
is the definition of the P5 figures it computes.

    python -m thrust.reliability.soak --duration 3600            # L5's hour
    python -m thrust.reliability.soak --duration 420 --json out.json
    python -m thrust.reliability.soak --server real --duration 600   # a real RocketMQ, R1-R4 in turn

The server runs as a `thrust serve` child process (`--in-process` puts it in the sampled process
instead; its in-memory store then dominates RSS). A FaultProxy runs in a child process too
(`ProxyProcess`: its chunk buffers would otherwise be charged to the client) in front of the server,
listening on 127.0.0.2 with the server's port, so the routes the server hands out lead through the
proxy too. The sampled process holds the clients and the load: a producer sending `--rate`
messages/s with random bodies of 1 B..64 KiB, a PushConsumer and a SimpleConsumer in two groups (each
group must get every message). Every `--fault-interval` seconds a fault is switched on for half the
interval and healed for the other half (chaos style), cycling through
connection reset (F4), black hole (F5) and refused connections (F6). With `--server real` the server is
a real Apache RocketMQ from the Maven Central jars (`thrust.cluster.RocketMQCluster`, two brokers behind
a cluster-mode proxy, the FaultProxy in front of the proxy) and the faults are the real-cluster issue's
R1-R4 in turn: broker-b killed -9, the proxy terminated, the proxy killed -9 (each JVM restarted with
its store and ports at the heal, which comes once it is ready again), and the black hole. Every
`--sample-interval` seconds, and once at the end of every healed half-cycle (just before the next
fault), the process's RSS, open file descriptors, threads and asyncio tasks, the push consumer's cache
and the server child's RSS are sampled.

The message histories are streamed to append-only JSON-lines files (`--history-dir`, default a
temporary directory removed at the end), so the sampled process does not grow with the history; the
checker reads them back after the clients are closed and sampling has stopped.

At the end the load stops, faults heal, both groups drain (the push consumer is restarted once, so that
messages whose receive reply a fault swallowed are released; see `_run`), and the history checker
gives P1-P4 per group.
P5, from the samples:
- RSS, compared like with like on the *steady* samples, those at the end of each healed half-cycle
  (30 s after a heal, full load, no fault; every sample when there are no faults; like the fd/task
  checks below, each is the minimum of 5 readings 0.2 s apart) at or after the warm-up (default 300 s,
  P5's 5 minutes; duration / 5 for runs shorter than 360 s). Growth = median of the steady
  samples in the last window / median of those in the first window - 1 <= 10 %, a window being the
  first (last) 10 minutes of steady samples, or a third of their span when that is shorter. Medians,
  because a single steady sample swings by +-10 MiB on a ~75 MiB client with a flat heap (glibc keeps
  or returns freed memory depending on where the last fault's bodies landed), so "the largest sample
  against the first" judges that noise: in a run with no faults and a flat heap it "grew" 32 %. A leak
  moves the median of the last window. Also reported, not judged: the largest later steady sample
  against the first (`rss_growth_max`), the last one, and the peak of any sample (during a black hole
  the sends waiting out their timeouts hold up to ~2,000 bodies for a few seconds);
- fds and asyncio tasks *of the client*: the sample taken just before the first fault is the baseline,
  and the sample at the end of every healed half-cycle, plus one after the final drain, must be at most
  baseline + 5 (each of these check samples is the minimum of 5 readings 0.2 s apart, so that calls
  and bodies in flight at that instant do not count; a leak raises the minimum too; a count below the
  baseline is not a leak). Tasks of the soak harness (per-send tasks, sampler, chaos loop) are not the
  client's and are counted apart (the raw totals are in the samples too). The client's tasks are
  judged less the producer's sends in flight (`Producer.stats().in_flight`, each holding at most one
  grpc.aio call task): a server that answers slowly after a restart holds hundreds of sends, each
  bounded by its retries and timeouts (the P3 bound), up to the producer's `max_in_flight` window;
  the fds include the pipes to the two children (constant);
- push cache never above its byte limit (64 MiB) plus one batch (32 messages of 64 KiB).
The summary goes to stdout (and `--json`); the exit status is 0 when every verdict holds.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import ctypes
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import thrust
from thrust.cluster import RocketMQCluster
from thrust.errors import ConnectionError, ThrustError, TimeoutError
from thrust.reliability.history import History, HistoryRecorder, Report, check
from thrust.reliability.proxy_process import ProxyProcess
from thrust.testing import ServerProcess, embedded_server

__all__ = ["Sample", "main", "soak"]

TOPIC = "soak"
PUSH_GROUP = "soak-push"
SIMPLE_GROUP = "soak-simple"
MAX_BODY = 64 * 1024
PUSH_CACHE_BYTES = 64 * 1024 * 1024
# ProxyProcess commands, in turn: RST every live connection (F4), black hole (F5), refuse (F6).
FAULTS: tuple[str, ...] = ("reset", "blackhole", "refuse")
# `--server real`: a real Apache RocketMQ (namesrv, broker-a, broker-b, a cluster-mode proxy), with
# R1-R4 of docs/reliability.md in turn: broker-b killed -9 (restarted with its store at the heal), the
# proxy terminated (SIGTERM) or killed -9 (restarted on the same port at the heal), and a black hole
# in the FaultProxy.
REAL_FAULTS: tuple[str, ...] = ("kill-broker-b", "terminate-proxy", "kill-proxy", "blackhole")
# The proxy's invisible time for push receives (upstream 60 s), as in tests/reliability/test_real_cluster.py.
# `useEndpointPortFromRequest`: routes name the port the client dialled (the FaultProxy's), not the proxy's.
REAL_PROXY_CONFIG: dict[str, Any] = {"defaultInvisibleTimeMills": 15_000, "useEndpointPortFromRequest": True}


WARMUP = 300.0  # P5's 5-minute warm-up before the RSS baseline (docs/reliability.md §1)
RSS_GROWTH = 0.10
RSS_WINDOW = 600.0  # seconds of steady samples whose median is compared at each end of the run
FD_TASK_SLACK = 5
STALL_S = 45.0  # the simple consumer got nothing for this long while healed: log where it waits
CHECK_READS = 5  # readings per fd/task check sample (their minimum is recorded)
HARNESS_TASK_PREFIX = "soak-"


@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the start
    rss_mib: float
    fds: int  # the process's (the FaultProxy and the server are children)
    threads: int
    tasks: int  # the client's: every asyncio task minus the soak harness's
    push_cached_bytes: int
    sent_ok: int
    fault: str  # the active fault, "" when healed
    kind: str = "periodic"  # "periodic" | "cycle-end" (end of a healed half-cycle) | "final"
    fds_total: int = 0
    tasks_total: int = 0
    server_rss_mib: float | None = None  # the `thrust serve` child's RSS (information only)
    # glibc's heap in use (mallinfo2 uordblks; None elsewhere), information only: with RSS it tells a
    # leak (in use grows) from allocator slack (RSS moves, in use does not).
    heap_in_use_mib: float | None = None
    # The producer's sends in flight (`Producer.stats().in_flight`) at the reading of `tasks`: each holds
    # at most one grpc.aio call task, which `tasks` counts; P5 judges `tasks - sends_in_flight`.
    sends_in_flight: int = 0


# (RSS MiB, fds, all fds, client tasks, all tasks, the producer's sends in flight)
_Counts = tuple[float, int, int, int, int, int]


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
    ]


def _load_mallinfo2() -> Any:
    try:
        fn = ctypes.CDLL(None).mallinfo2  # glibc >= 2.33
    except (OSError, AttributeError):
        return None
    fn.restype = _MallInfo2
    return fn


_MALLINFO2 = _load_mallinfo2()


def _heap_in_use_mib() -> float | None:
    """Bytes malloc has handed out and not got back, in MiB (small chunks plus mmapped ones)."""
    if _MALLINFO2 is None:
        return None
    info = _MALLINFO2()
    return float(info.uordblks + info.hblkhd) / 2**20


def _rss_mib(pid: int | str = "self") -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _await_chain(task: asyncio.Task[Any]) -> list[str]:
    """The chain of coroutines a task is suspended in, outermost first, and what the innermost awaits."""
    out: list[str] = []
    coro: Any = task.get_coro()
    for _ in range(60):
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            out.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_qualname}")
        nxt = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
        if nxt is None:
            out.append(f"awaits {coro!r}"[:300])
            break
        coro = nxt
    return out


def _client_task(task: asyncio.Task[Any]) -> bool:
    return not task.get_name().startswith(HARNESS_TASK_PREFIX)


def _body(pid: str, rng: random.Random) -> bytes:
    head = pid.encode() + b"|"
    return head + rng.randbytes(rng.randint(0, MAX_BODY - len(head)))


def _pid(message: thrust.ReceivedMessage) -> str:
    return message.body.split(b"|", 1)[0].decode()


class _Soak:
    def __init__(self, args: argparse.Namespace, history_dir: Path) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        # File-backed: the sampled process keeps no history (read back by the checker at the end).
        self.push_rec = HistoryRecorder(path=history_dir / "push.jsonl")
        self.simple_rec = HistoryRecorder(path=history_dir / "simple.jsonl")
        self.samples: list[Sample] = []
        self.push: thrust.PushConsumer | None = None
        self.producer: thrust.Producer | None = None
        self.push_deliveries = 0  # listener calls, under `lock`
        self.push_after_restart = 0  # deliveries by the drain's successor consumer (see `_run`)
        self.push_acked_first = 0  # acks of the consumer that ran the load (its successor's come on top)
        self.server_pid: int | None = None
        self.fault = ""
        self.stopping = False
        self.sent_ok = 0
        self.started = time.monotonic()
        self.lock = threading.Lock()
        self.max_cached = 0
        self.slow_sends = 0
        self.slow_by_fault: collections.Counter[str] = collections.Counter()
        self.slow_examples: list[dict[str, Any]] = []
        self.untyped_errors: list[str] = []
        self.windows: list[tuple[str, float, float]] = []
        self.restarts: list[tuple[str, float]] = []  # `--server real`: (fault, seconds to boot again)
        # Simple-consumer progress, to catch a consumer that stops receiving while the network is fine.
        self.simple_last_got = time.monotonic()
        self.simple_errors: dict[str, int] = {}
        self.stalls: list[dict[str, Any]] = []
        # The client's tasks by coroutine at a check over the task bound (at most 10), to tell a leak from
        # work still finishing after a heal.
        self.task_excess: list[dict[str, Any]] = []
        self._task_ref: int | None = None
        self._last_dump = 0.0

    async def produce(self, producer: thrust.Producer) -> None:
        interval = 1.0 / self.args.rate
        i = 0
        pending: set[asyncio.Task[None]] = set()
        next_at = time.monotonic()
        while not self.stopping:
            pid = f"s{i}"
            i += 1
            task = asyncio.create_task(self._send_one(producer, pid), name="soak-send")
            pending.add(task)
            task.add_done_callback(pending.discard)
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        if pending:
            await asyncio.gather(*pending)

    async def _send_one(self, producer: thrust.Producer, pid: str) -> None:
        ops = [(rec, rec.invoke(pid)) for rec in (self.push_rec, self.simple_rec)]
        t0 = time.monotonic()
        fault = self.fault
        outcome = "ok"
        try:
            receipt = await producer.send(thrust.Message(topic=TOPIC, body=_body(pid, self.rng)))
        except (TimeoutError, ConnectionError) as exc:
            outcome = type(exc).__name__
            for rec, op in ops:
                rec.unknown(op, error=outcome)
        except ThrustError as exc:
            outcome = type(exc).__name__
            for rec, op in ops:
                rec.fail(op, error=outcome)
        except BaseException as exc:
            # Not a typed error: recorded (and reported) rather than lost from the history.
            if len(self.untyped_errors) < 100:
                self.untyped_errors.append(f"{pid}: {exc!r}")
            for rec, op in ops:
                rec.unknown(op, error=type(exc).__name__)
            raise
        else:
            self.sent_ok += 1
            for rec, op in ops:
                rec.ok(op, receipt.message_id)
        took = time.monotonic() - t0
        if took > self.args.send_bound:
            self.slow_sends += 1
            # Where the slow sends were: by the fault active when each began, and the first few in full.
            self.slow_by_fault[fault or "healed"] += 1
            if len(self.slow_examples) < 20:
                self.slow_examples.append(
                    {
                        "pid": pid,
                        "t": round(t0 - self.started, 1),
                        "s": round(took, 1),
                        "fault": fault,
                        "outcome": outcome,
                    }
                )

    def on_push(self, m: thrust.ReceivedMessage) -> thrust.ConsumeResult:
        with self.lock:
            self.push_deliveries += 1
            ref = self.push_rec.delivered(_pid(m), m.message_id, attempt=m.delivery_attempt, consumer="push")
            self.push_rec.acked(ref)  # SUCCESS: the consumer acks (ack failures show up as redeliveries)
        return thrust.ConsumeResult.SUCCESS

    async def consume_simple(self, consumer: thrust.SimpleConsumer) -> None:
        while not self.stopping:
            await self._receive_once(consumer)

    async def _receive_once(self, consumer: thrust.SimpleConsumer) -> int:
        try:
            batch = await consumer.receive(32, 15)
        except ThrustError as exc:
            name = type(exc).__name__
            self.simple_errors[name] = self.simple_errors.get(name, 0) + 1
            await asyncio.sleep(0.2)
            return 0
        if batch:
            self.simple_last_got = time.monotonic()
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

    async def chaos(self, proxy: ProxyProcess, cluster: RocketMQCluster | None = None) -> None:
        if self.args.fault_interval <= 0:
            return
        k = 0
        half = self.args.fault_interval / 2
        faults = FAULTS if cluster is None else REAL_FAULTS
        while not self.stopping:
            await asyncio.sleep(half)
            if self.stopping:
                break
            # The end of a healed half-cycle: fds and tasks must be back at the baseline (P5).
            await self.check_sample("cycle-end")
            name = faults[k % len(faults)]
            k += 1
            self.fault = name
            began = time.monotonic() - self.started
            for rec in (self.push_rec, self.simple_rec):
                rec.fault_started(name)
            action, _, target = name.partition("-")
            if cluster is not None and action in ("kill", "terminate"):
                await asyncio.to_thread(getattr(cluster, action), target)
            else:
                await proxy.command(name)
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(half)
            if cluster is not None and action in ("kill", "terminate"):
                # Healed once the JVM is ready again (boot line; for the proxy a QueryRoute answered).
                boot = await asyncio.to_thread(cluster.restart, target)
                self.restarts.append((name, round(boot, 1)))
            else:
                # Heal for new connections (a black-holed live connection stays dead: the client must
                # notice).
                await proxy.command("pass", scope="new" if name == "blackhole" else "all")
            self.fault = ""
            self.windows.append((name, round(began, 1), round(time.monotonic() - self.started, 1)))
            for rec in (self.push_rec, self.simple_rec):
                rec.fault_healed(name)

    def _counts(self) -> _Counts:
        """(RSS MiB, fds, all fds, client tasks, all tasks, sends in flight) right now (the proxy is a
        child: fds are all the process's)."""
        fds = _fds()
        tasks = asyncio.all_tasks()
        n_client = sum(1 for t in tasks if _client_task(t))
        in_flight = self.producer.stats().in_flight if self.producer is not None else 0
        return _rss_mib() or 0.0, fds, fds, n_client, len(tasks), in_flight

    async def check_sample(self, kind: str) -> Sample:
        """A check sample: the floor (minimum) of CHECK_READS readings 0.2 s apart.

        At 200 msg/s a single reading catches a varying number of calls and bodies in flight (+-10
        tasks, +-4 MiB of RSS); a leak raises the floor too, a call in flight does not. The client tasks
        and the sends in flight come from the one reading with the fewest tasks beyond the sends.
        """
        reads = [self._counts()]
        for _ in range(CHECK_READS - 1):
            await asyncio.sleep(0.2)
            reads.append(self._counts())
        fewest = min(reads, key=lambda r: r[3] - r[5])
        floor = (
            min(r[0] for r in reads),
            min(r[1] for r in reads),
            min(r[2] for r in reads),
            fewest[3],
            min(r[4] for r in reads),
            fewest[5],
        )
        sample = self.take_sample(kind, floor)
        judged = sample.tasks - sample.sends_in_flight
        if self._task_ref is None:
            self._task_ref = judged
        elif judged - self._task_ref > FD_TASK_SLACK and len(self.task_excess) < 10:
            names = collections.Counter(
                getattr(t.get_coro(), "__qualname__", t.get_name())
                for t in asyncio.all_tasks()
                if _client_task(t)
            )
            self.task_excess.append({"t": sample.t, "kind": kind, "tasks": dict(names.most_common())})
        return sample

    def take_sample(self, kind: str = "periodic", counts: _Counts | None = None) -> Sample:
        cached = self.push.stats().cached_bytes if self.push is not None else 0
        self.max_cached = max(self.max_cached, cached)
        rss, fds, fds_total, client_tasks, tasks_total, in_flight = counts or self._counts()
        server_rss = _rss_mib(self.server_pid) if self.server_pid is not None else None
        heap = _heap_in_use_mib()
        s = Sample(
            t=round(time.monotonic() - self.started, 1),
            rss_mib=round(rss, 1),
            fds=fds,
            threads=threading.active_count(),
            tasks=client_tasks,
            push_cached_bytes=cached,
            sent_ok=self.sent_ok,
            fault=self.fault,
            kind=kind,
            fds_total=fds_total,
            tasks_total=tasks_total,
            server_rss_mib=None if server_rss is None else round(server_rss, 1),
            heap_in_use_mib=None if heap is None else round(heap, 1),
            sends_in_flight=in_flight,
        )
        self.samples.append(s)
        if self.args.verbose:
            server = "" if s.server_rss_mib is None else f" server_rss={s.server_rss_mib:7.1f}MiB"
            in_use = "" if s.heap_in_use_mib is None else f" (heap in use {s.heap_in_use_mib:6.1f})"
            print(
                f"t={s.t:7.1f}s rss={s.rss_mib:7.1f}MiB{in_use} fds={s.fds:4d}/{s.fds_total:<4d} "
                f"threads={s.threads:3d} tasks={s.tasks:4d}/{s.tasks_total:<4d} sends={s.sends_in_flight:4d} "
                f"push_cache={s.push_cached_bytes:>9d}B sent_ok={s.sent_ok}{server} "
                f"{s.fault}{'' if kind == 'periodic' else ' [' + kind + ']'}",
                flush=True,
            )
        return s

    async def sample(self) -> None:
        while not self.stopping:
            self.take_sample()
            self._watch_simple()
            await asyncio.sleep(self.args.sample_interval)

    def _watch_simple(self) -> None:
        """Diagnostics: when the simple consumer got nothing for STALL_S while healed, log where it waits."""
        now = time.monotonic()
        idle = now - self.simple_last_got
        if self.fault or idle < STALL_S or now - self._last_dump < 120.0 or len(self.stalls) >= 10:
            return
        self._last_dump = now
        where = {t.get_name(): _await_chain(t) for t in asyncio.all_tasks() if t.get_name() == "soak-simple"}
        stall = {
            "t": round(now - self.started, 1),
            "idle_s": round(idle, 1),
            "receive_errors": dict(self.simple_errors),
            "await_chain": where.get("soak-simple", []),
        }
        self.stalls.append(stall)
        print(f"simple consumer idle {idle:.0f}s while healed: {json.dumps(stall, indent=1)}", flush=True)

    def close(self) -> None:
        self.push_rec.close()
        self.simple_rec.close()


async def soak(args: argparse.Namespace) -> dict[str, Any]:
    """Run one soak; returns the figures (also printed by `main`)."""
    history_dir, remove_history = _history_dir(args)
    state = _Soak(args, history_dir)
    try:
        final, end_fds, end_tasks = await _run(state)
        state.close()
        # Sampling has stopped and the clients are closed: now the checker may read the histories.
        return _figures(state, final, end_fds, end_tasks)
    finally:
        state.close()
        if remove_history:
            shutil.rmtree(history_dir, ignore_errors=True)


def _history_dir(args: argparse.Namespace) -> tuple[Path, bool]:
    """The directory for the history files, and whether to remove it at the end."""
    if args.history_dir:
        path = Path(args.history_dir)
        path.mkdir(parents=True, exist_ok=True)
        return path, False
    return Path(tempfile.mkdtemp(prefix="thrust-soak-")), True


async def _run(state: _Soak) -> tuple[Any, int, int]:
    args = state.args
    cluster: RocketMQCluster | None = None
    target_host = "127.0.0.1"
    listen_port: int | None = None
    async with contextlib.AsyncExitStack() as stack:
        if args.server == "real":
            cluster = RocketMQCluster("cluster", proxy_config=REAL_PROXY_CONFIG, startup_timeout=300)
            stack.callback(cluster.stop)
            await asyncio.to_thread(cluster.start)
            for group in (PUSH_GROUP, SIMPLE_GROUP):
                cluster.create_group(group)
            await asyncio.to_thread(cluster.create_topic, TOPIC, "NORMAL", queues=8)
            target_host, _, real_port = cluster.endpoint.rpartition(":")
            port = int(real_port)
            listen_port = 0  # the proxy listens on every address: the FaultProxy takes a port of its own
        elif args.server_process:
            # The server in its own process: the sampled RSS / fds / tasks are the client's alone.
            proc = stack.enter_context(
                ServerProcess(["--topic", f"{TOPIC}:8", "--group", PUSH_GROUP, "--group", SIMPLE_GROUP])
            )
            port = proc.ports[0]
            state.server_pid = proc.pid
        else:
            srv = await stack.enter_async_context(
                embedded_server(topics=[f"{TOPIC}:8"], groups=[PUSH_GROUP, SIMPLE_GROUP])
            )
            port = srv.ports[0]
        async with ProxyProcess(
            target=(target_host, port), host="127.0.0.2", port=port if listen_port is None else listen_port
        ) as proxy:
            ep = proxy.endpoint
            producer = thrust.Producer(endpoints=ep, topics=[TOPIC], request_timeout=args.request_timeout)
            simple = thrust.SimpleConsumer(
                endpoints=ep,
                group=SIMPLE_GROUP,
                subscriptions={TOPIC: "*"},
                await_duration=5,
                request_timeout=args.request_timeout,
            )

            def new_push() -> thrust.PushConsumer:
                return thrust.PushConsumer(
                    endpoints=ep,
                    group=PUSH_GROUP,
                    subscriptions={TOPIC: "*"},
                    listener=state.on_push,
                    request_timeout=args.request_timeout,
                    max_cache_message_bytes=PUSH_CACHE_BYTES,
                )

            push = new_push()
            state.push = push
            state.producer = producer
            async with producer, simple, push:
                state.started = time.monotonic()
                tasks = [
                    asyncio.create_task(state.produce(producer), name="soak-produce"),
                    asyncio.create_task(state.consume_simple(simple), name="soak-simple"),
                    asyncio.create_task(state.chaos(proxy, cluster), name="soak-chaos"),
                    asyncio.create_task(state.sample(), name="soak-sample"),
                ]
                await asyncio.sleep(args.duration)
                state.stopping = True
                await tasks[0]
                for t in tasks[1:]:
                    t.cancel()
                for t in tasks[1:]:
                    with contextlib.suppress(asyncio.CancelledError):
                        await t
                await proxy.command("pass")
                # Drain: messages of lost receive replies come back after their invisible time (15 s).
                quiet = 0.0
                deadline = time.monotonic() + args.drain
                while time.monotonic() < deadline and quiet < 20.0:
                    t0 = time.monotonic()
                    got = await state._receive_once(simple)
                    quiet = 0.0 if got else quiet + (time.monotonic() - t0)
                    if push.stats().cached_bytes:
                        quiet = 0.0
                # A receive reply the black hole swallowed leaves its messages popped for the push
                # consumer: the server auto-renews them for as long as that client is alive, as the proxy
                # does with every handle it popped for a live client (docs/protocol.md §7.2; they would come
                # back after the 3 h renew limit). Java and thrust cannot nack messages they never saw, so the
                # way back is a restart: closing sends NotifyClientTermination (released after ~1 s), and a
                # successor in the same group drains them. Counted in the figures as `push_after_restart`.
                before_restart = state.push_deliveries
                await push.close()
                state.push_acked_first = push.stats().acked
                push = new_push()
                state.push = push
                async with push:
                    seen, quiet_since = state.push_deliveries, time.monotonic()
                    while time.monotonic() - quiet_since < 5.0 and time.monotonic() < deadline + 30.0:
                        await asyncio.sleep(0.5)
                        if state.push_deliveries != seen or push.stats().cached_bytes:
                            seen, quiet_since = state.push_deliveries, time.monotonic()
                    state.push_after_restart = state.push_deliveries - before_restart
                    final = push.stats()
                    # After the last heal and the drain: fds and tasks back at the baseline (P5).
                    await state.check_sample("final")
            state.push = None
            state.producer = None
            # Closed clients: resources should be back at the level of the first sample.
            await asyncio.sleep(1.0)
            end_fds, end_tasks = _fds(), len(asyncio.all_tasks())
    return final, end_fds, end_tasks


def _rss_windows(steady: Sequence[Sample]) -> tuple[list[Sample], list[Sample]]:
    """The steady samples of the first and of the last window (see the module docstring)."""
    if not steady:
        return [], []
    start, end = steady[0].t, steady[-1].t
    width = min(RSS_WINDOW, (end - start) / 3)
    return [s for s in steady if s.t <= start + width], [s for s in steady if s.t >= end - width]


def _median_heap(samples: Sequence[Sample]) -> float | None:
    values = [s.heap_in_use_mib for s in samples if s.heap_in_use_mib is not None]
    return statistics.median(values) if values else None


def _p5(state: _Soak) -> dict[str, Any]:
    """P5 from the samples (see the module docstring for the exact rules)."""
    args = state.args
    samples = state.samples
    # RSS is compared like with like: at the end of each healed half-cycle (30 s after a heal, full load,
    # no fault), because during a fault the sends waiting out their timeouts hold up to ~2,000 bodies
    # (a transient peak that is gone 10 s after the heal). Without faults every sample is steady.
    steady_kinds = ("cycle-end",) if args.fault_interval > 0 else ("periodic", "cycle-end")
    steady = [s for s in samples if s.kind in steady_kinds and s.t >= args.warmup]
    base = steady[0] if steady else None
    base_rss = base.rss_mib if base else 0.0
    max_rss = max((s.rss_mib for s in steady[1:]), default=base_rss)
    after = [s for s in samples if base is not None and s.t > base.t]
    peak_rss = max((s.rss_mib for s in after), default=base_rss)
    first, last = _rss_windows(steady)
    first_median = statistics.median(s.rss_mib for s in first) if first else 0.0
    last_median = statistics.median(s.rss_mib for s in last) if last else 0.0
    growth = (last_median - first_median) / first_median if first_median else 0.0
    last_steady = steady[-1].rss_mib if steady else 0.0
    last_rss = samples[-1].rss_mib if samples else 0.0
    growth_max = (max_rss - base_rss) / base_rss if base_rss else 0.0
    growth_last = (last_steady - base_rss) / base_rss if base_rss else 0.0
    growth_peak = (peak_rss - base_rss) / base_rss if base_rss else 0.0
    checks = [s for s in samples if s.kind in ("cycle-end", "final")]
    if not any(s.kind == "cycle-end" for s in checks) and samples:
        # No faults (--fault-interval 0): the first sample is the baseline, the final one is checked.
        checks = [samples[0], *checks]
    # Baseline for fds and tasks: the end of the first healed half, before any fault.
    ref = checks[0] if checks else (samples[0] if samples else None)
    # A leak raises the count; a check below the baseline (a broker's connection closed while it is
    # down, sends waiting out a backoff with no call) is not one. The client's tasks are judged without
    # the grpc.aio call of each send in flight: a slow server holds up to `max_in_flight` of them.
    bad_checks = []
    fd_delta = task_delta = 0
    if ref is not None:
        ref_tasks = ref.tasks - ref.sends_in_flight
        for s in checks[1:]:
            fd_excess, task_excess = s.fds - ref.fds, s.tasks - s.sends_in_flight - ref_tasks
            fd_delta, task_delta = max(fd_delta, fd_excess), max(task_delta, task_excess)
            if fd_excess > FD_TASK_SLACK or task_excess > FD_TASK_SLACK:
                bad_checks.append(
                    {"t": s.t, "kind": s.kind, "fds": s.fds, "tasks": s.tasks, "sends": s.sends_in_flight}
                )
    server = [s.server_rss_mib for s in samples if s.server_rss_mib is not None]
    cache_limit = PUSH_CACHE_BYTES + 32 * MAX_BODY
    return {
        "rss_rule": (
            "steady samples = ends of healed half-cycles at/after the warm-up; growth = median of the last "
            "window / median of the first - 1 <= 10 % (windows: 10 min, or a third of the span if shorter)"
        ),
        "warmup_s": args.warmup,
        "rss_baseline_t": base.t if base else None,
        "rss_baseline_mib": base_rss,
        "rss_steady_samples_after_baseline": max(0, len(steady) - 1),
        "rss_max_after_warmup_mib": max_rss,
        "rss_last_steady_mib": last_steady,
        "rss_growth_max": round(growth_max, 4),
        "rss_growth_last_steady": round(growth_last, 4),
        "rss_windows_s": [[first[0].t, first[-1].t], [last[0].t, last[-1].t]] if steady else None,
        "rss_first_window_median_mib": first_median,
        "rss_last_window_median_mib": last_median,
        "rss_growth": round(growth, 4),
        "heap_in_use_window_medians_mib": [_median_heap(first), _median_heap(last)],
        "rss_ok": len(steady) >= 3 and growth <= RSS_GROWTH,
        "rss_peak_any_sample_after_baseline_mib": peak_rss,
        "rss_peak_growth_any_sample": round(growth_peak, 4),
        "rss_last_mib": last_rss,
        "fd_task_baseline_t": ref.t if ref else None,
        "fd_baseline": ref.fds if ref else None,
        "task_baseline": ref.tasks - ref.sends_in_flight if ref else None,
        "cycle_checks": len(checks) - 1 if checks else 0,
        "fds_max_delta_at_checks": fd_delta,
        "tasks_max_delta_at_checks": task_delta,
        "fd_task_failures": bad_checks[:20],
        "fd_task_ok": ref is not None and len(checks) > 1 and not bad_checks,
        "threads_min_max": [
            min((s.threads for s in samples), default=0),
            max((s.threads for s in samples), default=0),
        ],
        "push_cache_max_bytes": state.max_cached,
        "push_cache_limit_bytes": cache_limit,
        "push_cache_ok": state.max_cached <= cache_limit,
        "server_rss_mib_first_max_last": [server[0], max(server), server[-1]] if server else None,
    }


def _figures(state: _Soak, final: Any, end_fds: int, end_tasks: int) -> dict[str, Any]:
    args = state.args
    samples = state.samples
    # require_ack=False: an ack whose reply a fault swallowed has an unknown outcome (the server usually
    # applied it, and then never redelivers); P1 is lost = 0 and unexpected = 0.
    reports: dict[str, Report] = {}
    hung: list[str] = []
    for name, rec in (("push", state.push_rec), ("simple", state.simple_rec)):
        history = rec.snapshot()  # read back from the history file
        reports[name] = check(history, recovery_bound=30.0, copies_per_send=3, require_ack=False)
        if name == "simple":
            hung = _hung(history)[:10]
        del history
    p5 = _p5(state)
    p5["fds_after_close"] = end_fds
    p5["tasks_after_close"] = end_tasks
    figures: dict[str, Any] = {
        "duration_s": args.duration,
        "rate_per_s": args.rate,
        "fault_interval_s": args.fault_interval,
        "server": "real" if args.server == "real" else "process" if args.server_process else "in-process",
        "restarts": state.restarts,
        "sent_ok": state.sent_ok,
        "slow_sends": state.slow_sends,
        "slow_sends_by_fault": dict(state.slow_by_fault),
        "slow_send_examples": state.slow_examples,
        "push_acked": state.push_acked_first + final.acked,
        "push_after_restart": state.push_after_restart,
        "delivered": {
            name: {"deliveries": r.deliveries, "payloads": r.delivered_payloads}
            for name, r in reports.items()
        },
        "untyped_send_errors": state.untyped_errors[:10],
        "hung_sends": hung,
        "samples": [asdict(s) for s in samples],
        "rss_mib": {
            "first": samples[0].rss_mib if samples else None,
            "after_warmup": p5["rss_baseline_mib"],
            "max_after_warmup": p5["rss_max_after_warmup_mib"],
            "peak_any_sample": p5["rss_peak_any_sample_after_baseline_mib"],
            "last": samples[-1].rss_mib if samples else None,
        },
        "p5": p5,
        "reports": {name: r.summary for name, r in reports.items()},
        "verdicts": {
            name: {v.name: v.ok for v in r.verdicts if v.ok is not None} for name, r in reports.items()
        },
        "duplicate_causes": {name: dict(r.duplicate_causes) for name, r in reports.items()},
        "recovery_times_s": {name: [round(x, 2) for x in r.recovery_times] for name, r in reports.items()},
        "fault_windows_s": state.windows,
        "simple_receive_errors": state.simple_errors,
        "simple_stalls": state.stalls,
        "task_excess": state.task_excess,
        "ok": all(r.ok for r in reports.values())
        and bool(p5["rss_ok"])
        and bool(p5["fd_task_ok"])
        and bool(p5["push_cache_ok"])
        and state.slow_sends == 0,
    }
    return figures


def _hung(history: History) -> list[str]:
    events = history.events
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
        f"client RSS MiB: first {rss['first']}, at the end of the warm-up {rss['after_warmup']}, max after "
        f"it {rss['max_after_warmup']} (steady samples; peak of any sample {rss['peak_any_sample']}), last "
        f"{rss['last']} (server: {figures['server']}, its RSS first/max/"
        f"last {figures['p5']['server_rss_mib_first_max_last']})"
    )
    if figures["slow_sends"]:
        print(
            f"sends past the P3 bound, by the fault active when they began: {figures['slow_sends_by_fault']}"
        )
        print(f"the first of them: {figures['slow_send_examples']}")
    if figures["hung_sends"] or figures["untyped_send_errors"]:
        print(f"hung sends: {figures['hung_sends']}; untyped errors: {figures['untyped_send_errors']}")
    print("P5: " + ", ".join(f"{k}={v}" for k, v in figures["p5"].items()))
    print(f"fault windows (name, from s, healed s): {figures['fault_windows_s']}")
    if figures["restarts"]:
        print(f"JVM restarts (fault, seconds to boot): {figures['restarts']}")
    print(f"simple consumer receive errors: {figures['simple_receive_errors']}")
    for excess in figures["task_excess"]:
        print(f"client tasks over the bound at t={excess['t']}s ({excess['kind']}): {excess['tasks']}")
    for stall in figures["simple_stalls"]:
        print(f"simple consumer stalled at t={stall['t']}s for {stall['idle_s']}s in: {stall['await_chain']}")
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
    p.add_argument(
        "--warmup",
        type=float,
        default=None,
        help="RSS baseline time (default 300 s, as P5 asks; duration / 5 when duration < 360 s)",
    )
    p.add_argument("--request-timeout", type=float, default=3.0)
    p.add_argument("--send-bound", type=float, default=11.0, help="P3 bound of one send in seconds")
    p.add_argument("--drain", type=float, default=120.0, help="max seconds to drain at the end")
    p.add_argument("--seed", type=int, default=1)
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--server-process",
        dest="server_process",
        action="store_true",
        default=True,
        help="run the server as a `thrust serve` child, so the samples measure the client (default)",
    )
    where.add_argument(
        "--in-process",
        dest="server_process",
        action="store_false",
        help="run the server in the sampled process (its message store then dominates RSS)",
    )
    p.add_argument(
        "--server",
        choices=("thrust", "real"),
        default="thrust",
        help="thrust: `thrust serve` (or --in-process); real: a real Apache RocketMQ, two brokers behind a "
        "cluster-mode proxy (Java 17 and Maven), with broker kill, proxy SIGTERM / kill -9 and black hole "
        "in turn",
    )
    p.add_argument(
        "--history-dir",
        default=None,
        help="keep the histories (push.jsonl, simple.jsonl) here (default: a temporary directory, removed)",
    )
    p.add_argument("--json", default=None, help="write the figures to this file")
    p.add_argument("-q", "--quiet", dest="verbose", action="store_false", help="no per-sample lines")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.warmup is None:
        args.warmup = WARMUP if args.duration >= WARMUP + 60 else args.duration / 5
    if args.warmup >= args.duration:
        print("the warm-up must end before the run does", file=sys.stderr)
        return 2
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
