"""The engine of `thrust perf`: producers and consumers driven through thrust's public API, measured with
`thrust.bench.stats` and reported in the pulsar-perf shape (apache/pulsar
`pulsar-testclient/.../PerformanceProducer.java`, `PerformanceConsumer.java`).

Producer latency is send -> receipt (`Producer.send_async` future), measured from just before the send
asks for a window slot, as pulsar-perf measures from just before `sendAsync` (which blocks when the
pending queue is full). With producer batching (`batch_max_messages` > 1, pulsar-perf's batching), a
message's latency runs from its own issue to the receipt of the SendMessage call that carried it, so
the time it waited for its batch to fill (at most `batch_max_delay`) is counted. With the library's
linger batch (`linger_batch` > 1) perf issues plain `send_async` calls and the producer batches them; the
latency likewise runs from the call to the message's own receipt, and `send_calls` counts the
SendMessage requests the producer made (`Producer.linger_stats`). Consumer latency is the
message's born time (the producer's wall clock, written when its SendMessage is built) -> the listener
call, pulsar-perf's `now - publishTime`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import functools
import gc
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import IO, Any

from thrust.bench.lag import GcPauses, LagWindow, LoopLag, format_line, summarise
from thrust.bench.stats import Recorder, SampleInbox, Summary, format_interval, format_summary
from thrust.config import ClientConfig, Credentials, TlsConfig, Transport
from thrust.message import ConsumeResult, Message, ReceivedMessage
from thrust.producer import Producer

__all__ = ["PerfOptions", "PerfResult", "run_perf", "topic_names"]


@dataclasses.dataclass(slots=True)
class PerfOptions:
    """Everything `thrust perf` can be asked for (see `thrust perf e2e --help`)."""

    mode: str = "e2e"  # produce | consume | e2e
    # what is measured: "endpoints" (an existing cluster), or a server perf started, "embedded" or "real"
    server: str = "embedded"
    # the connection to an existing cluster, resolved as `ClientConfig.from_env` does (flags over the
    # ROCKETMQ_* variables); None: built from the fields below
    config: ClientConfig | None = None
    endpoints: str = ""
    namespace: str = ""
    topic: str = "perf"
    num_topics: int = 1
    access_key: str | None = None
    secret_key: str | None = None
    tls: bool = False
    tls_ca: str | None = None
    tls_server_name: str | None = None
    # the clients' `ClientConfig.transport` (`--transport`); each side's resolved one is in the results
    transport: Transport = "auto"
    interval: float = 10.0
    duration: float = 0.0
    count: int = 0
    warmup: float = 1.0
    live: bool = False
    loop: str = "asyncio"  # the event loop perf runs on (reported in the JSON; `--loop`)
    gc_freeze: bool = False  # gc.freeze() once the clients have started (`--gc-freeze`)
    # the embedded server's loop lag and GC pauses since the last call (`BenchServer.take_lag`), when perf
    # started the server; None: not known (another server)
    server_lag: Callable[[], LagWindow | None] | None = None
    # producer
    rate: float = 0.0
    producers: int = 1
    max_in_flight: int = 128
    size: int = 1024
    tag: str | None = None
    fifo_groups: int = 0  # > 0: FIFO messages spread over this many message groups
    delay: float = 0.0  # > 0: delay messages, delivered this many seconds after send
    # > 1: up to this many messages of one topic (and message group) per SendMessage call
    batch_max_messages: int = 1
    batch_max_delay: float = 0.001  # seconds a started batch waits for more messages before it is sent
    # > 1: the library's linger batch (`Producer(batch_max_messages=...)`): plain send_async calls, batched
    # by the producer itself
    linger_batch: int = 1
    linger: float = 0.005  # its `batch_linger`, seconds
    # consumer
    group: str = "perf-group"
    consumer: str = "push"  # push | simple
    threads: int = 20
    listener_delay: float = 0.0  # seconds the listener blocks per message
    ack_batch: bool = True
    receivers: int = 4  # simple consumer: concurrent receive loops
    drain_timeout: float = 30.0  # e2e: seconds the consumer may take after the last send
    track_ids: bool = True


@dataclasses.dataclass(slots=True)
class PerfResult:
    produce: Summary | None
    consume: Summary | None
    interrupted: bool
    sent_ok: int = 0
    send_errors: int = 0
    received_unique: int = 0
    duplicates: int = 0
    # per interval, the loop lag and GC pauses of perf's process and of the server's (thrust.bench.lag)
    lag: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    # per side ("produce", "consume"), the transport its clients used ("native" or "grpcio": their
    # `stats().transport`), for the sides that started clients
    transport: dict[str, str] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "produce": self.produce.to_json() if self.produce else None,
            "consume": self.consume.to_json() if self.consume else None,
            "interrupted": self.interrupted,
            "sent_ok": self.sent_ok,
            "send_errors": self.send_errors,
            "received_unique": self.received_unique,
            "duplicates": self.duplicates,
            "lag": self.lag,
            "transport": self.transport,
        }


def _done_at(done: Callable[[asyncio.Future[Any], float], None], t0: float, fut: asyncio.Future[Any]) -> None:
    done(fut, t0)


class _Batch:
    """Messages of one topic and message group waiting to go out in one SendMessage call."""

    __slots__ = ("issued_at", "messages", "timer")

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.issued_at: list[float] = []  # perf_counter() when each message was issued
        self.timer: asyncio.TimerHandle | None = None


def topic_names(options: PerfOptions) -> list[str]:
    """pulsar-perf's rule: one topic keeps its name; with `-t N` > 1 they are `<topic>-0..N-1`."""
    if options.num_topics <= 1:
        return [options.topic]
    return [f"{options.topic}-{i}" for i in range(options.num_topics)]


def _client_kwargs(options: PerfOptions) -> dict[str, Any]:
    if options.config is not None:
        return {"config": options.config}  # `transport` is the config's own
    kwargs: dict[str, Any] = {
        "endpoints": options.endpoints,
        "namespace": options.namespace,
        "transport": options.transport,
    }
    if options.access_key is not None:
        kwargs["credentials"] = Credentials(
            access_key=options.access_key, secret_key=options.secret_key or ""
        )
    if options.tls:
        kwargs["tls"] = TlsConfig(enabled=True, ca_file=options.tls_ca, server_name=options.tls_server_name)
    return kwargs


class _Display:
    """Plain lines when not on a terminal; on a terminal also a status line rewritten every second."""

    def __init__(self, out: IO[str], live: bool) -> None:
        self.out = out
        self.live = live
        self._status = False

    def line(self, text: str) -> None:
        if self._status:
            self.out.write("\r\x1b[K")
            self._status = False
        self.out.write(text + "\n")
        self.out.flush()

    def status(self, text: str) -> None:
        if self.live:
            self.out.write("\r\x1b[K" + text)
            self.out.flush()
            self._status = True

    def clear(self) -> None:
        if self._status:
            self.out.write("\r\x1b[K")
            self.out.flush()
            self._status = False


class _Run:
    def __init__(self, options: PerfOptions, out: IO[str]) -> None:
        self.o = options
        self.display = _Display(out, options.live)
        self.topics = topic_names(options)
        self.stop = asyncio.Event()  # Ctrl-C or duration: stop everything
        self.producing_done = asyncio.Event()
        self.consuming_done = asyncio.Event()
        self.interrupted = False
        self.send_recorder = Recorder("produce", warmup=options.warmup)
        self.recv_recorder = Recorder("consume", warmup=options.warmup)
        self.inbox = SampleInbox()
        self.issued = 0
        self.sent_ok = 0
        self.send_calls = (
            0  # sends started: messages, or batches with batching (producer retries not counted)
        )
        self.seen: set[str] = set()
        self.ids: collections.deque[str] = collections.deque()
        self.loop_lag = LoopLag()
        self.gc_pauses = GcPauses()
        self.lag_window = LagWindow()
        self.lag_rows: list[dict[str, Any]] = []
        self.transport: dict[str, str] = {}  # side -> the transport its clients use
        self.body = os.urandom(max(1, options.size // 2) + 1).hex()[: max(1, options.size)].encode()

    def _freeze(self) -> None:
        """`--gc-freeze`: once the clients are up, what is alive (modules, channels, the clients) lives for
        the whole run; frozen, the full collections stop walking it (docs/benchmarks.md, "The main job's
        latency tails"). An application can do the same after its own start-up."""
        if self.o.gc_freeze:
            gc.collect()
            gc.freeze()

    def _started(self, side: str, transports: set[str], clients: str) -> None:
        """A side's clients have started: the transport they use ("native" or "grpcio", from their
        `stats()`) goes in a header line, in that side's summary line and in the JSON."""
        transport = ",".join(sorted(transports))
        self.transport[side] = transport
        recorder = self.send_recorder if side == "produce" else self.recv_recorder
        recorder.extra["transport"] = transport
        self.display.line(f"Transport ({side}): {transport} --- {clients}")

    # -- producer ----------------------------------------------------------------------------------------

    def _message(self, i: int) -> Message:
        o = self.o
        return Message(
            topic=self.topics[i % len(self.topics)],
            body=self.body,
            tag=o.tag,
            message_group=f"g{i % o.fifo_groups}" if o.fifo_groups > 0 else None,
            delay=o.delay if o.delay > 0 else None,
        )

    async def _sender(self, producer: Producer, share: float) -> None:
        if self.o.batch_max_messages > 1:
            await self._batch_sender(producer, share)
            return
        o = self.o
        rec = self.send_recorder
        interval = 1.0 / share if share > 0 else 0.0
        next_at = time.monotonic()
        perf = time.perf_counter

        def done(fut: asyncio.Future[Any], t0: float) -> None:
            if fut.cancelled() or fut.exception() is not None:
                rec.record_error()
            else:
                self.sent_ok += 1
                rec.record((perf() - t0) * 1e6, len(self.body))

        while not self.stop.is_set() and (o.count <= 0 or self.issued < o.count):
            if interval:
                now = time.monotonic()
                if now < next_at:
                    await asyncio.sleep(next_at - now)
                    continue
                next_at += interval
            i = self.issued
            self.issued += 1
            t0 = perf()
            try:
                fut = await producer.send_async(self._message(i))
            except Exception:
                rec.record_error()
                continue
            self.send_calls += 1
            fut.add_done_callback(functools.partial(_done_at, done, t0))

    async def _batch_sender(self, producer: Producer, share: float) -> None:
        """pulsar-perf's producer batching: messages are issued at the same pace as without batching and
        collected per (topic, message group); a batch goes out in one `Producer.send_batch` call once it
        holds `batch_max_messages` messages or `batch_max_delay` after its first message, whichever comes
        first. At most `max_in_flight` batches are in flight; the sender waits for a slot like
        `send_async` waits for its window. Counts and latencies stay per message."""
        o = self.o
        rec = self.send_recorder
        loop = asyncio.get_running_loop()
        interval = 1.0 / share if share > 0 else 0.0
        next_at = time.monotonic()
        perf = time.perf_counter
        size = len(self.body)
        slots = asyncio.Semaphore(o.max_in_flight)
        filling: dict[tuple[str, str | None], _Batch] = {}
        tasks: set[asyncio.Task[None]] = set()

        async def send(batch: _Batch, have_slot: bool) -> None:
            if not have_slot:
                await slots.acquire()
            try:
                self.send_calls += 1
                await producer.send_batch(batch.messages)
            except Exception:
                for _ in batch.messages:
                    rec.record_error()
            else:
                now = perf()
                self.sent_ok += len(batch.messages)
                for t0 in batch.issued_at:
                    rec.record((now - t0) * 1e6, size)
            finally:
                slots.release()

        def spawn(batch: _Batch, have_slot: bool) -> None:
            task = loop.create_task(send(batch, have_slot))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        def linger_over(key: tuple[str, str | None], batch: _Batch) -> None:
            if filling.get(key) is batch:
                del filling[key]
                spawn(batch, False)

        try:
            while not self.stop.is_set() and (o.count <= 0 or self.issued < o.count):
                if interval:
                    now = time.monotonic()
                    if now < next_at:
                        await asyncio.sleep(next_at - now)
                        continue
                    next_at += interval
                message = self._message(self.issued)
                self.issued += 1
                key = (message.topic, message.message_group)
                batch = filling.get(key)
                if batch is None:
                    batch = filling[key] = _Batch()
                    batch.timer = loop.call_later(o.batch_max_delay, linger_over, key, batch)
                batch.messages.append(message)
                batch.issued_at.append(perf())
                if len(batch.messages) >= o.batch_max_messages:
                    del filling[key]
                    if batch.timer is not None:
                        batch.timer.cancel()
                    await slots.acquire()
                    spawn(batch, True)
        finally:
            for batch in filling.values():  # what is left goes out now
                if batch.timer is not None:
                    batch.timer.cancel()
                spawn(batch, False)
            filling.clear()
            while tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

    async def produce(self) -> None:
        o = self.o
        linger: dict[str, Any] = {}
        if o.linger_batch > 1:
            # The window (max_in_flight) counts requests; the pending bound is two windows of full batches,
            # so the next batches are ready when a slot frees and a message waits for at most that much
            # ahead of it (the producer's default, 8192, would only add queueing to the latency).
            pending = 2 * o.max_in_flight * o.linger_batch
            linger = {
                "batch_max_messages": o.linger_batch,
                "batch_linger": o.linger,
                "batch_max_pending": pending,
                "batch_max_pending_bytes": max(32 << 20, pending * (o.size + 512)),
            }
        producers = [
            Producer(**_client_kwargs(o), topics=self.topics, max_in_flight=o.max_in_flight, **linger)
            for _ in range(max(1, o.producers))
        ]
        cpu: float | None = None
        try:
            for p in producers:
                await p.start()
            self._started(
                "produce", {p.stats().transport for p in producers}, f"{len(producers)} producer(s)"
            )
            self._freeze()
            self.send_recorder.restart()
            cpu = time.process_time()
            share = o.rate / len(producers) if o.rate > 0 else 0.0
            await asyncio.gather(*(self._sender(p, share) for p in producers))
        finally:
            # close() waits for the pipelined sends still in flight (bounded)
            await asyncio.gather(*(p.close() for p in producers), return_exceptions=True)
            if linger:
                self.send_calls = sum((p.linger_stats or (0, 0))[0] for p in producers)
            self.send_recorder.extra.update(send_calls=self.send_calls)
            if cpu is not None:
                # The perf process's CPU seconds while producing (start-up excluded); with the embedded
                # server in its own process, this is the client's cost (and perf's own bookkeeping).
                self.send_recorder.extra.update(cpu_s=round(time.process_time() - cpu, 3))
            self.producing_done.set()

    # -- consumer ----------------------------------------------------------------------------------------

    def _on_message(self, message: ReceivedMessage) -> None:
        born = message.born_timestamp
        latency = (time.time() - born) * 1e6 if born else -1.0
        self.inbox.put(latency, len(message.body))
        if self.o.track_ids:
            self.ids.append(message.message_id)

    def _listener(self) -> Callable[[ReceivedMessage], ConsumeResult]:
        delay = self.o.listener_delay
        on_message = self._on_message

        def listener(message: ReceivedMessage) -> ConsumeResult:
            on_message(message)
            if delay > 0:
                time.sleep(delay)  # a listener doing blocking work (runs on a consumption thread)
            return ConsumeResult.SUCCESS

        return listener

    async def consume(self) -> None:
        from thrust.push_consumer import ACK_BATCH_SIZE, PushConsumer

        o = self.o
        subs = {t: (o.tag or "*") for t in self.topics}
        consumer = PushConsumer(
            **_client_kwargs(o),
            group=o.group,
            subscriptions=subs,
            listener=self._listener(),
            consumption_thread_count=o.threads,
            ack_batch_size=ACK_BATCH_SIZE if o.ack_batch else 1,
            ack_linger=0.01 if o.ack_batch else 0.0,
        )
        try:
            await consumer.start()
            self._started("consume", {consumer.stats().transport}, "push consumer")
            self._freeze()
            self.recv_recorder.restart()
            await self.consuming_done.wait()
        finally:
            await consumer.close()  # flushes the pending acks
            stats = consumer.stats()
            self.recv_recorder.extra.update(acked=stats.acked, ack_rpcs=stats.ack_rpcs)

    async def consume_simple(self) -> None:
        from thrust.simple_consumer import SimpleConsumer

        o = self.o
        subs = {t: (o.tag or "*") for t in self.topics}
        consumer = SimpleConsumer(**_client_kwargs(o), group=o.group, subscriptions=subs, await_duration=5.0)
        acked = 0
        ack_rpcs = 0

        async def loop() -> None:
            nonlocal acked, ack_rpcs
            while not self.consuming_done.is_set():
                try:
                    messages = await consumer.receive(32, invisible_duration=30)
                except Exception:
                    self.recv_recorder.record_error()
                    await asyncio.sleep(0.1)
                    continue
                for m in messages:
                    self._on_message(m)
                if not messages:
                    continue
                if o.ack_batch:
                    results = await consumer.ack_many(messages)
                    ack_rpcs += 1
                    acked += sum(1 for r in results if r is None)
                else:
                    outcomes = await asyncio.gather(
                        *(consumer.ack(m) for m in messages), return_exceptions=True
                    )
                    ack_rpcs += len(messages)
                    acked += sum(1 for r in outcomes if r is None)

        try:
            await consumer.start()
            self._started("consume", {consumer.stats().transport}, "simple consumer")
            self._freeze()
            self.recv_recorder.restart()
            tasks = [asyncio.create_task(loop()) for _ in range(max(1, o.receivers))]
            await self.consuming_done.wait()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            self.recv_recorder.extra.update(acked=acked, ack_rpcs=ack_rpcs)
            await consumer.close()

    # -- reporting ---------------------------------------------------------------------------------------

    def _drain(self) -> None:
        self.inbox.drain(self.recv_recorder)
        ids = self.ids
        seen = self.seen
        while ids:
            seen.add(ids.popleft())

    def _report(self, sides: list[Recorder], *, partial: bool = False, show: bool = True) -> None:
        for rec in sides:
            stats = rec.report(partial=partial)
            if show:
                self.display.line(format_interval(rec.name, stats))
        # Beside the interval: how late perf's own loop and the server's woke up, and their collections
        # (docs/benchmarks.md, "The main job's latency tails"): a latency tail with a matching lag
        # names the process that stalled.
        self.lag_window.add(self.loop_lag.take(), self.gc_pauses.take())
        client = summarise(self.lag_window.take())
        server_window = self.o.server_lag() if self.o.server_lag is not None else None
        server = summarise(server_window) if server_window is not None else None
        self.lag_rows.append({"client": client, "server": server})
        if show:
            self.display.line(format_line(client, server))

    def _status(self, sides: list[Recorder]) -> None:
        parts = [f"{r.name}: {r.total} msg, {r.current_rate():.0f} msg/s, {r.errors} err" for r in sides]
        self.display.status(" | ".join(parts))

    def _consumer_finished(self) -> bool:
        o = self.o
        received = self.recv_recorder.total
        if o.mode == "consume":
            return o.count > 0 and received >= o.count
        # e2e: done once every successfully sent message arrived (after the last send)
        if not self.producing_done.is_set():
            return False
        target = self.sent_ok
        got = len(self.seen) if o.track_ids else received
        return got >= target

    async def main(self) -> PerfResult:
        o = self.o
        loop = asyncio.get_running_loop()

        def on_sigint() -> None:
            if self.stop.is_set():  # a second Ctrl-C: leave at once
                loop.remove_signal_handler(signal.SIGINT)
                raise KeyboardInterrupt
            self.interrupted = True
            self.stop.set()

        with _suppress_not_impl():
            loop.add_signal_handler(signal.SIGINT, on_sigint)
        self.loop_lag.start()
        self.gc_pauses.install()
        sides: list[Recorder] = []
        tasks: list[asyncio.Task[None]] = []
        if o.mode in ("consume", "e2e"):
            sides.append(self.recv_recorder)
            tasks.append(
                asyncio.create_task(self.consume() if o.consumer == "push" else self.consume_simple())
            )
        if o.mode in ("produce", "e2e"):
            if o.mode == "e2e":
                await asyncio.sleep(0.5)  # let the consumer subscribe first (its assignment scan)
            sides.insert(0, self.send_recorder)
            tasks.append(asyncio.create_task(self.produce()))
        else:
            self.producing_done.set()
        started = time.monotonic()
        next_report = started + o.interval
        next_status = started + 1.0
        drain_deadline: float | None = None
        try:
            while True:
                await asyncio.sleep(0.05)
                self._drain()
                now = time.monotonic()
                failed = [t for t in tasks if t.done() and not t.cancelled() and t.exception() is not None]
                if failed:
                    raise failed[0].exception()  # type: ignore[misc]
                if o.duration > 0 and now - started >= o.duration and not self.stop.is_set():
                    self.stop.set()
                if now >= next_report:
                    self._report(sides)
                    next_report += o.interval
                if now >= next_status:
                    self._status(sides)
                    next_status = now + 1.0
                if o.mode == "produce":
                    if self.producing_done.is_set():
                        break
                    continue
                if self._consumer_finished():
                    break
                if self.interrupted:
                    break
                if o.mode == "consume" and self.stop.is_set():
                    break
                if o.mode == "e2e" and self.producing_done.is_set():
                    if drain_deadline is None:
                        drain_deadline = now + o.drain_timeout
                    elif now >= drain_deadline:
                        break
        finally:
            self.stop.set()
            self.consuming_done.set()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._drain()
            self.gc_pauses.uninstall()
            await self.loop_lag.stop()
            with _suppress_not_impl():
                loop.remove_signal_handler(signal.SIGINT)
            self.display.clear()
        # The last, partial interval: in the JSON (the intervals add up to the totals), but printed only
        # when the run had no whole interval (`thrust.bench.stats.shown_intervals`).
        if any(r.total - (r.intervals[-1].total if r.intervals else 0) for r in sides):
            self._report(sides, partial=True, show=not any(r.intervals for r in sides))
        produce = self.send_recorder.summary() if o.mode in ("produce", "e2e") else None
        consume = self.recv_recorder.summary() if o.mode in ("consume", "e2e") else None
        for s in (produce, consume):
            if s is not None:
                for text in format_summary(s):
                    self.display.line(text)
        unique = len(self.seen) if o.track_ids else self.recv_recorder.total
        return PerfResult(
            produce=produce,
            consume=consume,
            interrupted=self.interrupted,
            sent_ok=self.sent_ok,
            send_errors=self.send_recorder.errors,
            received_unique=unique,
            duplicates=self.recv_recorder.total - unique if o.track_ids else 0,
            lag=self.lag_rows,
            transport=dict(self.transport),
        )


def _suppress_not_impl() -> Any:
    # add_signal_handler works only on the main thread of a Unix loop; elsewhere Ctrl-C stays default
    return contextlib.suppress(NotImplementedError, RuntimeError, ValueError)


async def run_perf(options: PerfOptions, out: IO[str] | None = None) -> PerfResult:
    """Run one perf session on the current loop and return its results (lines go to `out`)."""
    return await _Run(options, out or sys.stdout).main()
