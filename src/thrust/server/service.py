"""The embedded server's gRPC layer: `apache.rocketmq.v2.MessagingService` over `grpc.aio`.

Thin on purpose: every decision about messages lives in `thrust.server.core` (pure, synchronous);
this module validates requests with the shared validators, translates protobuf, runs the clock
(a timer at the brokers' `next_event_time`), holds long polls and owns the Telemetry streams.

Wire behaviour follows the Apache RocketMQ proxy (docs/protocol.md §2-§7):

- every unary RPC and ReceiveMessage ends with gRPC OK; the outcome is `Status` in the body;
  Telemetry alone uses gRPC codes (INVALID_ARGUMENT for PUBSUB_NOT_SET);
- `BrokerError` / `Invalid` become their status code; anything unexpected INTERNAL_SERVER_ERROR
  (the proxy's catch-all 50001), never a gRPC INTERNAL;
- one `grpc.aio.server` per broker port; QueryRoute on any port lists every broker hosting the topic.

Long polling is event-driven: a waiting ReceiveMessage parks a future under (broker, topic); sends,
acks of FIFO messages, nacks, transaction commits and the timer (visibility changes, delayed messages
landing) wake the parked polls, each of which then pops once.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Final, TypeVar, cast

import grpc

from thrust._codec.status import Code
from thrust._codec.validation import (
    DEFAULT_INVISIBLE_SECONDS,
    Invalid,
    check_change_invisible_duration,
    check_group,
    check_polling_time,
    check_receive_invisible_duration,
    check_topic,
)
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust._proto.apache.rocketmq.v2 import service_pb2_grpc as g
from thrust.server.app import MAX_INBOUND_MESSAGE_SIZE, ServerConfig
from thrust.server.auth import Authenticator, Caller, is_loopback
from thrust.server.convert import (
    delivery_pb,
    duration_seconds,
    inbound_message,
    stored_message_pb,
    timestamp,
)
from thrust.server.core.broker import MAX_BATCH_SIZE, Broker, broker_of_handle
from thrust.server.core.catalog import Catalog, dead_letter_topic
from thrust.server.core.filter import FilterKind, MessageFilter, compile_filter
from thrust.server.core.model import BrokerError, Delivery, TopicInfo, TransactionCheck
from thrust.server.faults import Action, Faults, Rpc, Stats
from thrust.server.settings import DEFAULT_REQUEST_TIMEOUT, ClientSettings, merge_settings

__all__ = ["MAX_RECEIVE_MESSAGE_LENGTH", "EmbeddedServer", "MessagingServicer"]

logger = logging.getLogger("thrust.server")

MAX_RECEIVE_MESSAGE_LENGTH: Final = MAX_INBOUND_MESSAGE_SIZE
"""The default max inbound message (`ServerConfig.max_inbound_message_size`): the proxy's 130 MiB."""

_MAX_PENDING_CALLS: Final = 1 << 16
# gRPC core's default: the third ping inside `min_ping_interval` without data sent gets GOAWAY.
_MAX_PING_STRIKES: Final = 2


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def _server_options(config: ServerConfig) -> list[tuple[str, Any]]:
    """grpc.aio server arguments: the transport limits S8 and S12 (docs/reliability.md §5)."""
    options: list[tuple[str, Any]] = [
        # S8: bounded inbound messages (the proxy's grpcMaxInboundMessageSize, 130 MiB by default).
        ("grpc.max_receive_message_length", config.max_inbound_message_size),
        ("grpc.max_send_message_length", -1),
        # S8: calls open at once per connection (SETTINGS_MAX_CONCURRENT_STREAMS); a client's further calls
        # wait in its transport until one ends, they are not refused.
        ("grpc.max_concurrent_streams", config.max_concurrent_streams),
        # S8 keepalive enforcement. Clients may ping without calls (Java and thrust ping every 300 s even
        # when idle, as grpc-java's `permitKeepAliveTime` allows); a client pinging more often than
        # `min_ping_interval` gets GOAWAY too_many_pings after `_MAX_PING_STRIKES` strikes.
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", _ms(config.min_ping_interval)),
        ("grpc.http2.max_ping_strikes", _MAX_PING_STRIKES if config.min_ping_interval else 0),
        # S12: a connection that does not finish its TLS/HTTP/2 handshake in time is closed (slow loris).
        ("grpc.server_handshake_timeout_ms", _ms(config.handshake_timeout)),
        # Without this a second server could silently share a port (SO_REUSEPORT), hiding a port clash.
        ("grpc.so_reuseport", 0),
        # gRPC core queues calls that arrived before the Python server asked for them, and past 1000 queued
        # calls it cancels new ones at random (CANCELLED, before any handler runs; hard limit 3000). A client
        # pipelining ~1000 sends outruns the single-threaded asyncio loop, so that backlog protection
        # cancelled sends. A RocketMQ proxy (grpc-java) has no such limit: it answers overload with
        # TOO_MANY_REQUESTS, never by cancelling the stream. Deadlines still bound every queued call.
        ("grpc.server.max_pending_requests", _MAX_PENDING_CALLS),
        ("grpc.server.max_pending_requests_hard_limit", _MAX_PENDING_CALLS),
    ]
    if config.idle_timeout:
        # S8: the proxy closes a connection without calls after maxConnectionIdle (120 s,
        # docs/protocol.md §2.6).
        options.append(("grpc.max_connection_idle_ms", _ms(config.idle_timeout)))
    if config.keepalive_time:
        # S12: ping a silent connection and close it when the ack does not come, so a half-open peer's
        # fd (and its calls) are freed; grpc's server default is one ping per 2 h.
        options.append(("grpc.keepalive_time_ms", _ms(config.keepalive_time)))
        options.append(("grpc.keepalive_timeout_ms", _ms(config.keepalive_timeout)))
        # A keepalive that fires while another ping (a BDP probe) is unanswered waits for that ping, whose
        # ack is bounded by the ping timeout (60 s by default), not by the keepalive timeout.
        options.append(("grpc.http2.ping_timeout_ms", _ms(config.keepalive_timeout)))
    return options


_TELEMETRY_QUEUE: Final = 1024  # outgoing commands buffered per stream
_FILTER_CACHE: Final = 1024
_CHECKED_NAMES: Final = 4096
_DEADLINE_MARGIN: Final = 0.1  # seconds
_OK: Final = int(Code.OK)
_R = TypeVar("_R")


def _status(code: int, message: str | None = None) -> d.Status:
    text = message if message is not None else Code(code).name
    return d.Status(code=cast(Any, code), message=text)


_STATUS_OK: Final = _status(Code.OK)


def _error_status(exc: Invalid | BrokerError) -> d.Status:
    return d.Status(code=cast(Any, exc.code), message=exc.message)


def _combined(codes: Sequence[int]) -> d.Status:
    """The top-level status of a multi-entry answer: the shared code, or MULTIPLE_RESULTS
    (docs/protocol.md §7.3)."""
    if len(codes) == 1 and codes[0] == _OK:
        return _STATUS_OK
    first: int | None = None
    for code in codes:
        if first is None:
            first = code
        elif code != first:
            return _status(Code.MULTIPLE_RESULTS)
    return _STATUS_OK if first is None or first == _OK else _status(first)


def _scheme_of(host: str) -> int:
    text = host.strip("[]")
    if ":" in text:
        return d.AddressScheme.IPv6
    if text.replace(".", "").isdigit():
        return d.AddressScheme.IPv4
    return d.AddressScheme.DOMAIN_NAME


class _Session:
    """One open Telemetry stream: where server-initiated commands for a client go."""

    __slots__ = ("abort", "broker", "client_id", "mute", "peer", "queue")

    def __init__(self, client_id: str, broker: int, peer: str) -> None:
        self.client_id = client_id
        self.broker = broker
        self.peer = peer
        self.queue: asyncio.Queue[s.TelemetryCommand | None] = asyncio.Queue(_TELEMETRY_QUEUE)
        self.abort: tuple[grpc.StatusCode, str] | None = None
        self.mute = False  # a dropped Telemetry call: settings are stored but never answered

    def send(self, command: s.TelemetryCommand | None) -> bool:
        try:
            self.queue.put_nowait(command)
        except asyncio.QueueFull:
            logger.warning("telemetry queue of client %s is full; command dropped", self.client_id)
            return False
        return True

    def end(self, status: grpc.StatusCode, details: str) -> None:
        """End the stream with `status`, dropping the commands not written yet (even from a full queue)."""
        self.abort = (status, details)
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queue.put_nowait(None)


class _Client:
    """What the server remembers of a client id between its calls: when it was last heard from (any call
    or Telemetry command; upstream expires a channel after `channelExpiredTimeout`, docs/protocol.md §4.7) and
    its parked long polls, answered at once when it expires."""

    __slots__ = ("expired", "last_seen", "polls")

    def __init__(self) -> None:
        self.last_seen = 0.0
        self.expired = False
        self.polls: set[asyncio.Future[None]] = set()


class MessagingServicer(g.MessagingServiceServicer):  # type: ignore[misc]
    """`MessagingService` for one broker (one port) of an `EmbeddedServer`."""

    def __init__(self, server: EmbeddedServer, index: int) -> None:
        self._server = server
        self._index = index
        self._broker = server.brokers[index]
        self._faults = server.faults
        self._auth = server.authenticator
        self._catalog = server.catalog
        self._filters: dict[tuple[int, str], MessageFilter] = {}
        self._checked_topics: set[str] = set()
        self._checked_groups: set[str] = set()

    # ------------------------------------------------------------------------------------------
    # plumbing

    async def _unary(
        self,
        rpc: Rpc,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
        work: Callable[[Caller], _R],
        fail: Callable[[d.Status], _R],
    ) -> _R:
        action = self._faults.on_call(rpc, self._index)
        if action is not None:
            early = await self._pre_action(action, context)
            if early is not None:
                return fail(early)
        try:
            caller = self._auth.check(context.invocation_metadata() or ())
            self._server.seen(caller.client_id)
            result = work(caller)
        except (Invalid, BrokerError) as exc:
            result = fail(_error_status(exc))
        except Exception as exc:  # the proxy's catch-all (docs/protocol.md §2.2): not gRPC INTERNAL
            logger.exception("%s failed", rpc.value)
            result = fail(_status(Code.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}"))
        if action is not None and action.drop:
            await self._server.hold(context)
        return result

    async def _pre_action(
        self,
        action: Action,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> d.Status | None:
        """Apply latency, an injected status, or a drop-without-processing; a status to answer with."""
        if action.latency:
            await asyncio.sleep(action.latency)
        if action.code is not None:
            return _status(action.code, action.message)
        if action.drop and not action.process:
            await self._server.hold(context)
            return _status(Code.PROXY_TIMEOUT, "response dropped")
        return None

    def _broker_for(self, handle: str) -> Broker:
        """The broker a receipt/recall handle came from (the port's own broker when unknown)."""
        name = broker_of_handle(handle)
        if name is None or name == self._broker.name:
            return self._broker
        return self._server.broker_by_name.get(name, self._broker)

    def _filter(self, expression: d.FilterExpression) -> MessageFilter:
        kind = expression.type or FilterKind.TAG
        key = (kind, expression.expression)
        compiled = self._filters.get(key)
        if compiled is None:
            compiled = compile_filter(kind, expression.expression)
            if len(self._filters) >= _FILTER_CACHE:
                self._filters.clear()
            self._filters[key] = compiled
        return compiled

    def _topic(self, name: str) -> TopicInfo:
        # Names are checked once: a valid name stays valid, and clients repeat the same few names on
        # every call (bounded, cleared when full).
        checked = self._checked_topics
        if name not in checked:
            check_topic(name)
            if len(checked) >= _CHECKED_NAMES:
                checked.clear()
            checked.add(name)
        return self._catalog.topic(name)

    def _group(self, name: str) -> None:
        checked = self._checked_groups
        if name not in checked:
            check_group(name)
            if len(checked) >= _CHECKED_NAMES:
                checked.clear()
            checked.add(name)

    # ------------------------------------------------------------------------------------------
    # routing

    async def QueryRoute(
        self,
        request: s.QueryRouteRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> s.QueryRouteResponse:
        def work(caller: Caller) -> s.QueryRouteResponse:
            info = self._topic(request.topic.name)
            response = s.QueryRouteResponse(status=_STATUS_OK)
            types = [int(t) for t in sorted(info.types)]
            for broker_pb in self._server.topic_brokers(request.endpoints, info):
                for qid in range(info.queues):
                    mq = response.message_queues.add()
                    mq.topic.CopyFrom(request.topic)
                    mq.id = qid
                    mq.permission = d.Permission.READ_WRITE
                    mq.broker.CopyFrom(broker_pb)
                    mq.accept_message_types.extend(cast(Any, types))
            return response

        return await self._unary(Rpc.QUERY_ROUTE, context, work, lambda st: s.QueryRouteResponse(status=st))

    async def QueryAssignment(
        self,
        request: s.QueryAssignmentRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> s.QueryAssignmentResponse:
        def work(caller: Caller) -> s.QueryAssignmentResponse:
            info = self._topic(request.topic.name)
            check_group(request.group.name)
            group = self._catalog.group(request.group.name)
            response = s.QueryAssignmentResponse(status=_STATUS_OK)
            # Assignments carry no accept_message_types: the proxy builds their queues from topic, id,
            # permission and broker only (RouteActivity.queryAssignment); the route has the types.
            override = self._faults.assignment(info.name, group.name)
            if override is not None:  # staged by a test (Faults.set_assignment), every port alike
                by_name = {pb.name: pb for pb in self._server.route_brokers(request.endpoints)}
                brokers = self._server.brokers
                for b, qid in override:
                    broker_pb = by_name.get(brokers[b].name) if b < len(brokers) else None
                    if broker_pb is not None:
                        mq = response.assignments.add().message_queue
                        mq.topic.CopyFrom(request.topic)
                        mq.id = qid
                        mq.permission = d.Permission.READ_WRITE
                        mq.broker.CopyFrom(broker_pb)
                return response
            # Non-FIFO groups: one "acting queue" id -1 per broker, load balanced by pop; FIFO groups:
            # one assignment per queue. The same list for every client (docs/protocol.md §3.3).
            ids = range(info.queues) if group.fifo else (-1,)
            for broker_pb in self._server.topic_brokers(request.endpoints, info):
                for qid in ids:
                    mq = response.assignments.add().message_queue
                    mq.topic.CopyFrom(request.topic)
                    mq.id = qid
                    mq.permission = d.Permission.READ_WRITE
                    mq.broker.CopyFrom(broker_pb)
            return response

        return await self._unary(
            Rpc.QUERY_ASSIGNMENT, context, work, lambda st: s.QueryAssignmentResponse(status=st)
        )

    # ------------------------------------------------------------------------------------------
    # client management

    async def Heartbeat(
        self,
        request: s.HeartbeatRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> s.HeartbeatResponse:
        def work(caller: Caller) -> s.HeartbeatResponse:
            if request.HasField("group") and request.group.name:
                check_group(request.group.name)
            # The proxy answers from the settings Telemetry stored (docs/protocol.md §4.1).
            if self._server.client_settings(caller.client_id) is None:
                return s.HeartbeatResponse(
                    status=_status(
                        Code.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client"
                    )
                )
            return s.HeartbeatResponse(status=_STATUS_OK)

        return await self._unary(Rpc.HEARTBEAT, context, work, lambda st: s.HeartbeatResponse(status=st))

    async def NotifyClientTermination(
        self,
        request: s.NotifyClientTerminationRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> s.NotifyClientTerminationResponse:
        def work(caller: Caller) -> s.NotifyClientTerminationResponse:
            known = self._server.terminate_client(caller.client_id)
            if not known:
                return s.NotifyClientTerminationResponse(
                    status=_status(
                        Code.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client"
                    )
                )
            return s.NotifyClientTerminationResponse(status=_STATUS_OK)

        return await self._unary(
            Rpc.NOTIFY_CLIENT_TERMINATION,
            context,
            work,
            lambda st: s.NotifyClientTerminationResponse(status=st),
        )

    # ------------------------------------------------------------------------------------------
    # producing

    async def SendMessage(
        self,
        request: s.SendMessageRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> s.SendMessageResponse:
        def work(caller: Caller) -> s.SendMessageResponse:
            messages = request.messages
            if not messages:
                raise Invalid(Code.MESSAGE_CORRUPTED, "no message to send")
            topic = messages[0].topic.name
            if len(messages) > 1:
                for message in messages:
                    if message.topic.name != topic:
                        raise Invalid(
                            Code.MESSAGE_CORRUPTED, "all messages of one request must share a topic"
                        )
            self._topic(topic)
            now = time.time()
            client_id = caller.client_id
            # The proxy builds every message before it sends any (SendMessageActivity.buildMessage): the
            # first invalid one fails the whole request with its code as the top status and no entries.
            valid = [inbound_message(message, client_id, now) for message in messages]
            # A refusal by the broker (type conflict, not hosted, delivery time, held-message limit) fails
            # the whole request too: the proxy makes entries only from the broker's SendResults.
            results = self._broker.send(valid, now)
            response = s.SendMessageResponse()
            entry = response.entries.add()
            entry.status.CopyFrom(_STATUS_OK)
            first = results[0]
            if len(results) > 1:
                # The proxy sends a batch as one MessageBatch and answers one entry for the broker's one
                # SendResult (SendMessageActivity.convertToSendMessageResponse): the first message's queue
                # offset, the first message's key as transaction id, and the broker's offset message id
                # (store host, port, commit-log offset: never the client's).
                entry.message_id = f"7F000001{self._index:08X}{first.offset:016X}"
            else:
                entry.message_id = messages[0].system_properties.message_id
                if first.recall_handle:
                    entry.recall_handle = first.recall_handle
            # The broker's SendResult carries the (first) message's unique key as its transaction id for
            # every message, not only for transactional ones (SendMessageActivity).
            entry.transaction_id = first.transaction_id or messages[0].system_properties.message_id
            entry.offset = first.offset
            self._server.stats.entries[Rpc.SEND_MESSAGE.value] += len(valid)
            self._server.changed(self._index, topic)
            response.status.CopyFrom(_STATUS_OK)
            return response

        return await self._unary(Rpc.SEND_MESSAGE, context, work, lambda st: s.SendMessageResponse(status=st))

    async def EndTransaction(
        self,
        request: s.EndTransactionRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> s.EndTransactionResponse:
        def work(caller: Caller) -> s.EndTransactionResponse:
            topic = request.topic.name
            self._topic(topic)
            if not request.transaction_id.strip():
                raise Invalid(Code.INVALID_TRANSACTION_ID, "transaction id cannot be empty")
            commit: bool | None = None
            if request.resolution == d.TransactionResolution.COMMIT:
                commit = True
            elif request.resolution == d.TransactionResolution.ROLLBACK:
                commit = False
            # Any other resolution is upstream's TransactionStatus.UNKNOWN (EndTransactionActivity): OK,
            # nothing resolved, the message stays prepared and is checked later.
            now = time.time()
            # The producer sends EndTransaction to the broker it sent to; try the others if not.
            brokers = [self._broker, *(b for b in self._server.brokers if b is not self._broker)]
            for i, broker in enumerate(brokers):
                try:
                    broker.end_transaction(
                        topic=topic,
                        message_id=request.message_id,
                        transaction_id=request.transaction_id,
                        commit=commit,
                        now=now,
                    )
                except BrokerError as exc:
                    if exc.code != Code.INVALID_TRANSACTION_ID or i == len(brokers) - 1:
                        raise
                    continue
                if commit:
                    self._server.changed(self._server.brokers.index(broker), topic)
                break
            return s.EndTransactionResponse(status=_STATUS_OK)

        return await self._unary(
            Rpc.END_TRANSACTION, context, work, lambda st: s.EndTransactionResponse(status=st)
        )

    async def RecallMessage(
        self,
        request: s.RecallMessageRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> s.RecallMessageResponse:
        def work(caller: Caller) -> s.RecallMessageResponse:
            self._topic(request.topic.name)
            if not request.recall_handle:
                raise Invalid(Code.BAD_REQUEST, "recall handle cannot be empty")
            broker = self._broker_for(request.recall_handle)
            message_id = broker.recall(
                topic=request.topic.name, recall_handle=request.recall_handle, now=time.time()
            )
            return s.RecallMessageResponse(status=_STATUS_OK, message_id=message_id)

        return await self._unary(
            Rpc.RECALL_MESSAGE, context, work, lambda st: s.RecallMessageResponse(status=st)
        )

    # ------------------------------------------------------------------------------------------
    # consuming

    async def ReceiveMessage(
        self,
        request: s.ReceiveMessageRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> AsyncIterator[s.ReceiveMessageResponse]:
        if _undecodable(request):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request cannot be decoded")
        action = self._faults.on_call(Rpc.RECEIVE_MESSAGE, self._index)
        # Bounded record of attempt ids, so tests can check a client's retry reuses one (F14).
        self._faults.stats.record_receive(
            self._index,
            request.group.name,
            request.message_queue.topic.name,
            request.attempt_id if request.HasField("attempt_id") else None,
        )
        status: d.Status | None = None
        deliveries: list[Delivery] = []
        if action is not None:
            status = await self._pre_action(action, context)
        if status is None:
            try:
                caller = self._auth.check(context.invocation_metadata() or ())
            except Invalid as exc:
                # Refused by the proxy's request pipeline (authentication, CLIENT_ID_REQUIRED) before the
                # activity runs: the status alone, without the closing delivery_timestamp
                # (GrpcMessagingApplication.addExecutor / writeResponse).
                yield s.ReceiveMessageResponse(status=_error_status(exc))
                return
            try:
                deliveries = await self._receive(request, context, caller)
            except (Invalid, BrokerError) as exc:
                status = _error_status(exc)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.exception("ReceiveMessage failed")
                status = _status(Code.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")
            if action is not None and action.drop:
                await self._server.hold(context)
        if status is None:
            if deliveries:
                yield s.ReceiveMessageResponse(status=_STATUS_OK)
                for delivery in deliveries:
                    response = s.ReceiveMessageResponse()
                    delivery_pb(delivery, response.message)
                    yield response
                self._server.stats.entries[Rpc.RECEIVE_MESSAGE.value] += len(deliveries)
            else:
                yield s.ReceiveMessageResponse(status=_status(Code.MESSAGE_NOT_FOUND, "no new message"))
        else:
            yield s.ReceiveMessageResponse(status=status)
        # The proxy writes delivery_timestamp last, in onComplete (docs/protocol.md §6.4).
        yield s.ReceiveMessageResponse(delivery_timestamp=timestamp(time.time()))

    async def _receive(
        self,
        request: s.ReceiveMessageRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
        caller: Caller,
    ) -> list[Delivery]:
        client = self._server.seen(caller.client_id)
        settings = self._server.client_settings(caller.client_id)
        request_timeout = settings.request_timeout if settings is not None else DEFAULT_REQUEST_TIMEOUT
        # Polling time: the request's, clamped to [5 s, 20 s], within the deadline (docs/protocol.md §6.2).
        remaining = context.time_remaining()
        polling = check_polling_time(
            duration_seconds(request.long_polling_timeout)
            if request.HasField("long_polling_timeout")
            else None,
            remaining,
            request_timeout,
            client_version=caller.version,
        )
        if remaining is not None:
            # thrust: answer a little before the deadline when the hold is bounded by it, so the
            # empty result reaches the client instead of a DEADLINE_EXCEEDED.
            polling = min(polling, remaining - _DEADLINE_MARGIN)
        topic = request.message_queue.topic.name
        group = request.group.name
        self._group(group)
        self._topic(topic)  # TOPIC_NOT_FOUND unless auto-create
        self._catalog.group(group)  # CONSUMER_GROUP_NOT_FOUND unless auto-create
        if request.auto_renew:
            invisible = DEFAULT_INVISIBLE_SECONDS
        else:
            if not request.HasField("invisible_duration"):
                raise Invalid(
                    Code.ILLEGAL_INVISIBLE_TIME, "invisible duration is required without auto renew"
                )
            invisible = duration_seconds(request.invisible_duration)
            check_receive_invisible_duration(invisible)
        message_filter = self._filter(request.filter_expression)
        batch = request.batch_size
        batch = MAX_BATCH_SIZE if batch <= 0 else min(batch, MAX_BATCH_SIZE)
        # The proxy pops the broker's acting queue (-1) whatever the request's queue id says, FIFO groups
        # included (docs/protocol.md §3.3: ReceiveMessageQueueSelector maps the broker name to queue -1).
        # Clients rely on it: the official SimpleConsumer names a random route queue on every receive.
        queue_id = -1
        mq = request.message_queue
        broker = self._broker
        index = self._index
        if mq.broker.name and mq.broker.name != broker.name:
            other = self._server.broker_by_name.get(mq.broker.name)
            if other is not None:
                broker = other
                index = self._server.brokers.index(other)
        attempt_id = request.attempt_id if request.HasField("attempt_id") else None
        server = self._server
        loop = asyncio.get_running_loop()
        deadline = loop.time() + polling
        parked: tuple[int, str] | None = None
        try:
            while True:
                deliveries = broker.pop(
                    client_id=caller.client_id,
                    group=group,
                    topic=topic,
                    queue_id=queue_id,
                    message_filter=message_filter,
                    batch_size=batch,
                    invisible_duration=invisible,
                    auto_renew=request.auto_renew,
                    attempt_id=attempt_id,
                    now=time.time(),
                )
                if deliveries:
                    server.reschedule(broker)
                    if request.auto_renew:
                        server.track(caller.client_id)
                    return deliveries
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return deliveries
                if parked is None:
                    # S8: a bounded number of waiting polls per group (upstream's pop hold queue answers
                    # POLLING_FULL, which the proxy returns as TOO_MANY_REQUESTS; clients back off 20 ms).
                    server.park(index, group)
                    parked = (index, group)
                await server.wait_for_change(index, topic, remaining, client)
                if client.expired:  # S12: the client expired while it waited; answer "nothing"
                    return []
        finally:
            if parked is not None:
                server.unpark(*parked)

    async def AckMessage(
        self,
        request: s.AckMessageRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> s.AckMessageResponse:
        def work(caller: Caller) -> s.AckMessageResponse:
            topic = request.topic.name
            group = request.group.name
            self._group(group)
            self._topic(topic)
            fifo = self._catalog.group(group).fifo
            faults = self._faults
            now = time.time()
            client_id = caller.client_id
            response = s.AckMessageResponse()
            codes: list[int] = []
            acked = 0
            touched: set[Broker] = set()
            # With one broker every handle is routed to it anyway (see `_broker_for`).
            single = self._broker if len(self._server.brokers) == 1 else None
            for entry in request.entries:
                result = response.entries.add()
                result.message_id = entry.message_id
                handle = entry.receipt_handle
                result.receipt_handle = handle
                code: int = _OK
                message = "OK"
                injected = None
                if faults.active:
                    injected = faults.ack_entry_fault(entry.message_id)
                    if faults.handle_expired(handle, entry.message_id):
                        injected = (Code.INVALID_RECEIPT_HANDLE, "receipt handle is expired")
                if injected is not None:
                    code, message = injected
                else:
                    broker = single or self._broker_for(handle)
                    try:
                        broker.ack(
                            client_id=client_id,
                            group=group,
                            topic=topic,
                            receipt_handle=handle,
                            message_id=entry.message_id,
                            now=now,
                        )
                        acked += 1
                        touched.add(broker)
                    except BrokerError as exc:
                        code, message = exc.code, exc.message
                if code == _OK:
                    result.status.CopyFrom(_STATUS_OK)
                else:
                    status = result.status
                    status.code = code  # type: ignore[assignment]
                    status.message = message
                codes.append(code)
            response.status.CopyFrom(_combined(codes))
            self._server.stats.entries[Rpc.ACK_MESSAGE.value] += acked
            if fifo:
                # An ack unblocks the next message of its FIFO message group.
                for broker in touched:
                    self._server.changed(self._server.brokers.index(broker), topic)
            return response

        return await self._unary(Rpc.ACK_MESSAGE, context, work, lambda st: s.AckMessageResponse(status=st))

    async def ChangeInvisibleDuration(
        self,
        request: s.ChangeInvisibleDurationRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> s.ChangeInvisibleDurationResponse:
        def work(caller: Caller) -> s.ChangeInvisibleDurationResponse:
            topic = request.topic.name
            group = request.group.name
            self._group(group)
            self._topic(topic)
            self._catalog.group(group)
            seconds = duration_seconds(request.invisible_duration)
            check_change_invisible_duration(seconds)
            handle = request.receipt_handle
            if self._faults.handle_expired(handle, request.message_id):
                raise Invalid(Code.INVALID_RECEIPT_HANDLE, "receipt handle is expired")
            broker = self._broker_for(handle)
            new_handle = broker.change_invisible_duration(
                client_id=caller.client_id,
                group=group,
                topic=topic,
                receipt_handle=handle,
                message_id=request.message_id,
                duration=seconds,
                now=time.time(),
            )
            self._server.stats.entries[Rpc.CHANGE_INVISIBLE_DURATION.value] += 1
            if seconds <= 0:
                self._server.changed(self._server.brokers.index(broker), topic)
            else:
                self._server.reschedule(broker)
            return s.ChangeInvisibleDurationResponse(status=_STATUS_OK, receipt_handle=new_handle)

        return await self._unary(
            Rpc.CHANGE_INVISIBLE_DURATION,
            context,
            work,
            lambda st: s.ChangeInvisibleDurationResponse(status=st),
        )

    async def ForwardMessageToDeadLetterQueue(
        self,
        request: s.ForwardMessageToDeadLetterQueueRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> s.ForwardMessageToDeadLetterQueueResponse:
        def work(caller: Caller) -> s.ForwardMessageToDeadLetterQueueResponse:
            topic = request.topic.name
            group = request.group.name
            self._group(group)
            self._topic(topic)
            fifo = self._catalog.group(group).fifo
            handle = request.receipt_handle
            if self._faults.handle_expired(handle, request.message_id):
                raise Invalid(Code.INVALID_RECEIPT_HANDLE, "receipt handle is expired")
            broker = self._broker_for(handle)
            broker.forward_to_dead_letter_queue(
                client_id=caller.client_id,
                group=group,
                topic=topic,
                receipt_handle=handle,
                message_id=request.message_id,
                now=time.time(),
            )
            self._server.stats.entries[Rpc.FORWARD_MESSAGE_TO_DEAD_LETTER_QUEUE.value] += 1
            index = self._server.brokers.index(broker)
            self._server.changed(index, dead_letter_topic(group))
            if fifo:
                self._server.changed(index, topic)
            return s.ForwardMessageToDeadLetterQueueResponse(status=_STATUS_OK)

        return await self._unary(
            Rpc.FORWARD_MESSAGE_TO_DEAD_LETTER_QUEUE,
            context,
            work,
            lambda st: s.ForwardMessageToDeadLetterQueueResponse(status=st),
        )

    # ------------------------------------------------------------------------------------------
    # offset-mode RPCs: the broker core keeps no consumer offsets, so these answer NOT_IMPLEMENTED.

    async def PullMessage(
        self,
        request: s.PullMessageRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> AsyncIterator[s.PullMessageResponse]:
        if _undecodable(request):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request cannot be decoded")
        status = await self._unary(
            Rpc.PULL_MESSAGE,
            context,
            lambda caller: _status(Code.NOT_IMPLEMENTED, _NO_OFFSETS),
            lambda st: st,
        )
        yield s.PullMessageResponse(status=status)

    async def UpdateOffset(
        self,
        request: s.UpdateOffsetRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> s.UpdateOffsetResponse:
        return await self._not_implemented(Rpc.UPDATE_OFFSET, context, s.UpdateOffsetResponse)

    async def GetOffset(
        self,
        request: s.GetOffsetRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> s.GetOffsetResponse:
        return await self._not_implemented(Rpc.GET_OFFSET, context, s.GetOffsetResponse)

    async def QueryOffset(
        self,
        request: s.QueryOffsetRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> s.QueryOffsetResponse:
        return await self._not_implemented(Rpc.QUERY_OFFSET, context, s.QueryOffsetResponse)

    async def SyncLiteSubscription(
        self,
        request: s.SyncLiteSubscriptionRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> s.SyncLiteSubscriptionResponse:
        return await self._not_implemented(
            Rpc.SYNC_LITE_SUBSCRIPTION,
            context,
            s.SyncLiteSubscriptionResponse,
            "lite topics are not supported by the embedded server",
        )

    async def _not_implemented(
        self,
        rpc: Rpc,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
        response_type: Callable[..., _R],
        message: str = "",
    ) -> _R:
        text = message or _NO_OFFSETS
        return await self._unary(
            rpc,
            context,
            lambda caller: response_type(status=_status(Code.NOT_IMPLEMENTED, text)),
            lambda st: response_type(status=st),
        )

    # ------------------------------------------------------------------------------------------
    # telemetry

    async def Telemetry(
        self,
        request_iterator: AsyncIterator[s.TelemetryCommand],
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> None:
        action = self._faults.on_call(Rpc.TELEMETRY, self._index)
        if action is not None:
            early = await self._pre_action(action, context)
            if early is not None:
                await context.write(s.TelemetryCommand(status=early))
                return
        try:
            caller = self._auth.check(context.invocation_metadata() or ())
        except Invalid as exc:
            await context.write(s.TelemetryCommand(status=_error_status(exc)))
            code = (
                grpc.StatusCode.UNAUTHENTICATED
                if exc.code == Code.UNAUTHORIZED
                else grpc.StatusCode.INVALID_ARGUMENT
            )
            await context.abort(code, exc.message)
            return
        session = _Session(caller.client_id, self._index, context.peer())
        session.mute = action is not None and action.drop
        server = self._server
        server.seen(caller.client_id)
        server.open_session(session)
        reader = asyncio.create_task(self._telemetry_reader(session, request_iterator))
        try:
            while (command := await session.queue.get()) is not None:
                await context.write(command)
        finally:
            reader.cancel()
            server.close_session(session)
        if session.abort is not None:
            await context.abort(*session.abort)

    async def _telemetry_reader(
        self, session: _Session, request_iterator: AsyncIterator[s.TelemetryCommand]
    ) -> None:
        server = self._server
        try:
            async for command in request_iterator:
                if _undecodable(command):
                    session.abort = (grpc.StatusCode.INVALID_ARGUMENT, "telemetry command cannot be decoded")
                    break
                server.seen(session.client_id)
                which = command.WhichOneof("command")
                if which == "settings":
                    try:
                        reply = server.apply_settings(session.client_id, command.settings)
                    except Invalid as exc:
                        if exc.code == Code.BAD_REQUEST:  # PUBSUB_NOT_SET (docs/protocol.md §2.2)
                            session.abort = (grpc.StatusCode.INVALID_ARGUMENT, exc.message)
                            break
                        reply = s.TelemetryCommand(status=_error_status(exc))
                    except BrokerError as exc:
                        reply = s.TelemetryCommand(status=_error_status(exc))
                    delay = self._faults.settings_delay(self._index)
                    if session.mute:
                        continue
                    if delay:
                        asyncio.get_running_loop().call_later(delay, session.send, reply)
                    else:
                        session.send(reply)
                elif which == "thread_stack_trace":
                    server.answer(command.thread_stack_trace.nonce, command)
                elif which == "verify_message_result":
                    server.answer(command.verify_message_result.nonce, command)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the stream broke (client went away); the writer ends below
            logger.debug("telemetry stream of %s ended: %s", session.client_id, exc)
        finally:
            session.send(None)


_NO_OFFSETS: Final = "offset-mode consumption is not supported by the embedded server (no consumer offsets)"


class EmbeddedServer:
    """An in-memory RocketMQ 5 "proxy + brokers" on `config.brokers` ports.

    Use as `async with EmbeddedServer(config) as server:` or call `start()` / `stop()`.

    Attributes:
        config: the configuration.
        catalog: topics and groups, shared by every broker.
        brokers: one `Broker` per port, named `<prefix>-<i>`.
        faults: fault injection and counters (`faults.stats`).
        ports: the bound ports (after `start()`).
    """

    def __init__(self, config: ServerConfig | None = None, *, faults: Faults | None = None) -> None:
        self.config = config = config or ServerConfig()
        host = config.host
        if not is_loopback(host) and not config.credentials and not config.insecure_allow_remote:
            raise ValueError(
                f"refusing to listen on non-loopback address {host!r} without authentication; "
                "set credentials or insecure_allow_remote"
            )
        if bool(config.tls_cert) != bool(config.tls_key):
            raise ValueError("TLS needs both a certificate and a private key")
        if (
            not is_loopback(host)
            and config.credentials
            and not config.tls_cert
            and not config.insecure_allow_remote
        ):
            # S7 (docs/reliability.md §5): the signature covers only x-mq-date-time, so over plaintext anyone
            # on the path can replay a captured header (within the date-time window).
            raise ValueError(
                f"refusing to accept signed requests over plaintext on non-loopback address {host!r}: "
                "signatures can be captured and replayed; set tls_cert/tls_key or insecure_allow_remote"
            )
        config.check_limits()
        count = len(config.ports) if config.ports else config.brokers
        if count < 1:
            raise ValueError("at least one broker is needed")
        self.catalog = Catalog(
            auto_create_topics=config.auto_create_topics, default_queues=config.default_queues
        )
        for topic in config.topics:
            for b in topic.brokers:
                if b >= count:
                    raise ValueError(f"topic {topic.name!r} is placed on broker {b}, but there are {count}")
            hosts = [f"{config.broker_prefix}-{b}" for b in topic.brokers] if topic.brokers else None
            self.catalog.create_topic(topic.name, topic.queues, topic.types, hosts)
        for group in config.groups:
            self.catalog.create_group(group.name, fifo=group.fifo, retry=group.retry)
        self.brokers = [
            Broker(
                f"{config.broker_prefix}-{i}",
                self.catalog,
                transaction_check_after=config.transaction_check_after,
                transaction_check_interval=config.transaction_check_interval,
            )
            for i in range(count)
        ]
        self.broker_by_name = {b.name: b for b in self.brokers}
        self.faults = faults if faults is not None else Faults()
        self.authenticator = Authenticator(
            config.credentials, date_time_window=config.effective_date_time_window()
        )
        self.ports: list[int] = []
        self._servers: list[grpc.aio.Server] = []
        self._servicers = [MessagingServicer(self, i) for i in range(count)]
        self._settings: dict[str, ClientSettings] = {}
        self._sessions: dict[str, list[_Session]] = {}
        self._expiry: dict[str, asyncio.TimerHandle] = {}
        self._pending: dict[str, asyncio.Future[s.TelemetryCommand]] = {}
        self._waiters: list[dict[str, set[asyncio.Future[None]]]] = [{} for _ in range(count)]
        self._held: set[asyncio.Future[None]] = set()
        self._clients: dict[str, _Client] = {}
        self._parked: dict[tuple[int, str], int] = {}
        self._sweeper: asyncio.TimerHandle | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False

    # ------------------------------------------------------------------------------------------
    # lifecycle

    @property
    def stats(self) -> Stats:
        """Call and entry counters (`faults.stats`)."""
        return self.faults.stats

    @property
    def endpoints(self) -> list[str]:
        """`host:port` of each broker, in broker order."""
        host = self.config.host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return [f"{host}:{port}" for port in self.ports]

    async def start(self) -> None:
        """Bind every port and start serving."""
        if self._started:
            return
        self._loop = asyncio.get_running_loop()
        config = self.config
        credentials = None
        if config.tls_cert and config.tls_key:
            credentials = grpc.ssl_server_credentials([(config.tls_key, config.tls_cert)])
        options = _server_options(config)
        try:
            for i, servicer in enumerate(self._servicers):
                server = grpc.aio.server(options=options)
                _register(server, servicer)
                self._servers.append(server)
                self.ports.append(self._bind(server, i, credentials))
            for server in self._servers:
                await server.start()
        except BaseException:
            for server in self._servers:
                await server.stop(None)
            self._servers.clear()
            self.ports.clear()
            raise
        self._started = True
        self._schedule_timer()
        self._schedule_sweep()
        if not is_loopback(config.host):
            logger.warning(
                "listening on non-loopback address %s: authentication %s, TLS %s%s",
                config.host,
                "on" if config.credentials else "OFF",
                "on" if config.tls_cert else "OFF",
                " (insecure_allow_remote)" if config.insecure_allow_remote else "",
            )

    def _bind(self, server: grpc.aio.Server, index: int, credentials: grpc.ServerCredentials | None) -> int:
        config = self.config
        host = config.host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        if config.ports:
            wanted = [config.ports[index]]
        elif config.port:
            wanted = [config.port + index]
        elif index == 0:
            wanted = [0]
        else:
            # Consecutive ports when free, else any free port.
            wanted = [self.ports[0] + index, 0]
        for port in wanted:
            address = f"{host}:{port}"
            try:
                if credentials is None:
                    bound = server.add_insecure_port(address)
                else:
                    bound = server.add_secure_port(address, credentials)
            except RuntimeError:
                bound = 0
            if bound:
                return bound
        raise OSError(f"cannot bind {host}:{wanted[0]}")

    async def stop(self, grace: float | None = 0.5) -> None:
        """Stop serving: close Telemetry streams, end held calls, cancel timers."""
        if not self._started:
            return
        self._started = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for handle in self._expiry.values():
            handle.cancel()
        self._expiry.clear()
        for sessions in list(self._sessions.values()):
            for session in sessions:
                session.send(None)
        for fut in self._held:
            fut.cancel()
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()
        await asyncio.gather(*(server.stop(grace) for server in self._servers))
        self._servers.clear()

    async def wait_for_termination(self) -> None:
        """Wait until every port stops serving."""
        await asyncio.gather(*(server.wait_for_termination() for server in self._servers))

    async def __aenter__(self) -> EmbeddedServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------------------------------
    # routes

    def topic_brokers(self, requested: d.Endpoints, topic: TopicInfo) -> list[d.Broker]:
        """`route_brokers`, keeping only the brokers that host `topic` (`TopicInfo.brokers`)."""
        routes = self.route_brokers(requested)
        if topic.brokers is None:
            return routes
        return [pb for pb in routes if topic.hosted_on(pb.name)]

    def route_brokers(self, requested: d.Endpoints) -> list[d.Broker]:
        """Every broker as `Broker{name, id 0, endpoints}`: the host the client dialed (from the
        request's endpoints, docs/protocol.md §3.2) with that broker's port."""
        host: str | None = None
        scheme = 0
        if requested.addresses:
            host = requested.addresses[0].host
            scheme = requested.scheme
        if not host:
            host = self.config.advertise_host or self.config.host
            if host in ("0.0.0.0", "::", ""):
                host = "127.0.0.1"
        if not scheme:
            scheme = _scheme_of(host)
        out = []
        for broker, port in zip(self.brokers, self.ports, strict=False):
            pb = d.Broker(name=broker.name, id=0)
            pb.endpoints.scheme = cast(Any, scheme)
            pb.endpoints.addresses.add(host=host, port=port)
            out.append(pb)
        return out

    # ------------------------------------------------------------------------------------------
    # clients and telemetry

    def client_settings(self, client_id: str) -> ClientSettings | None:
        """The settings a client last reported over Telemetry (merged), or None."""
        return self._settings.get(client_id)

    def connected_clients(self) -> list[str]:
        """Client ids with at least one open Telemetry stream."""
        return list(self._sessions)

    def apply_settings(self, client_id: str, reported: d.Settings) -> s.TelemetryCommand:
        """Validate and merge a client's Settings; the reply to send (docs/protocol.md §4.1, §4.2)."""
        group_info = None
        if reported.WhichOneof("pub_sub") == "subscription" and reported.subscription.group.name:
            check_group(reported.subscription.group.name)
            group_info = self.catalog.group(reported.subscription.group.name)
        settings = merge_settings(reported, group_info)
        self._settings[client_id] = settings
        return s.TelemetryCommand(status=_STATUS_OK, settings=settings.merged)

    def track(self, client_id: str) -> None:
        """A client holds auto-renewed messages: make sure they are released `client_expiry` seconds
        after it is gone, even when it never opened a Telemetry stream."""
        if client_id in self._sessions or client_id in self._expiry or self._loop is None:
            return
        self._expiry[client_id] = self._loop.call_later(
            self.config.client_expiry, self._expire_client, client_id
        )

    def open_session(self, session: _Session) -> None:
        sessions = self._sessions.setdefault(session.client_id, [])
        sessions.append(session)
        handle = self._expiry.pop(session.client_id, None)
        if handle is not None:
            handle.cancel()
        logger.info(
            "client %s connected to broker %d (telemetry from %s)",
            session.client_id,
            session.broker,
            session.peer,
        )

    def close_session(self, session: _Session) -> None:
        sessions = self._sessions.get(session.client_id)
        if sessions is not None and session in sessions:
            sessions.remove(session)
            if not sessions:
                del self._sessions[session.client_id]
                if self._started and self._loop is not None:
                    # Keep the client's auto-renewed messages for a while: it may reconnect (the
                    # proxy expires a channel after 120 s without heartbeat, docs/protocol.md §4.7).
                    self._expiry[session.client_id] = self._loop.call_later(
                        self.config.client_expiry, self._expire_client, session.client_id
                    )
        logger.info("client %s disconnected from broker %d", session.client_id, session.broker)

    def _expire_client(self, client_id: str) -> None:
        self._expiry.pop(client_id, None)
        if client_id in self._sessions:
            return
        self._settings.pop(client_id, None)
        self._release(client_id)

    def terminate_client(self, client_id: str) -> bool:
        """NotifyClientTermination: forget the client's settings and release its in-flight messages
        (visible again after ~1 s, docs/protocol.md §4.7). False when the client had no settings."""
        known = self._settings.pop(client_id, None) is not None
        self._clients.pop(client_id, None)
        self._release(client_id)
        return known

    # ------------------------------------------------------------------------------------------
    # client expiry (S12) and pending long polls (S8), docs/reliability.md §5

    def seen(self, client_id: str) -> _Client:
        """A call or Telemetry command from `client_id` arrived now; its record."""
        client = self._clients.get(client_id)
        if client is None:
            client = _Client()
            if self.config.channel_expiry:  # else nothing would ever remove it
                self._clients[client_id] = client
        client.last_seen = time.monotonic()
        return client

    def park(self, index: int, group: str) -> None:
        """A ReceiveMessage of `group` on broker `index` starts waiting.

        Raises:
            Invalid(TOO_MANY_REQUESTS): `max_pending_polls` of the group are waiting there already.
        """
        key = (index, group)
        waiting = self._parked.get(key, 0)
        limit = self.config.max_pending_polls
        if limit and waiting >= limit:
            raise Invalid(
                Code.TOO_MANY_REQUESTS,
                f"too many long polls waiting for consumer group {group!r} on this broker (limit {limit})",
            )
        self._parked[key] = waiting + 1

    def unpark(self, index: int, group: str) -> None:
        key = (index, group)
        waiting = self._parked.get(key, 0) - 1
        if waiting > 0:
            self._parked[key] = waiting
        else:
            self._parked.pop(key, None)

    def pending_polls(self, group: str, broker: int | None = None) -> int:
        """ReceiveMessage calls of `group` waiting now (on broker index `broker`, or on all)."""
        return sum(n for (b, g), n in self._parked.items() if g == group and broker in (None, b))

    def _schedule_sweep(self) -> None:
        expiry = self.config.channel_expiry
        if expiry and self._started and self._loop is not None:
            # Expire within a quarter of the expiry (at most 5 s) after the deadline.
            self._sweeper = self._loop.call_later(max(0.05, min(expiry / 4, 5.0)), self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        horizon = time.monotonic() - self.config.channel_expiry
        silent = [cid for cid, client in self._clients.items() if client.last_seen < horizon]
        for client_id in silent:
            self.expire_client(client_id)
        self._schedule_sweep()

    def expire_client(self, client_id: str) -> None:
        """Forget a client now, as after `channel_expiry` of silence: end its Telemetry streams, answer its
        parked long polls with no message, drop its settings and release its auto-renewed messages (the
        proxy's channel expiry, docs/protocol.md §4.7). A live client simply reconnects and registers
        again."""
        client = self._clients.pop(client_id, None)
        if client is not None:
            client.expired = True
            for fut in client.polls:
                if not fut.done():
                    fut.set_result(None)
            client.polls.clear()
        reason = f"client expired: nothing heard from it for {self.config.channel_expiry:g} s"
        for session in self._sessions.pop(client_id, ()):
            session.end(grpc.StatusCode.UNAVAILABLE, reason)
        handle = self._expiry.pop(client_id, None)
        if handle is not None:
            handle.cancel()
        self._settings.pop(client_id, None)
        self._release(client_id)
        logger.info("%s (%s)", reason, client_id)

    def _release(self, client_id: str) -> None:
        now = time.time()
        for broker in self.brokers:
            broker.release_client(client_id, now)
            self.reschedule(broker)

    def send_command(self, client_id: str, command: s.TelemetryCommand, *, broker: int | None = None) -> bool:
        """Write a server-initiated command on the client's Telemetry stream (on `broker` when it has
        one there, else any). False when the client has no open stream."""
        sessions = self._sessions.get(client_id)
        if not sessions:
            return False
        chosen = sessions[-1]
        if broker is not None:
            for session in sessions:
                if session.broker == broker:
                    chosen = session
        return chosen.send(command)

    def answer(self, nonce: str, command: s.TelemetryCommand) -> None:
        future = self._pending.pop(nonce, None)
        if future is not None and not future.done():
            future.set_result(command)

    async def _round_trip(
        self,
        client_id: str,
        build: Callable[[str], s.TelemetryCommand],
        timeout: float,
    ) -> s.TelemetryCommand:
        nonce = uuid.uuid4().hex
        future: asyncio.Future[s.TelemetryCommand] = asyncio.get_running_loop().create_future()
        self._pending[nonce] = future
        try:
            if not self.send_command(client_id, build(nonce)):
                raise LookupError(f"client {client_id!r} has no open telemetry stream")
            return await asyncio.wait_for(future, timeout)
        finally:
            self._pending.pop(nonce, None)

    async def print_thread_stack_trace(
        self,
        client_id: str,
        timeout: float = 5.0,
    ) -> s.TelemetryCommand:
        """Send PrintThreadStackTraceCommand; the client's `TelemetryCommand{thread_stack_trace}` reply.

        Raises:
            LookupError: the client has no open Telemetry stream.
            TimeoutError: no answer within `timeout`.
        """

        def build(nonce: str) -> s.TelemetryCommand:
            command = s.TelemetryCommand()
            command.print_thread_stack_trace_command.nonce = nonce
            return command

        return await self._round_trip(client_id, build, timeout)

    async def verify_message(
        self,
        client_id: str,
        message: d.Message,
        timeout: float = 5.0,
    ) -> s.TelemetryCommand:
        """Send VerifyMessageCommand; the client's `TelemetryCommand{status, verify_message_result}`."""

        def build(nonce: str) -> s.TelemetryCommand:
            command = s.TelemetryCommand()
            command.verify_message_command.nonce = nonce
            command.verify_message_command.message.CopyFrom(message)
            return command

        return await self._round_trip(client_id, build, timeout)

    def reconnect_endpoints(self, client_id: str) -> int:
        """Send ReconnectEndpointsCommand on every Telemetry stream of the client; how many were sent."""
        sent = 0
        for session in list(self._sessions.get(client_id, ())):
            command = s.TelemetryCommand()
            command.reconnect_endpoints_command.nonce = uuid.uuid4().hex
            sent += session.send(command)
        return sent

    def _dispatch_check(self, index: int, check: TransactionCheck) -> None:
        command = s.TelemetryCommand()
        recover = command.recover_orphaned_transaction_command
        recover.message.CopyFrom(stored_message_pb(check.message))
        recover.transaction_id = check.transaction_id
        if self.send_command(check.producer_client_id, command, broker=index):
            return
        # The producer is gone: any producer publishing the topic may resolve it (the broker asks
        # any channel of the producer group, docs/protocol.md §5.8).
        topic = check.message.topic
        for client_id, settings in self._settings.items():
            topics = settings.merged.publishing.topics if settings.merged.HasField("publishing") else ()
            if any(t.name == topic for t in topics) and self.send_command(client_id, command, broker=index):
                return

    # ------------------------------------------------------------------------------------------
    # the clock and long polls

    def changed(self, index: int, topic: str) -> None:
        """Something on broker `index` may now be poppable for `topic`: wake its long polls and make
        sure the timer covers the broker's next event."""
        waiters = self._waiters[index].pop(topic, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
        self.reschedule(self.brokers[index])

    def reschedule(self, broker: Broker) -> None:
        """Move the timer earlier if `broker` has an event before it."""
        when = broker.next_event_time()
        if when is not None and when < self._timer_at:
            self._schedule_at(when)

    def _schedule_timer(self) -> None:
        best: float | None = None
        for broker in self.brokers:
            when = broker.next_event_time()
            if when is not None and (best is None or when < best):
                best = when
        self._timer_at = float("inf")
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if best is not None:
            self._schedule_at(best)

    def _schedule_at(self, when: float) -> None:
        if not self._started or self._loop is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._loop.call_later(max(when - time.time(), 0.001), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        now = time.time()
        for index, broker in enumerate(self.brokers):
            try:
                checks = broker.tick(now)
            except Exception:
                logger.exception("tick of broker %s failed", broker.name)
                continue
            for check in checks:
                self._dispatch_check(index, check)
            # Visibility may have changed on any topic of this broker (expired invisibility, delayed
            # messages landing, also when an earlier request's lazy advance applied them): one pop per
            # parked poll.
            waiters = self._waiters[index]
            if waiters:
                self._waiters[index] = {}
                for futures in waiters.values():
                    for fut in futures:
                        if not fut.done():
                            fut.set_result(None)
        self._schedule_timer()

    async def wait_for_change(
        self, index: int, topic: str, within: float, client: _Client | None = None
    ) -> None:
        """Park until `changed(index, topic)` or the timer wakes broker `index`, or `within` seconds pass
        (or `client` expires)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        parked = self._waiters[index].setdefault(topic, set())
        parked.add(fut)
        if client is not None:
            client.polls.add(fut)
        handle = loop.call_later(within, _resolve, fut)
        try:
            await fut
        finally:
            handle.cancel()
            if client is not None:
                client.polls.discard(fut)
            current = self._waiters[index].get(topic)
            if current is not None:
                current.discard(fut)
                if not current:
                    del self._waiters[index][topic]

    async def hold(self, context: grpc.aio.ServicerContext) -> None:  # type: ignore[type-arg]
        """Never answer (a dropped response): wait until the client's deadline has passed, or until
        the call is cancelled or the server stops."""
        remaining = context.time_remaining()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._held.add(fut)
        try:
            if remaining is None:
                await fut
            else:
                await asyncio.wait_for(fut, remaining + 0.5)
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the call itself was cancelled (client gone); `stop()` only cancels `fut`
        finally:
            self._held.discard(fut)


class _Undecodable:
    """A request the deserializer could not parse."""


_UNDECODABLE: Final = _Undecodable()
_SERVICE_NAME: Final = "apache.rocketmq.v2.MessagingService"


def _undecodable(request: object) -> bool:
    return request is _UNDECODABLE


def _decoder(parse: Callable[[bytes], object]) -> Callable[[bytes], object]:
    def decode(data: bytes) -> object:
        try:
            return parse(data)
        except Exception:
            return _UNDECODABLE

    return decode


def _guard_unary(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    async def handler(request: Any, context: Any) -> Any:
        if request is _UNDECODABLE:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request cannot be decoded")
        return await fn(request, context)

    return handler


def _register(server: grpc.aio.Server, servicer: MessagingServicer) -> None:
    """Register every MessagingService method, like the generated `add_..._to_server`, except that an
    undecodable request is answered gRPC INVALID_ARGUMENT (grpc.aio would answer UNKNOWN, which
    reads as a server bug). The streaming handlers check for it themselves."""
    handlers = {}
    for method in s.DESCRIPTOR.services_by_name["MessagingService"].methods:
        request_type = getattr(s, method.input_type.name)
        response_type = getattr(s, method.output_type.name)
        fn = getattr(servicer, method.name)
        decode = _decoder(request_type.FromString)
        encode = response_type.SerializeToString
        if method.client_streaming:
            handler = grpc.stream_stream_rpc_method_handler(fn, decode, encode)
        elif method.server_streaming:
            handler = grpc.unary_stream_rpc_method_handler(fn, decode, encode)
        else:
            handler = grpc.unary_unary_rpc_method_handler(_guard_unary(fn), decode, encode)
        handlers[method.name] = handler
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE_NAME, handlers),))
    # Registered methods are matched by gRPC core when the call arrives, so a call skips the Python-level
    # generic handler lookup (what the generated `add_..._to_server` of grpcio >= 1.62 does too).
    server.add_registered_method_handlers(_SERVICE_NAME, handlers)  # type: ignore[attr-defined]


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
