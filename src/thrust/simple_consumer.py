"""`SimpleConsumer`: pull messages when you want them, settle each one yourself.

Each `receive()` is one ReceiveMessage long poll (up to 32 messages) on one broker: round robin over the
subscribed topics, and within a topic over its brokers, preferring those whose last receive returned
messages (`thrust._core.receive_balancer`). Not over the route's queues, as the Java client's
`SubscriptionLoadBalancer` does: the proxy pops a broker's whole share of the topic whatever queue is
named, so with 8 queues per broker that named one drained broker 8 times in a row, each time an empty long
poll held for `await_duration` while the other brokers' backlog waited. Messages stay invisible to
other consumers for `invisible_duration`; `ack()` removes them, `change_invisible_duration()` hides them
longer (or makes them visible again soon) and keeps the new receipt handle the server returns
(docs/protocol.md §7.4), and a message not acked in time is delivered again with `delivery_attempt + 1`.

`async for msg in consumer` iterates over batched receives: each `__anext__` only pops a local buffer, so
iterating costs no more per message than calling `receive()` yourself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Unpack

from thrust._client import check, client_config, join_start
from thrust._codec import convert, validation
from thrust._codec.filter import check_filter
from thrust._codec.status import Code
from thrust._core.endpoints import Endpoint
from thrust._core.receive_balancer import ReceiveBalancer
from thrust._core.routes import RouteQueue
from thrust._core.settings import ClientSettings, receive_deadline
from thrust._io.native import resolve_transport
from thrust._io.rpc import OK_OR_MULTIPLE, status_error
from thrust._io.session import ClientSession
from thrust._io.telemetry import TelemetryHandler
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
from thrust.config import ClientConfig, ClientConfigFields
from thrust.errors import (
    ClientClosedError,
    ForbiddenError,
    ThrustError,
    ValidationError,
    validation_error,
)
from thrust.message import FilterExpression, ReceivedMessage

__all__ = ["SimpleConsumer", "SimpleConsumerStats"]

logger = logging.getLogger("thrust.consumer")

MAX_BATCH = 32  # the broker refuses more per pop (docs/protocol.md §6.3)
# A corrupted message is made visible again soon so another delivery (maybe intact) can replace it.
CORRUPTED_RETRY_DELAY = 1.0


@dataclasses.dataclass(frozen=True, slots=True)
class SimpleConsumerStats:
    """A snapshot of a simple consumer (see `SimpleConsumer.stats()`).

    Counters: `receives` (ReceiveMessage calls answered, empty ones included), `empty_receives` (those
    that returned nothing), `messages_received`, `receive_failures` (receives that raised), `acks`
    (messages acked, by `ack()` or `ack_many()`), `ack_failures` (messages whose ack failed), `renewals`
    (`change_invisible_duration()` calls that succeeded: the invisibility renewed, or ended with 0 s),
    `renewal_failures`. Gauge: `receives_in_flight`.
    """

    receives: int
    empty_receives: int
    messages_received: int
    receive_failures: int
    acks: int
    ack_failures: int
    renewals: int
    renewal_failures: int
    receives_in_flight: int
    transport: str = "grpcio"


class SimpleConsumer:
    """Receives messages of a group on demand. Native asyncio; `thrust.sync.SimpleConsumer` for threads.

    ```
    async with thrust.SimpleConsumer(endpoints="127.0.0.1:8081", group="g", subscriptions={"t": "*"}) as c:
        for msg in await c.receive(max_messages=32, invisible_duration=30):
            await c.ack(msg)
        async for msg in c:          # or iterate
            await msg.ack()
    ```

    Args:
        config: a `ClientConfig`; or give its fields as keywords instead (`connection`).
        connection: `ClientConfig`'s fields as keywords (`endpoints=`, `namespace=`, ...; see
            `thrust.config.ClientConfigFields`).
        group: the consumer group.
        subscriptions: topic -> filter: a tag expression string (`"*"`, `"a||b"`) or a `FilterExpression`
            (`FilterExpression.sql("price > 10")`).
        await_duration: how long one receive waits on the server for messages (long polling, seconds).
            The server clamps it to [5 s, 20 s]: a value below 5 s silently becomes 5 s, so a receive that
            finds nothing returns after 5 s, not sooner; above 20 s becomes 20 s. That is the RocketMQ
            proxy's `grpcClientConsumerMinLongPollingTimeoutMillis` / `...MaxLongPollingTimeoutMillis`
            (`ProxyConfig`), and `thrust serve` clamps the same way. A value below 5 s is accepted with one
            warning (logger `thrust.consumer`) when the consumer is created; one outside (0, 3600] raises
            `ValidationError`.
        invisible_duration: the default for `receive()` and for iteration (seconds, 10 s .. 12 h; outside,
            `ValidationError`).

    A malformed SQL92 filter raises `ValidationError` (ILLEGAL_FILTER_EXPRESSION) here, before any I/O.
    """

    def __init__(
        self,
        config: ClientConfig | None = None,
        *,
        group: str,
        subscriptions: Mapping[str, str | FilterExpression],
        await_duration: float = 20.0,
        invisible_duration: float = 30.0,
        **connection: Unpack[ClientConfigFields],
    ) -> None:
        self.config = client_config("SimpleConsumer", config, connection)
        self.transport = resolve_transport(self.config)
        check(validation.check_group, group)
        self.group = group
        self._subscriptions: dict[str, FilterExpression] = {}
        for topic, expr in subscriptions.items():
            check(validation.check_topic, topic)
            self._subscriptions[topic] = _checked_filter(expr)
        if not 0 < await_duration <= 3600:
            # A ValidationError as the invisible duration's below (also a ValueError): the proxy clamps the
            # long poll to [5 s, 20 s] rather than refusing it, so there is no server code for this
            # one; ILLEGAL_POLLING_TIME is the code of the field.
            raise ValidationError(
                "await_duration must be in (0, 3600] seconds", code=Code.ILLEGAL_POLLING_TIME
            )
        check(validation.check_receive_invisible_duration, float(invisible_duration))
        self.await_duration = float(await_duration)
        self.invisible_duration = float(invisible_duration)
        if self.await_duration < validation.MIN_POLLING_SECONDS:
            # The proxy raises it to its minimum without telling the client (ReceiveMessageActivity), so
            # say it here, once per consumer rather than per receive.
            logger.warning(
                "SimpleConsumer(group=%r): await_duration=%g s is below the server's minimum long poll "
                "of %g s; a receive that finds no message waits %g s",
                group,
                self.await_duration,
                validation.MIN_POLLING_SECONDS,
                validation.MIN_POLLING_SECONDS,
            )
        self._session: ClientSession | None = None
        self._start_task: asyncio.Task[None] | None = None
        self._closed = False
        self._next_topic = 0
        self._balancers: dict[str, ReceiveBalancer[str]] = {}  # per topic, over its broker names
        self._next_queue: dict[tuple[str, str], int] = {}  # per (topic, broker): the queue to name
        self._buffer: deque[ReceivedMessage] = deque()
        self._group_pb = pb.Resource(resource_namespace=self.config.namespace, name=group)
        self._filters: dict[str, pb.FilterExpression] = {}
        self._instrumentation = self.config.instrumentation
        # Statistics (`stats()`): plain ints on the loop, one update per call.
        self._counters = dict.fromkeys(
            (
                "receives",
                "empty_receives",
                "messages_received",
                "receive_failures",
                "acks",
                "ack_failures",
                "renewals",
                "renewal_failures",
                "receives_in_flight",
            ),
            0,
        )

    # -- lifecycle ---------------------------------------------------------------------------------

    @property
    def session(self) -> ClientSession:
        """The underlying session (internal API, for tests and tools)."""
        if self._session is None:
            raise RuntimeError("the consumer is not started")
        return self._session

    @property
    def subscriptions(self) -> dict[str, FilterExpression]:
        """A copy of the current subscriptions."""
        return dict(self._subscriptions)

    @property
    def client_id(self) -> str | None:
        """The `x-mq-client-id` this consumer presents, once started (None before)."""
        return self._session.client_id if self._session is not None else None

    def stats(self) -> SimpleConsumerStats:
        """A snapshot of the consumer's counters (receives, acks, renewals and their failures)."""
        return SimpleConsumerStats(**self._counters, transport=self.transport)

    def __repr__(self) -> str:
        c = self._counters
        state = "closed" if self._closed else ("running" if self._start_task is not None else "new")
        return (
            f"<SimpleConsumer group={self.group!r} {state} receives={c['receives']} "
            f"received={c['messages_received']} acks={c['acks']} renewals={c['renewals']} "
            f"transport={self.transport}>"
        )

    async def start(self) -> None:
        """Fetch routes, open sessions and announce the subscriptions; idempotent (`async with` calls it)."""
        if self._closed:
            raise ClientClosedError("the consumer is closed")
        if self._start_task is None:
            self._session = ClientSession(
                self.config,
                transport=self.transport,
                client_type=pb.SIMPLE_CONSUMER,
                local_settings=ClientSettings.for_consumer(),
                handler=_ConsumerTelemetry(self),
                group=self.group,
            )
            self._start_task = asyncio.get_running_loop().create_task(
                self._session.start(list(self._subscriptions))
            )
            if self._instrumentation is not None:
                self._instrumentation.attach(self)
        await join_start(self._start_task, lambda: self.close(timeout=1.0))

    async def __aenter__(self) -> SimpleConsumer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self, timeout: float = 5.0) -> None:
        """Stop, let in-flight calls finish (up to `timeout`), tell the server, close channels. Idempotent.

        A pending `receive()` (long poll) is cancelled at once and raises ClientClosedError; `timeout`
        bounds the wait for acks and other calls in flight.

        Buffered but not yet iterated messages are not acked: they become visible again when their
        invisible duration ends (the server also releases them on NotifyClientTermination)."""
        self._closed = True
        self._buffer.clear()
        session, self._session = self._session, None
        if session is not None:
            await session.close(timeout)
            if self._instrumentation is not None:
                self._instrumentation.detach(self)
        if self._start_task is not None and not self._start_task.done():
            self._start_task.cancel()

    async def _ready(self) -> ClientSession:
        if self._closed:
            raise ClientClosedError("the consumer is closed")
        if self._session is None or self._start_task is None or not self._start_task.done():
            await self.start()
        session = self._session
        if session is None or self._closed:
            raise ClientClosedError("the consumer is closed")
        return session

    # -- subscriptions -------------------------------------------------------------------------------

    async def subscribe(self, topic: str, expression: str | FilterExpression = "*") -> None:
        """Add or change a subscription (the route is fetched now, so an unknown topic fails here)."""
        check(validation.check_topic, topic)
        checked = _checked_filter(expression)
        session = await self._ready()
        await session.route(topic)
        self._subscriptions[topic] = checked
        self._filters.pop(topic, None)
        self._resync()

    def unsubscribe(self, topic: str) -> None:
        """Stop receiving from `topic`."""
        self._subscriptions.pop(topic, None)
        self._filters.pop(topic, None)
        self._balancers.pop(topic, None)
        self._resync()

    def _resync(self) -> None:
        session = self._session
        if session is None:
            return
        for endpoint in session.open_sessions():
            stream = session.telemetry(endpoint)
            if stream is not None:
                stream.sync_settings()

    # -- receive -------------------------------------------------------------------------------------

    def _filter(self, topic: str) -> pb.FilterExpression:
        f = self._filters.get(topic)
        if f is None:
            f = convert.filter_expression(self._subscriptions[topic])
            self._filters[topic] = f
        return f

    async def _pick(self, session: ClientSession) -> tuple[str, RouteQueue]:
        topics = list(self._subscriptions)
        if not topics:
            raise ValidationError("no subscriptions", code=Code.BAD_REQUEST)
        for _ in range(len(topics)):
            topic = topics[self._next_topic % len(topics)]
            self._next_topic += 1
            route = await session.route(topic)
            by_broker: dict[str, list[RouteQueue]] = {}
            for q in route.queues:
                if q.readable and q.is_master:
                    by_broker.setdefault(q.broker_name, []).append(q)
            if by_broker:
                balancer = self._balancers.get(topic)
                if balancer is None:
                    balancer = self._balancers[topic] = ReceiveBalancer()
                broker = balancer.choose(list(by_broker))
                # The queue named does not matter to the proxy (it pops the broker's acting queue, FIFO
                # groups included: ReceiveMessageActivity.ReceiveMessageQueueSelector), but a real queue
                # of that broker, rotated, is what the request has always carried.
                queues = by_broker[broker]
                i = self._next_queue.get((topic, broker), 0)
                self._next_queue[(topic, broker)] = i + 1
                return topic, queues[i % len(queues)]
        raise ForbiddenError("no readable queue in any subscribed topic", code=Code.FORBIDDEN)

    def _record(self, queue: RouteQueue, received: int) -> None:
        balancer = self._balancers.get(queue.topic)
        if balancer is not None:
            balancer.record(queue.broker_name, received)

    async def receive(
        self, max_messages: int = MAX_BATCH, invisible_duration: float | None = None
    ) -> list[ReceivedMessage]:
        """Receive up to `max_messages` (1..32) messages, waiting up to `await_duration` for the first
        (clamped by the server to 5..20 s: with `await_duration` below 5 s an empty receive takes 5 s).

        Returns an empty list when nothing arrived. Each message is hidden from other consumers for
        `invisible_duration` seconds (default: the consumer's), then delivered again unless acked."""
        if not 1 <= max_messages <= MAX_BATCH:
            raise ValidationError(f"max_messages must be in 1..{MAX_BATCH}", code=Code.BAD_REQUEST)
        invisible = self.invisible_duration if invisible_duration is None else float(invisible_duration)
        check(validation.check_receive_invisible_duration, invisible)
        session = await self._ready()
        topic, queue = await self._pick(session)
        request = spb.ReceiveMessageRequest(
            group=self._group_pb,
            message_queue=convert.message_queue_to_pb(queue, self.config.namespace),
            filter_expression=self._filter(topic),
            batch_size=max_messages,
            invisible_duration=convert.duration(invisible),
            auto_renew=False,
            long_polling_timeout=convert.duration(self.await_duration),
        )
        endpoint = queue.endpoint
        span = None if self._instrumentation is None else self._instrumentation.receive(self, topic)
        counters = self._counters
        counters["receives_in_flight"] += 1
        # Not await_duration + request timeout: the proxy holds a poll for at least 5 s and refuses a
        # shorter deadline (ILLEGAL_POLLING_TIME, docs/protocol.md §6.2), see `receive_deadline`.
        try:
            result = await session.receive(
                endpoint,
                request,
                timeout=receive_deadline(self.await_duration, session.settings.request_timeout),
            )
        except BaseException as exc:
            counters["receives_in_flight"] -= 1
            if span is not None:
                span.end(endpoint, (), exc)
            if isinstance(exc, ThrustError):  # (not a cancellation)
                counters["receive_failures"] += 1
                self._record(queue, 0)  # a failing broker is tried less often, like an empty one
            raise
        counters["receives_in_flight"] -= 1
        counters["receives"] += 1
        good, bad = result.messages, result.corrupted
        self._record(queue, len(good) + len(bad))
        if not good and not bad:
            counters["empty_receives"] += 1
            if span is not None:
                span.end(endpoint, (), None)
            return []
        if bad:
            self._release_corrupted(session, endpoint, bad)
        for m in good:
            m._bind(self)
        counters["messages_received"] += len(good)
        if span is not None:
            span.end(endpoint, good, None)
        return good

    def _release_corrupted(
        self, session: ClientSession, endpoint: Endpoint, bad: list[convert.Corrupted]
    ) -> None:
        """Never hand a corrupted message over; make it visible again soon (Java nacks it:
        docs/protocol.md §6.6)."""
        for c in bad:
            logger.warning("dropping corrupted message %s of %r: %s", c.message_id, c.topic, c.reason)
            request = spb.ChangeInvisibleDurationRequest(
                group=self._group_pb,
                topic=session.resource(c.topic),
                receipt_handle=c.receipt_handle,
                invisible_duration=convert.duration(CORRUPTED_RETRY_DELAY),
                message_id=c.message_id,
            )
            session.spawn(session.call(endpoint, "ChangeInvisibleDuration", request), "thrust-nack-corrupted")

    # -- settle ----------------------------------------------------------------------------------------

    async def ack(self, message: ReceivedMessage) -> None:
        """Acknowledge `message`: it will not be delivered again.

        Raises `InvalidReceiptHandleError` when its invisible duration already ran out (the message may
        have been delivered again), or another typed error."""
        session = await self._ready()
        endpoint = _endpoint_of(message, session)
        request = spb.AckMessageRequest(
            group=self._group_pb,
            topic=session.resource(message.topic),
            entries=[
                spb.AckMessageEntry(message_id=message.message_id, receipt_handle=message.receipt_handle)
            ],
        )
        span = None
        if self._instrumentation is not None:
            span = self._instrumentation.settle(self, "ack", message.topic, (message,))
        try:
            response, request_id = await session.call(
                endpoint, "AckMessage", request, ok=_ANY_STATUS, with_request_id=True
            )
            _raise_for_entries(response, request_id)
        except BaseException as exc:
            self._counters["ack_failures"] += 1
            if span is not None:
                span.end(endpoint, exc)
            raise
        self._counters["acks"] += 1
        if span is not None:
            span.end(endpoint, None)

    async def ack_many(self, messages: Sequence[ReceivedMessage]) -> list[ThrustError | None]:
        """Acknowledge many messages with one AckMessage per (broker, topic); never raises for an entry.

        Returns, per message in order, None when acked or the typed error for that message."""
        if not messages:
            return []
        session = await self._ready()
        groups: dict[tuple[Endpoint, str], list[int]] = {}
        for i, m in enumerate(messages):
            groups.setdefault((_endpoint_of(m, session), m.topic), []).append(i)
        results: list[ThrustError | None] = [None] * len(messages)

        async def one(endpoint: Endpoint, topic: str, indexes: list[int]) -> None:
            request = spb.AckMessageRequest(group=self._group_pb, topic=session.resource(topic))
            add = request.entries.add  # in place: a list passed as `entries=` is copied entry by entry
            for i in indexes:
                add(message_id=messages[i].message_id, receipt_handle=messages[i].receipt_handle)
            span = None
            if self._instrumentation is not None:
                span = self._instrumentation.settle(self, "ack", topic, [messages[i] for i in indexes])
            try:
                response, request_id = await session.call(
                    endpoint, "AckMessage", request, ok=_ANY_STATUS, with_request_id=True
                )
            except ThrustError as exc:
                for i in indexes:
                    results[i] = exc
                if span is not None:
                    span.end(endpoint, exc)
                return
            by_handle = {e.receipt_handle: e.status for e in response.entries}
            top = response.status
            first: ThrustError | None = None
            for i in indexes:
                error = status_error(by_handle.get(messages[i].receipt_handle, top), request_id)
                if error is not None:
                    results[i] = error
                    first = first or error
            if span is not None:
                span.end(endpoint, first)

        await asyncio.gather(*(one(ep, topic, idx) for (ep, topic), idx in groups.items()))
        failed = sum(1 for r in results if r is not None)
        self._counters["acks"] += len(results) - failed
        self._counters["ack_failures"] += failed
        return results

    async def change_invisible_duration(self, message: ReceivedMessage, seconds: float) -> None:
        """Hide `message` for `seconds` from now (0 makes it visible again at once; max 12 h).

        The server answers with a new receipt handle, which replaces `message.receipt_handle`; the old one
        no longer works (docs/protocol.md §7.4). The next delivery counts as a new attempt."""
        check(validation.check_change_invisible_duration, float(seconds))
        session = await self._ready()
        endpoint = _endpoint_of(message, session)
        request = spb.ChangeInvisibleDurationRequest(
            group=self._group_pb,
            topic=session.resource(message.topic),
            receipt_handle=message.receipt_handle,
            invisible_duration=convert.duration(float(seconds)),
            message_id=message.message_id,
        )
        span = None
        if self._instrumentation is not None:
            span = self._instrumentation.settle(self, "change_invisible_duration", message.topic, (message,))
        try:
            response = await session.call(endpoint, "ChangeInvisibleDuration", request)
        except BaseException as exc:
            self._counters["renewal_failures"] += 1
            if span is not None:
                span.end(endpoint, exc)
            raise
        self._counters["renewals"] += 1
        if span is not None:
            span.end(endpoint, None)
        if response.receipt_handle:
            message._replace_receipt_handle(response.receipt_handle)

    # -- iteration -------------------------------------------------------------------------------------

    def __aiter__(self) -> SimpleConsumer:
        return self

    async def __anext__(self) -> ReceivedMessage:
        """The next message: from the local buffer, refilled with batched receives (32 at a time)."""
        buffer = self._buffer
        while not buffer:
            if self._closed:
                raise StopAsyncIteration
            try:
                buffer.extend(await self.receive(MAX_BATCH, self.invisible_duration))
            except ClientClosedError:
                raise StopAsyncIteration from None
        return buffer.popleft()

    async def messages(
        self, *, max_messages: int = MAX_BATCH, invisible_duration: float | None = None
    ) -> AsyncIterator[ReceivedMessage]:
        """Iterate with explicit receive options; stops when the consumer is closed.

        Messages received for one batch are handed out in order; stopping early leaves the rest unacked
        (they become visible again after their invisible duration)."""
        while not self._closed:
            try:
                batch = await self.receive(max_messages, invisible_duration)
            except ClientClosedError:
                return
            for m in batch:
                yield m


_ANY_STATUS: frozenset[int] = frozenset(int(c) for c in Code)


def _endpoint_of(message: ReceivedMessage, session: ClientSession) -> Endpoint:
    if not isinstance(message, ReceivedMessage):
        raise TypeError(f"expected a ReceivedMessage, got {type(message).__name__}")
    return message.endpoint or session.access_point


def _raise_for_entries(response: Any, request_id: str | None) -> None:
    for entry in response.entries:
        error = status_error(entry.status, request_id)
        if error is not None:
            raise error
    error = status_error(response.status, request_id, OK_OR_MULTIPLE)
    if error is not None:
        raise error


class _ConsumerTelemetry(TelemetryHandler):
    def __init__(self, consumer: SimpleConsumer) -> None:
        self._consumer = consumer

    def settings_command(self) -> pb.Settings:
        c = self._consumer
        s = pb.Settings()
        sub = s.subscription
        sub.group.CopyFrom(c._group_pb)
        for topic, expr in c._subscriptions.items():
            sub.subscriptions.append(
                pb.SubscriptionEntry(
                    topic=pb.Resource(resource_namespace=c.config.namespace, name=topic),
                    expression=convert.filter_expression(expr),
                )
            )
        sub.long_polling_timeout.CopyFrom(convert.duration(c.await_duration))
        return s


def _checked_filter(expression: str | FilterExpression) -> FilterExpression:
    """`expression` as a `FilterExpression`, once it compiled: a malformed SQL92 filter is a
    `ValidationError` (ILLEGAL_FILTER_EXPRESSION) here, before any I/O, with the parser the embedded server
    filters with. The real proxy leaves SQL to the broker, whose refusal reaches the client as
    INTERNAL_SERVER_ERROR on every receive (D6 in docs/interop-findings.md), so it could not tell this
    from a passing failure."""
    f = FilterExpression.of(expression)
    try:
        check_filter(int(f.type), f.expression)
    except validation.Invalid as exc:
        raise validation_error(exc.message, exc.code) from None
    return f
