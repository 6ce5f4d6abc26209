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
   (`thrust._push.settle.BatchDriver`). `close()` flushes them.
2. The listener never runs on the loop's thread when it is a plain function: `thrust._consumption` runs it on
   `consumption_thread_count` threads and carries messages and results across in batches (one wake-up per
   burst). An `async def` listener runs on the loop, at most `async_concurrency` at once.
3. No lock over session I/O: every queue awaits only the session of its own endpoint
   (`thrust._io.session`), so a broker slow to answer Settings delays only its own queues.
4. Failed acks are retried per entry on their own capped backoff (the batcher's retry heap);
   INVALID_RECEIPT_HANDLE and other 400xx are dropped at once and counted; the retry set is bounded by count
   and by age.
5. (a) A dropped queue's long polls are cancelled at once, so a newly assigned queue never waits for them;
   messages already taken from it are still consumed and acked. (b) Each topic runs its own assignment
   scan, and a scan changes only that topic's queues (`thrust._core.assignment`).
6. Flow control by cached count and bytes per queue (`thrust._core.process_queue`); a message stays
   cached until its ack settles, so a slow ack path holds back receiving, never the listener: the receive loop
   awaits an event when the cache is full (no recursion, no polling) and runs several receives per queue
   while there is room.

And (scenario 5a again) a receive's first message goes to the listener as soon as the stream delivers
it, not once the whole batch has been read (`_Stream`: Java acts on completion; why thrust does not).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

from thrust._codec import convert, validation
from thrust._codec.status import Code
from thrust._consumption import ListenerExecutor, RateLimitedLog
from thrust._core.ack import AckBatch, AckBatcher, AckConfig, AckEntry, AckKey, Fate, Outcome, results_for
from thrust._core.assignment import AssignmentTable, QueueId
from thrust._core.endpoints import Endpoint
from thrust._core.fifo import (
    FIFO_SETTLE_BACKOFF,
    UNTIL_SETTLED,
    FifoAction,
    FifoSequencer,
    fifo_failure_action,
    fifo_settle_config,
    releases_chain,
)
from thrust._core.process_queue import ProcessQueue, QueueBudget, ReceiveTicket
from thrust._core.routes import AssignmentEndpointSelector, RouteQueue, TopicRoute
from thrust._core.settings import ClientSettings
from thrust._io.rpc import OK_OR_MULTIPLE
from thrust._io.session import ClientSession
from thrust._io.telemetry import TelemetryHandler
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
from thrust._push.settle import BatchDriver
from thrust.config import ClientConfig, Credentials, TlsConfig
from thrust.errors import ClientClosedError, ThrustError, TooManyRequestsError, ValidationError
from thrust.message import ConsumeResult, FilterExpression, ReceivedMessage
from thrust.producer import _config

__all__ = ["PushConsumer", "PushConsumerStats", "QueueStats"]

logger = logging.getLogger("thrust.consumer")

MiB = 1024 * 1024

# How long a consumed message's ack (or nack) keeps being retried. Push receives use auto_renew, so the
# proxy holds the message invisible with its default 60 s invisible time and renews it
# (docs/protocol.md §6.3, §7.2); an entry still failing after that long is given up rather than retried
# forever (bench scenario 4).
ACK_RETRY_WINDOW = 60.0

# Close nacks the messages it never started with this invisible duration, so that the rest of the group gets
# them about a second later instead of after the server's invisible time (60 s for push receives).
CLOSE_NACK_DELAY = 1.0


class _Delivery:
    """One received message on its way through the listener, the FIFO chain and the ack batcher."""

    __slots__ = ("message", "nbytes", "queue")

    def __init__(self, message: ReceivedMessage, queue: _Queue) -> None:
        # Replaced by a copy one attempt later on each local FIFO retry (`_fifo_failed`), so that the
        # listener, the retry backoff and the dead-letter forward read the same count.
        self.message = message
        self.queue = queue
        self.nbytes = len(message.body)


class _Stream:
    """The messages of one ReceiveMessage stream on their way to the listener (bench scenario 5a).

    Java acts on a ReceiveMessage only once its stream has completed (docs/protocol.md §6.4: the response
    observer collects the messages and completes the receive in `onCompleted`), and thrust did the same. But
    the server writes the status first and then one message per gRPC write, and each message is final once
    written; reading a 32-message stream to its end takes several ms, during which an idle queue's listener
    has nothing to do (scenario 5a: the first message reached the client after ~4 ms and the listener after
    ~10 ms). So thrust deviates: the *first* message after the OK status is decoded, cached and handed to the
    listener pool at once (`ClientSession.receive(..., on_message=)`), and the rest are held and handed over
    together when the stream ends. That is at most two hand-offs per receive, never one per message: the rule
    of scenario 6 that nothing crosses a thread per message when it can cross per batch still holds (a second
    chunk per burst, flushed by `call_soon`, would not help: gRPC resumes the reader once per message, so it
    would flush after every message). The process queue accounts the first message as a partial result
    (`ProcessQueue.on_partial`). FIFO order holds: the stream is in order, and the sequencer chains the rest
    behind the first.
    """

    __slots__ = ("consumer", "held", "queue", "ticket")

    def __init__(self, consumer: PushConsumer, queue: _Queue, ticket: ReceiveTicket) -> None:
        self.consumer = consumer
        self.queue = queue
        self.ticket = ticket
        # None until the first message was handed over; then the messages that arrived after it.
        self.held: list[Any] | None = None

    def arrived(self, raw: Any) -> None:
        """`RpcClient.receive`'s `on_message`: called on the loop for each message after the OK status."""
        held = self.held
        if held is not None:
            held.append(raw)
            return
        self.held = []
        try:
            self.consumer._take(self.queue, self.ticket, (raw,), final=False)
        except Exception:  # never break the stream's reader: the message is then left to redelivery
            logger.exception("handing over the first message of a receive from %s failed", self.queue.id)


class _Token:
    """What a nack / dead-letter entry needs beyond its id and handle: the queue, topic and a number (the
    nack's invisible duration, or the delivery attempt reported to the dead-letter queue), and the delivery
    whose cache slot it holds until it settles (None for a corrupted message, which was never cached)."""

    __slots__ = ("delivery", "message_id", "queue", "topic", "value")

    def __init__(
        self, queue: _Queue, topic: str, message_id: str, value: float, delivery: _Delivery | None = None
    ) -> None:
        self.queue = queue
        self.topic = topic
        self.message_id = message_id
        self.value = value
        self.delivery = delivery


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
    receive_failures, queues_dropped.
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


class _Queue:
    """The io side of one assigned queue: its `ProcessQueue` (pure), runner task and receive tasks."""

    __slots__ = (
        "ack_key",
        "acks_pending",
        "consumed",
        "event",
        "fifo",
        "id",
        "in_listener",
        "pq",
        "received",
        "receivers",
        "request",
        "route_queue",
        "runner",
        "settling",
        "timer",
    )

    def __init__(self, qid: QueueId, route_queue: RouteQueue, pq: ProcessQueue, ack_key: AckKey) -> None:
        self.id = qid
        self.route_queue = route_queue
        self.pq = pq
        self.ack_key = ack_key
        self.event = asyncio.Event()
        self.receivers: set[asyncio.Task[None]] = set()
        self.runner: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.request: spb.ReceiveMessageRequest | None = None
        self.fifo: FifoSequencer[_Delivery] | None = None
        # FIFO heads whose ack / dead-letter forward their group waits for, with the batcher holding it (so
        # that dropping the queue can bound them: `_drop_queue`).
        self.settling: dict[AckEntry, AckBatcher] = {}
        self.in_listener = 0
        self.acks_pending = 0
        self.received = 0
        self.consumed = 0

    @property
    def endpoint(self) -> Endpoint:
        return self.route_queue.endpoint


class PushConsumer:
    """Consumes the subscribed topics and pushes every message to `listener`. Native asyncio.

    Args:
        config: a `ClientConfig`; or give its fields directly (`endpoints=`, `namespace=`, ...).
        group: the consumer group.
        subscriptions: topic -> filter (a tag expression such as `"*"` or `"a||b"`, or a `FilterExpression`).
        listener: `fn(message) -> ConsumeResult | None`, a plain function (run on `consumption_thread_count`
            threads) or an `async def` (run on the loop). Returning `ConsumeResult.SUCCESS` **or None** (a
            listener that just returns, as Python functions do when nothing failed) acks the message;
            `ConsumeResult.FAILURE`, any other value or an exception nacks it for redelivery.
        consumption_thread_count: threads for a plain-function listener (Java default 20).
        async_concurrency: at most this many `async def` listener calls at once.
        max_cache_message_count / max_cache_message_bytes: client-wide cache of received messages not yet
            settled (waiting for the listener, or for their ack / nack to complete), split evenly over the
            assigned queues (Java 4096 / 64 MiB).
        receives_per_queue: ReceiveMessage calls in flight per queue while the cache has room for them
            (FIFO queues always use one).
        ack_batch_size / ack_linger: an AckMessage goes out when a (endpoint, topic) batch has this many
            entries, or `ack_linger` seconds after its oldest entry was queued. A FIFO group's acks do not
            linger: each message group waits for its previous message's ack.
        ack_retry_window: seconds a failing ack keeps being retried before it is given up. In a FIFO group
            the ack or dead-letter forward of a message group's head is retried for as long as its queue
            stays assigned instead, because the group waits for it (`thrust._core.fifo`); once the queue is
            dropped it gets this window like any other ack.
        fifo_parallel_groups: for FIFO groups, consume different message groups in parallel (order is kept
            within each group); False consumes a queue's messages strictly one after another (Java default).
        shutdown_grace: seconds `close()` lets running listener calls finish.
        scan_interval: seconds between assignment scans of each topic (Java 5 s).
    """

    def __init__(
        self,
        config: ClientConfig | None = None,
        *,
        endpoints: str | Iterable[str] | None = None,
        namespace: str | None = None,
        credentials: Credentials | None = None,
        tls: TlsConfig | bool | None = None,
        request_timeout: float | None = None,
        group: str,
        subscriptions: Mapping[str, str | FilterExpression],
        listener: Callable[[ReceivedMessage], Any],
        consumption_thread_count: int = 20,
        async_concurrency: int = 64,
        max_cache_message_count: int = 4096,
        max_cache_message_bytes: int = 64 * MiB,
        receives_per_queue: int = 2,
        ack_batch_size: int = 32,
        ack_linger: float = 0.01,
        ack_retry_window: float = ACK_RETRY_WINDOW,
        fifo_parallel_groups: bool = False,
        shutdown_grace: float = 10.0,
        scan_interval: float = 5.0,
    ) -> None:
        self.config = _config(
            config,
            endpoints,
            namespace=namespace,
            credentials=credentials,
            tls=tls,
            request_timeout=request_timeout,
        )
        if not subscriptions:
            raise ValueError("subscriptions must name at least one topic")
        try:
            validation.check_group(group)
            for topic in subscriptions:
                validation.check_topic(topic)
        except validation.Invalid as exc:
            raise ValidationError(exc.message, code=exc.code) from None
        if not callable(listener):
            raise TypeError("listener must be callable")
        if consumption_thread_count < 1 or async_concurrency < 1:
            raise ValueError("consumption_thread_count and async_concurrency must be >= 1")
        if ack_linger < 0 or ack_retry_window <= 0 or shutdown_grace < 0 or scan_interval <= 0:
            raise ValueError("ack_linger, shutdown_grace >= 0 and ack_retry_window, scan_interval > 0")
        self.group = group
        self.subscriptions: dict[str, FilterExpression] = {
            t: FilterExpression.of(f) for t, f in subscriptions.items()
        }
        self.listener = listener
        self.consumption_thread_count = consumption_thread_count
        self.async_concurrency = async_concurrency
        self.fifo_parallel_groups = fifo_parallel_groups
        self.shutdown_grace = shutdown_grace
        self.scan_interval = scan_interval
        self.ack_retry_window = ack_retry_window
        self._receives_per_queue = receives_per_queue
        self._budget = QueueBudget(
            max_cache_message_count,
            max_cache_message_bytes,
            max_receives_in_flight=receives_per_queue,
            request_timeout=self.config.request_timeout,
        )
        # A message holds its cache slot until its ack settles, so the batcher never holds more entries than
        # the cache: the bounds below can only be reached when the cache limit is larger than them.
        self._ack_config = AckConfig(
            max_batch=ack_batch_size,
            linger=ack_linger,
            max_pending=max(65_536, max_cache_message_count),
            max_retrying=max(10_000, max_cache_message_count),
        )
        self._session: ClientSession | None = None
        self._executor: ListenerExecutor[_Delivery] | None = None
        self._acks: BatchDriver | None = None
        self._nacks: BatchDriver | None = None
        self._dlq: BatchDriver | None = None
        self._table = AssignmentTable()
        self._queues: dict[QueueId, _Queue] = {}
        self._selector = AssignmentEndpointSelector()
        self._scanners: dict[str, asyncio.Task[None]] = {}
        self._route_changed: dict[str, asyncio.Event] = {}
        self._fifo_timers: dict[_Delivery, asyncio.TimerHandle] = {}
        self._start_task: asyncio.Task[None] | None = None
        self._close_task: asyncio.Task[None] | None = None
        self._closing = False
        self._group_pb = pb.Resource(resource_namespace=self.config.namespace, name=group)
        self._topic_pb = {
            t: pb.Resource(resource_namespace=self.config.namespace, name=t) for t in self.subscriptions
        }
        self._filter_pb = {t: convert.filter_expression(f) for t, f in self.subscriptions.items()}
        self._receive_log = RateLimitedLog(10.0)
        self._scan_log = RateLimitedLog(10.0)
        self._counters = dict.fromkeys(
            (
                "received",
                "consumed",
                "consume_failures",
                "nacked",
                "dead_lettered",
                "receive_failures",
                "queues_dropped",
            ),
            0,
        )

    # -- lifecycle -----------------------------------------------------------------------------------------

    @property
    def client_id(self) -> str | None:
        return self._session.client_id if self._session is not None else None

    @property
    def session(self) -> ClientSession:
        """The underlying session (internal API, for tests and tools)."""
        if self._session is None:
            raise RuntimeError("the consumer is not started")
        return self._session

    async def start(self) -> None:
        """Fetch routes, start the listener pool and one assignment scan per topic; idempotent.

        Returns once every topic's route is known; sessions with brokers open in the background, each queue
        waiting only for its own broker (bench scenario 3)."""
        if self._closing:
            raise ClientClosedError("the consumer is closed")
        if self._start_task is None:
            self._start_task = asyncio.get_running_loop().create_task(self._start())
        try:
            await asyncio.shield(self._start_task)
        except BaseException:
            if self._start_task.done():
                await self.close()
            raise

    async def _start(self) -> None:
        local = dataclasses.replace(
            ClientSettings.for_consumer(), request_timeout=self.config.request_timeout
        )
        self._session = session = ClientSession(
            self.config,
            client_type=pb.PUSH_CONSUMER,
            local_settings=local,
            handler=_PushTelemetry(self),
            group=self.group,
        )
        self._executor = ListenerExecutor(
            self.listener,
            success=ConsumeResult.SUCCESS,
            on_results=self._on_results,
            thread_count=self.consumption_thread_count,
            async_concurrency=self.async_concurrency,
            name="thrust-consume",
        )
        self._acks = BatchDriver("ack", AckBatcher(self._ack_config), self._send_acks, self._acks_finished)
        self._nacks = BatchDriver(
            "nack", AckBatcher(AckConfig.unbatched()), self._send_nack, self._nacks_finished
        )
        # Only FIFO groups forward to the dead-letter queue themselves, and a poison message's group waits for
        # the forward: it is retried on the FIFO schedule.
        self._dlq = BatchDriver(
            "dlq",
            AckBatcher(AckConfig.unbatched(backoff=FIFO_SETTLE_BACKOFF)),
            self._send_dlq,
            self._dlq_finished,
        )
        await session.start(())
        self._route_changed = {t: asyncio.Event() for t in self.subscriptions}
        session.add_route_listener(self._on_route_change)
        # Routes only: a broker slow to answer Settings must not hold up the others (bench scenario 3).
        await asyncio.gather(*(session.route(t) for t in self.subscriptions))
        for topic in self.subscriptions:
            self._scanners[topic] = asyncio.get_running_loop().create_task(
                self._scan_loop(topic), name=f"thrust-scan-{topic}"
            )

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
            self._close_task = asyncio.get_running_loop().create_task(self._close())
        await asyncio.shield(self._close_task)

    async def _close(self) -> None:
        if self._start_task is not None and not self._start_task.done():
            self._start_task.cancel()
            await asyncio.wait([self._start_task], timeout=1.0)
        scanners = list(self._scanners.values())
        for task in scanners:
            task.cancel()
        for q in list(self._queues.values()):
            self._drop_queue(q)
        for handle in self._fifo_timers.values():
            handle.cancel()
        self._fifo_timers.clear()
        if self._executor is not None:
            unstarted = self._executor.stop()
            if unstarted:
                self._nack_unstarted(unstarted)
            dropped = await self._executor.close(self.shutdown_grace)
            if dropped:
                logger.info(
                    "%d received messages were not consumed before close; the server redelivers them", dropped
                )
        timeout = self.config.request_timeout + 1.0
        drivers = [d for d in (self._acks, self._nacks, self._dlq) if d is not None]
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
        waiting = [t for t in scanners if not t.done()]
        for q in self._queues.values():
            waiting.extend(t for t in q.receivers if not t.done())
            if q.runner is not None and not q.runner.done():
                waiting.append(q.runner)
        if waiting:
            await asyncio.wait(waiting, timeout=1.0)
        if self._session is not None:
            await self._session.close(self.config.request_timeout + 1.0)

    # -- assignments (bench scenarios 5a, 5b) ------------------------------------------------------------

    async def _scan_loop(self, topic: str) -> None:
        """Scan `topic` every `scan_interval`, and at once when the session reports a route change."""
        assert self._session is not None
        session = self._session
        changed = self._route_changed[topic]
        while not self._closing:
            # Cleared before the scan: a change reported while it runs triggers the next one at once.
            changed.clear()
            try:
                await self._scan(topic, await session.route(topic))
            except ThrustError as exc:
                self._scan_log.failure(f"assignment scan of {topic!r} failed: {exc}", None)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("assignment scan of %r failed", topic)
            try:
                async with asyncio.timeout(self.scan_interval):
                    await changed.wait()
            except TimeoutError:
                pass

    def _on_route_change(self, topic: str, route: TopicRoute) -> None:
        """Route listener (the session refreshes routes every 30 s): queues on brokers that left the route
        are dropped now (their sessions are being closed), and the topic is scanned again at once."""
        changed = self._route_changed.get(topic)
        if changed is None or self._closing:
            return
        if any(q.id.topic == topic and q.endpoint not in route.endpoints for q in self._queues.values()):
            self._apply_assignment(
                topic,
                [
                    q.route_queue
                    for q in self._queues.values()
                    if q.id.topic == topic and q.endpoint in route.endpoints
                ],
            )
        changed.set()

    async def _query_assignment(self, topic: str, route: TopicRoute) -> list[RouteQueue]:
        """The queues QueryAssignment assigns to this client for `topic` (docs/protocol.md §3.3, §3.4)."""
        session = self.session
        endpoint = self._selector.pick(route, session.access_point)
        if endpoint is None:
            return []
        request = spb.QueryAssignmentRequest(
            topic=self._topic_pb[topic],
            group=self._group_pb,
            endpoints=convert.endpoint_to_pb(session.access_point),
        )
        response = await session.call(endpoint, "QueryAssignment", request)
        return convert.route_queues_from_pb(topic, (a.message_queue for a in response.assignments))

    async def _scan(self, topic: str, route: TopicRoute) -> None:
        assigned = await self._query_assignment(topic, route)
        if self._closing:
            return
        self._apply_assignment(topic, assigned)

    def _apply_assignment(self, topic: str, assigned: Sequence[RouteQueue]) -> None:
        """Drop and create only this topic's queues (bench scenario 5b)."""
        now = time.monotonic()
        by_id = {q.id: q for q in assigned if q.topic == topic and q.readable}
        expired = [qid for qid in self._table.queues(topic) if self._queues[qid].pq.expired(now)]
        diff = self._table.sync(topic, by_id, expired)
        if not diff:
            return
        for qid in diff.to_drop:
            q = self._queues.pop(qid, None)
            if q is not None:
                self._drop_queue(q)
        for qid in diff.to_add:
            self._create_queue(qid, by_id[qid], now)
        self._budget.set_queue_count(len(self._table))
        for q in self._queues.values():
            q.event.set()  # thresholds were re-split: every queue re-plans
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("topic %r: +%s -%s", topic, sorted(diff.to_add), sorted(diff.to_drop))

    def _create_queue(self, qid: QueueId, route_queue: RouteQueue, now: float) -> None:
        pq = ProcessQueue(qid, self._budget, _new_attempt_id, now)
        q = _Queue(qid, route_queue, pq, AckKey(route_queue.endpoint, self.group, qid.topic))
        q.request = spb.ReceiveMessageRequest(
            group=self._group_pb,
            message_queue=convert.message_queue_to_pb(route_queue, self.config.namespace),
            filter_expression=self._filter_pb[qid.topic],
            auto_renew=True,
        )
        self._queues[qid] = q
        q.runner = asyncio.get_running_loop().create_task(self._run_queue(q), name=f"thrust-queue-{qid}")

    def _drop_queue(self, q: _Queue) -> None:
        """Stop receiving at once: cancel in-flight long polls (bench scenario 5a). Messages already taken
        from the queue are still consumed and acked; FIFO messages not started yet are left to redelivery."""
        if q.pq.dropped:
            return
        q.pq.drop()
        self._counters["queues_dropped"] += 1
        for task in q.receivers:
            task.cancel()
        if q.timer is not None:
            q.timer.cancel()
        q.event.set()
        if q.fifo is not None:
            waiting = q.fifo.drop()
            if waiting:
                # Never started: release their cache space; the server redelivers them in order.
                q.pq.on_consumed(len(waiting), sum(d.nbytes for d in waiting), time.monotonic())
        if q.settling:
            # No group waits here any more: the heads' acks and forwards are bounded like any other from now
            # on. Java gives them up at once (`ackFifoMessageLater` / `forwardToDeadLetterQueueLater`:
            # "Process queue was dropped"); an ack still spares the queue's next owner a redelivery, so it
            # keeps its ordinary window.
            bound = time.monotonic() + self.ack_retry_window
            for entry, batcher in q.settling.items():
                batcher.cap_deadline(entry, bound)
            q.settling.clear()

    # -- receiving (bench scenario 6) -----------------------------------------------------------------------

    async def _run_queue(self, q: _Queue) -> None:
        """Start receives while the plan allows, else await the queue's event. No polling, no recursion."""
        loop = asyncio.get_running_loop()
        pq = q.pq
        while not pq.dropped and not self._closing:
            q.event.clear()
            now = time.monotonic()
            n = pq.receive_plan(now)
            if n == 0:
                wake = pq.wake_at(now)
                if wake is not None and q.timer is None:
                    q.timer = loop.call_at(loop.time() + (wake - now), self._wake_queue, q)
                await q.event.wait()
                continue
            ticket = pq.on_receive_started(n, now)
            task = loop.create_task(self._receive(q, ticket))
            q.receivers.add(task)
            task.add_done_callback(q.receivers.discard)

    def _wake_queue(self, q: _Queue) -> None:
        q.timer = None
        q.event.set()

    async def _receive(self, q: _Queue, ticket: ReceiveTicket) -> None:
        """One ReceiveMessage on `q`. Its first message goes to the listener as soon as it arrives, the rest
        together when the stream ends (`_Stream`)."""
        session = self.session
        settings = session.settings
        request = spb.ReceiveMessageRequest()
        assert q.request is not None
        request.CopyFrom(q.request)
        request.batch_size = ticket.requested
        request.long_polling_timeout.CopyFrom(convert.duration(settings.long_polling_timeout))
        request.attempt_id = ticket.attempt_id
        stream = _Stream(self, q, ticket)
        try:
            result = await session.receive(
                q.endpoint, request, timeout=settings.receive_deadline, on_message=stream.arrived
            )
        except asyncio.CancelledError:
            self._stream_broke(stream)
            q.pq.on_receive_failed(ticket, False, time.monotonic())
            q.event.set()
            return  # cancelled because the queue was dropped or the consumer closes
        except ThrustError as exc:
            self._counters["receive_failures"] += 1
            if not self._closing and not q.pq.dropped:
                self._receive_log.failure(f"receive from {q.id} failed: {exc}", None)
            self._stream_broke(stream)
            q.pq.on_receive_failed(ticket, isinstance(exc, TooManyRequestsError), time.monotonic())
            q.event.set()
            return
        held = stream.held
        if held:
            held.extend(result.messages)  # (only a stream without any status collects messages there)
            rest = held
        else:
            rest = result.messages
        self._take(q, ticket, rest, final=True)

    def _stream_broke(self, stream: _Stream) -> None:
        """A receive failed or was cancelled after some of its messages arrived. What was handed over stays
        delivered; what arrived after it is handed over too (the server holds those messages invisible for
        this client either way), except when the consumer closes (the server makes them visible again once
        the client has left) or a dropped FIFO queue's (left to redelivery in order, as `_drop_queue` leaves
        its waiting messages)."""
        held = stream.held
        if not held:
            return
        stream.held = []
        q = stream.queue
        if self._closing or (q.pq.dropped and self.session.settings.fifo):
            return
        self._take(q, stream.ticket, held, final=False)

    def _take(self, q: _Queue, ticket: ReceiveTicket, raw: Sequence[Any], *, final: bool) -> None:
        """Messages of `ticket`'s stream: decode, cache (`on_partial` for a chunk of a stream still open,
        `on_received` for the rest once it completed), hand the good ones to the listener, settle the
        corrupted ones."""
        good, bad = convert.received_from_pbs(raw, q.endpoint)
        # One pass per chunk: the deliveries carry their body size, which is what the cache counts.
        deliveries = [_Delivery(m, q) for m in good]
        nbytes = 0
        largest = 0
        for d in deliveries:
            size = d.nbytes
            nbytes += size
            if size > largest:
                largest = size
        n = len(deliveries)
        now = time.monotonic()
        if final:
            q.pq.on_received(ticket, n, nbytes, now, largest if n else None)
        elif not q.pq.on_partial(ticket, n, nbytes, now, largest if n else None):
            return  # the ticket is closed: cannot happen, chunks always come before its end
        if bad:
            self._corrupted(q, bad)
        if n:
            q.received += n
            self._counters["received"] += n
            self._dispatch(q, deliveries)
        q.event.set()

    def _corrupted(self, q: _Queue, bad: Sequence[convert.Corrupted]) -> None:
        # Java: a corrupted standard message is nacked, a corrupted FIFO one dead-lettered
        # (docs/protocol.md §6.6).
        logger.warning("%d corrupted message(s) from %s (%s)", len(bad), q.id, bad[0].reason)
        settings = self.session.settings
        for c in bad:
            token = _Token(q, c.topic, c.message_id, 1)
            entry = AckEntry(c.message_id, c.receipt_handle, time.monotonic() + self.ack_retry_window, token)
            if settings.fifo:
                assert self._dlq is not None
                self._dlq.add(q.ack_key, entry)
            else:
                assert self._nacks is not None
                self._nacks.add(q.ack_key, entry)

    def _dispatch(self, q: _Queue, deliveries: list[_Delivery]) -> None:
        executor = self._executor
        assert executor is not None
        if self.session.settings.fifo:
            if q.fifo is None:
                q.fifo = FifoSequencer(
                    parallel_groups=self.fifo_parallel_groups, group_of=lambda d: d.message.message_group
                )
            ready = q.fifo.add(deliveries)
        else:
            ready = deliveries
        q.in_listener += len(ready)
        executor.submit(ready)

    # -- results (bench scenarios 1, 4, 7) ----------------------------------------------------------------

    def _on_results(self, results: list[tuple[_Delivery, bool]]) -> None:
        """All results since the last wake-up, on the loop: acks, nacks, FIFO retries.

        A message keeps its cache slot until its ack (nack, dead-letter forward) settles, as Java evicts from
        its process queue only when the ack completes (docs/protocol.md §8.3): acks that cannot keep up then
        hold back receiving instead of piling up in the batcher until it overflows. The listener is never
        held back while the cache has room (bench scenario 1).

        A FIFO message stays at the head of its chain until its ack or dead-letter forward has settled on
        the server (`_heads_settled`), as Java's `FifoConsumeService` submits the next message only when
        `eraseFifoMessage` completes (docs/protocol.md §7.6)."""
        now = time.monotonic()
        acks = self._acks
        assert acks is not None and self._executor is not None
        deadline = now + self.ack_retry_window
        to_ack: list[tuple[AckKey, AckEntry]] = []
        failures = 0
        for d, ok in results:
            q = d.queue
            q.in_listener -= 1
            if ok:
                q.consumed += 1
                m = d.message
                q.acks_pending += 1
                if q.fifo is None:
                    to_ack.append((q.ack_key, AckEntry(m.message_id, m.receipt_handle, deadline, d)))
                else:
                    to_ack.append((q.ack_key, self._head_entry(q, m, d, deadline, acks.batcher)))
            else:
                failures += 1
                if q.fifo is not None:
                    self._fifo_failed(d, now)
                else:
                    self._nack(d, deadline)
        # Counters and the batcher once per burst of results, not once per message.
        counters = self._counters
        counters["consumed"] += len(to_ack)
        if failures:
            counters["consume_failures"] += failures
        if to_ack:
            acks.add_many(to_ack, now)

    @staticmethod
    def _head_entry(
        q: _Queue, m: ReceivedMessage, token: object, deadline: float, batcher: AckBatcher
    ) -> AckEntry:
        """The ack / forward entry of a FIFO chain head: retried until settled while its queue is assigned
        (`UNTIL_SETTLED`, tracked in `q.settling` so that a drop bounds it), else bounded by `deadline`."""
        if q.pq.dropped:
            return AckEntry(m.message_id, m.receipt_handle, deadline, token)
        entry = AckEntry(m.message_id, m.receipt_handle, UNTIL_SETTLED, token)
        q.settling[entry] = batcher
        return entry

    def _nack(self, d: _Delivery, deadline: float) -> None:
        """FAILURE: ChangeInvisibleDuration by the server's backoff for this delivery attempt
        (docs/protocol.md §7.4)."""
        m = d.message
        assert self._nacks is not None
        delay = self.session.settings.retry_policy.next_delay(max(1, m.delivery_attempt))
        entry = AckEntry(
            m.message_id, m.receipt_handle, deadline, _Token(d.queue, m.topic, m.message_id, delay, d)
        )
        d.queue.acks_pending += 1
        self._nacks.add(d.queue.ack_key, entry)

    def _nack_unstarted(self, unstarted: list[_Delivery]) -> None:
        """Close: messages handed to the pool but never started go back to the server now, with a short
        ChangeInvisibleDuration, instead of staying invisible until the server's invisible time (60 s,
        auto-renewed) runs out. The nacks are sent while running listeners finish and are awaited with the
        acks. FIFO messages are left to the server's redelivery: nacking a group's head out of turn could only
        reorder it."""
        fifo = self.session.settings.fifo
        deadline = time.monotonic() + self.ack_retry_window
        assert self._nacks is not None
        for d in unstarted:
            q = d.queue
            q.in_listener -= 1
            if fifo:
                continue
            m = d.message
            token = _Token(q, m.topic, m.message_id, CLOSE_NACK_DELAY, d)
            q.acks_pending += 1
            self._nacks.add(q.ack_key, AckEntry(m.message_id, m.receipt_handle, deadline, token))
        if not fifo:
            logger.info("close: %d received messages were not started; nacked for redelivery", len(unstarted))

    def _fifo_failed(self, d: _Delivery, now: float) -> None:
        """A FIFO message failed: retry locally on a loop timer, or dead-letter it. Either way it stays at the
        head of its chain: the group goes on once the forward has settled (`_heads_settled`)."""
        policy = self.session.settings.retry_policy
        m = d.message
        # Local retries count up from the server's delivery_attempt, and the
        # listener sees each one (Java `MessageViewImpl.incrementAndGetDeliveryAttempt`).
        attempt = m.delivery_attempt
        if fifo_failure_action(attempt, policy.max_attempts) is FifoAction.RETRY:
            delay = policy.next_delay(attempt)
            d.message = m._redelivered()
            loop = asyncio.get_running_loop()
            self._fifo_timers[d] = loop.call_later(delay, self._fifo_retry, d)
            return
        q = d.queue
        dlq = self._dlq
        assert dlq is not None
        token = _Token(q, m.topic, m.message_id, attempt, d)
        entry = self._head_entry(q, m, token, now + self.ack_retry_window, dlq.batcher)
        q.acks_pending += 1
        dlq.add(q.ack_key, entry)

    def _fifo_retry(self, d: _Delivery) -> None:
        self._fifo_timers.pop(d, None)
        if self._closing or self._executor is None:
            return
        if d.queue.pq.dropped:
            # The queue went away while the message waited: release its slot; the server redelivers it.
            d.queue.pq.on_consumed(1, d.nbytes, time.monotonic())
            return
        d.queue.in_listener += 1
        self._executor.submit([d])

    # -- settling RPCs ------------------------------------------------------------------------------------

    async def _send_acks(self, batch: AckBatch) -> Sequence[tuple[AckEntry, Outcome]]:
        key = batch.key
        request = spb.AckMessageRequest(
            group=self._group_pb,
            topic=self._topic_pb[key.topic],
            entries=[
                spb.AckMessageEntry(message_id=e.message_id, receipt_handle=e.receipt_handle)
                for e in batch.entries
            ],
        )
        response = await self.session.call(key.endpoint, "AckMessage", request, ok=_ANY_CODE)
        return results_for(
            batch, response.status.code, ((r.message_id, r.status.code) for r in response.entries)
        )

    async def _send_nack(self, batch: AckBatch) -> Sequence[tuple[AckEntry, Outcome]]:
        entry = batch.entries[0]
        token = entry.token
        assert isinstance(token, _Token)
        request = spb.ChangeInvisibleDurationRequest(
            group=self._group_pb,
            topic=self._topic_resource(token.topic),
            receipt_handle=entry.receipt_handle,
            invisible_duration=convert.duration(token.value),
            message_id=token.message_id,
        )
        response = await self.session.call(
            batch.key.endpoint, "ChangeInvisibleDuration", request, ok=_ANY_CODE
        )
        return results_for(batch, response.status.code)

    async def _send_dlq(self, batch: AckBatch) -> Sequence[tuple[AckEntry, Outcome]]:
        entry = batch.entries[0]
        token = entry.token
        assert isinstance(token, _Token)
        request = spb.ForwardMessageToDeadLetterQueueRequest(
            group=self._group_pb,
            topic=self._topic_resource(token.topic),
            receipt_handle=entry.receipt_handle,
            message_id=token.message_id,
            delivery_attempt=int(token.value),
            max_delivery_attempts=self.session.settings.retry_policy.max_attempts,
        )
        response = await self.session.call(
            batch.key.endpoint, "ForwardMessageToDeadLetterQueue", request, ok=_ANY_CODE
        )
        return results_for(batch, response.status.code)

    def _topic_resource(self, topic: str) -> pb.Resource:
        return self._topic_pb.get(topic) or pb.Resource(resource_namespace=self.config.namespace, name=topic)

    def _acks_finished(self, finished: list[tuple[AckEntry, Fate]]) -> None:
        self._release([entry.token for entry, _fate in finished])
        if self._session is not None and self._session.settings.fifo:
            self._heads_settled(finished)

    def _nacks_finished(self, finished: list[tuple[AckEntry, Fate]]) -> None:
        self._counters["nacked"] += sum(1 for _entry, fate in finished if fate is Fate.ACKED)
        self._release([entry.token for entry, _fate in finished])

    def _dlq_finished(self, finished: list[tuple[AckEntry, Fate]]) -> None:
        self._counters["dead_lettered"] += sum(1 for _entry, fate in finished if fate is Fate.ACKED)
        self._release([entry.token for entry, _fate in finished])
        self._heads_settled(finished)

    def _heads_settled(self, finished: list[tuple[AckEntry, Fate]]) -> None:
        """FIFO chain heads whose ack or dead-letter forward left its batcher: the core decides whether the
        chain goes on (`FifoSequencer.settled`); the next messages are handed to the listener pool."""
        follow_ups: list[_Delivery] = []
        for entry, fate in finished:
            token = entry.token
            d = token if type(token) is _Delivery else getattr(token, "delivery", None)
            if not isinstance(d, _Delivery):
                continue  # a corrupted message's forward: never in a chain
            q = d.queue
            if q.settling.pop(entry, None) is None or q.fifo is None:
                continue  # not a head its group waits for (the queue was dropped: the chain is gone)
            nxt = q.fifo.settled(d, fate)
            if nxt is not None:
                follow_ups.append(nxt)
            elif not releases_chain(fate):
                logger.warning(
                    "FIFO message %s of %s given up (%s) before the server settled it: its message group "
                    "stays blocked until the queue moves or the consumer closes, when the server "
                    "redelivers it ahead of the rest of its group",
                    d.message.message_id,
                    q.id,
                    fate.name,
                )
        if follow_ups and not self._closing and self._executor is not None:
            for d in follow_ups:
                d.queue.in_listener += 1
            self._executor.submit(follow_ups)

    def _release(self, tokens: list[object]) -> None:
        """Settled (acked, nacked, forwarded or given up): the messages leave the cache, making room.

        Once per finished batch; a batch's entries nearly always share one queue, so the per-queue sums are
        kept in locals until the queue changes."""
        freed: dict[_Queue, list[int]] = {}
        q: _Queue | None = None
        n = nbytes = 0
        for token in tokens:
            d = token if type(token) is _Delivery else getattr(token, "delivery", None)
            if d is None:
                continue  # a corrupted message's nack: it never took a cache slot
            assert isinstance(d, _Delivery)
            if d.queue is not q:
                if q is not None:
                    self._add_freed(freed, q, n, nbytes)
                q = d.queue
                n = nbytes = 0
            q.acks_pending -= 1
            n += 1
            nbytes += d.nbytes
        if q is not None:
            self._add_freed(freed, q, n, nbytes)
        if freed:
            now = time.monotonic()
            for q, (n, nbytes) in freed.items():
                q.pq.on_consumed(n, nbytes, now)
                q.event.set()

    @staticmethod
    def _add_freed(freed: dict[_Queue, list[int]], q: _Queue, n: int, nbytes: int) -> None:
        slot = freed.get(q)
        if slot is None:
            freed[q] = [n, nbytes]
        else:
            slot[0] += n
            slot[1] += nbytes

    # -- statistics ---------------------------------------------------------------------------------------

    def stats(self) -> PushConsumerStats:
        """A snapshot of the consumer's gauges and counters, per queue and in total."""
        retrying: dict[_Queue, int] = {}
        if self._acks is not None and self._acks.batcher.stats().retrying:
            for entry in self._acks.batcher.retrying_entries():
                d = entry.token
                if isinstance(d, _Delivery):
                    retrying[d.queue] = retrying.get(d.queue, 0) + 1
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
            for q in sorted(self._queues.values(), key=lambda q: q.id)
        )
        ack = self._acks.batcher.stats() if self._acks is not None else None
        nack = self._nacks.batcher.stats() if self._nacks is not None else None
        dlq = self._dlq.batcher.stats() if self._dlq is not None else None
        c = self._counters
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
            received=c["received"],
            consumed=c["consumed"],
            consume_failures=c["consume_failures"],
            acked=ack.acked if ack else 0,
            acks_dropped_invalid=ack.dropped_invalid if ack else 0,
            acks_dropped_expired=ack.dropped_expired if ack else 0,
            acks_dropped_overflow=ack.dropped_overflow if ack else 0,
            ack_rpcs=ack.rpcs if ack else 0,
            ack_attempts=ack.attempts if ack else 0,
            nacked=c["nacked"],
            dead_lettered=c["dead_lettered"],
            receive_failures=c["receive_failures"],
            queues_dropped=c["queues_dropped"],
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
            f"consumed={s.consumed} failed={s.consume_failures}>"
        )


# AckMessage / ChangeInvisibleDuration / DLQ outcomes are judged per entry by the batcher (results_for), so
# the rpc boundary must hand back every answered status instead of raising on non-OK.
_ANY_CODE: frozenset[int] = frozenset(int(c) for c in Code) | OK_OR_MULTIPLE


def _new_attempt_id() -> str:
    return str(uuid.uuid4())


class _PushTelemetry(TelemetryHandler):
    def __init__(self, consumer: PushConsumer) -> None:
        self._consumer = consumer

    def settings_command(self) -> pb.Settings:
        c = self._consumer
        s = pb.Settings()
        sub = s.subscription
        sub.group.CopyFrom(c._group_pb)
        for topic, expr in c._filter_pb.items():
            sub.subscriptions.add(topic=c._topic_pb[topic], expression=expr)
        return s

    async def on_verify_message(
        self, endpoint: Endpoint, command: spb.VerifyMessageCommand
    ) -> tuple[int, str]:
        """Consume the message once with the listener, never ack it; OK when the listener returns SUCCESS
        (or None), else FAILED_TO_CONSUME_MESSAGE (Java PushConsumerImpl via its consume service:
        docs/protocol.md §4.4).

        Off the hot path (an operator's console command), so it runs alone: a plain-function listener on a
        worker thread of the loop's default executor, never on the loop itself."""
        c = self._consumer
        try:
            message = convert.received_from_pb(command.message, endpoint)
        except convert.Corrupted as exc:
            return Code.MESSAGE_CORRUPTED, f"corrupted message: {exc.reason}"
        listener = c.listener
        try:
            if c._executor is not None and c._executor.is_async:
                result = await listener(message)
            else:
                result = await asyncio.to_thread(listener, message)
        except Exception as exc:  # the listener's failure is the verification's answer
            return Code.FAILED_TO_CONSUME_MESSAGE, f"listener raised {type(exc).__name__}: {exc}"
        if result is ConsumeResult.SUCCESS or result is None:  # None is SUCCESS, as for consumption
            return Code.OK, "OK"
        return Code.FAILED_TO_CONSUME_MESSAGE, f"listener returned {result!r}"

    def on_settings(self, endpoint: Endpoint, settings: pb.Settings) -> None:
        c = self._consumer
        if c._session is None:
            return
        # Server Settings win: batch size, long polling, request timeout (fifo, backoff: read where used).
        c._budget.apply_settings(c._session.settings)
        # FIFO queues keep one receive at a time: a second receive could only come back out of order.
        fifo = c._session.settings.fifo
        c._budget.max_receives_in_flight = 1 if fifo else c._receives_per_queue
        if c._acks is not None:
            # A FIFO group's next message waits for each ack (docs/protocol.md §7.6): no linger, FIFO retry
            # schedule.
            c._acks.batcher.config = fifo_settle_config(c._ack_config) if fifo else c._ack_config
        for q in c._queues.values():
            q.event.set()
