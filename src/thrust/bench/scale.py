"""`thrust perf scale`: what one PushConsumer subscribed to many topics costs, and whether a hot topic among
quiet ones still gets its throughput (docs/benchmarks.md, "A consumer of a thousand topics").

For each group kind (NORMAL, FIFO) and topic count N, against a fresh 2-broker embedded server in a child
process (`thrust.bench.control_server`, so that its CPU is not the client's and its call counters are the
honest count of what the client asked):

1. alone: a consumer of its own group subscribed to one topic, `hot-alone`; a backlog of `hot_messages`
   is stored on it (no RPCs) and drained: msg/s; then a paced producer (`paced_rate` msg/s for
   `paced_seconds`) gives the p50 / p99 from a message's born time to its listener call;
2. the consumer of N topics (`scale-0` .. `scale-N-1`; `scale-0` is the hot one), once every assigned queue
   exists: an idle window of `idle_seconds` in which nothing is sent. Client CPU % of one core (this
   process's user + system time over the window; the event loop's thread and the native transport's
   apart, each with its wake-ups a second), its RSS, asyncio tasks and threads, the server's calls
   per second by RPC, the most ReceiveMessage calls the consumer began in one second of the window (idle
   polls in step come back in bursts), and the long polls parked on the server at the end;
3. first-message latency on quiet topics: one message sent to each of `quiet_probes` quiet topics, one
   at a time, send -> listener call;
4. the hot topic among the quiet ones: the same drain and paced run on `scale-0`; `hot_ratio` is its drain
   msg/s over the alone consumer's.

A lite row: a LitePushConsumer bound to one LITE topic with `lite_topics` lite topics subscribed, in the
same idle window: its long polls (parked on the server) and calls per second.

With `server="real"` the same rows run on a real Apache RocketMQ (`thrust.cluster`): the cluster that
`thrust cluster --exec` started for this process (`$THRUST_ROCKETMQ`), else one started here (cluster mode,
`brokers` brokers; the lite row on a 5.5 lite cluster of one broker). Its topics and groups are created
through the brokers' admin port, with names of their own per row; the backlog is stored with bare
SendMessage batches from a thread (`thrust.bench.targets.send_backlog`); the server's CPU is its proxy's
and brokers' JVMs'. The real proxy counts no calls, so the calls per second are counted on the client
(`client_rpcs_per_second`, both servers; the embedded server's own counts stay in `rpcs_per_second`), and
the long polls open are the client's receives in flight (`receives_in_flight`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO, Any, Protocol

from thrust._core.scan_schedule import DEFAULT_MAX_SCAN_RATE
from thrust.bench.cpu import NATIVE_THREAD, proc_cpu_seconds, thread_cpu_seconds, thread_wakeups
from thrust.bench.server import ControlServer
from thrust.config import ClientConfig, Transport
from thrust.message import ConsumeResult, Message, ReceivedMessage
from thrust.producer import Producer
from thrust.push_consumer import PushConsumer

__all__ = [
    "EmbeddedScaleTarget",
    "RealScaleClusters",
    "RealScaleTarget",
    "ScaleOptions",
    "ScaleRow",
    "ScaleTarget",
    "embedded_target",
    "percentile",
    "run_scale",
]


@dataclasses.dataclass(slots=True)
class ScaleOptions:
    """What `thrust perf scale` measures (see `thrust perf scale --help`)."""

    topics: tuple[int, ...] = (10, 100, 1000)
    kinds: tuple[str, ...] = ("normal", "fifo")
    brokers: int = 2
    queues: int = 1  # queues per topic and broker: a FIFO group has one assignment per queue
    # One renewal window of an idle queue's receive and one long poll after it (300 s + 20 s, then its loop
    # sees it end; each of its long polls is renewed in between, in Rust on the native transport): every
    # idle queue's work is in it once.
    idle_seconds: float = 330.0
    # After every queue exists, before the idle window; None: one assignment-scan period of the topics
    # (`max(5, topics / DEFAULT_MAX_SCAN_RATE)` s), so that the window sees the steady scan rate, not the
    # first scans.
    settle_seconds: float | None = None
    quiet_probes: int = 5
    hot_messages: int = 20_000
    paced_rate: float = 500.0
    paced_seconds: float = 4.0
    # A FIFO group consumes a queue one message after another (each waits for its ack): a smaller backlog
    # and a rate it can keep up with, so that the p99 is latency rather than queueing.
    fifo_hot_messages: int = 4_000
    fifo_paced_rate: float = 100.0
    size: int = 64
    lite_topics: tuple[int, ...] = (10_000,)
    transport: Transport = "auto"
    server: str = "embedded"  # or "real" (`RealScaleClusters`)
    ready_timeout: float = 300.0
    drain_timeout: float = 120.0


@dataclasses.dataclass(slots=True)
class ScaleRow:
    """One measured configuration; `None` where a phase did not run or did not finish."""

    kind: str  # normal | fifo | lite
    topics: int
    queues: int = 0  # assigned queues (lite: the bound topic's)
    ready_seconds: float | None = None
    cpu_percent: float | None = None
    # The event loop's thread and the native transport's thread ("thrust-native"; None on grpcio) apart:
    # CPU % of a core and wake-ups a second (`thrust.bench.cpu.thread_wakeups`) over the idle window.
    loop_cpu_percent: float | None = None
    loop_wakeups_per_second: float | None = None
    native_cpu_percent: float | None = None
    native_wakeups_per_second: float | None = None
    server_cpu_percent: float | None = None
    rss_mib: float | None = None
    tasks: int | None = None
    threads: int | None = None
    rpcs_per_second: dict[str, float] = dataclasses.field(default_factory=dict)  # the embedded server's
    client_rpcs_per_second: dict[str, float] = dataclasses.field(default_factory=dict)  # the consumer's
    # The most ReceiveMessage calls the consumer began in one second of the idle window (the mean is in
    # `client_rpcs_per_second`): idle polls answered together come back in bursts, which a hot topic's
    # receives wait behind.
    receive_peak_per_second: int | None = None
    # QueryRoute calls of the idle window per cached route, and how often a route is refreshed: the routes
    # of many topics are refreshed together, a round every `route_period_seconds`, so a window holds a
    # whole number of rounds or not depending on where it starts, and the CPU figure moves with them.
    route_rounds: float | None = None
    route_period_seconds: float | None = None
    parked_polls: int | None = None  # on the embedded server
    receives_in_flight: int | None = None  # the consumer's long polls open
    first_message_ms: list[float] = dataclasses.field(default_factory=list)
    alone_msgs_per_second: float | None = None
    alone_p50_ms: float | None = None
    alone_p99_ms: float | None = None
    hot_msgs_per_second: float | None = None
    hot_p50_ms: float | None = None
    hot_p99_ms: float | None = None
    hot_ratio: float | None = None
    transport: str = ""
    server: str = "embedded"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The `q` quantile (0..1) by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
    return ordered[rank]


async def _receive_peak(consumer: PushConsumer, seconds: float) -> int:
    """Sleep `seconds`, counting the consumer's ReceiveMessage calls second by second: the largest count."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    last = consumer.session.calls().get("ReceiveMessage", 0)
    peak = 0
    while (left := end - loop.time()) > 0:
        await asyncio.sleep(min(1.0, left))
        now = consumer.session.calls().get("ReceiveMessage", 0)
        peak = max(peak, now - last)
        last = now
    return peak


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _threads() -> int:
    """Every thread of this process, the transport's native ones included (not only Python's)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


class _Sink:
    """The listener's side: counts per topic, and for the topics being timed, when each message arrived.
    The listener runs on the consumer's threads; the loop waits on `asyncio` events set thread-safely."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.latencies: dict[str, list[float]] = {}  # topic -> born -> listener, seconds (paced phases)
        self.arrived: dict[str, float] = {}  # topic -> perf_counter of its latest message
        self._waits: dict[str, tuple[int, asyncio.Event]] = {}

    def listener(self, message: ReceivedMessage) -> ConsumeResult:
        now = time.time()
        arrived = time.perf_counter()
        topic = message.topic
        with self._lock:
            n = self.counts.get(topic, 0) + 1
            self.counts[topic] = n
            self.arrived[topic] = arrived
            lat = self.latencies.get(topic)
            if lat is not None and message.born_timestamp is not None:
                lat.append(now - message.born_timestamp)
            wait = self._waits.get(topic)
            if wait is not None and n >= wait[0]:
                del self._waits[topic]
                self._loop.call_soon_threadsafe(wait[1].set)
        return ConsumeResult.SUCCESS

    def until(self, topic: str, count: int) -> asyncio.Event:
        """An event set once `topic` has had `count` messages in total."""
        event = asyncio.Event()
        with self._lock:
            if self.counts.get(topic, 0) >= count:
                event.set()
            else:
                self._waits[topic] = (count, event)
        return event

    def record_latency(self, topic: str) -> list[float]:
        with self._lock:
            lat: list[float] = []
            self.latencies[topic] = lat
            return lat

    def count(self, topic: str) -> int:
        with self._lock:
            return self.counts.get(topic, 0)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


class ScaleTarget(Protocol):
    """The server one row runs on: its endpoint, the row's resource names, its backlog fill and what it
    counts (`EmbeddedScaleTarget`, `RealScaleTarget`). Every method blocks."""

    kind: str
    endpoint: str
    brokers: int

    def name(self, base: str) -> str: ...

    def create(
        self,
        topics: Sequence[tuple[str, str, int]],
        groups: Sequence[tuple[str, bool, str | None, int | None]],
    ) -> None: ...

    def fill(self, topic: str, count: int, size: int, *, fifo: bool) -> None: ...

    def cpu(self) -> float | None: ...

    def reset_calls(self) -> None: ...

    def calls(self) -> dict[str, int] | None: ...

    def polls(self, group: str) -> int | None: ...

    def close(self) -> None: ...


class EmbeddedScaleTarget:
    """A row on the embedded server: a `ControlServer` child process of its own."""

    kind = "embedded"

    def __init__(self, server: ControlServer, brokers: int, prefix: str = "") -> None:
        self._server = server
        self.prefix = prefix
        self.brokers = brokers
        self.endpoint = server.endpoints[0]

    def name(self, base: str) -> str:
        """A topic's or group's name in this row."""
        return self.prefix + base

    def create(
        self,
        topics: Sequence[tuple[str, str, int]],
        groups: Sequence[tuple[str, bool, str | None, int | None]],
    ) -> None:
        """Create the row's topics, as (name, message type, queues per broker), and groups, as (name,
        fifo, lite bind topic, lite quota). The embedded server was started with them (`_server_spec`)."""

    def fill(self, topic: str, count: int, size: int, *, fifo: bool) -> None:
        """Store `count` messages on `topic` (blocking)."""
        self._server.command("fill", topic=topic, count=count, size=size)

    def cpu(self) -> float | None:
        """The server's CPU seconds so far."""
        return float(self._server.command("cpu")["cpu"])

    def reset_calls(self) -> None:
        self._server.command("reset")

    def calls(self) -> dict[str, int] | None:
        """The server's calls by RPC since `reset_calls` (None: it counts none)."""
        return dict(self._server.command("stats")["calls"])

    def polls(self, group: str) -> int | None:
        """Long polls of `group` parked on the server (None: it cannot tell)."""
        return int(self._server.command("polls", group=group)["polls"])

    def close(self) -> None:
        self._server.close()


class RealScaleTarget:
    """A row on a running real RocketMQ: its topics and groups created through the brokers' admin port
    (names prefixed per row, so that rows and repeated runs never share state), the backlog stored with
    bare SendMessage batches, the CPU of the proxy's and brokers' JVMs (`pids`)."""

    kind = "real"

    def __init__(self, info: Any, pids: Sequence[int], prefix: str) -> None:
        self.info = info
        self.prefix = prefix
        self.brokers = len(info.brokers)
        self.endpoint = info.endpoint
        self._pids = list(pids)
        self._admin = info.admin()

    def name(self, base: str) -> str:
        return self.prefix + base

    def create(
        self,
        topics: Sequence[tuple[str, str, int]],
        groups: Sequence[tuple[str, bool, str | None, int | None]],
    ) -> None:
        # Blocking; the consumers wait until the proxy routes the topics (`_Run._ready`).
        for name, kind, queues in topics:
            self._admin.create_topic(name, kind, queues=queues)
        for name, fifo, bind, quota in groups:
            self._admin.create_group(name, fifo=fifo, lite_bind_topic=bind, lite_quota=quota)

    def fill(self, topic: str, count: int, size: int, *, fifo: bool) -> None:
        from thrust.bench.targets import send_backlog

        # A FIFO topic takes only messages with a group; 8 groups spread the backlog over the queues.
        send_backlog(self.endpoint, topic, count, size, message_groups=8 if fifo else 0)

    def cpu(self) -> float | None:
        return sum(proc_cpu_seconds(pid) for pid in self._pids) if self._pids else None

    def reset_calls(self) -> None:
        pass

    def calls(self) -> dict[str, int] | None:
        return None

    def polls(self, group: str) -> int | None:
        return None

    def close(self) -> None:
        pass  # the cluster outlives the row


class _Run:
    def __init__(self, options: ScaleOptions, target: ScaleTarget, out: IO[str]) -> None:
        self.o = options
        self.target = target
        self.out = out
        self.config = ClientConfig(target.endpoint, transport=options.transport)
        self._kind = "normal"

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def _consumer(self, group: str, topics: Sequence[str], sink: _Sink) -> PushConsumer:
        return PushConsumer(
            self.config, group=group, subscriptions=dict.fromkeys(topics, "*"), listener=sink.listener
        )

    async def _ready(self, consumer: PushConsumer, expected: int) -> float:
        """Seconds until `expected` queues are assigned (polled every 100 ms: not in a measured window)."""
        t0 = time.perf_counter()
        deadline = t0 + self.o.ready_timeout
        while len(consumer.stats().queues) < expected:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{len(consumer.stats().queues)} of {expected} queues after timeout")
            await asyncio.sleep(0.1)
        return time.perf_counter() - t0

    async def _drain(self, sink: _Sink, topic: str) -> float | None:
        """Store `hot_messages` on `topic` and time their consumption: msg/s (None: timed out)."""
        n = self.o.fifo_hot_messages if self._kind == "fifo" else self.o.hot_messages
        event = sink.until(topic, sink.count(topic) + n)
        t0 = time.perf_counter()
        await asyncio.to_thread(self.target.fill, topic, n, self.o.size, fifo=self._kind == "fifo")
        try:
            async with asyncio.timeout(self.o.drain_timeout):
                await event.wait()
        except TimeoutError:
            return None
        return n / (time.perf_counter() - t0)

    async def _paced(self, producer: Producer, sink: _Sink, topic: str) -> tuple[float | None, float | None]:
        """`paced_rate` msg/s to `topic` for `paced_seconds`: the p50 and p99 of born -> listener."""
        o = self.o
        rate = o.fifo_paced_rate if self._kind == "fifo" else o.paced_rate
        total = max(1, int(rate * o.paced_seconds))
        lat = sink.record_latency(topic)
        event = sink.until(topic, sink.count(topic) + total)
        body = b"x" * o.size
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        pending: list[asyncio.Future[Any]] = []
        for i in range(total):
            delay = t0 + i / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            # A FIFO group's messages spread over 8 message groups, as FIFO users key them.
            group = f"g{i % 8}" if self._kind == "fifo" else None
            message = Message(topic=topic, body=body, message_group=group)
            pending.append(await producer.send_async(message))
        await asyncio.gather(*pending, return_exceptions=True)
        try:
            async with asyncio.timeout(o.drain_timeout):
                await event.wait()
        except TimeoutError:
            pass
        return percentile(lat, 0.5), percentile(lat, 0.99)

    async def _first_messages(self, producer: Producer, sink: _Sink, topics: Sequence[str]) -> list[float]:
        out: list[float] = []
        for topic in topics:
            event = sink.until(topic, sink.count(topic) + 1)
            message = Message(topic=topic, body=b"q", message_group="q" if self._kind == "fifo" else None)
            t0 = time.perf_counter()
            await producer.send(message)
            try:
                async with asyncio.timeout(self.o.drain_timeout):
                    await event.wait()
            except TimeoutError:
                continue
            out.append(round((sink.arrived[topic] - t0) * 1000, 2))
        return out

    async def _idle(self, row: ScaleRow, consumer: PushConsumer, group: str, scanned_topics: int) -> None:
        """The idle window: nothing is sent; what the client and the server spend."""
        target = self.target
        settle = self.o.settle_seconds
        await asyncio.sleep(max(5.0, scanned_topics / DEFAULT_MAX_SCAN_RATE) if settle is None else settle)
        gc.collect()
        await asyncio.to_thread(target.reset_calls)
        scpu0 = await asyncio.to_thread(target.cpu)
        calls0 = dict(consumer.session.calls())
        threads0, wakes0 = thread_cpu_seconds(), thread_wakeups()
        cpu0, t0 = _cpu(), time.perf_counter()
        peak = await _receive_peak(consumer, self.o.idle_seconds)
        cpu1, t1 = _cpu(), time.perf_counter()
        threads1, wakes1 = thread_cpu_seconds(), thread_wakeups()
        calls1 = dict(consumer.session.calls())
        server_calls = await asyncio.to_thread(target.calls)
        scpu1 = await asyncio.to_thread(target.cpu)
        wall = t1 - t0
        row.cpu_percent = round(100 * (cpu1 - cpu0) / wall, 2)
        loop_tid = threading.get_native_id()
        native = [t for t, (name, _) in threads1.items() if name == NATIVE_THREAD and t in threads0]
        for tids, cpu_field, wake_field in (
            ([loop_tid], "loop_cpu_percent", "loop_wakeups_per_second"),
            (native, "native_cpu_percent", "native_wakeups_per_second"),
        ):
            if tids:
                cpu = sum(threads1[t][1] - threads0[t][1] for t in tids)
                wakes = sum(wakes1.get(t, 0) - wakes0.get(t, 0) for t in tids)
                setattr(row, cpu_field, round(100 * cpu / wall, 2))
                setattr(row, wake_field, round(wakes / wall, 1))
        if scpu0 is not None and scpu1 is not None:
            row.server_cpu_percent = round(100 * (scpu1 - scpu0) / wall, 2)
        row.rss_mib = round(_rss_mib(), 1)
        row.tasks = len(asyncio.all_tasks())
        row.threads = _threads()
        if server_calls is not None:
            row.rpcs_per_second = {k: round(v / wall, 2) for k, v in sorted(server_calls.items()) if v}
        row.client_rpcs_per_second = {
            k: round((v - calls0.get(k, 0)) / wall, 2)
            for k, v in sorted(calls1.items())
            if v > calls0.get(k, 0)
        }
        routes = consumer.session.routes
        fetched = calls1.get("QueryRoute", 0) - calls0.get("QueryRoute", 0)
        row.route_rounds = round(fetched / max(1, len(routes.topics())), 2)
        row.route_period_seconds = round(routes.refresh_every(), 1)
        row.receive_peak_per_second = peak
        row.parked_polls = await asyncio.to_thread(target.polls, group)
        row.receives_in_flight = consumer.stats().receives_in_flight

    async def topics_row(self, kind: str, n: int) -> ScaleRow:
        o = self.o
        t = self.target
        self._kind = kind
        row = ScaleRow(kind=kind, topics=n, server=t.kind)
        loop = asyncio.get_running_loop()
        sink = _Sink(loop)
        per_topic = t.brokers * (o.queues if kind == "fifo" else 1)
        hot_alone = t.name("hot-alone")
        topics = [t.name(f"scale-{i}") for i in range(n)]
        alone_group, group = t.name(f"alone-{kind}"), t.name(f"scale-{kind}")
        message_type = "FIFO" if kind == "fifo" else "NORMAL"
        await asyncio.to_thread(
            t.create,
            [(name, message_type, o.queues) for name in (hot_alone, *topics)],
            [(alone_group, kind == "fifo", None, None), (group, kind == "fifo", None, None)],
        )
        async with Producer(self.config) as producer:
            alone = self._consumer(alone_group, [hot_alone], sink)
            async with alone:
                await self._ready(alone, per_topic)
                await asyncio.sleep(1.0)  # its first polls parked
                row.alone_msgs_per_second = _round(await self._drain(sink, hot_alone))
                p50, p99 = await self._paced(producer, sink, hot_alone)
                row.alone_p50_ms, row.alone_p99_ms = _ms(p50), _ms(p99)
                row.transport = alone.stats().transport
            consumer = self._consumer(group, topics, sink)
            async with consumer:
                row.ready_seconds = round(await self._ready(consumer, per_topic * n), 2)
                row.queues = len(consumer.stats().queues)
                self.say(f"{kind} x {n}: {row.queues} queues assigned in {row.ready_seconds} s")
                await self._idle(row, consumer, group, n)
                self.say(
                    f"{kind} x {n}: idle client CPU {row.cpu_percent} %{self._threads(row)},"
                    f" RSS {row.rss_mib} MiB,"
                    f" {row.tasks} tasks, {row.threads} threads, calls/s {self._calls(row)},"
                    f" {row.receives_in_flight} long polls open,"
                    f" at most {row.receive_peak_per_second} ReceiveMessage in a second,"
                    f" {row.route_rounds} route refresh rounds (one every {row.route_period_seconds} s)"
                )
                quiet = topics[1:]
                step = max(1, len(quiet) // max(1, o.quiet_probes))
                row.first_message_ms = await self._first_messages(
                    producer, sink, quiet[::step][: o.quiet_probes]
                )
                row.hot_msgs_per_second = _round(await self._drain(sink, topics[0]))
                p50, p99 = await self._paced(producer, sink, topics[0])
                row.hot_p50_ms, row.hot_p99_ms = _ms(p50), _ms(p99)
        if row.hot_msgs_per_second and row.alone_msgs_per_second:
            row.hot_ratio = round(row.hot_msgs_per_second / row.alone_msgs_per_second, 3)
        elif row.alone_msgs_per_second:
            row.hot_ratio = 0.0  # the hot topic's backlog was not drained in time
        self.say(
            f"{kind} x {n}: first message on a quiet topic {row.first_message_ms} ms; hot topic"
            f" {row.hot_msgs_per_second} msg/s (alone {row.alone_msgs_per_second}, ratio {row.hot_ratio}),"
            f" p99 {row.hot_p99_ms} ms (alone {row.alone_p99_ms})"
        )
        return row

    @staticmethod
    def _threads(row: ScaleRow) -> str:
        """The idle CPU's split by thread, as the row's line says it."""
        out = f" (loop {row.loop_cpu_percent} %, {row.loop_wakeups_per_second} wake-ups/s"
        if row.native_cpu_percent is not None:
            out += f"; {NATIVE_THREAD} {row.native_cpu_percent} %, {row.native_wakeups_per_second} wake-ups/s"
        return out + ")"

    @staticmethod
    def _calls(row: ScaleRow) -> dict[str, float]:
        """The server's counts where it has them, else the client's."""
        return row.rpcs_per_second or row.client_rpcs_per_second

    async def lite_row(self, n: int) -> ScaleRow:
        from thrust.lite_push_consumer import LitePushConsumer

        t = self.target
        row = ScaleRow(kind="lite", topics=n, server=t.kind)
        sink = _Sink(asyncio.get_running_loop())
        parent, group = t.name("lite-parent"), t.name("scale-lite")
        await asyncio.to_thread(t.create, [(parent, "LITE", 1)], [(group, False, parent, n + 100)])
        consumer = LitePushConsumer(self.config, group=group, bind_topic=parent, listener=sink.listener)
        async with consumer:
            t0 = time.perf_counter()
            await asyncio.gather(*(consumer.subscribe_lite(f"lite-{i}") for i in range(n)))
            row.ready_seconds = round(time.perf_counter() - t0, 2)
            push = consumer.push_consumer
            await self._ready(push, t.brokers)
            row.queues = len(push.stats().queues)
            row.transport = push.stats().transport
            await self._idle(row, push, group, 1)  # lite topics are not scanned: the bound topic is
        self.say(
            f"lite x {n}: idle client CPU {row.cpu_percent} %{self._threads(row)}, RSS {row.rss_mib} MiB,"
            f" {row.tasks} tasks,"
            f" calls/s {self._calls(row)}, {row.receives_in_flight} long polls open"
        )
        return row


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _server_spec(options: ScaleOptions, lite: int = 0) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "brokers": options.brokers,
        "default_queues": options.queues,
        "groups": ["alone-normal", "scale-normal", "alone-fifo:fifo", "scale-fifo:fifo", "scale-lite"],
    }
    if lite:
        spec["topics"] = ["lite-parent:1:LITE"]
        spec["lite_subscription_quota"] = lite + 100
    return spec


def embedded_target(options: ScaleOptions) -> Callable[[int], ScaleTarget]:
    """Rows on the embedded server: a fresh 2-broker `ControlServer` per row (`lite`: a lite row's)."""

    def make(lite: int) -> ScaleTarget:
        return EmbeddedScaleTarget(ControlServer(_server_spec(options, lite)), options.brokers)

    return make


class RealScaleClusters:
    """Rows on a real RocketMQ: the clusters that `thrust cluster --exec` started for this process
    (`$THRUST_ROCKETMQ`: cluster mode for the topic rows, a lite one for the lite row), else clusters
    started here, one at a time: `options.brokers` brokers of `ROCKETMQ_VERSION` for the topic rows, one
    broker of `LITE_VERSION` serving lite topics for the lite row. Every row gets names of its own."""

    def __init__(self, options: ScaleOptions, log: Callable[[str], None] = print) -> None:
        self._options = options
        self._log = log
        self._started: Any = None  # the cluster started here, and whether it is the lite one
        self._started_lite = False
        self._rows = 0
        self._tag = f"{os.getpid() % 10000}-{int(time.time()) % 100000}"

    def __enter__(self) -> Callable[[int], ScaleTarget]:
        return self.target

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def _stop(self) -> None:
        if self._started is not None:
            self._started.stop()
            self._started = None

    def target(self, lite: int) -> ScaleTarget:
        from thrust.cluster import LITE_VERSION, ClusterControl, RocketMQCluster, attach_from_env

        self._rows += 1
        prefix = f"s{self._tag}-{self._rows}-"
        want_lite = lite > 0
        info = attach_from_env("cluster", lite=want_lite)
        if info is not None:
            names = ["proxy", *("broker-a", "broker-b")[: len(info.brokers)]]
            pids = [ClusterControl(info.control).pid(n) for n in names] if info.control else []
            return RealScaleTarget(info, pids, prefix)
        if self._started is None or self._started_lite != want_lite:
            self._stop()  # one JVM set at a time: the 2 cores are the client's and the server's
            if want_lite:
                cluster = RocketMQCluster("cluster", version=LITE_VERSION, brokers=1, lite=True)
            else:
                cluster = RocketMQCluster("cluster", brokers=min(2, max(1, self._options.brokers)))
            self._log(f"starting a real RocketMQ {cluster.version} (cluster mode) ...")
            cluster.start()
            self._started, self._started_lite = cluster, want_lite
        cluster = self._started
        info = cluster.info
        names = ["proxy", *("broker-a", "broker-b")[: len(info.brokers)]]
        return RealScaleTarget(info, [cluster.pid(n) for n in names], prefix)


async def run_scale(
    options: ScaleOptions,
    out: IO[str] | None = None,
    *,
    target: Callable[[int], ScaleTarget] | None = None,
) -> list[ScaleRow]:
    """Every configured row, each on a target of its own (`target(lite topics)`, blocking; default the
    embedded server); progress lines go to `out`."""
    stream = out if out is not None else sys.stdout
    make = target if target is not None else embedded_target(options)
    rows: list[ScaleRow] = []
    for kind in options.kinds:
        for n in options.topics:
            t = await asyncio.to_thread(make, 0)
            try:
                rows.append(await _Run(options, t, stream).topics_row(kind, n))
            finally:
                await asyncio.to_thread(t.close)
    for n in options.lite_topics:
        t = await asyncio.to_thread(make, n)
        try:
            rows.append(await _Run(options, t, stream).lite_row(n))
        finally:
            await asyncio.to_thread(t.close)
    return rows


def median_rows(runs: Sequence[Sequence[ScaleRow]]) -> list[dict[str, Any]]:
    """Per configuration, the median of every number over repeated runs (the table's figures)."""
    merged: list[dict[str, Any]] = []
    for rows in zip(*runs, strict=True):
        first = rows[0].to_json()
        out: dict[str, Any] = {"kind": first["kind"], "topics": first["topics"], "runs": len(rows)}
        for key, value in first.items():
            if key in ("kind", "topics", "transport", "server"):
                out[key] = value
            elif key in ("rpcs_per_second", "client_rpcs_per_second"):
                per_run = [getattr(r, key) for r in rows]
                kinds = sorted({k for calls in per_run for k in calls})
                out[key] = {k: _median([calls.get(k, 0.0) for calls in per_run]) for k in kinds}
            elif key == "first_message_ms":
                out[key] = _median([v for r in rows for v in r.first_message_ms])
            elif isinstance(value, int | float) or value is None:
                out[key] = _median([getattr(r, key) for r in rows])
        merged.append(out)
    return merged


def _median(values: Sequence[Any]) -> Any:
    present = [v for v in values if v is not None]
    if not present:
        return None
    m = statistics.median(present)
    return round(m, 2) if isinstance(m, float) else m
