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
   process's user + system time over the window), its RSS, asyncio tasks and threads, the server's calls
   per second by RPC, and the long polls parked on the server at the end;
3. first-message latency on quiet topics: one message sent to each of `quiet_probes` quiet topics, one
   at a time, send -> listener call;
4. the hot topic among the quiet ones: the same drain and paced run on `scale-0`; `hot_ratio` is its drain
   msg/s over the alone consumer's.

A lite row: a LitePushConsumer bound to one LITE topic with `lite_topics` lite topics subscribed, in the
same idle window: its long polls (parked on the server) and calls per second.
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
from typing import IO, Any

from thrust.bench.server import ControlServer
from thrust.config import ClientConfig, Transport
from thrust.message import ConsumeResult, Message, ReceivedMessage
from thrust.producer import Producer
from thrust.push_consumer import PushConsumer

__all__ = ["ScaleOptions", "ScaleRow", "percentile", "run_scale"]


@dataclasses.dataclass(slots=True)
class ScaleOptions:
    """What `thrust perf scale` measures (see `thrust perf scale --help`)."""

    topics: tuple[int, ...] = (10, 100, 1000)
    kinds: tuple[str, ...] = ("normal", "fifo")
    brokers: int = 2
    queues: int = 1  # queues per topic and broker: a FIFO group has one assignment per queue
    # Two of the push consumer's 15 s long polls, so that every idle queue's poll ends and is renewed in it.
    idle_seconds: float = 30.0
    # After every queue exists, before the idle window; None: one assignment-scan period of the topics
    # (`max(5, topics / 20)` s), so that the window sees the steady scan rate, not the first scans.
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
    server_cpu_percent: float | None = None
    rss_mib: float | None = None
    tasks: int | None = None
    threads: int | None = None
    rpcs_per_second: dict[str, float] = dataclasses.field(default_factory=dict)
    parked_polls: int | None = None
    first_message_ms: list[float] = dataclasses.field(default_factory=list)
    alone_msgs_per_second: float | None = None
    alone_p50_ms: float | None = None
    alone_p99_ms: float | None = None
    hot_msgs_per_second: float | None = None
    hot_p50_ms: float | None = None
    hot_p99_ms: float | None = None
    hot_ratio: float | None = None
    transport: str = ""

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The `q` quantile (0..1) by nearest rank; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
    return ordered[rank]


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


class _Run:
    def __init__(self, options: ScaleOptions, server: ControlServer, out: IO[str]) -> None:
        self.o = options
        self.server = server
        self.out = out
        self.config = ClientConfig(",".join(server.endpoints[:1]), transport=options.transport)
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
        await asyncio.to_thread(self.server.command, "fill", topic=topic, count=n, size=self.o.size)
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

    async def _idle(self, row: ScaleRow, group: str, scanned_topics: int) -> None:
        """The idle window: nothing is sent; what the client and the server spend."""
        server = self.server
        settle = self.o.settle_seconds
        await asyncio.sleep(max(5.0, scanned_topics / 20) if settle is None else settle)
        gc.collect()
        await asyncio.to_thread(server.command, "reset")
        scpu0 = (await asyncio.to_thread(server.command, "cpu"))["cpu"]
        cpu0, t0 = _cpu(), time.perf_counter()
        await asyncio.sleep(self.o.idle_seconds)
        cpu1, t1 = _cpu(), time.perf_counter()
        stats = await asyncio.to_thread(server.command, "stats")
        scpu1 = (await asyncio.to_thread(server.command, "cpu"))["cpu"]
        polls = await asyncio.to_thread(server.command, "polls", group=group)
        wall = t1 - t0
        row.cpu_percent = round(100 * (cpu1 - cpu0) / wall, 2)
        row.server_cpu_percent = round(100 * (scpu1 - scpu0) / wall, 2)
        row.rss_mib = round(_rss_mib(), 1)
        row.tasks = len(asyncio.all_tasks())
        row.threads = _threads()
        row.rpcs_per_second = {k: round(v / wall, 2) for k, v in sorted(stats["calls"].items()) if v}
        row.parked_polls = int(polls["polls"])

    async def topics_row(self, kind: str, n: int) -> ScaleRow:
        o = self.o
        self._kind = kind
        row = ScaleRow(kind=kind, topics=n)
        loop = asyncio.get_running_loop()
        sink = _Sink(loop)
        per_topic = o.brokers * (o.queues if kind == "fifo" else 1)
        async with Producer(self.config) as producer:
            alone = self._consumer(f"alone-{kind}", ["hot-alone"], sink)
            async with alone:
                await self._ready(alone, per_topic)
                await asyncio.sleep(1.0)  # its first polls parked
                row.alone_msgs_per_second = _round(await self._drain(sink, "hot-alone"))
                p50, p99 = await self._paced(producer, sink, "hot-alone")
                row.alone_p50_ms, row.alone_p99_ms = _ms(p50), _ms(p99)
                row.transport = alone.stats().transport
            topics = [f"scale-{i}" for i in range(n)]
            consumer = self._consumer(f"scale-{kind}", topics, sink)
            async with consumer:
                row.ready_seconds = round(await self._ready(consumer, per_topic * n), 2)
                row.queues = len(consumer.stats().queues)
                self.say(f"{kind} x {n}: {row.queues} queues assigned in {row.ready_seconds} s")
                await self._idle(row, f"scale-{kind}", n)
                self.say(
                    f"{kind} x {n}: idle client CPU {row.cpu_percent} %, RSS {row.rss_mib} MiB,"
                    f" {row.tasks} tasks, {row.threads} threads, server calls/s {row.rpcs_per_second},"
                    f" {row.parked_polls} long polls parked"
                )
                quiet = topics[1:]
                step = max(1, len(quiet) // max(1, o.quiet_probes))
                row.first_message_ms = await self._first_messages(
                    producer, sink, quiet[::step][: o.quiet_probes]
                )
                row.hot_msgs_per_second = _round(await self._drain(sink, "scale-0"))
                p50, p99 = await self._paced(producer, sink, "scale-0")
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

    async def lite_row(self, n: int) -> ScaleRow:
        from thrust.lite_push_consumer import LitePushConsumer

        row = ScaleRow(kind="lite", topics=n)
        sink = _Sink(asyncio.get_running_loop())
        consumer = LitePushConsumer(
            self.config, group="scale-lite", bind_topic="lite-parent", listener=sink.listener
        )
        async with consumer:
            t0 = time.perf_counter()
            await asyncio.gather(*(consumer.subscribe_lite(f"lite-{i}") for i in range(n)))
            row.ready_seconds = round(time.perf_counter() - t0, 2)
            row.queues = len(consumer.push_consumer.stats().queues)
            row.transport = consumer.push_consumer.stats().transport
            await self._idle(row, "scale-lite", 1)  # lite topics are not scanned: the bound topic is
        self.say(
            f"lite x {n}: idle client CPU {row.cpu_percent} %, RSS {row.rss_mib} MiB, {row.tasks} tasks,"
            f" server calls/s {row.rpcs_per_second}, {row.parked_polls} long polls parked"
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


async def run_scale(
    options: ScaleOptions,
    out: IO[str] | None = None,
    *,
    server_factory: Callable[[dict[str, Any]], ControlServer] = ControlServer,
) -> list[ScaleRow]:
    """Every configured row, each against a server of its own; progress lines go to `out`."""
    stream = out if out is not None else sys.stdout
    rows: list[ScaleRow] = []
    for kind in options.kinds:
        for n in options.topics:
            server = await asyncio.to_thread(server_factory, _server_spec(options))
            try:
                rows.append(await _Run(options, server, stream).topics_row(kind, n))
            finally:
                await asyncio.to_thread(server.close)
    for n in options.lite_topics:
        server = await asyncio.to_thread(server_factory, _server_spec(options, lite=n))
        try:
            rows.append(await _Run(options, server, stream).lite_row(n))
        finally:
            await asyncio.to_thread(server.close)
    return rows


def median_rows(runs: Sequence[Sequence[ScaleRow]]) -> list[dict[str, Any]]:
    """Per configuration, the median of every number over repeated runs (the table's figures)."""
    merged: list[dict[str, Any]] = []
    for rows in zip(*runs, strict=True):
        first = rows[0].to_json()
        out: dict[str, Any] = {"kind": first["kind"], "topics": first["topics"], "runs": len(rows)}
        for key, value in first.items():
            if key in ("kind", "topics", "transport"):
                out[key] = value
            elif key == "rpcs_per_second":
                kinds = sorted({k for r in rows for k in r.rpcs_per_second})
                out[key] = {k: _median([r.rpcs_per_second.get(k, 0.0) for r in rows]) for k in kinds}
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
