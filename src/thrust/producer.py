"""`Producer`: send messages (awaited or pipelined), in batches, in transactions; recall delay messages.

Every message is validated before any I/O with the limits the proxy applies (`thrust._codec.validation`).
Its id is assigned once and kept across retries, so a retried message is the same message to the broker.
Failed sends are retried by the server's producer backoff policy (max 3 attempts, 10 ms -> 1 s by default:
docs/protocol.md §4.3, §5.6), on another queue / broker each time, skipping endpoints that just failed.

Why one module of ~930 lines (docs/CONVENTIONS.md): every way to send (`send`, `send_async`, `send_batch`,
the linger batch, a transaction's half message) goes through one path, prepare -> wire -> attempts ->
outcomes, with one retry policy, one in-flight window and one set of statistics, and a transaction's end
and the server's check reuse its session and endpoint choice. The parts that stand alone already live
elsewhere: validation (`_codec.validation`), queue choice (`_core.routes`), the decisions of each send's
attempts (queues, readiness, isolation, retry or give up, backoff: `_core.send.SendPlan`, which `_attempts`
drives), the linger batch's state (`_core.linger`, `_io.batching`) and latency buckets (`_core.latency`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from types import TracebackType
from typing import Any, TypeVar, Unpack

from thrust import errors
from thrust._client import check, client_config, join_start
from thrust._codec import convert, validation
from thrust._codec.ids import new_message_id
from thrust._codec.status import Code
from thrust._core.endpoints import Endpoint
from thrust._core.latency import LatencyRecorder, LatencySummary
from thrust._core.linger import LingerConfig, estimate_size, lane_for, split_on_refusal
from thrust._core.routes import QueueSelector
from thrust._core.send import Attempt, Refusal, SendPlan, end_transaction_retry_delay
from thrust._core.settings import PRODUCER_RETRY_POLICY, ClientSettings
from thrust._io.batching import LingerDriver, LingerEntry, own_error
from thrust._io.native import resolve_transport
from thrust._io.rpc import OK_OR_MULTIPLE, status_error
from thrust._io.session import ClientSession
from thrust._io.tasks import TaskSet
from thrust._io.telemetry import TelemetryHandler
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
from thrust.config import ClientConfig, ClientConfigFields
from thrust.errors import ClientClosedError, ThrustError, ValidationError, validation_error
from thrust.message import Message, MessageType, ReceivedMessage, SendReceipt, TransactionResolution

__all__ = ["LatencySummary", "Producer", "ProducerStats", "Transaction", "TransactionChecker"]

logger = logging.getLogger("thrust.producer")

TransactionChecker = Callable[[ReceivedMessage], "TransactionResolution | Awaitable[TransactionResolution]"]
"""Answers a server transaction check for an orphaned transactional message: COMMIT, ROLLBACK or UNKNOWN."""

_BORN_HOST = socket.gethostname()

_T = TypeVar("_T")


class _Prepared:
    """One validated SendMessage request and what the receipt needs (and, for an instrumented producer,
    the messages themselves: `messages`, empty otherwise)."""

    __slots__ = (
        "message_group",
        "message_ids",
        "message_type",
        "messages",
        "request",
        "topic",
        "transactional",
    )

    def __init__(
        self,
        request: spb.SendMessageRequest,
        topic: str,
        ids: list[str],
        group: str | None,
        tx: bool,
        kind: int,
        messages: Sequence[Message] = (),
    ) -> None:
        self.message_type = kind
        self.request = request
        self.topic = topic
        self.message_ids = ids
        self.message_group = group
        self.transactional = tx
        self.messages = messages


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerStats:
    """A snapshot of a producer (see `Producer.stats()`).

    Counters: `sends` (SendMessage requests begun: one per `send()`, `send_async()` or `send_batch()`,
    one per linger batch, one per transactional send; retries are not counted here), `messages_sent`
    (messages the broker stored), `retries` (attempts after a request's first), `failures` (requests
    that failed after their last attempt), `messages_failed` (their messages, and the entries of a linger
    batch that the broker refused one by one). Gauge: `in_flight` (requests begun and not answered yet,
    retries and their backoff included). `latency`: from a request's first attempt to the broker's
    answer, of the requests that succeeded, retries included.
    """

    sends: int
    messages_sent: int
    retries: int
    failures: int
    messages_failed: int
    in_flight: int
    latency: LatencySummary
    transport: str = "grpcio"


class Producer:
    """Sends messages to RocketMQ topics. Native asyncio; use `thrust.sync.Producer` from threads.

    ```
    async with thrust.Producer(endpoints="127.0.0.1:8081", topics=["t"]) as producer:
        receipt = await producer.send(thrust.Message(topic="t", body=b"hi", tag="a"))
    ```

    Args:
        config: a `ClientConfig`; or give its fields as keywords instead (`connection`).
        connection: `ClientConfig`'s fields as keywords (`endpoints=`, `namespace=`, ...; see
            `thrust.config.ClientConfigFields`).
        topics: topics to prepare at start (routes, sessions); others are prepared on first send.
        max_attempts: send attempts per message including the first (the server's backoff decides delays).
        max_in_flight: at most this many sends (awaited or pipelined) run at once; more wait for a slot.
        transaction_checker: answers the server's checks of orphaned transactions (see `transaction()`).
        transaction_recovery: seconds until the server checks an unresolved transaction.
        batch_max_messages: the **linger batch**, off by default (1). With N > 1, `send()` and
            `send_async()` of NORMAL messages are collected per topic and sent N at most per SendMessage;
            each caller still gets its own `SendReceipt` (its message id, its queue offset) or its own
            typed error. Messages that may not share a request go alone: DELAY and PRIORITY ones at once,
            FIFO ones one request at a time per message group, in the order of the `send()` calls (the
            proxy keeps a message group's queue only for one-message requests). Transactions and
            `send_batch()` never use it. `max_in_flight` then counts requests, not messages.
        batch_max_bytes: estimated bytes per batch (bodies, properties and ~256 B per message); a larger
            message goes alone. The broker refuses a batch whose whole exceeds its `maxMessageSize`
            (4 MiB by default): keep this below it.
        batch_linger: seconds a batch waits for more messages after its first one, so a lone awaited
            `send()` takes that much longer; 0 batches only the sends made together (in one loop
            iteration). A batch that is due while every `max_in_flight` slot is busy keeps filling until
            a slot frees.
        batch_max_pending: messages accepted into the linger batch and not yet answered; `send()` waits
            while this or `batch_max_pending_bytes` is reached (backpressure).
        batch_max_pending_bytes: the estimated bytes of those messages, the same backpressure by size.

    A linger batch is retried whole by the retry policy above, with its message ids kept; one refused for a
    single bad message (MESSAGE_BODY_TOO_LARGE and the other per-message codes, nothing stored) is resent
    one message per request, so only that message fails. `close()` sends what is queued (within its
    timeout) and fails the rest with `ClientClosedError`.
    """

    def __init__(
        self,
        config: ClientConfig | None = None,
        *,
        topics: Iterable[str] = (),
        max_attempts: int = 3,
        max_in_flight: int = 1024,
        transaction_checker: TransactionChecker | None = None,
        transaction_recovery: float | None = None,
        batch_max_messages: int = 1,
        batch_max_bytes: int = 1 << 20,
        batch_linger: float = 0.005,
        batch_max_pending: int = 8192,
        batch_max_pending_bytes: int = 32 << 20,
        **connection: Unpack[ClientConfigFields],
    ) -> None:
        self.config = client_config("Producer", config, connection)
        self.transport = resolve_transport(self.config)
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        if max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        self._topics = list(dict.fromkeys(topics))
        for topic in self._topics:
            check(validation.check_topic, topic)
        self._max_attempts = max_attempts
        self._max_in_flight = max_in_flight
        # Validated now, so that a bad option fails at construction; the driver starts with the producer.
        self._linger_config = (
            LingerConfig(
                max_messages=batch_max_messages,
                max_bytes=batch_max_bytes,
                linger=float(batch_linger),
                max_pending=batch_max_pending,
                max_pending_bytes=batch_max_pending_bytes,
            )
            if batch_max_messages > 1
            else None
        )
        if batch_max_messages < 1:
            raise ValueError("batch_max_messages must be >= 1")
        self._linger: LingerDriver | None = None
        self._valid_topics: set[str] = set(self._topics)  # topic names already validated
        self._checker = transaction_checker
        self._recovery = transaction_recovery
        self._session: ClientSession | None = None
        self._window: asyncio.Semaphore | None = None
        # The send_async() sends; as many as the window allows, so at most max_in_flight.
        self._send_tasks = TaskSet(limit=max_in_flight)
        # The sends started with no task (`_start_without_task`), until settled: close() waits for them.
        self._pending: set[asyncio.Future[SendReceipt]] = set()
        self._selector = QueueSelector()
        self._start_task: asyncio.Task[None] | None = None
        self._closed = False
        self._instrumentation = self.config.instrumentation
        # Statistics (`stats()`): plain ints on the loop, one update per request, not per message.
        self._sends = self._messages_sent = self._retries = 0
        self._failures = self._messages_failed = self._in_flight = 0
        self._latency = LatencyRecorder()

    # -- lifecycle ---------------------------------------------------------------------------------

    @property
    def client_id(self) -> str | None:
        """The client id (x-mq-client-id), once started."""
        return self._session.client_id if self._session is not None else None

    @property
    def linger_stats(self) -> tuple[int, int] | None:
        """(SendMessage requests, messages) taken by the linger batch so far, including requests that
        failed; None when the linger batch is off or the producer was never started."""
        if self._linger is None:
            return None
        acc = self._linger.acc
        return acc.batches_taken, acc.messages_taken

    @property
    def session(self) -> ClientSession:
        """The underlying session (internal API, for tests and tools)."""
        if self._session is None:
            raise RuntimeError("the producer is not started")
        return self._session

    def stats(self) -> ProducerStats:
        """A snapshot of the producer's counters, in-flight requests and send latency."""
        return ProducerStats(
            sends=self._sends,
            messages_sent=self._messages_sent,
            retries=self._retries,
            failures=self._failures,
            messages_failed=self._messages_failed,
            in_flight=self._in_flight,
            latency=self._latency.summary(),
            transport=self.transport,
        )

    def __repr__(self) -> str:
        s = self.stats()
        state = "closed" if self._closed else ("running" if self._start_task is not None else "new")
        return (
            f"<Producer {state} sends={s.sends} sent={s.messages_sent} retries={s.retries} "
            f"failures={s.failures} in_flight={s.in_flight} transport={self.transport}>"
        )

    async def start(self) -> None:
        """Fetch routes of `topics` and open sessions; idempotent. `async with` calls it."""
        if self._closed:
            raise ClientClosedError("the producer is closed")
        if self._start_task is None:
            self._session = ClientSession(
                self.config,
                transport=self.transport,
                client_type=pb.PRODUCER,
                local_settings=dataclasses.replace(
                    ClientSettings.for_producer(),
                    retry_policy=PRODUCER_RETRY_POLICY.with_max_attempts(self._max_attempts),
                    request_timeout=self.config.request_timeout,
                ),
                handler=_ProducerTelemetry(self),
            )
            self._window = asyncio.Semaphore(self._max_in_flight)
            if self._linger_config is not None:
                self._linger = LingerDriver(self._linger_config, self._send_linger_batch, self._window)
            self._start_task = asyncio.get_running_loop().create_task(self._session.start(self._topics))
            if self._instrumentation is not None:
                self._instrumentation.attach(self)
        await join_start(self._start_task, lambda: self.close(timeout=1.0))

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self, timeout: float = 5.0) -> None:
        """Stop accepting sends, wait (up to `timeout`) for in-flight ones, then close the session.

        Idempotent. Sends still running at the deadline are cancelled and raise ClientClosedError."""
        if self._closed and self._session is None:
            return
        self._closed = True
        deadline = time.monotonic() + max(0.0, timeout)
        linger = self._linger
        if linger is not None:
            # Queued batches go out now; what is not answered within the bound fails with ClientClosedError.
            await linger.close(max(0.0, timeout * 0.6))
        sends = self._send_tasks
        if self._pending:
            await asyncio.wait(
                set(self._pending), timeout=max(0.0, deadline - time.monotonic() - timeout * 0.4)
            )
        if len(sends):
            await sends.wait(deadline - time.monotonic() - timeout * 0.4)
        # Those still running at the bound are cancelled and awaited (bounded too).
        await sends.aclose(0.5)
        session, self._session = self._session, None
        if session is not None:
            await session.close(max(0.1, deadline - time.monotonic()))
            if self._instrumentation is not None:
                self._instrumentation.detach(self)
        if self._start_task is not None and not self._start_task.done():
            self._start_task.cancel()

    async def _ready(self) -> ClientSession:
        session = self._session
        if session is None or self._start_task is None or not self._start_task.done():
            if self._closed:
                raise ClientClosedError("the producer is closed")
            await self.start()
            session = self._session
            assert session is not None
        if self._closed:
            raise ClientClosedError("the producer is closed")
        return session

    # -- sending -----------------------------------------------------------------------------------

    async def send(self, message: Message) -> SendReceipt:
        """Send one message and wait for the broker's receipt.

        Raises `ValidationError` (before any I/O) for an invalid message, otherwise the typed error of the
        last attempt once retries are exhausted. With the linger batch (`batch_max_messages` > 1) the
        message may share its SendMessage with others; its receipt and its error are still its own."""
        session = await self._ready()
        linger = self._linger
        if linger is not None:
            entry = self._linger_entry(message, session)
            if entry is not None:
                future = await linger.submit(entry)
                try:
                    receipt: SendReceipt = await future
                except asyncio.CancelledError:
                    linger.withdraw(entry)  # not sent if its batch has not left yet
                    raise
                return receipt
        prepared = self._prepare([message], session, transactional=False)
        assert self._window is not None
        async with self._window:
            started: asyncio.Future[SendReceipt] = asyncio.get_running_loop().create_future()
            if self._start_without_task(session, prepared, started):
                return await started  # (cancelling this cancels the future, so its call)
            receipts = await self._send_prepared(session, prepared)
        return receipts[0]

    async def send_async(self, message: Message) -> asyncio.Future[SendReceipt]:
        """Start sending one message and return a future of its receipt (pipelining).

        Waits only while `max_in_flight` sends are already running (the bounded window), or, with the
        linger batch, while its pending bounds are reached. Validation errors are raised here, before
        anything is sent. Cancelling the future before its batch leaves withdraws the message."""
        session = await self._ready()
        linger = self._linger
        if linger is not None:
            entry = self._linger_entry(message, session)
            if entry is not None:
                return await linger.submit(entry)
        prepared = self._prepare([message], session, transactional=False)
        window = self._window
        assert window is not None
        await window.acquire()
        if self._send_tasks.closed:  # close() began while this waited for a slot
            window.release()
            raise ClientClosedError("the producer is closed")
        future: asyncio.Future[SendReceipt] = asyncio.get_running_loop().create_future()
        if self._start_without_task(session, prepared, future):
            self._pending.add(future)
            future.add_done_callback(self._settled)
            return future
        task = self._send_tasks.spawn(self._send_one(session, prepared), "thrust-send")
        task.add_done_callback(self._sent)
        return task

    async def _send_one(self, session: ClientSession, prepared: _Prepared) -> SendReceipt:
        return (await self._send_prepared(session, prepared))[0]

    def _sent(self, task: asyncio.Task[Any]) -> None:
        assert self._window is not None
        self._window.release()

    def _settled(self, future: asyncio.Future[SendReceipt]) -> None:
        self._pending.discard(future)
        assert self._window is not None
        self._window.release()

    async def send_batch(self, messages: Sequence[Message]) -> list[SendReceipt]:
        """Send several messages of one topic in one SendMessage call; receipts in the same order.

        FIFO messages (with a message group) must all share the same group. If the broker refuses some
        entries, the typed error of the first refused entry is raised."""
        if not messages:
            return []
        _check_batch(messages)
        session = await self._ready()
        prepared = self._prepare(list(messages), session, transactional=False)
        assert self._window is not None
        async with self._window:
            return await self._send_prepared(session, prepared)

    def _prepare(self, messages: list[Message], session: ClientSession, *, transactional: bool) -> _Prepared:
        first = messages[0]
        if len(messages) > 1:
            _check_batch(messages)
        elif not isinstance(first, Message):
            raise TypeError(f"expected thrust.Message, got {type(first).__name__}")
        topic = first.topic
        self._check_topic(topic)
        settings = session.settings
        now = time.time()
        pbs = []
        ids = []
        for m in messages:
            if transactional or not (
                m.message_group is None
                and m.delivery_timestamp is None
                and m.priority is None
                and m.lite_topic is None
            ):
                _check_type(m, transactional)  # a NORMAL message has nothing it could conflict with
            message_id = _checked_id(m, settings.max_body_size, now)
            pbs.append(self._wire(m, message_id, now, transactional))
            ids.append(message_id)
        kind = MessageType.TRANSACTION if transactional else messages[0].message_type
        return _Prepared(
            spb.SendMessageRequest(messages=pbs),
            topic,
            ids,
            messages[0].message_group,
            transactional,
            kind,
            messages if self._instrumentation is not None else (),
        )

    def _wire(
        self, m: Message, message_id: str, now: float, transactional: bool, into: pb.Message | None = None
    ) -> pb.Message:
        """The wire form of a checked message (`into`: fill that one, e.g. `request.messages.add()`)."""
        return convert.message_to_pb(
            m,
            message_id=message_id,
            namespace=self.config.namespace,
            born_host=_BORN_HOST,
            born_timestamp=now,
            transactional=transactional,
            transaction_recovery=self._recovery,
            into=into,
        )

    # -- the linger batch --------------------------------------------------------------------------

    def _check_topic(self, topic: str) -> None:
        """`validation.check_topic`, once per topic name (a producer sends to few topics)."""
        if topic not in self._valid_topics:
            check(validation.check_topic, topic)
            if len(self._valid_topics) >= 1024:  # bounded: a producer of many topics re-checks them
                self._valid_topics.clear()
            self._valid_topics.add(topic)

    def _linger_entry(self, message: Message, session: ClientSession) -> LingerEntry | None:
        """`message` validated for the linger batch (its wire form is built into the request when its
        batch leaves), or None when it must be sent alone."""
        if not isinstance(message, Message):
            raise TypeError(f"expected thrust.Message, got {type(message).__name__}")
        if message.lite_topic is not None:
            return None  # sent alone
        lane = lane_for(
            message.topic,
            message_group=message.message_group,
            delayed=message.delivery_timestamp is not None,
            priority=message.priority,
        )
        if lane is None:
            return None
        topic = message.topic
        self._check_topic(topic)
        # No priority, and at most a message group (lane_for): one type, no _check_type needed.
        now = time.time()
        message_id = _checked_id(message, session.settings.max_body_size, now)
        size = estimate_size(message.body, message.properties, message.tag, message.keys, topic)
        return LingerEntry(lane, size, message_id, message, now, asyncio.get_running_loop().create_future())

    async def _send_linger_batch(self, entries: Sequence[LingerEntry]) -> list[SendReceipt | ThrustError]:
        """Send one linger batch (one lane: one topic, NORMAL messages or one FIFO message); one outcome
        per message. Called by the linger driver, which holds a window slot for it."""
        session = self._session
        if session is None:
            raise ClientClosedError("the producer is closed")
        first = entries[0]
        topic, group = first.lane
        request = spb.SendMessageRequest()
        add = request.messages.add
        for e in entries:
            self._wire(e.message, e.message_id, e.born, False, into=add())
        kind = MessageType.FIFO if group is not None else MessageType.NORMAL
        traced = [e.message for e in entries] if self._instrumentation is not None else ()
        prepared = _Prepared(request, topic, [e.message_id for e in entries], group, False, kind, traced)
        try:
            outcomes, _ = await self._send_with_endpoint(session, prepared, self._batch_outcomes)
            return outcomes
        except ThrustError as exc:
            if not split_on_refusal(exc.code, len(entries)):
                raise
            logger.info(
                "a batch of %d messages to %r was refused (%s); sending each alone", len(entries), topic, exc
            )
        out: list[SendReceipt | ThrustError] = []
        for e, wire in zip(entries, request.messages, strict=True):
            alone = _Prepared(
                spb.SendMessageRequest(messages=[wire]),
                topic,
                [e.message_id],
                group,
                False,
                kind,
                (e.message,) if traced else (),
            )
            try:
                outcomes, _ = await self._send_with_endpoint(session, alone, self._batch_outcomes)
                out.extend(outcomes)
            except ThrustError as exc:
                out.append(exc)
        return out

    async def _send_prepared(self, session: ClientSession, prepared: _Prepared) -> list[SendReceipt]:
        return (await self._send_with_endpoint(session, prepared, self._receipts))[0]

    async def _send_with_endpoint(
        self, session: ClientSession, prepared: _Prepared, answer: Callable[[Any, _Prepared, str | None], _T]
    ) -> tuple[_T, Endpoint]:
        """Send `prepared` with retries; `answer(response, prepared, request_id)` turns the response into
        the result (and raises for a failure that the retry policy should see). Counted in `stats()`, and
        reported to the instrumentation, if any, as one send span whose context travels in every message."""
        instrumentation = self._instrumentation
        span = None
        if instrumentation is not None:
            span = instrumentation.send(
                self,
                prepared.topic,
                MessageType(prepared.message_type),
                prepared.messages,
                prepared.message_ids,
            )
            traceparent = span.traceparent
            if traceparent is not None:
                # The W3C context of the send span, in the system property the proxy keeps with the
                # message (apache/rocketmq SendMessageActivity: TRACE_CONTEXT), for consumers to link to.
                for wire in prepared.request.messages:
                    wire.system_properties.trace_context = traceparent
        started = self._send_began()
        try:
            result = await self._attempts(session, prepared, answer)
        except BaseException as exc:
            self._send_failed(prepared)
            if span is not None:
                span.end(None, exc)
            raise
        self._send_succeeded(prepared, result[0], started)
        if span is not None:
            span.end(result[1], None)
        return result

    def _send_began(self) -> float:
        self._sends += 1
        self._in_flight += 1
        return time.monotonic()

    def _send_failed(self, prepared: _Prepared) -> None:
        self._in_flight -= 1
        self._failures += 1
        self._messages_failed += len(prepared.message_ids)

    def _send_succeeded(self, prepared: _Prepared, outcomes: object, started: float) -> None:
        self._in_flight -= 1
        sent = len(prepared.message_ids)
        if sent > 1 and isinstance(outcomes, list):
            # A linger batch answers per message: the entries the broker refused count as failed.
            refused = sum(1 for o in outcomes if isinstance(o, ThrustError))
            sent -= refused
            self._messages_failed += refused
        self._messages_sent += sent
        self._latency.record(time.monotonic() - started)

    async def _attempts(
        self, session: ClientSession, prepared: _Prepared, answer: Callable[[Any, _Prepared, str | None], _T]
    ) -> tuple[_T, Endpoint]:
        """Drive the send's `SendPlan` (thrust._core.send decides queues, retries and delays): one
        SendMessage per attempt it names, its result reported back, until a success or a final failure."""
        plan = self._plan(session, await session.route(prepared.topic), prepared)
        if plan.refusal is Refusal.NO_WRITABLE_QUEUE:
            raise errors.ForbiddenError(
                f"topic {prepared.topic!r} has no writable queue", code=Code.FORBIDDEN
            )
        if plan.refusal is Refusal.TYPE_NOT_ACCEPTED:
            kind = MessageType(prepared.message_type).name
            raise ValidationError(
                f"topic {prepared.topic!r} does not accept {kind} messages",
                code=Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            )
        wait = plan.prefer_ready(session.is_ready)
        if wait:
            await session.wait_any_ready(wait)
            plan.prefer_ready(session.is_ready)
        return await self._drive(session, prepared, plan, answer)

    def _plan(self, session: ClientSession, route: Any, prepared: _Prepared) -> SendPlan:
        return SendPlan.for_send(
            self._selector,
            route,
            session.settings.retry_policy,
            session.isolation,
            time.monotonic(),
            message_type=prepared.message_type,
            message_group=prepared.message_group,
            transactional=prepared.transactional,
            validate_message_type=session.settings.validate_message_type,
        )

    async def _drive(
        self,
        session: ClientSession,
        prepared: _Prepared,
        plan: SendPlan,
        answer: Callable[[Any, _Prepared, str | None], _T],
    ) -> tuple[_T, Endpoint]:
        """The attempts of `plan` from its next one on (`_attempts`)."""
        while True:
            attempt = plan.next_attempt()
            endpoint = attempt.endpoint
            try:
                response, request_id = await session.call(
                    endpoint,
                    "SendMessage",
                    prepared.request,
                    ok=OK_OR_MULTIPLE,
                    wait_for_connection=attempt.wait_for_connection,
                    with_request_id=True,
                )
                result = answer(response, prepared, request_id)
                plan.on_success(attempt)
                return result, endpoint
            except ThrustError as exc:
                delay = self._retry_delay(plan, attempt, exc)
                if delay is None:
                    raise
                if delay > 0:
                    await asyncio.sleep(delay)

    def _retry_delay(self, plan: SendPlan, attempt: Attempt, exc: ThrustError) -> float | None:
        """What `plan` says after `attempt` failed with `exc`: None when that is final, else the seconds
        before the next attempt (counted as a retry)."""
        delay = plan.on_failure(
            attempt,
            retriable=exc.retriable,
            transport=isinstance(exc, errors.ConnectionError | errors.TimeoutError),
            closing=self._closed,
            now=time.monotonic(),
        )
        if delay is None:
            return None
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug(
                "send attempt %d to %s failed (%s); retrying in %.3fs",
                attempt.number,
                attempt.endpoint,
                exc,
                delay,
            )
        self._retries += 1
        return delay

    # -- the task-free send ----------------------------------------------------------------------

    def _start_without_task(
        self, session: ClientSession, prepared: _Prepared, future: asyncio.Future[SendReceipt]
    ) -> bool:
        """Start sending `prepared` (one message) with no task of its own, and settle `future` with its
        receipt or error; False (nothing done) when the send needs to wait or to be traced: then the
        caller spawns `_send_one`. That is the common case of `send_async` on the native transport: the
        route cached, the first attempt's endpoint ready. A first attempt that fails is retried by a task
        that carries the same `SendPlan` on (`_drive`); the send is counted as `_send_with_endpoint`
        counts it."""
        if self._instrumentation is not None:
            return False
        route = session.routes.get(prepared.topic)
        if route is None:
            return False
        plan = self._plan(session, route, prepared)
        if plan.refusal is not None or plan.prefer_ready(session.is_ready):
            return False
        attempt = plan.next_attempt()
        started = 0.0
        cancel_call: Callable[[], None] | None = None
        retry: asyncio.Task[SendReceipt] | None = None

        def done(response: Any, error: ThrustError | None, request_id: str | None) -> None:
            nonlocal cancel_call, retry
            cancel_call = None
            if future.done():  # cancelled meanwhile (counted then)
                return
            try:
                if error is None:
                    try:
                        receipts = self._receipts(response, prepared, request_id)
                    except ThrustError as exc:
                        error = exc
                    else:
                        plan.on_success(attempt)
                        self._send_succeeded(prepared, receipts, started)
                        future.set_result(receipts[0])
                        return
                delay = self._retry_delay(plan, attempt, error)
                if delay is None:
                    self._send_failed(prepared)
                    future.set_exception(error)
                    return
                retry = self._send_tasks.spawn(
                    self._retry_without_task(session, prepared, plan, delay), "thrust-send"
                )
                retry.add_done_callback(settle)
            except BaseException as exc:  # never into the transport's wake-up
                self._send_failed(prepared)
                future.set_exception(exc)

        def settle(task: asyncio.Task[SendReceipt]) -> None:
            if future.done():
                return
            if task.cancelled():
                future.cancel()
                return
            exc = task.exception()
            if exc is None:
                self._send_succeeded(prepared, [task.result()], started)
                future.set_result(task.result())
            else:
                self._send_failed(prepared)
                future.set_exception(exc)

        def abandoned(f: asyncio.Future[SendReceipt]) -> None:
            if not f.cancelled():
                return
            # Cancelled by its caller: the call in flight, or the task retrying it, stops.
            if cancel_call is not None:
                cancel_call()
            if retry is not None:
                retry.cancel()
            self._send_failed(prepared)

        cancel_call = session.start_call(
            attempt.endpoint,
            "SendMessage",
            prepared.request,
            done,
            ok=OK_OR_MULTIPLE,
            wait_for_connection=attempt.wait_for_connection,
        )
        if cancel_call is None:
            return False
        started = self._send_began()
        future.add_done_callback(abandoned)
        return True

    async def _retry_without_task(
        self, session: ClientSession, prepared: _Prepared, plan: SendPlan, delay: float
    ) -> SendReceipt:
        if delay > 0:
            await asyncio.sleep(delay)
        receipts, _ = await self._drive(session, prepared, plan, self._receipts)
        return receipts[0]

    @staticmethod
    def _receipts(response: Any, prepared: _Prepared, request_id: str | None) -> list[SendReceipt]:
        """One receipt per message; the first refused entry's error is raised (and seen by the retry
        policy), as `send_batch` promises."""
        receipts = []
        for outcome in Producer._outcomes(response, prepared, request_id):
            if isinstance(outcome, ThrustError):
                raise outcome
            receipts.append(outcome)
        return receipts

    @staticmethod
    def _batch_outcomes(
        response: Any, prepared: _Prepared, request_id: str | None
    ) -> list[SendReceipt | ThrustError]:
        """`_outcomes`, but a request that failed for every message (the one entry of a batch, or every
        entry) raises, so that the retry policy and the split on refusal see it."""
        outcomes = Producer._outcomes(response, prepared, request_id)
        if all(isinstance(o, ThrustError) for o in outcomes):
            raise outcomes[0]  # type: ignore[misc]
        return outcomes

    @staticmethod
    def _outcomes(
        response: Any, prepared: _Prepared, request_id: str | None
    ) -> list[SendReceipt | ThrustError]:
        """One outcome per message of `prepared`: its receipt or its own error (the linger batch), which
        carries the request id of the SendMessage that refused it."""
        entries = response.entries
        ids = prepared.message_ids
        if len(entries) == 1 and len(ids) > 1:
            # The real proxy answers a batch with one entry: the broker stores a batch as one
            # SEND_BATCH_MESSAGE with one SendResult (apache/rocketmq SendMessageActivity
            # .convertToSendMessageResponse, one entry per SendResult), whose offset is the first
            # message's and whose message id is not ours: a new id of the whole batch in local mode
            # (LocalMessageService.sendMessage), our ids joined by commas in cluster mode
            # (MQClientAPIImpl.processSendResponse). The batch went to one queue at consecutive
            # offsets, and each message carries the id we set (its UNIQ_KEY), which consumers see.
            [entry] = entries
            error = status_error(entry.status, request_id)
            if error is not None:
                return [error, *(own_error(error) for _ in ids[1:])]
            return [
                SendReceipt(
                    message_id=message_id,
                    topic=prepared.topic,
                    offset=entry.offset + i,
                    transaction_id=entry.transaction_id,
                )
                for i, message_id in enumerate(ids)
            ]
        if len(entries) != len(ids):
            # Not retriable: the server may have stored the messages, and a retry would store them again.
            raise errors.InternalError(
                f"SendMessage answered {len(entries)} entries for {len(ids)} messages",
                code=Code.INTERNAL_SERVER_ERROR,
                request_id=request_id,
                retriable=False,
            )
        outcomes: list[SendReceipt | ThrustError] = []
        for entry, message_id in zip(entries, ids, strict=True):
            error = status_error(entry.status, request_id)
            outcomes.append(
                convert.send_receipt(entry, prepared.topic, message_id) if error is None else error
            )
        return outcomes

    # -- transactions ------------------------------------------------------------------------------

    def transaction(self) -> Transaction:
        """A transaction: messages sent through it stay invisible until `commit()`.

        ```
        async with producer.transaction() as tx:
            await tx.send(msg)          # half message
            ...                         # local work; an exception rolls back
        # leaving the block commits
        ```
        If the process dies before the resolution, the server asks the `transaction_checker`."""
        return Transaction(self)

    async def _end_transaction(
        self,
        endpoint: Endpoint,
        topic: str,
        message_id: str,
        transaction_id: str,
        resolution: TransactionResolution,
        source: int,
    ) -> None:
        session = await self._ready() if source == pb.SOURCE_CLIENT else self._session
        if session is None:
            return
        request = spb.EndTransactionRequest(
            topic=session.resource(topic),
            message_id=message_id,
            transaction_id=transaction_id,
            resolution=pb.COMMIT if resolution is TransactionResolution.COMMIT else pb.ROLLBACK,
            source=source,  # type: ignore[arg-type]
        )
        # Retried on retriable failures, bounded (thrust._core.send.end_transaction_retry_delay decides).
        attempt = 1
        while True:
            try:
                await session.call(endpoint, "EndTransaction", request)
                return
            except ThrustError as exc:
                delay = end_transaction_retry_delay(attempt, retriable=exc.retriable, closed=session.closed)
                if delay is None:
                    raise
                logger.info(
                    "EndTransaction of %s failed (%s); attempt %d in %.2fs",
                    message_id,
                    exc,
                    attempt + 1,
                    delay,
                )
            attempt += 1
            await asyncio.sleep(delay)

    async def _check_transaction(
        self, endpoint: Endpoint, command: spb.RecoverOrphanedTransactionCommand
    ) -> None:
        checker = self._checker
        if checker is None:
            logger.warning("transaction check from %s but no transaction_checker is set", endpoint)
            return
        try:
            message = convert.received_from_pb(command.message, endpoint)
        except convert.Corrupted as exc:
            logger.warning("transaction check for a corrupted message ignored: %s", exc)
            return
        try:
            result = checker(message)
            if inspect.isawaitable(result):
                result = await result
        except Exception:
            logger.exception("transaction_checker raised for message %s", message.message_id)
            return
        if result is TransactionResolution.UNKNOWN or not isinstance(result, TransactionResolution):
            return
        try:
            await self._end_transaction(
                endpoint,
                message.topic,
                message.message_id,
                command.transaction_id,
                result,
                pb.SOURCE_SERVER_CHECK,
            )
        except ThrustError as exc:
            logger.warning("EndTransaction after a check failed: %s", exc)

    # -- recall ------------------------------------------------------------------------------------

    async def recall(self, topic: str, recall_handle: str) -> str:
        """Recall (cancel) a delay message before its delivery time; returns its message id.

        `recall_handle` comes from the `SendReceipt` of the delay message."""
        check(validation.check_topic, topic)
        if not recall_handle:
            raise ValidationError("recall_handle is empty", code=Code.BAD_REQUEST)
        session = await self._ready()
        route = await session.route(topic)
        request = spb.RecallMessageRequest(topic=session.resource(topic), recall_handle=recall_handle)
        last: ThrustError | None = None
        for endpoint in route.endpoints:
            try:
                response = await session.call(endpoint, "RecallMessage", request)
                return str(response.message_id)
            except errors.NotFoundError as exc:  # another broker may own the handle
                last = exc
        assert last is not None
        raise last


class Transaction:
    """A producer transaction; see `Producer.transaction()`. Not reusable after commit or rollback."""

    def __init__(self, producer: Producer) -> None:
        self._producer = producer
        self._sent: list[tuple[Endpoint, str, str, str]] = []
        self._done = False

    async def send(self, message: Message) -> SendReceipt:
        """Send a half message: stored, but invisible to consumers until the transaction commits."""
        if self._done:
            raise ClientClosedError("the transaction is already resolved")
        producer = self._producer
        session = await producer._ready()
        prepared = producer._prepare([message], session, transactional=True)
        receipts, endpoint = await producer._send_with_endpoint(session, prepared, producer._receipts)
        receipt = receipts[0]
        self._sent.append((endpoint, receipt.topic, receipt.message_id, receipt.transaction_id))
        return receipt

    async def commit(self) -> None:
        """Make every message of the transaction visible."""
        await self._resolve(TransactionResolution.COMMIT)

    async def rollback(self) -> None:
        """Discard every message of the transaction."""
        await self._resolve(TransactionResolution.ROLLBACK)

    async def _resolve(self, resolution: TransactionResolution) -> None:
        if self._done:
            raise ClientClosedError("the transaction is already resolved")
        self._done = True
        await asyncio.gather(
            *(
                self._producer._end_transaction(ep, topic, mid, tid, resolution, pb.SOURCE_CLIENT)
                for ep, topic, mid, tid in self._sent
            )
        )

    async def __aenter__(self) -> Transaction:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._done:
            return
        if exc_type is None:
            await self.commit()
        else:
            await self.rollback()


class _ProducerTelemetry(TelemetryHandler):
    def __init__(self, producer: Producer) -> None:
        self._producer = producer

    def settings_command(self) -> pb.Settings:
        p = self._producer
        s = pb.Settings()
        s.publishing.topics.extend(
            pb.Resource(resource_namespace=p.config.namespace, name=t) for t in p._topics
        )
        s.publishing.validate_message_type = True
        s.backoff_policy.CopyFrom(
            convert.retry_policy_to_pb(
                ClientSettings.for_producer().retry_policy.with_max_attempts(p._max_attempts)
            )
        )
        return s

    async def on_recover_orphaned_transaction(
        self, endpoint: Endpoint, command: spb.RecoverOrphanedTransactionCommand
    ) -> None:
        await self._producer._check_transaction(endpoint, command)


def _checked_id(m: Message, max_body_size: int, now: float) -> str:
    """A new message id for `m`, once `m` passed the per-message checks of the proxy that `Message` could
    not make when it was built (`validation.check_new_message` made the others): the body against the
    server's size limit and the delivery time against the clock (no I/O on bad input; `_check_type` is the
    caller's)."""
    try:
        validation.check_body(m.body, max_body_size)
        if m.delivery_timestamp is not None:
            validation.check_delivery_timestamp(m.delivery_timestamp, now)
    except validation.Invalid as exc:
        raise validation_error(exc.message, exc.code) from None
    return new_message_id()


def _check_batch(messages: Sequence[Message]) -> None:
    """A batch is one topic, one message type and (FIFO) one message group, as the Java client's
    `ProducerImpl.send0` requires before any I/O ("Messages to send have different topics"). Its
    IllegalArgumentException is a BAD_REQUEST here; the proxy answers a batch of several topics
    MESSAGE_CORRUPTED (`SendMessageActivity`: "topic in message is not same"), a code that names a
    corrupted body elsewhere."""
    first = messages[0]
    if not isinstance(first, Message):
        raise TypeError(f"expected thrust.Message, got {type(first).__name__}")
    for m in messages:
        if not isinstance(m, Message):
            raise TypeError(f"expected thrust.Message, got {type(m).__name__}")
        if m.topic != first.topic:
            raise ValidationError("messages to send have different topics", code=Code.BAD_REQUEST)
        if m.message_type != first.message_type:
            raise ValidationError("messages to send have different types", code=Code.BAD_REQUEST)
        if m.message_group != first.message_group:
            raise ValidationError(
                "FIFO messages to send have different message groups", code=Code.BAD_REQUEST
            )


def _check_type(message: Message, transactional: bool) -> None:
    kinds = sum(
        (
            message.message_group is not None,
            message.delivery_timestamp is not None,
            message.priority is not None,
            message.lite_topic is not None,
        )
    )
    if kinds > 1 or (transactional and kinds):
        raise ValidationError(
            "message group (FIFO), delivery time (DELAY), priority, lite topic (LITE) and transactions are "
            "exclusive",
            code=Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
        )
    check(validation.check_priority, message.priority)
