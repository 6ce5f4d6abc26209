"""`PushConsumer`: messages pushed to a listener, acknowledged in batches in the background.

    async def handle(message: thrust.ReceivedMessage) -> thrust.ConsumeResult:
        ...
        return thrust.ConsumeResult.SUCCESS

    async with thrust.PushConsumer(
        endpoints="127.0.0.1:8081", group="billing", subscriptions={"a": "*", "b": "x||y"}, listener=handle
    ) as consumer:
        await asyncio.sleep(60)

How it avoids the six hot-path faults of the Rust push consumer (docs/protocol.md §9.2; bench
scenarios 1-5b, docs/benchmarks.md#scenarios):

1. Acks never stand between two messages: a consumed message's ack goes into an `AckBatcher`
   (`thrust._core.ack`) keyed by (endpoint, group, topic), sent as one multi-entry AckMessage when a batch
   fills or a short linger passes, several batches in flight; per-entry results are applied
   (`thrust._io.batching.AckDriver`). `close()` flushes them.
2. The listener never runs on the loop's thread when it is a plain function: `thrust._consumption` runs it on
   `consumption_thread_count` threads and carries messages and results across in batches (one wake-up per
   burst). An `async def` listener runs on the loop, at most `async_concurrency` at once.
3. No lock over session I/O: every queue awaits only the session of its own endpoint
   (`thrust._io.session`), so a broker slow to answer Settings delays only its own queues.
4. Failed acks are retried per entry on their own capped backoff (the batcher's retry heap);
   INVALID_RECEIPT_HANDLE and other 400xx are dropped at once and counted; the retry set is bounded by count
   and by age.
5. (a) A newly assigned queue receives at once, never waiting for a dropped queue's long polls; those run
   to their end, and what they bring, like what the dropped queue had taken, is still consumed and acked
   (cancelling them could leave a batch the proxy popped renewed for this client until it closes:
   `thrust._push.scanner`). (b) Each topic has its own assignment
   scan, and a scan changes only that topic's queues (`thrust._core.assignment`).
6. Flow control by cached count and bytes per queue (`thrust._core.process_queue`); a message stays
   cached until its ack settles, so a slow ack path holds back receiving, never the listener: the receive loop
   awaits an event when the cache is full (no recursion, no polling) and runs several receives per queue
   while there is room.

And (scenario 5a again) a receive's first message goes to the listener as soon as the stream delivers
it, not once the whole batch has been read (`thrust._push.receiver._Stream`: Java acts on completion; why
thrust does not).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import TypeAlias, Unpack

from thrust._client import client_config as _config
from thrust._client import join_start
from thrust._codec import convert, validation
from thrust._codec.filter import check_filter
from thrust._consumption import ListenerExecutor, is_async_callable
from thrust._core.ack import AckConfig
from thrust._core.process_queue import QueueBudget
from thrust._core.scan_schedule import DEFAULT_MAX_SCAN_RATE
from thrust._core.settings import ClientSettings
from thrust._io.native import resolve_transport
from thrust._io.session import ClientSession
from thrust._io.tasks import TaskSet
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust._push.commands import LiteHooks, PushCommands
from thrust._push.model import ACK_RETRY_WINDOW, MiB, _Delivery, logger
from thrust._push.receiver import QueueReceiver
from thrust._push.scanner import AssignmentScanner
from thrust._push.settler import Settler
from thrust._push.tracing import traced_invoke
from thrust.config import ClientConfig, ClientConfigFields
from thrust.errors import ClientClosedError, ThrustError, validation_error
from thrust.message import ConsumeResult, ConsumeSuspend, FilterExpression, ReceivedMessage

__all__ = ["Listener", "PushConsumer", "PushConsumerStats", "QueueStats"]

# Entries per AckMessage by default: two receives' worth (see `PushConsumer`'s `ack_batch_size`).
ACK_BATCH_SIZE = 64

Listener: TypeAlias = Callable[
    [ReceivedMessage],
    "ConsumeResult | ConsumeSuspend | Awaitable[ConsumeResult | ConsumeSuspend | None] | None",
]
"""A push consumer's listener: a plain function, or an `async def`, of one message returning
`ConsumeResult` or None (None is SUCCESS: see `PushConsumer`), or for a `LitePushConsumer` a
`ConsumeSuspend`."""


@dataclasses.dataclass(frozen=True, slots=True)
class QueueStats:
    """One assigned queue: cache, receives in flight, listeners running, acks not yet settled.

    `acks_pending` counts this queue's acks, nacks and dead-letter forwards not settled yet (queued, in flight
    or retrying); `acks_retrying` the acks among them waiting in the retry schedule after a failed attempt
    (the per-queue share of `PushConsumerStats.acks_retrying`)."""

    topic: str
    broker: str
    queue_id: int
    cached_messages: int
    cached_bytes: int
    receives_in_flight: int
    listeners_in_flight: int
    acks_pending: int
    acks_retrying: int
    received: int
    consumed: int


@dataclasses.dataclass(frozen=True, slots=True)
class PushConsumerStats:
    """A snapshot of the whole consumer (see `PushConsumer.stats()`).

    Gauges: cached_messages / cached_bytes (received, not yet consumed), listeners_in_flight,
    receives_in_flight, acks_pending (queued or in flight), acks_retrying (waiting in the retry schedule),
    nacks_pending, dead_letters_pending. Counters: received, consumed, consume_failures, acked,
    acks_dropped_invalid (INVALID_RECEIPT_HANDLE and other 400xx), acks_dropped_expired (gave up by age),
    acks_dropped_overflow (retry set full), ack_rpcs, ack_attempts, nacked, dead_lettered,
    receive_failures, queues_dropped, held_releases (times the client re-registered so that the proxy
    releases the rest of a batch whose receive broke after it began: docs/reliability.md, bug 12).
    `last_receive_error`: the typed error of the most recent failed receive (None while none failed); a
    failure a retry cannot cure (`retriable` False, such as a subscription the server refuses) keeps
    failing every receive, and is also logged every 10 s.
    """

    queues: tuple[QueueStats, ...]
    cached_messages: int
    cached_bytes: int
    listeners_in_flight: int
    receives_in_flight: int
    acks_pending: int
    acks_retrying: int
    nacks_pending: int
    dead_letters_pending: int
    received: int
    consumed: int
    consume_failures: int
    acked: int
    acks_dropped_invalid: int
    acks_dropped_expired: int
    acks_dropped_overflow: int
    ack_rpcs: int
    ack_attempts: int
    nacked: int
    dead_lettered: int
    receive_failures: int
    queues_dropped: int
    held_releases: int = 0
    last_receive_error: ThrustError | None = None
    transport: str = "grpcio"


class PushConsumer:
    """Consumes the subscribed topics and pushes every message to `listener`. Native asyncio.

    Args:
        config: a `ClientConfig`; or give its fields as keywords instead (`connection`).
        connection: `ClientConfig`'s fields as keywords (`endpoints=`, `namespace=`, ...; see
            `thrust.config.ClientConfigFields`).
        group: the consumer group.
        subscriptions: topic -> filter (a tag expression such as `"*"` or `"a||b"`, or a `FilterExpression`);
            a malformed SQL92 filter raises `ValidationError` (ILLEGAL_FILTER_EXPRESSION) before any I/O.
        listener: `fn(message) -> ConsumeResult | None`, a plain function (run on `consumption_thread_count`
            threads) or an `async def` (run on the loop). Returning `ConsumeResult.SUCCESS` **or None** (a
            listener that just returns, as Python functions do when nothing failed) acks the message;
            `ConsumeResult.FAILURE`, any other value or an exception nacks it for redelivery.
        consumption_thread_count: threads for a plain-function listener (Java default 20).
        async_concurrency: at most this many `async def` listener calls at once.
        max_cache_message_count: client-wide cache of received messages not yet settled (waiting for the
            listener, or for their ack / nack to complete) (Java 4096). Split by demand, not evenly over
            the assigned queues as Java does: a queue whose last receive came back empty and that caches
            nothing runs one long poll asking for a batch or less (all such queues together reserve at
            most half the cache), and the queues with messages share the rest (`thrust._core.process_queue`).
        max_cache_message_bytes: the same cache's limit in body bytes (Java 64 MiB).
        receives_per_queue: ReceiveMessage calls in flight per queue with messages while the cache has room
            for them (FIFO queues, and idle queues, always use one).
        ack_batch_size: an AckMessage goes out when a (endpoint, topic) batch has this many entries, or
            `ack_linger` seconds after its oldest entry was queued. A FIFO group's acks do not linger: each
            message group waits for its previous message's ack. 64, two receives' worth: under a backlog
            one AckMessage per two receives costs a tenth less client CPU per message than one per receive
            (docs/benchmarks.md, "Acks of two receives in one call"), and below 6,400 messages a second per
            broker the linger sends them first anyway.
        ack_linger: seconds an ack batch waits for more entries after its oldest one (see `ack_batch_size`).
        ack_retry_window: seconds a failing ack keeps being retried before it is given up. In a FIFO group
            the ack or dead-letter forward of a message group's head is retried for as long as its queue
            stays assigned instead, because the group waits for it (`thrust._core.fifo`); once the queue is
            dropped it gets this window like any other ack.
        fifo_parallel_groups: for FIFO groups, consume different message groups in parallel (order is kept
            within each group); False consumes a queue's messages strictly one after another (Java default).
        shutdown_grace: seconds `close()` lets running listener calls finish.
        scan_interval: seconds between assignment scans of each topic (Java 5 s), or longer when
            `max_scan_rate` demands it.
        max_scan_rate: at most this many periodic assignment scans a second over all the topics, started
            together once a second (default 20): a consumer of 1,000 topics scans each every 50 s rather
            than every 5 s (Java scans every topic every 5 s: 200 QueryAssignment a second). A topic's first
            scan and a scan after its route changed are not held by it (`thrust._core.scan_schedule`).
    """

    def __init__(
        self,
        config: ClientConfig | None = None,
        *,
        group: str,
        subscriptions: Mapping[str, str | FilterExpression],
        listener: Listener,
        consumption_thread_count: int = 20,
        async_concurrency: int = 64,
        max_cache_message_count: int = 4096,
        max_cache_message_bytes: int = 64 * MiB,
        receives_per_queue: int = 2,
        ack_batch_size: int = ACK_BATCH_SIZE,
        ack_linger: float = 0.01,
        ack_retry_window: float = ACK_RETRY_WINDOW,
        fifo_parallel_groups: bool = False,
        shutdown_grace: float = 10.0,
        scan_interval: float = 5.0,
        max_scan_rate: float = DEFAULT_MAX_SCAN_RATE,
        **connection: Unpack[ClientConfigFields],
    ) -> None:
        self.config = _config("PushConsumer", config, connection)
        self.transport = resolve_transport(self.config)
        if not subscriptions:
            raise ValueError("subscriptions must name at least one topic")
        filters = {t: FilterExpression.of(f) for t, f in subscriptions.items()}
        try:
            validation.check_group(group)
            for topic, f in filters.items():
                validation.check_topic(topic)
                # A malformed SQL92 filter fails here, before any I/O (SimpleConsumer's `_checked_filter`).
                check_filter(int(f.type), f.expression)
        except validation.Invalid as exc:
            raise validation_error(exc.message, exc.code) from None
        if not callable(listener):
            raise TypeError("listener must be callable")
        if consumption_thread_count < 1 or async_concurrency < 1:
            raise ValueError("consumption_thread_count and async_concurrency must be >= 1")
        if (
            ack_linger < 0
            or ack_retry_window <= 0
            or shutdown_grace < 0
            or scan_interval <= 0
            or max_scan_rate <= 0
        ):
            raise ValueError(
                "ack_linger, shutdown_grace >= 0 and ack_retry_window, scan_interval, max_scan_rate > 0"
            )
        self.group = group
        self.subscriptions = filters
        self.listener = listener
        self.consumption_thread_count = consumption_thread_count
        self.async_concurrency = async_concurrency
        self.fifo_parallel_groups = fifo_parallel_groups
        self.shutdown_grace = shutdown_grace
        self.scan_interval = scan_interval
        self.max_scan_rate = max_scan_rate
        self.ack_retry_window = ack_retry_window
        # A message holds its cache slot until its ack settles, so the batcher never holds more entries than
        # the cache: the bounds below can only be reached when the cache limit is larger than them.
        ack_config = AckConfig(
            max_batch=ack_batch_size,
            linger=ack_linger,
            max_pending=max(65_536, max_cache_message_count),
            max_retrying=max(10_000, max_cache_message_count),
        )
        namespace = self.config.namespace
        self._group_pb = pb.Resource(resource_namespace=namespace, name=group)
        self._topic_pb = {t: pb.Resource(resource_namespace=namespace, name=t) for t in self.subscriptions}
        self._filter_pb = {t: convert.filter_expression(f) for t, f in self.subscriptions.items()}
        # The three parts, each owning its state (thrust._push.model). The consumer owns the session, the
        # listener pool, the start / close tasks and one task set for the scans, the queue runners and the
        # receives (close cancels and awaits it last); it binds the parts to the first two at start.
        self._tasks = TaskSet(logger)
        instrumentation = self.config.instrumentation
        self._settler = Settler(
            ack_config=ack_config,
            ack_retry_window=ack_retry_window,
            group_pb=self._group_pb,
            topic_pb=self._topic_pb,
            namespace=namespace,
            instrumentation=instrumentation,
            client=self,
        )
        self._receiver = QueueReceiver(
            fifo_parallel_groups=fifo_parallel_groups,
            instrumentation=instrumentation,
            client=self,
            on_corrupted=self._settler.corrupted,
            spawn=self._tasks.spawn,
        )
        self._scanner = AssignmentScanner(
            group=group,
            group_pb=self._group_pb,
            topic_pb=self._topic_pb,
            filter_pb=self._filter_pb,
            namespace=namespace,
            budget=QueueBudget(
                max_cache_message_count,
                max_cache_message_bytes,
                max_receives_in_flight=receives_per_queue,
                request_timeout=self.config.request_timeout,
            ),
            receives_per_queue=receives_per_queue,
            scan_interval=scan_interval,
            max_scan_rate=max_scan_rate,
            ack_retry_window=ack_retry_window,
            run_queue=self._receiver.run,
            spawn=self._tasks.spawn,
        )
        self._session: ClientSession | None = None
        # Set before `start` by a `LitePushConsumer`, which wraps this consumer (thrust.lite_push_consumer).
        self._client_type: int = pb.PUSH_CONSUMER
        self._lite_hooks: LiteHooks | None = None
        self._executor: ListenerExecutor[_Delivery] | None = None
        self._start_task: asyncio.Task[None] | None = None
        self._close_task: asyncio.Task[None] | None = None
        self._closing = False

    @property
    def client_id(self) -> str | None:
        return self._session.client_id if self._session is not None else None

    @property
    def session(self) -> ClientSession:
        """The underlying session (internal API, for tests and tools)."""
        if self._session is None:
            raise RuntimeError("the consumer is not started")
        return self._session

    # -- lifecycle -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Fetch routes, start the listener pool and the assignment scans; idempotent.

        Returns once every topic's route is known; sessions with brokers open in the background, each queue
        waiting only for its own broker (bench scenario 3)."""
        if self._closing:
            raise ClientClosedError("the consumer is closed")
        if self._start_task is None:
            self._start_task = asyncio.get_running_loop().create_task(self._start())
        await join_start(self._start_task, self.close)

    async def _start(self) -> None:
        local = dataclasses.replace(
            ClientSettings.for_consumer(), request_timeout=self.config.request_timeout
        )
        listener_is_async = is_async_callable(self.listener)
        self._session = session = ClientSession(
            self.config,
            transport=self.transport,
            client_type=self._client_type,
            local_settings=local,
            handler=PushCommands(
                group_pb=self._group_pb,
                topic_pb=self._topic_pb,
                filter_pb=self._filter_pb,
                listener=self.listener,
                listener_is_async=listener_is_async,
                settings_changed=self._settings_changed,
                lite=self._lite_hooks,
            ),
            group=self.group,
        )
        instrumentation = self.config.instrumentation
        invoke = None
        if instrumentation is not None:
            invoke = traced_invoke(instrumentation, self, self.listener, listener_is_async)
            instrumentation.attach(self)
        settler = self._settler
        self._executor = executor = ListenerExecutor(
            self.listener,
            success=ConsumeResult.SUCCESS,
            on_results=settler.on_results,
            thread_count=self.consumption_thread_count,
            async_concurrency=self.async_concurrency,
            name="thrust-consume",
            invoke=invoke,
            # A lite push consumer's listener may put a lite topic aside (`ConsumeSuspend`); for any other
            # consumer that result is a failure, as Java's `convertSuspendResultIfNeeded` makes it.
            passthrough=ConsumeSuspend if self._client_type == pb.LITE_PUSH_CONSUMER else None,
        )
        settler.start(session, executor.submit)
        self._receiver.start(session, settler.hand_over)
        await session.start(())
        await self._scanner.start(session)

    def _settings_changed(self) -> None:
        """The server's Settings arrived (Telemetry): the scanner's budget and the settler's ack batching
        follow them."""
        session = self._session
        if session is None:
            return
        settings = session.settings
        self._scanner.apply_settings(settings)
        self._settler.set_fifo(settings.fifo)

    async def __aenter__(self) -> PushConsumer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop receiving, let running listeners finish (`shutdown_grace`), flush acks, leave the group.

        Order (docs/protocol.md §8.4): scans stop and every queue's receives are cancelled; the listener pool
        stops taking new messages and waits for running calls; acks, nacks and dead-letter forwards are sent
        at once and awaited (bounded by the request timeout); the session sends NotifyClientTermination and
        closes its streams and channels. Idempotent; concurrent callers await the same shutdown."""
        if self._close_task is None:
            self._closing = True
            self._scanner.stop()
            self._receiver.stop()
            self._settler.stop()
            self._close_task = asyncio.get_running_loop().create_task(self._close())
        await asyncio.shield(self._close_task)

    async def _close(self) -> None:
        if self._start_task is not None and not self._start_task.done():
            self._start_task.cancel()
            await asyncio.wait([self._start_task], timeout=1.0)
        self._scanner.close_queues()
        settler = self._settler
        if self._executor is not None:
            unstarted = self._executor.stop()
            if unstarted:
                settler.nack_unstarted(unstarted)
            dropped = await self._executor.close(self.shutdown_grace)
            if dropped:
                logger.info(
                    "%d received messages were not consumed before close; the server redelivers them", dropped
                )
        timeout = self.config.request_timeout + 1.0
        drivers = settler.drivers()
        drained = await asyncio.gather(*(d.drain(timeout) for d in drivers))
        for driver, idle in zip(drivers, drained, strict=True):
            if not idle:
                # Bounded: what is still unsettled is given up; the server makes those messages visible
                # again once the client has left (NotifyClientTermination below), a FIFO head ahead of the
                # rest of its group.
                st = driver.batcher.stats()
                logger.warning(
                    "close: %d %s request(s) not settled within %.1f s, given up; the server redelivers them",
                    st.pending + st.in_flight + st.retrying,
                    driver.name,
                    timeout,
                )
        for d in drivers:
            await d.close()
        # The scans and receives were cancelled first (close_queues); runners end once their queue is
        # closed. Whatever is left now is cancelled too.
        await self._tasks.aclose(1.0)
        if self._session is not None:
            await self._session.close(self.config.request_timeout + 1.0)
            if self.config.instrumentation is not None:
                self.config.instrumentation.detach(self)

    # -- statistics ---------------------------------------------------------------------------------------

    def stats(self) -> PushConsumerStats:
        """A snapshot of the consumer's gauges and counters, per queue and in total."""
        settler = self._settler
        receiver = self._receiver
        retrying = settler.retrying_by_queue()
        queues = tuple(
            QueueStats(
                topic=q.id.topic,
                broker=q.id.broker_name,
                queue_id=q.id.queue_id,
                cached_messages=q.pq.cached_count,
                cached_bytes=q.pq.cached_bytes,
                receives_in_flight=q.pq.in_flight,
                listeners_in_flight=q.in_listener,
                acks_pending=q.acks_pending,
                acks_retrying=retrying.get(q, 0),
                received=q.received,
                consumed=q.consumed,
            )
            for q in sorted(self._scanner.queues.values(), key=lambda q: q.id)
        )
        ack = settler.acks.batcher.stats() if settler.acks is not None else None
        nack = settler.nacks.batcher.stats() if settler.nacks is not None else None
        dlq = settler.dlq.batcher.stats() if settler.dlq is not None else None
        return PushConsumerStats(
            queues=queues,
            cached_messages=sum(s.cached_messages for s in queues),
            cached_bytes=sum(s.cached_bytes for s in queues),
            listeners_in_flight=self._executor.in_flight if self._executor is not None else 0,
            receives_in_flight=sum(s.receives_in_flight for s in queues),
            acks_pending=(ack.pending + ack.in_flight) if ack else 0,
            acks_retrying=ack.retrying if ack else 0,
            nacks_pending=(nack.pending + nack.in_flight + nack.retrying) if nack else 0,
            dead_letters_pending=(dlq.pending + dlq.in_flight + dlq.retrying) if dlq else 0,
            received=receiver.received,
            consumed=settler.consumed,
            consume_failures=settler.consume_failures,
            acked=ack.acked if ack else 0,
            acks_dropped_invalid=ack.dropped_invalid if ack else 0,
            acks_dropped_expired=ack.dropped_expired if ack else 0,
            acks_dropped_overflow=ack.dropped_overflow if ack else 0,
            ack_rpcs=ack.rpcs if ack else 0,
            ack_attempts=ack.attempts if ack else 0,
            nacked=settler.nacked,
            dead_lettered=settler.dead_lettered,
            receive_failures=receiver.receive_failures,
            queues_dropped=self._scanner.queues_dropped,
            held_releases=self._session.held_releases if self._session is not None else 0,
            last_receive_error=receiver.last_receive_error,
            transport=self.transport,
        )

    def __repr__(self) -> str:
        s = self.stats()
        dropped = s.acks_dropped_invalid + s.acks_dropped_expired + s.acks_dropped_overflow
        state = "closed" if self._closing else ("running" if self._start_task is not None else "new")
        return (
            f"<PushConsumer group={self.group!r} {state} queues={len(s.queues)} "
            f"cached={s.cached_messages}/{s.cached_bytes}B listeners={s.listeners_in_flight} "
            f"receives={s.receives_in_flight} acks_pending={s.acks_pending} acks_retrying={s.acks_retrying} "
            f"acked={s.acked} acks_dropped={dropped} "
            f"consumed={s.consumed} failed={s.consume_failures} transport={self.transport}>"
        )
