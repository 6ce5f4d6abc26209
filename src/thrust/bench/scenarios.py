"""The named scenarios of `thrust bench` (docs/benchmarks.md#scenarios: 1-5b from the Rust client's
apache/rocketmq-clients#1445, 6 and 7 after two Pulsar client fixes, and a plain backlog drain and
full-rate production at any message size), the raw gRPC ceiling, and the server's own ceiling.

Why one module of this size (docs/CONVENTIONS.md): each scenario is a set of runners (thrust, the
official client, Java, raw) over the same helpers, and `SCENARIOS` lists them side by side; the runners
share nothing with each other that a split would make clearer.

Every run gets a server of its own from `Context.target` (`thrust.bench.targets`): a fresh embedded
server in a child process (`ControlServer`), with the fault hooks the scenario names and a backlog
stored directly in the broker; or, with `--server real` / `--endpoints`, a topic and a group on a real
Apache RocketMQ with a backlog produced before the client starts. Either way the backlog costs the
measured window nothing. Latency (scenario 1's 2 ms round trip) is a TCP FaultProxy in front of the
server (`targets.latency_front`), the same on every server. Scenarios that need the embedded server's
fault hooks (3, 4, 5a) and its own ceilings (ceiling, server) run only there (`Scenario.embedded_only`).

The clients: thrust runs in this process; the official Python client runs `official_driver.py` in its
own venv; the Java client runs `java/.../BenchDriver.java` (`java_driver.py`); "raw" is bare grpc.aio
stubs in this process (`raw.py`). Each reports its own CPU time over the window (this process's
`getrusage`, or the driver's own process), divided by the messages it consumed or produced in the
window: the client CPU per message. The server's CPU per message is the embedded server's process, or
the real proxy's and brokers' JVMs (`/proc/<pid>/stat`), over the same window. On the embedded server,
acked counts and RPC counts are read from the server's counters, the same way for every client.

On the embedded server (like the proxy, docs/protocol.md §3.3) a non-FIFO group is assigned one "acting queue"
per broker, so "N queues" in a scenario means N brokers with one queue each: N assignments, N process
queues in the consumer. The real server in local mode has one broker: every consumer gets one
assignment there, whatever the scenario's N.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

from thrust.bench.cpu import self_cpu_seconds
from thrust.bench.raw import Window, raw_consume, raw_produce, receive_and_ack
from thrust.bench.server import ControlServer
from thrust.bench.targets import (
    GROUP,
    EmbeddedTarget,
    RunSpec,
    ServerRun,
    Target,
    latency_front,
)
from thrust.message import ConsumeResult, ReceivedMessage

__all__ = [
    "SCENARIOS",
    "Context",
    "Row",
    "Scenario",
    "official_python",
    "official_venv_dir",
]

_OFFICIAL = "rocketmq-python-client==5.1.2"
CLIENTS = ("thrust", "thrust-native", "thrust-grpcio", "official", "java", "raw")
# The thrust columns that pin a transport (`ClientConfig.transport`): their runs are thrust's, with
# $THRUST_TRANSPORT set for the run (`transport_for`); plain "thrust" takes what "auto" takes.
TRANSPORTS = {"thrust-native": "native", "thrust-grpcio": "grpcio"}


@contextlib.contextmanager
def transport_for(client: str) -> Iterator[None]:
    """Run a thrust column on its transport: $THRUST_TRANSPORT set for the run, then restored (every
    thrust client of a run is built with the default transport "auto", which reads it)."""
    transport = TRANSPORTS.get(client)
    if transport is None:
        yield
        return
    saved = os.environ.get("THRUST_TRANSPORT")
    os.environ["THRUST_TRANSPORT"] = transport
    try:
        yield
    finally:
        if saved is None:
            del os.environ["THRUST_TRANSPORT"]
        else:
            os.environ["THRUST_TRANSPORT"] = saved


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    """One table row: a metric of a scenario."""

    key: str
    label: str
    higher_is_better: bool = True
    digits: int = 0


@dataclasses.dataclass(slots=True)
class Context:
    duration: float = 10.0
    warmup: float = 1.0
    official_python: str | None = None
    log: Callable[[str], None] = lambda _text: None
    target: Target = dataclasses.field(default_factory=EmbeddedTarget)
    size: int = 64
    """Message size (bytes) of this run's backlog or sends (scenarios with `sized`)."""
    java: list[str] | None = None
    """The Java driver's command prefix (`java_driver.build_java_driver`)."""
    java_warmup: float = 15.0
    """Seconds before the Java driver's window: a fresh JVM spends its first seconds interpreting and
    compiling (JIT) its hot paths, which on two shared cores takes far longer than the 1 s the Python
    clients need to settle. Its steady state is what the anchor column is for."""

    def warmup_of(self, client: str) -> float:
        return max(self.warmup, self.java_warmup) if client == "java" else self.warmup


Runner = Callable[[Context], Coroutine[Any, Any, dict[str, float]]]


@dataclasses.dataclass(frozen=True, slots=True)
class Scenario:
    id: str
    title: str
    rows: tuple[Row, ...]
    thrust: Runner | str  # a str: why thrust cannot run it here
    official: Runner | str  # a str: why the official client cannot express it
    java: Runner | str = "not measured: the Java driver covers scenario 1, the drain and production"
    raw: Runner | str = "-"
    embedded_only: str | None = None
    """Why the scenario runs only on the embedded server (None: it runs on any server)."""
    sized: bool = False
    """The message size is a parameter (`--size`, `ID@SIZE`); otherwise the scenario's own 64 B."""
    topics: tuple[str, ...] = ()
    """Logical topics it uses (for the list of what an existing cluster must have)."""

    def runner(self, client: str) -> Runner | str:
        value: Runner | str = getattr(self, "thrust" if client in TRANSPORTS else client)
        return value


# ---------------------------------------------------------------------------------------------------
# the official client's venv


def official_venv_dir() -> Path:
    """Where the official client's venv lives: `$THRUST_INTEROP_VENV` when set, else
    `$XDG_CACHE_HOME/thrust/official-client/<package>-<version>-py<X.Y>` (`~/.cache` when XDG_CACHE_HOME is
    unset or not absolute, as the XDG spec says). Never the current directory: `thrust bench` must not
    leave a venv wherever the user happened to run it. The Python version is in the name because a venv
    belongs to the interpreter that made it."""
    explicit = os.environ.get("THRUST_INTEROP_VENV")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    name = f"{_OFFICIAL.replace('==', '-')}-py{sys.version_info.major}.{sys.version_info.minor}"
    return base / "thrust" / "official-client" / name


def official_python() -> str:
    """The python of the official client's venv (`official_venv_dir()`), built with pip on first use
    (rocketmq-python-client==5.1.2, pinned like the interop tests)."""
    venv = official_venv_dir()
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import rocketmq; from rocketmq import PushConsumer"]
    if python.exists() and subprocess.run(probe, capture_output=True, check=False).returncode == 0:
        return str(python)
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [*(str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"), _OFFICIAL],
        check=True,
    )
    return str(python)


# ---------------------------------------------------------------------------------------------------
# the thrust push consumer, measured over a window


class _Counts:
    """Listener-side counters, safe from the consumption threads."""

    def __init__(self, topics: list[str]) -> None:
        self.per_topic = {t: 0 for t in topics}
        self.lock = threading.Lock()
        self.running = 0
        self.peak = 0

    def enter(self, topic: str) -> None:
        with self.lock:
            self.running += 1
            if self.running > self.peak:
                self.peak = self.running

    def leave(self, topic: str) -> None:
        with self.lock:
            self.running -= 1
            self.per_topic[topic] += 1

    def snapshot(self) -> dict[str, int]:
        with self.lock:
            return dict(self.per_topic)


async def _timer(stop: asyncio.Event, samples: list[float]) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        t = loop.time()
        await asyncio.sleep(0.01)
        samples.append((loop.time() - t - 0.01) * 1000.0)


def _p99(samples: list[float]) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def _percentile(samples: list[float], q: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def _server_delta(before: dict[str, Any], after: dict[str, Any], seconds: float) -> dict[str, float]:
    acked = after["entries"].get("AckMessage", 0) - before["entries"].get("AckMessage", 0)
    ack_rpcs = after["calls"].get("AckMessage", 0) - before["calls"].get("AckMessage", 0)
    return {"acked_per_s": acked / seconds, "acked": float(acked), "ack_rpcs": float(ack_rpcs)}


class _Snap:
    """The server's side of a window's edge: its counters (embedded only) and CPU seconds."""

    def __init__(self, run: ServerRun) -> None:
        self.stats = run.stats()
        self.cpu = run.cpu()


def _window_out(
    w: Window, run: ServerRun, before: _Snap, after: _Snap, *, filled: int = 0, consumed: bool = True
) -> dict[str, float]:
    """The metrics every client's window gives: rate, client and server CPU per message, and (embedded
    server) acks from the server's counters; `backlog_exhausted` when the client consumed (nearly) the
    whole backlog before the window ended, which makes its rate a lower bound."""
    seconds = max(w.seconds, 1e-9)
    messages = max(1, w.count)
    out = {
        "consumed_per_s" if consumed else "produced_per_s": w.count / seconds,
        "seconds": seconds,
        "client_us": w.cpu / messages * 1e6,
        "client_cpu_pct": w.cpu / seconds * 100.0,
    }
    if run.idle_cpu_pct is not None:
        out["server_idle_cpu_pct"] = run.idle_cpu_pct
    if before.cpu is not None and after.cpu is not None:
        used = after.cpu - before.cpu
        out["server_us"] = used / messages * 1e6
        out["server_cpu_pct"] = used / seconds * 100.0
        if run.idle_cpu_pct is not None:
            # Less what the server burns with no client at all (a JVM's timers, GC, the broker's flush
            # and scan threads: 30-35 % of a core for a local-mode 5.4.0 here). A client that sends at a
            # lower rate divides that fixed cost by fewer messages, which made the proxy look 2.3x dearer
            # per thrust send than per raw send; at equal rates the two cost it the same
            # (scripts/proxy_send_cpu.py, docs/benchmarks.md).
            busy = used - run.idle_cpu_pct / 100.0 * seconds
            out["server_busy_us"] = max(0.0, busy) / messages * 1e6
    if consumed and before.stats is not None and after.stats is not None:
        out |= _server_delta(before.stats, after.stats, seconds)
        out["ack_rpcs_per_msg"] = out["ack_rpcs"] / max(1.0, out["acked"])
    if consumed and filled and run.exclusive and w.total >= 0.99 * filled:
        out["backlog_exhausted"] = 1.0
    if not consumed:
        out["p50_ms"] = _percentile(w.latencies_ms, 0.5)
        out["p99_ms"] = _percentile(w.latencies_ms, 0.99)
        out["errors"] = float(w.errors)
    return out


async def _thrust_push(
    ctx: Context,
    run: ServerRun,
    endpoint: str,
    topics: list[str],
    *,
    listener_sleep: float = 0.0,
    timer: bool = False,
    consumer_kwargs: dict[str, Any] | None = None,
) -> dict[str, float]:
    from thrust.push_consumer import PushConsumer

    names = {run.topic(t): t for t in topics}
    counts = _Counts(list(names))

    def listener(message: ReceivedMessage) -> ConsumeResult:
        counts.enter(message.topic)
        try:
            if listener_sleep:
                time.sleep(listener_sleep)  # blocking work, as a real listener would do
            return ConsumeResult.SUCCESS
        finally:
            counts.leave(message.topic)

    consumer = PushConsumer(
        endpoints=endpoint,
        group=run.group,
        subscriptions={t: "*" for t in names},
        listener=listener,
        **(consumer_kwargs or {}),
    )
    async with consumer:
        deadline = time.monotonic() + 30
        # polled: the counter is bumped from listener threads
        while sum(counts.snapshot().values()) == 0 and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        await asyncio.sleep(ctx.warmup)
        with counts.lock:
            counts.peak = counts.running
        before, s_before = counts.snapshot(), _Snap(run)
        cpu0, t0 = self_cpu_seconds(), time.monotonic()
        samples: list[float] = []
        stop = asyncio.Event()
        timer_task = asyncio.create_task(_timer(stop, samples)) if timer else None
        await asyncio.sleep(ctx.duration)
        after, cpu1 = counts.snapshot(), self_cpu_seconds()
        seconds = time.monotonic() - t0
        s_after = _Snap(run)
        stop.set()
        if timer_task is not None:
            await timer_task
    per_topic = {t: after[t] - before[t] for t in names}
    w = Window()
    w.count, w.seconds, w.cpu, w.total = sum(per_topic.values()), seconds, cpu1 - cpu0, sum(after.values())
    out = _window_out(w, run, s_before, s_after, filled=sum(run.filled.values()))
    out["peak"] = float(counts.peak)
    for name, n in per_topic.items():
        out[f"topic_{names[name]}"] = float(n)
    if timer:
        out["timer_p99_ms"] = _p99(samples)
    return out


@contextlib.contextmanager
def _driver(cmd: list[str], *, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[str]]:
    """A client driver (official or Java) in a session of its own, with a throwaway HOME; killed on exit.
    Its stderr goes to a file whose tail is in the error when it ends without a result."""
    with tempfile.TemporaryDirectory(prefix="thrust-driver-") as home:
        err = open(Path(home) / "stderr.log", "w+")  # closed in the finally below
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=err,
            stdin=subprocess.DEVNULL,
            # user.home: the Java client logs under ~/logs/rocketmq, and the JVM takes user.home from
            # the password database, not $HOME
            env=dict(
                os.environ, HOME=home, PYTHONPATH="", JAVA_TOOL_OPTIONS=f"-Duser.home={home}", **(env or {})
            ),
            text=True,
            start_new_session=True,
            cwd=home,
        )
        try:
            yield proc
        except RuntimeError as exc:
            err.seek(0)
            tail = err.read()[-1500:]
            raise RuntimeError(f"{exc}; its stderr ends:\n{tail}" if tail else str(exc)) from None
        finally:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(10)
            err.close()


def _window_events(
    proc: subprocess.Popen[str], run: ServerRun
) -> tuple[dict[str, Any], dict[str, Any], _Snap, _Snap]:
    """Read a driver's `window_start` and `window_end`, taking the server's side at each."""
    assert proc.stdout is not None
    start: dict[str, Any] | None = None
    s_before: _Snap | None = None
    for line in proc.stdout:
        if not line.startswith("{"):
            continue
        event = json.loads(line)
        if event["event"] == "window_start":
            s_before, start = _Snap(run), event
        elif event["event"] == "window_end":
            if start is None or s_before is None:
                break
            return start, event, s_before, _Snap(run)
    raise RuntimeError("the driver ended without a measurement window")


def _official_cmd(ctx: Context, cfg: dict[str, Any]) -> list[str]:
    python = ctx.official_python or official_python()
    return [python, str(Path(__file__).with_name("official_driver.py")), json.dumps(cfg)]


def _java_cmd(ctx: Context, cfg: dict[str, Any]) -> list[str]:
    if ctx.java is None:
        from thrust.bench.java_driver import build_java_driver

        ctx.java = build_java_driver()
    return [*ctx.java, *(f"{k}={v}" for k, v in cfg.items())]


def _driver_push(
    ctx: Context,
    run: ServerRun,
    endpoint: str,
    topics: list[str],
    *,
    client: str,
    listener_sleep: float = 0.0,
    timer: bool = False,
    threads: int = 20,
) -> dict[str, float]:
    names = {run.topic(t): t for t in topics}
    if client == "official":
        cfg: dict[str, Any] = {
            "endpoints": endpoint,
            "group": run.group,
            "topics": list(names),
            "threads": threads,
            "listener_sleep": listener_sleep,
            "warmup": ctx.warmup,
            "window": ctx.duration,
            "timer": timer,
            "first_timeout": 30.0,
        }
        cmd = _official_cmd(ctx, cfg)
    else:
        cfg = {"mode": "consume", "endpoints": endpoint, "group": run.group, "topics": ",".join(names)}
        cfg |= {"threads": threads, "warmup": ctx.warmup_of("java"), "window": ctx.duration}
        cfg["first_timeout"] = 30.0
        cmd = _java_cmd(ctx, cfg)
    with _driver(cmd) as proc:
        start, end, s_before, s_after = _window_events(proc, run)
    w = Window()
    w.count, w.seconds = int(end["consumed"]), float(end["seconds"])
    w.cpu, w.total = float(end["cpu"]) - float(start["cpu"]), int(end["total"])
    out = _window_out(w, run, s_before, s_after, filled=sum(run.filled.values()))
    out["peak"] = float(end["peak"])
    for name, n in end["per_topic"].items():
        out[f"topic_{names[name]}"] = float(n)
    if timer:
        out["timer_p99_ms"] = float(end["timer_p99_ms"]) if end["timer_p99_ms"] is not None else float("nan")
    return out


def _backlog(ctx: Context, rate_guess: float = 8000.0, warmup: float | None = None) -> int:
    """Enough messages that no client drains the backlog within the run."""
    return int(rate_guess * (ctx.duration + (ctx.warmup if warmup is None else warmup) + 5.0))


Faults = tuple[tuple[str, str], ...]


def _server(brokers: int, topics: list[str], faults: Faults = ()) -> ControlServer:
    spec = {
        "brokers": brokers,
        "topics": [f"{t}:1" for t in topics],
        "groups": [GROUP],
        "faults": list(faults),
    }
    return ControlServer(spec)


def _consume_scenario(
    brokers: int,
    topics: list[str],
    *,
    faults: Faults = (),
    rtt: float = 0.0,
    listener_sleep: float = 0.0,
    timer: bool = False,
    rate_guess: float = 8000.0,
    thrust_kwargs: dict[str, Any] | None = None,
    raw_loops: int = 8,
) -> dict[str, Runner]:
    """Runners for every client: a backlog in each topic, a push consumer of each client's defaults
    (thrust's `thrust_kwargs` aside) draining it, behind `rtt` of added round trip (FaultProxy)."""
    spec = RunSpec(tuple(topics), brokers=brokers, faults=faults)

    @contextlib.asynccontextmanager
    async def setup(ctx: Context, client: str) -> AsyncIterator[tuple[ServerRun, str]]:
        with ctx.target.run(spec, ctx.size) as run:
            for t in topics:
                run.fill(t, _backlog(ctx, rate_guess, ctx.warmup_of(client)), ctx.size)
            run.sample_idle()
            async with latency_front(run, rtt / 2.0) as endpoint:
                yield run, endpoint

    async def thrust_run(ctx: Context) -> dict[str, float]:
        async with setup(ctx, "thrust") as (run, endpoint):
            return await _thrust_push(
                ctx,
                run,
                endpoint,
                topics,
                listener_sleep=listener_sleep,
                timer=timer,
                consumer_kwargs=thrust_kwargs,
            )

    def driver_run(client: str) -> Runner:
        async def run_it(ctx: Context) -> dict[str, float]:
            async with setup(ctx, client) as (run, endpoint):
                return await asyncio.to_thread(
                    _driver_push,
                    ctx,
                    run,
                    endpoint,
                    topics,
                    client=client,
                    listener_sleep=listener_sleep,
                    timer=timer,
                )

        return run_it

    async def raw_run(ctx: Context) -> dict[str, float]:
        async with setup(ctx, "raw") as (run, endpoint):
            edges: list[_Snap] = []
            w = await raw_consume(
                endpoint,
                run.topic(topics[0]),
                run.group,
                loops=raw_loops,
                warmup=ctx.warmup,
                window=ctx.duration,
                on_start=lambda: edges.append(_Snap(run)),
                on_end=lambda: edges.append(_Snap(run)),
            )
            return _window_out(w, run, edges[0], edges[1], filled=sum(run.filled.values()))

    runners: dict[str, Runner] = {
        "thrust": thrust_run,
        "official": driver_run("official"),
        "java": driver_run("java"),
    }
    if len(topics) == 1 and not listener_sleep:
        runners["raw"] = raw_run
    return runners


# ---------------------------------------------------------------------------------------------------
# full-rate production: every client keeps at most IN_FLIGHT sends pending

_IN_FLIGHT = 128


async def _thrust_produce(ctx: Context, run: ServerRun, topic: str) -> dict[str, float]:
    """`Producer.send_async` with at most `_IN_FLIGHT` sends pending, as the drivers keep them: a slot is
    taken before the send and given back by its receipt, and the latency runs from the send (after the
    slot) to the receipt."""
    from thrust.message import Message
    from thrust.producer import Producer

    body = b"x" * max(1, ctx.size)
    w = Window()
    measuring = False
    perf = time.perf_counter
    slots = asyncio.Semaphore(_IN_FLIGHT)

    def done(t0: float, fut: asyncio.Future[Any]) -> None:
        slots.release()
        if not measuring:
            return
        if fut.cancelled() or fut.exception() is not None:
            w.errors += 1
        else:
            w.count += 1
            w.latencies_ms.append((perf() - t0) * 1000.0)

    async with Producer(endpoints=run.endpoint, topics=[topic], max_in_flight=2 * _IN_FLIGHT) as producer:
        stop = asyncio.Event()

        async def sender() -> None:
            while not stop.is_set():
                await slots.acquire()
                t0 = perf()
                try:
                    fut = await producer.send_async(Message(topic=topic, body=body))
                except Exception:
                    slots.release()
                    w.errors += measuring
                    continue
                fut.add_done_callback(functools.partial(done, t0))

        task = asyncio.create_task(sender())
        try:
            await asyncio.sleep(ctx.warmup)
            s_before = _Snap(run)
            measuring = True
            cpu0, t0 = self_cpu_seconds(), time.monotonic()
            await asyncio.sleep(ctx.duration)
            cpu1, t1 = self_cpu_seconds(), time.monotonic()
            measuring = False
            s_after = _Snap(run)
        finally:
            stop.set()
            await task
    w.seconds, w.cpu = t1 - t0, cpu1 - cpu0
    return _window_out(w, run, s_before, s_after, consumed=False)


def _driver_produce(ctx: Context, run: ServerRun, topic: str, client: str) -> dict[str, float]:
    cfg: dict[str, Any] = {"mode": "produce", "endpoints": run.endpoint, "topic": topic, "size": ctx.size}
    cfg |= {"in_flight": _IN_FLIGHT, "warmup": ctx.warmup_of(client), "window": ctx.duration}
    cmd = _official_cmd(ctx, cfg) if client == "official" else _java_cmd(ctx, cfg)
    with _driver(cmd) as proc:
        start, end, s_before, s_after = _window_events(proc, run)
    w = Window()
    w.count, w.seconds, w.errors = int(end["sent"]), float(end["seconds"]), int(end["errors"])
    w.cpu = float(end["cpu"]) - float(start["cpu"])
    out = _window_out(w, run, s_before, s_after, consumed=False)
    nan = float("nan")
    out["p50_ms"] = nan if end["p50_ms"] is None else float(end["p50_ms"])
    out["p99_ms"] = nan if end["p99_ms"] is None else float(end["p99_ms"])
    return out


def _produce_scenario() -> dict[str, Runner]:
    spec = RunSpec(("produce",), brokers=1)

    async def thrust_run(ctx: Context) -> dict[str, float]:
        with ctx.target.run(spec, ctx.size) as run:
            run.sample_idle()
            return await _thrust_produce(ctx, run, run.topic("produce"))

    def driver_run(client: str) -> Runner:
        async def run_it(ctx: Context) -> dict[str, float]:
            with ctx.target.run(spec, ctx.size) as run:
                run.sample_idle()
                return await asyncio.to_thread(_driver_produce, ctx, run, run.topic("produce"), client)

        return run_it

    async def raw_run(ctx: Context) -> dict[str, float]:
        with ctx.target.run(spec, ctx.size) as run:
            run.sample_idle()
            edges: list[_Snap] = []
            w = await raw_produce(
                run.endpoint,
                run.topic("produce"),
                size=ctx.size,
                in_flight=_IN_FLIGHT,
                warmup=ctx.warmup,
                window=ctx.duration,
                on_start=lambda: edges.append(_Snap(run)),
                on_end=lambda: edges.append(_Snap(run)),
            )
            return _window_out(w, run, edges[0], edges[1], consumed=False)

    return {
        "thrust": thrust_run,
        "official": driver_run("official"),
        "java": driver_run("java"),
        "raw": raw_run,
    }


# ---------------------------------------------------------------------------------------------------
# scenario 4: failing and invalid acks


def _sc4_window(ctx: Context) -> float:
    """apache/rocketmq-clients#1445 counts the attempts on the invalid handles over 15 s; short runs (tests)
    use less."""
    return 15.0 if ctx.duration >= 10 else max(3.0, ctx.duration)


async def _sc4_thrust(ctx: Context) -> dict[str, float]:
    from thrust.push_consumer import PushConsumer

    window = _sc4_window(ctx)
    with _server(1, ["s4"], (("ack-entry", "INTERNAL_SERVER_ERROR:1"),)) as server:
        ids = server.command("fill", topic="s4", count=400, size=64)["ids"]
        server.command("expire", message_ids=ids[:4])
        consumer = PushConsumer(
            endpoints=server.endpoints[0],
            group=GROUP,
            subscriptions={"s4": "*"},
            listener=lambda _m: ConsumeResult.SUCCESS,
        )
        async with consumer:
            t0 = time.monotonic()
            done_at: float | None = None
            while time.monotonic() - t0 < window:
                stats = server.command("stats")
                if done_at is None and stats["entries"].get("AckMessage", 0) >= 396:
                    done_at = time.monotonic() - t0
                await asyncio.sleep(0.02)
            hits = server.command("stats")["expired_hits"]
    return {"valid_acks_done_s": done_at if done_at is not None else float("inf"), "invalid_attempts": hits}


def _sc4_official_sync(ctx: Context) -> dict[str, float]:
    window = _sc4_window(ctx)
    python = ctx.official_python or official_python()
    driver = Path(__file__).with_name("official_driver.py")
    with _server(1, ["s4"], (("ack-entry", "INTERNAL_SERVER_ERROR:1"),)) as server:
        ids = server.command("fill", topic="s4", count=400, size=64)["ids"]
        server.command("expire", message_ids=ids[:4])
        cfg = {"endpoints": server.endpoints[0], "group": GROUP, "topics": ["s4"], "warmup": 0.0}
        cfg |= {"window": window + 5, "first_timeout": 0.0}
        with tempfile.TemporaryDirectory(prefix="thrust-official-") as home:
            proc = subprocess.Popen(
                [python, str(driver), json.dumps(cfg)],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL,
                env=dict(os.environ, HOME=home, PYTHONPATH=""),
                text=True,
                start_new_session=True,
            )
            try:
                assert proc.stdout is not None
                line = proc.stdout.readline()  # "started": startup() returned
                if not line:
                    raise RuntimeError("the official driver did not start")
                t0 = time.monotonic()
                done_at: float | None = None
                while time.monotonic() - t0 < window:
                    stats = server.command("stats")
                    if done_at is None and stats["entries"].get("AckMessage", 0) >= 396:
                        done_at = time.monotonic() - t0
                    time.sleep(0.02)
                hits = server.command("stats")["expired_hits"]
            finally:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(10)
    return {"valid_acks_done_s": done_at if done_at is not None else float("inf"), "invalid_attempts": hits}


async def _sc4_official(ctx: Context) -> dict[str, float]:
    return await asyncio.to_thread(_sc4_official_sync, ctx)


# ---------------------------------------------------------------------------------------------------
# scenario 3: healthy sends while a new broker's Telemetry settings answer takes 3 s

_SC3_SLOW = 3.0  # seconds the new broker holds its Telemetry settings reply (as in rocketmq-clients#1445)
_SC3_SENDERS = 8


def _sc3_server() -> ControlServer:
    # "h" lives on broker 0 only, "slow" on broker 1 only: sending to "slow" needs a session to broker 1,
    # whose Telemetry handshake (the settings reply) is held for 3 s.
    spec = {
        "brokers": 2,
        "topics": ["h:4@0", "slow:4@1"],
        "groups": [GROUP],
        "faults": [("settings-delay", f"{_SC3_SLOW}:1")],
    }
    return ControlServer(spec)


def _sc3_metrics(
    done: list[tuple[float, float]], base0: float, slow0: float, slow_s: float, after0: float | None = None
) -> dict[str, float]:
    """From (completion time, latency s) of every healthy send: the sends completed within the 3 s
    before the slow send (baseline) and within the 3 s after it, and the p99 latency of each. With
    `after0`, also a control window: 3 s starting once the slow send is over, nothing slow pending. Its
    ratio to the baseline is the run-to-run noise of two plain windows; the slow window against the mean
    of the windows before and after it cancels a load that drifts steadily during the run."""
    base = [lat * 1000.0 for end, lat in done if base0 <= end < base0 + _SC3_SLOW]
    during = [lat * 1000.0 for end, lat in done if slow0 <= end < slow0 + _SC3_SLOW]
    out = {
        "healthy_sends": float(len(during)),
        "healthy_p99_ms": _p99(during),
        "baseline_sends": float(len(base)),
        "baseline_p99_ms": _p99(base),
        "slow_send_s": slow_s,
    }
    out["sends_vs_baseline"] = out["healthy_sends"] / max(1.0, out["baseline_sends"])
    out["p99_vs_baseline"] = out["healthy_p99_ms"] / out["baseline_p99_ms"] if base else float("nan")
    if after0 is not None:
        after = sum(1 for end, _lat in done if after0 <= end < after0 + _SC3_SLOW)
        out["control_vs_baseline"] = after / max(1.0, out["baseline_sends"])
        out["sends_vs_around"] = out["healthy_sends"] / max(1.0, (out["baseline_sends"] + after) / 2.0)
    return out


async def _sc3_thrust(ctx: Context) -> dict[str, float]:
    """8 tasks send to "h" (broker 0) back to back through one Producer. Baseline: the 3 s window
    after warm-up. Then one send to "slow" (broker 1, new, settings reply held 3 s) and the next 3 s."""
    from thrust.message import Message
    from thrust.producer import Producer

    body = b"x" * 64
    with _sc3_server() as server:
        async with Producer(endpoints=server.endpoints[0], topics=["h"]) as producer:
            done: list[tuple[float, float]] = []
            stop = asyncio.Event()

            async def sender() -> None:
                while not stop.is_set():
                    t0 = time.monotonic()
                    await producer.send(Message(topic="h", body=body))
                    t1 = time.monotonic()
                    done.append((t1, t1 - t0))

            async def slow_send() -> float:
                t0 = time.monotonic()
                with contextlib.suppress(Exception):  # its time counts even if it times out
                    await producer.send(Message(topic="slow", body=body))
                return time.monotonic() - t0

            senders = [asyncio.create_task(sender()) for _ in range(_SC3_SENDERS)]
            try:
                await asyncio.sleep(max(0.5, ctx.warmup))
                base0 = time.monotonic()
                await asyncio.sleep(_SC3_SLOW)
                slow0 = time.monotonic()
                slow = asyncio.create_task(slow_send())
                await asyncio.sleep(_SC3_SLOW)
                slow_s = await asyncio.wait_for(slow, 30)
                after0 = time.monotonic()  # the control window: nothing slow is pending any more
                await asyncio.sleep(_SC3_SLOW)
            finally:
                stop.set()
                await asyncio.gather(*senders, return_exceptions=True)
    return _sc3_metrics(done, base0, slow0, slow_s, after0)


@contextlib.contextmanager
def _official_events(cfg: dict[str, Any], ctx: Context) -> Iterator[subprocess.Popen[str]]:
    """The official driver with `cfg`, killed (and its HOME removed) on exit."""
    python = ctx.official_python or official_python()
    driver = Path(__file__).with_name("official_driver.py")
    with tempfile.TemporaryDirectory(prefix="thrust-official-") as home:
        proc = subprocess.Popen(
            [python, str(driver), json.dumps(cfg)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            env=dict(os.environ, HOME=home, PYTHONPATH=""),
            text=True,
            start_new_session=True,
        )
        try:
            yield proc
        finally:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(10)


def _next_event(proc: subprocess.Popen[str], name: str) -> dict[str, Any]:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{"):
            event: dict[str, Any] = json.loads(line)
            if event["event"] == name:
                return event
    raise RuntimeError(f"the official driver ended before {name!r}")


def _sc3_official_sync(ctx: Context) -> dict[str, float]:
    with _sc3_server() as server:
        cfg: dict[str, Any] = {
            "mode": "sends",
            "endpoints": server.endpoints[0],
            "healthy": "h",
            "slow": "slow",
        }
        cfg |= {"senders": _SC3_SENDERS, "warmup": max(0.5, ctx.warmup), "slow_window": _SC3_SLOW}
        with _official_events(cfg, ctx) as proc:
            result = _next_event(proc, "sends_result")
    slow_s = result["slow_s"]
    done = [(float(end), float(lat)) for end, lat in result["done"]]
    after0 = result.get("after0")
    return _sc3_metrics(
        done,
        result["base0"],
        result["slow0"],
        float("inf") if slow_s is None else float(slow_s),
        None if after0 is None else float(after0),
    )


async def _sc3_official(ctx: Context) -> dict[str, float]:
    return await asyncio.to_thread(_sc3_official_sync, ctx)


# ---------------------------------------------------------------------------------------------------
# scenario 5a: the assignment moves away from a queue in a long poll


_SC5A_TOPIC = "s5a"


def _sc5a_server() -> ControlServer:
    # Two brokers with one queue each: the proxy pops a broker's acting queue whatever queue id the
    # request names (docs/protocol.md §3.3), so "queue 0" and "queue 1" are broker 0's and broker 1's queue.
    # Only broker 1 holds messages, so queue 0's receive parks in a long poll (the server's 20 s).
    spec = {"brokers": 2, "topics": [f"{_SC5A_TOPIC}:1"], "groups": [f"{GROUP}:fifo"], "faults": []}
    server = ControlServer(spec)
    server.command("assign", topic=_SC5A_TOPIC, group=GROUP, queues=[[0, 0]])
    server.command("fill", topic=_SC5A_TOPIC, count=100, size=64, broker=1)
    return server


async def _sc5a_move(server: ControlServer, first: Callable[[], float | None]) -> dict[str, float]:
    """Wait until queue 0's receive is parked, move the assignment to queue 1, and measure from the
    moment the server first answered the new assignment to the first message the listener got."""
    deadline = time.monotonic() + 30
    while server.command("stats")["broker_calls"].get("0:ReceiveMessage", 0) < 1:
        if time.monotonic() > deadline:
            raise RuntimeError("the consumer never polled queue 0")
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.5)  # well inside the 20 s long poll
    server.command("assign", topic=_SC5A_TOPIC, group=GROUP, queues=[[1, 0]])
    moved = time.monotonic()
    got: float | None = None
    while time.monotonic() - moved < 25 and got is None:
        await asyncio.sleep(0.005)
        got = first()
    assigned = server.command("assigned", topic=_SC5A_TOPIC, group=GROUP)["at"]
    asked = server.command("first_call", broker=1, rpc="ReceiveMessage")["at"]
    if got is None or assigned is None:
        inf = float("inf")
        # the receive may have been issued even though no message reached the listener: say so
        call = (asked - assigned) * 1000.0 if asked is not None and assigned is not None else inf
        return {"first_receive_ms": inf, "move_to_receive_ms": inf, "receive_call_ms": call}
    return {
        "first_receive_ms": (got - assigned) * 1000.0,
        "move_to_receive_ms": (got - moved) * 1000.0,
        # the split: the client's reaction (assignment reply, new queue, its ReceiveMessage reaching
        # broker 1) and the rest (the receive's stream, decode, hand-off to the listener)
        "receive_call_ms": (asked - assigned) * 1000.0 if asked is not None else float("inf"),
    }


async def _sc5a_thrust(ctx: Context) -> dict[str, float]:
    from thrust.push_consumer import PushConsumer

    first: list[float] = []

    def listener(message: ReceivedMessage) -> ConsumeResult:
        if not first:
            first.append(time.monotonic())
        return ConsumeResult.SUCCESS

    with _sc5a_server() as server:
        consumer = PushConsumer(
            endpoints=server.endpoints[0],
            group=GROUP,
            subscriptions={_SC5A_TOPIC: "*"},
            listener=listener,
        )
        async with consumer:
            return await _sc5a_move(server, lambda: first[0] if first else None)


async def _sc5a_official(ctx: Context) -> dict[str, float]:
    with _sc5a_server() as server:
        cfg: dict[str, Any] = {
            "mode": "first",
            "endpoints": server.endpoints[0],
            "group": GROUP,
            "topics": [_SC5A_TOPIC],
        }
        cfg["seconds"] = 60.0
        with _official_events(cfg, ctx) as proc:
            got: list[float] = []

            def read_first() -> None:
                with contextlib.suppress(RuntimeError, ValueError):
                    got.append(float(_next_event(proc, "first")["mono"]))

            threading.Thread(target=read_first, daemon=True).start()
            return await _sc5a_move(server, lambda: got[0] if got else None)


# ---------------------------------------------------------------------------------------------------
# scenario 6 (after apache/pulsar#16336): backlog over many queues plus a fast producer; latency must stay
# flat


_SC6 = RunSpec(("s6",), brokers=8)


async def _sc6_thrust(ctx: Context) -> dict[str, float]:
    from thrust.bench.perf import PerfOptions, run_perf

    with ctx.target.run(_SC6, 64) as run:
        run.fill("s6", 5000, 64)
        options = PerfOptions(
            mode="e2e",
            endpoints=run.endpoint,
            topic=run.topic("s6"),
            group=run.group,
            duration=max(4.0, ctx.duration),
            interval=1.0,
            warmup=0.0,
            rate=1000.0,
            size=64,
            drain_timeout=5.0,
            track_ids=False,
        )
        result = await run_perf(options, out=io.StringIO())
    assert result.consume is not None
    intervals = [i for i in result.consume.intervals if i.count > 0]
    return _sc6_metrics([i.rate for i in intervals], [i.latency.p99 for i in intervals])


def _sc6_metrics(rates: list[float], p99s: list[float]) -> dict[str, float]:
    """Scenario 6's numbers from the non-empty intervals: median rate (edges excluded when possible),
    p99 of the first interval, worst p99 of the second half, p99 of the last interval."""
    nan = float("nan")
    if not rates:
        return {"consumed_per_s": 0.0, "p99_first_ms": nan, "p99_late_max_ms": nan, "p99_last_ms": nan}
    inner = rates[1:-1] or rates
    return {
        "consumed_per_s": statistics.median(inner),
        "p99_first_ms": p99s[0],
        "p99_late_max_ms": max(p99s[len(p99s) // 2 :]),
        "p99_last_ms": p99s[-1],
    }


def _sc6_official_sync(ctx: Context) -> dict[str, float]:
    python = ctx.official_python or official_python()
    driver = Path(__file__).with_name("official_driver.py")
    seconds = max(4.0, ctx.duration)
    with ctx.target.run(_SC6, 64) as run:
        run.fill("s6", 5000, 64)
        cfg: dict[str, Any] = {
            "mode": "e2e",
            "endpoints": run.endpoint,
            "group": run.group,
            "topics": [run.topic("s6")],
        }
        cfg |= {"rate": 1000.0, "seconds": seconds, "size": 64, "drain": 5.0}
        with tempfile.TemporaryDirectory(prefix="thrust-official-") as home:
            proc = subprocess.run(
                [python, str(driver), json.dumps(cfg)],
                capture_output=True,
                text=True,
                env=dict(os.environ, HOME=home, PYTHONPATH=""),
                timeout=seconds + 60,
                check=False,
                start_new_session=True,
            )
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    result = next((e for e in events if e["event"] == "e2e_result"), None)
    if result is None:
        raise RuntimeError(f"the official e2e driver gave no result: {proc.stderr[-500:]}")
    rows = [i for i in result["intervals"] if i["count"] > 0]
    return _sc6_metrics([float(i["count"]) for i in rows], [float(i["p99"]) for i in rows])


async def _sc6_official(ctx: Context) -> dict[str, float]:
    return await asyncio.to_thread(_sc6_official_sync, ctx)


# ---------------------------------------------------------------------------------------------------
# the ceilings: raw gRPC against the embedded server, and the server's CPU during it


async def _raw_grpc(ctx: Context) -> dict[str, float]:
    """Receive(32) + Ack(32 entries) loops on bare grpc.aio stubs, no client library: the most a Python
    gRPC consumer can do against this server on this machine (the pattern a client library adds its own work
    to)."""
    import grpc

    from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
    from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
    from thrust._proto.apache.rocketmq.v2 import service_pb2_grpc as rpc

    topic = "raw"
    loops = 8
    with _server(4, [topic]) as server:
        server.command("fill", topic=topic, count=_backlog(ctx, 12000.0), size=64)
        channel = grpc.aio.insecure_channel(server.endpoints[0])
        stub = rpc.MessagingServiceStub(channel)
        metadata = (("x-mq-client-id", f"raw@{os.getpid()}"), ("x-mq-language", "PYTHON"))
        group = pb.Resource(name=GROUP)
        resource = pb.Resource(name=topic)
        brokers = [f"broker-{i}" for i in range(4)]
        received = 0
        stop = asyncio.Event()

        def acked(n: int) -> None:
            nonlocal received
            received += n

        def loop(i: int) -> Coroutine[Any, Any, None]:
            request = spb.ReceiveMessageRequest(
                group=group,
                message_queue=pb.MessageQueue(topic=resource, id=-1, broker=pb.Broker(name=brokers[i % 4])),
                filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                batch_size=32,
                auto_renew=False,
            )
            request.invisible_duration.seconds = 30
            request.long_polling_timeout.seconds = 5
            return receive_and_ack(stub, request, metadata, stop, acked)

        tasks = [asyncio.create_task(loop(i)) for i in range(loops)]
        await asyncio.sleep(ctx.warmup + 0.5)
        n0, cpu0, t0 = received, server.command("cpu")["cpu"], time.monotonic()
        self0 = time.process_time()
        await asyncio.sleep(ctx.duration)
        n1, cpu1, t1 = received, server.command("cpu")["cpu"], time.monotonic()
        self1 = time.process_time()
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await channel.close(None)
    seconds = t1 - t0
    us = (cpu1 - cpu0) / max(1, n1 - n0) * 1e6
    return {
        "consumed_per_s": (n1 - n0) / seconds,
        "server_cpu_pct": (cpu1 - cpu0) / seconds * 100.0,
        "client_cpu_pct": (self1 - self0) / seconds * 100.0,
        "client_us": (self1 - self0) / max(1, n1 - n0) * 1e6,
        "server_us": us,
        "core_per_s": 1e6 / us if us > 0 else float("inf"),
    }


async def _raw_send(ctx: Context) -> dict[str, float]:
    """The embedded server's own ceiling on the send path: 16 bare grpc.aio loops calling SendMessage
    (no client library), first with 1 message per call, then with 32, each for half the window; the
    server's CPU seconds come from its own process. "One server core" is 1 s / (server CPU per message):
    what the server could take if it had a whole core to itself, whatever the client costs."""
    import grpc

    from thrust._codec.ids import new_message_id
    from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
    from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
    from thrust._proto.apache.rocketmq.v2 import service_pb2_grpc as rpc

    topic = "raw"
    loops = 16
    window = max(1.0, ctx.duration / 2.0)
    out: dict[str, float] = {}
    spec = {"brokers": 1, "topics": [f"{topic}:4"], "groups": [GROUP], "faults": []}
    with ControlServer(spec) as server:
        channel = grpc.aio.insecure_channel(server.endpoints[0])
        stub = rpc.MessagingServiceStub(channel)
        metadata = (("x-mq-client-id", f"raw-send@{os.getpid()}"), ("x-mq-language", "PYTHON"))
        template = pb.Message(topic=pb.Resource(name=topic), body=b"x" * 64)
        template.system_properties.born_host = "bench"
        template.system_properties.message_type = pb.NORMAL
        template.system_properties.body_encoding = pb.IDENTITY
        sent = 0
        failed = 0

        async def loop(per_call: int, stop: asyncio.Event) -> None:
            nonlocal sent, failed
            while not stop.is_set():
                request = spb.SendMessageRequest()
                for _ in range(per_call):
                    m = request.messages.add()
                    m.CopyFrom(template)
                    m.system_properties.message_id = new_message_id()
                    m.system_properties.born_timestamp.GetCurrentTime()
                answer = await stub.SendMessage(request, metadata=metadata, timeout=10)
                if answer.status.code == pb.OK:
                    sent += per_call
                else:
                    failed += per_call

        for per_call in (1, 32):
            stop = asyncio.Event()
            tasks = [asyncio.create_task(loop(per_call, stop)) for _ in range(loops)]
            await asyncio.sleep(min(1.0, ctx.warmup + 0.2))
            n0, cpu0, t0 = sent, server.command("cpu")["cpu"], time.monotonic()
            self0 = time.process_time()
            await asyncio.sleep(window)
            n1, cpu1, t1 = sent, server.command("cpu")["cpu"], time.monotonic()
            self1 = time.process_time()
            stop.set()
            await asyncio.gather(*tasks)
            seconds = t1 - t0
            messages = max(1, n1 - n0)
            us = (cpu1 - cpu0) / messages * 1e6
            key = f"send{per_call}"
            out[f"{key}_per_s"] = (n1 - n0) / seconds
            out[f"{key}_server_cpu_pct"] = (cpu1 - cpu0) / seconds * 100.0
            out[f"{key}_client_cpu_pct"] = (self1 - self0) / seconds * 100.0
            out[f"{key}_server_us"] = us
            out[f"{key}_core_per_s"] = 1e6 / us if us > 0 else float("inf")
        await channel.close(None)
    if failed:
        raise RuntimeError(f"{failed} raw sends were refused by the server")
    return out


# ---------------------------------------------------------------------------------------------------
# scenario 7 (after apache/pulsar-client-go#968): per-message acks vs batched acks; then the table


def _sc7(batch: bool) -> dict[str, Runner]:
    kwargs = {"ack_batch_size": 32 if batch else 1, "ack_linger": 0.01 if batch else 0.0}
    return _consume_scenario(4, ["s7"], thrust_kwargs=kwargs)


# Scenario 1's 2 ms round trip is a TCP FaultProxy in front of the server (1 ms each way), on every server
# (it used to be the embedded server's own delay of ReceiveMessage and AckMessage answers, which no real
# proxy has).
_sc1 = _consume_scenario(4, ["s1"], rtt=0.002)
_sc2 = _consume_scenario(4, ["s2"], listener_sleep=0.01, timer=True, rate_guess=2500.0)
_sc2b = _consume_scenario(16, ["s2b"], listener_sleep=0.01, rate_guess=2500.0)
_sc5b = _consume_scenario(1, ["a", "b"], rate_guess=6000.0)
_sc7a = _sc7(False)
_sc7b = _sc7(True)
_drain = _consume_scenario(4, ["drain"], rate_guess=9000.0)
_produce = _produce_scenario()

_CPU_ROWS = (
    Row("client_us", "client CPU per message (µs)", False, 1),
    Row("server_us", "server CPU per message (µs)", False, 1),
    Row("server_busy_us", "server CPU per message less its idle (µs)", False, 1),
)
_FAULT_HOOKS = "needs the embedded server's fault hooks"
_OWN_CEILING = "the embedded server's own ceiling: on a real server, the raw column of drain and produce"
_NO_JAVA = "not measured: the Java driver covers scenario 1, the drain and production"

SCENARIOS: dict[str, Scenario] = {
    s.id: s
    for s in (
        Scenario(
            "ceiling",
            "raw gRPC consumer (bare grpc.aio, Receive(32)+Ack(32), 8 loops, 4 queues) and the server's CPU",
            (
                Row("consumed_per_s", "msg/s"),
                Row("server_cpu_pct", "server CPU % (of one core)"),
                Row("client_cpu_pct", "client CPU % (of one core)"),
                Row("server_us", "server CPU per consumed message (µs)", False, 1),
                Row("client_us", "client CPU per consumed message (µs)", False, 1),
                Row("core_per_s", "the server with one core to itself: msg/s (1 s / CPU per message)"),
            ),
            _raw_grpc,
            "the raw gRPC client is the same for both columns",
            embedded_only=_OWN_CEILING,
        ),
        Scenario(
            "server",
            "the embedded server's own send ceiling: bare grpc.aio SendMessage, 16 calls in flight, 1 broker",
            (
                Row("send1_per_s", "1 message per SendMessage: msg/s"),
                Row("send1_server_cpu_pct", "1 per call: server CPU % (of one core)"),
                Row("send1_client_cpu_pct", "1 per call: raw client CPU % (of one core)"),
                Row("send1_server_us", "1 per call: server CPU per message (µs)", False, 1),
                Row("send1_core_per_s", "1 per call: the server with one core to itself, msg/s"),
                Row("send32_per_s", "32 messages per SendMessage: msg/s"),
                Row("send32_server_cpu_pct", "32 per call: server CPU % (of one core)"),
                Row("send32_client_cpu_pct", "32 per call: raw client CPU % (of one core)"),
                Row("send32_server_us", "32 per call: server CPU per message (µs)", False, 1),
                Row("send32_core_per_s", "32 per call: the server with one core to itself, msg/s"),
            ),
            _raw_send,
            "the raw gRPC client is the same for both columns",
            embedded_only=_OWN_CEILING,
        ),
        Scenario(
            "1",
            "4 queues, ack and receive RTT 2 ms (TCP FaultProxy), listener ~0",
            (
                Row("consumed_per_s", "consumed msg/s"),
                Row("acked_per_s", "acked msg/s (embedded server's counters)"),
                *_CPU_ROWS,
            ),
            _sc1["thrust"],
            _sc1["official"],
            _sc1["java"],
            _sc1["raw"],
            sized=True,
            topics=("s1",),
        ),
        Scenario(
            "2",
            "4 queues, listener blocks 10 ms",
            (
                Row("consumed_per_s", "consumed msg/s"),
                Row("timer_p99_ms", "lateness of an unrelated 10 ms timer, p99 (ms)", False, 2),
                *_CPU_ROWS,
            ),
            _sc2["thrust"],
            _sc2["official"],
            _NO_JAVA,
            topics=("s2",),
        ),
        Scenario(
            "2'",
            "16 queues, listener blocks 10 ms, default options",
            (Row("peak", "peak concurrent listener calls"), Row("consumed_per_s", "msg/s"), *_CPU_ROWS),
            _sc2b["thrust"],
            _sc2b["official"],
            _NO_JAVA,
            topics=("s2b",),
        ),
        Scenario(
            "3",
            "8 senders to a healthy broker; one send to a new broker whose telemetry answers after 3 s",
            (
                Row("healthy_sends", "healthy sends during those 3 s"),
                Row("healthy_p99_ms", "healthy send latency during those 3 s, p99 (ms)", False, 2),
                Row("baseline_sends", "baseline: healthy sends in the 3 s before (no slow broker)"),
                Row("baseline_p99_ms", "baseline: healthy send latency, p99 (ms)", False, 2),
                Row("sends_vs_baseline", "healthy sends / baseline (target >= 0.95)", True, 2),
                Row("p99_vs_baseline", "healthy p99 / baseline p99 (target <= 2)", False, 2),
                Row("slow_send_s", "the send to the new broker took (s)", False, 2),
                Row(
                    "control_vs_baseline",
                    "control: healthy sends in 3 s after the slow send is over / baseline (noise)",
                    True,
                    2,
                ),
                Row("sends_vs_around", "healthy sends / mean of the windows before and after", True, 2),
            ),
            _sc3_thrust,
            _sc3_official,
            embedded_only=f"{_FAULT_HOOKS} (a broker whose Telemetry settings answer is held 3 s)",
        ),
        Scenario(
            "4",
            "400 messages; first ack of each fails once; 4 receipt handles invalid",
            (
                Row("valid_acks_done_s", "time until the 396 valid acks are done (s)", False, 2),
                Row(
                    "invalid_attempts",
                    "ack attempts on the 4 invalid handles in 15 s (3 s in short runs)",
                    False,
                ),
            ),
            _sc4_thrust,
            _sc4_official,
            embedded_only=f"{_FAULT_HOOKS} (failing acks, invalid receipt handles)",
        ),
        Scenario(
            "5a",
            "FIFO group, queue 0 in a long poll (the server's 20 s), the assignment moves to queue 1",
            (
                Row("first_receive_ms", "first receive on queue 1 after it is assigned (ms)", False, 1),
                Row(
                    "receive_call_ms",
                    "of which: until the client's ReceiveMessage on queue 1 reached the server (ms)",
                    False,
                    1,
                ),
                Row(
                    "move_to_receive_ms", "from the move to that receive, incl. the scan interval (ms)", False
                ),
            ),
            _sc5a_thrust,
            _sc5a_official,
            embedded_only=f"{_FAULT_HOOKS} (an assignment moved while a receive is in a long poll)",
        ),
        Scenario(
            "5b",
            "topics a and b, one queue each",
            (
                Row("topic_a", "messages consumed from a"),
                Row("topic_b", "messages consumed from b"),
                *_CPU_ROWS,
            ),
            _sc5b["thrust"],
            _sc5b["official"],
            _NO_JAVA,
            topics=("a", "b"),
        ),
        Scenario(
            "6",
            "backlog over 8 queues + producer at 1,000 msg/s, e2e",
            (
                Row("consumed_per_s", "consumer msg/s (median interval)"),
                Row("p99_first_ms", "e2e latency p99, first interval (ms)", False, 1),
                Row("p99_late_max_ms", "e2e latency p99, worst interval of the second half (ms)", False, 1),
                Row("p99_last_ms", "e2e latency p99, last interval (ms)", False, 1),
            ),
            _sc6_thrust,
            _sc6_official,
            _NO_JAVA,
            topics=("s6",),
        ),
        Scenario(
            "7a",
            "per-message acks (ack batch size 1), 4 queues, full rate",
            (
                Row("consumed_per_s", "consumed msg/s"),
                Row("acked_per_s", "acked msg/s (embedded server's counters)"),
                Row("ack_rpcs_per_msg", "ack RPCs per acked message", False, 3),
                *_CPU_ROWS,
            ),
            _sc7a["thrust"],
            _sc7a["official"],
            _NO_JAVA,
            topics=("s7",),
        ),
        Scenario(
            "7b",
            "batched acks (32 entries, 10 ms linger), 4 queues, full rate",
            (
                Row("consumed_per_s", "consumed msg/s"),
                Row("acked_per_s", "acked msg/s (embedded server's counters)"),
                Row("ack_rpcs_per_msg", "ack RPCs per acked message", False, 3),
                *_CPU_ROWS,
            ),
            _sc7b["thrust"],
            "cannot be expressed: the official PushConsumer acks each message with its own AckMessage",
            _NO_JAVA,
            topics=("s7",),
        ),
        Scenario(
            "drain",
            "plain backlog drain: 4 queues, listener ~0, each client's defaults (raw: 8 Receive(32)+Ack)",
            (
                Row("consumed_per_s", "consumed msg/s"),
                Row("acked_per_s", "acked msg/s (embedded server's counters)"),
                *_CPU_ROWS,
            ),
            _drain["thrust"],
            _drain["official"],
            _drain["java"],
            _drain["raw"],
            sized=True,
            topics=("drain",),
        ),
        Scenario(
            "produce",
            f"full-rate production: one producer, {_IN_FLIGHT} sends in flight, one message per SendMessage",
            (
                Row("produced_per_s", "sent msg/s (receipts)"),
                Row("p50_ms", "send -> receipt latency, p50 (ms)", False, 2),
                Row("p99_ms", "send -> receipt latency, p99 (ms)", False, 2),
                *_CPU_ROWS,
            ),
            _produce["thrust"],
            _produce["official"],
            _produce["java"],
            _produce["raw"],
            sized=True,
            topics=("produce",),
        ),
    )
}

ALL = tuple(SCENARIOS)
"""Every scenario id; the default selection (`DEFAULT`) also runs the sized ones at 1 KiB."""

DEFAULT = (
    "ceiling",
    "server",
    "1",
    "1@1k",
    "2",
    "2'",
    "3",
    "4",
    "5a",
    "5b",
    "6",
    "7a",
    "7b",
    "drain",
    "drain@1k",
    "produce",
    "produce@1k",
)
