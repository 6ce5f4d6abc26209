"""Consuming: ReceiveMessage (long polls), AckMessage, ChangeInvisibleDuration and
ForwardMessageToDeadLetterQueue (docs/protocol.md §6, §7)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Final

import grpc

from thrust._codec.scalars import duration_seconds, timestamp
from thrust._codec.status import Code
from thrust._codec.validation import (
    DEFAULT_INVISIBLE_SECONDS,
    Invalid,
    check_change_invisible_duration,
    check_polling_time,
    check_receive_invisible_duration,
)
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.server.auth import Caller
from thrust.server.core.broker import MAX_BATCH_SIZE, Broker
from thrust.server.core.catalog import dead_letter_topic
from thrust.server.core.model import BrokerError, Delivery
from thrust.server.faults import Rpc
from thrust.server.message_codec import delivery_pb
from thrust.server.service.port import Port
from thrust.server.service.status import (
    _OK,
    _STATUS_OK,
    _combined,
    _error_status,
    _status,
    _undecodable,
    logger,
)
from thrust.server.settings import DEFAULT_REQUEST_TIMEOUT

_DEADLINE_MARGIN: Final = 0.1  # seconds


class ConsumerRpcs:
    """ReceiveMessage, AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue."""

    def __init__(self, port: Port) -> None:
        self._port = port

    async def ReceiveMessage(
        self,
        request: s.ReceiveMessageRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> AsyncIterator[s.ReceiveMessageResponse]:
        if _undecodable(request):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request cannot be decoded")
        action = self._port.faults.on_call(Rpc.RECEIVE_MESSAGE, self._port.index)
        # Bounded record of attempt ids, so tests can check a client's retry reuses one (F14).
        self._port.faults.stats.record_receive(
            self._port.index,
            request.group.name,
            request.message_queue.topic.name,
            request.attempt_id if request.HasField("attempt_id") else None,
            request.long_polling_timeout.ToNanoseconds() / 1e9
            if request.HasField("long_polling_timeout")
            else None,
        )
        status: d.Status | None = None
        deliveries: list[Delivery] = []
        if action is not None:
            status = await self._port.pre_action(action, context)
        if status is None:
            try:
                caller = self._port.auth.check(context.invocation_metadata() or ())
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
                await self._port.server.hold(context)
        if status is None:
            if deliveries:
                stall = self._port.faults.stream_stall(len(deliveries))
                yield s.ReceiveMessageResponse(status=_STATUS_OK)
                for i, delivery in enumerate(deliveries):
                    if i == stall:
                        await self._port.server.hold(context)
                        return
                    response = s.ReceiveMessageResponse()
                    delivery_pb(delivery, response.message)
                    yield response
                self._port.server.stats.entries[Rpc.RECEIVE_MESSAGE.value] += len(deliveries)
            else:
                yield s.ReceiveMessageResponse(status=_status(Code.MESSAGE_NOT_FOUND, "no new message"))
        else:
            yield s.ReceiveMessageResponse(status=status)
        # The proxy writes delivery_timestamp last, in onComplete (docs/protocol.md §6.4).
        yield s.ReceiveMessageResponse(delivery_timestamp=timestamp(self._port.now()))

    async def _receive(
        self,
        request: s.ReceiveMessageRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
        caller: Caller,
    ) -> list[Delivery]:
        client = self._port.clients.seen(caller.client_id)
        settings = self._port.clients.client_settings(caller.client_id)
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
        self._port.group(group)
        self._port.topic(topic)  # TOPIC_NOT_FOUND unless auto-create
        self._port.catalog.group(group)  # CONSUMER_GROUP_NOT_FOUND unless auto-create
        if request.auto_renew:
            invisible = DEFAULT_INVISIBLE_SECONDS
        else:
            if not request.HasField("invisible_duration"):
                raise Invalid(
                    Code.ILLEGAL_INVISIBLE_TIME, "invisible duration is required without auto renew"
                )
            invisible = duration_seconds(request.invisible_duration)
            check_receive_invisible_duration(invisible)
        message_filter = self._port.filter(request.filter_expression)
        batch = request.batch_size
        batch = MAX_BATCH_SIZE if batch <= 0 else min(batch, MAX_BATCH_SIZE)
        # The proxy pops the broker's acting queue (-1) whatever the request's queue id says, FIFO groups
        # included (docs/protocol.md §3.3: ReceiveMessageQueueSelector maps the broker name to queue -1).
        # Clients rely on it: the official SimpleConsumer names a random route queue on every receive.
        queue_id = -1
        mq = request.message_queue
        broker = self._port.broker
        index = self._port.index
        if mq.broker.name and mq.broker.name != broker.name:
            other = self._port.server.broker_by_name.get(mq.broker.name)
            if other is not None:
                broker = other
                index = self._port.server.brokers.index(other)
        attempt_id = request.attempt_id if request.HasField("attempt_id") else None
        server = self._port.server
        loop = asyncio.get_running_loop()
        deadline = loop.time() + polling
        parked: tuple[int, str, str] | None = None
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
                    now=self._port.now(),
                )
                if deliveries:
                    server.reschedule(broker)
                    if request.auto_renew:
                        self._port.clients.track(caller.client_id)
                    hold = self._port.faults.popped_hold()
                    if hold:
                        await asyncio.sleep(hold)
                    return deliveries
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return deliveries
                if parked is None:
                    # S8: a bounded number of waiting polls per group and topic (upstream's pop hold
                    # queue answers POLLING_FULL, which the proxy returns as TOO_MANY_REQUESTS; clients
                    # back off 20 ms).
                    server.park(index, group, topic)
                    parked = (index, group, topic)
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
            self._port.group(group)
            self._port.topic(topic)
            fifo = self._port.catalog.group(group).fifo
            faults = self._port.faults
            now = self._port.now()
            client_id = caller.client_id
            response = s.AckMessageResponse()
            codes: list[int] = []
            acked = 0
            touched: set[Broker] = set()
            lite = False
            # With one broker every handle is routed to it anyway (see `_broker_for`).
            single = self._port.broker if len(self._port.server.brokers) == 1 else None
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
                    broker = single or self._port.broker_for(handle)
                    try:
                        broker.ack(
                            client_id=client_id,
                            group=group,
                            topic=topic,
                            receipt_handle=handle,
                            message_id=entry.message_id,
                            now=now,
                            lite_topic=entry.lite_topic if entry.HasField("lite_topic") else None,
                        )
                        lite = lite or entry.HasField("lite_topic")
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
            self._port.server.stats.entries[Rpc.ACK_MESSAGE.value] += acked
            if fifo or lite:
                # An ack unblocks the next message of its FIFO message group (or of its lite topic).
                for broker in touched:
                    self._port.server.changed(self._port.server.brokers.index(broker), topic)
            return response

        return await self._port.unary(
            Rpc.ACK_MESSAGE, context, work, lambda st: s.AckMessageResponse(status=st)
        )

    async def ChangeInvisibleDuration(
        self,
        request: s.ChangeInvisibleDurationRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> s.ChangeInvisibleDurationResponse:
        def work(caller: Caller) -> s.ChangeInvisibleDurationResponse:
            topic = request.topic.name
            group = request.group.name
            self._port.group(group)
            self._port.topic(topic)
            self._port.catalog.group(group)
            seconds = duration_seconds(request.invisible_duration)
            check_change_invisible_duration(seconds)
            handle = request.receipt_handle
            if self._port.faults.handle_expired(handle, request.message_id):
                raise Invalid(Code.INVALID_RECEIPT_HANDLE, "receipt handle is expired")
            broker = self._port.broker_for(handle)
            new_handle = broker.change_invisible_duration(
                client_id=caller.client_id,
                group=group,
                topic=topic,
                receipt_handle=handle,
                message_id=request.message_id,
                duration=seconds,
                now=self._port.now(),
                lite_topic=request.lite_topic if request.HasField("lite_topic") else None,
            )
            self._port.server.stats.entries[Rpc.CHANGE_INVISIBLE_DURATION.value] += 1
            if seconds <= 0:
                self._port.server.changed(self._port.server.brokers.index(broker), topic)
            else:
                self._port.server.reschedule(broker)
            return s.ChangeInvisibleDurationResponse(status=_STATUS_OK, receipt_handle=new_handle)

        return await self._port.unary(
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
            self._port.group(group)
            self._port.topic(topic)
            fifo = self._port.catalog.group(group).fifo
            handle = request.receipt_handle
            if self._port.faults.handle_expired(handle, request.message_id):
                raise Invalid(Code.INVALID_RECEIPT_HANDLE, "receipt handle is expired")
            broker = self._port.broker_for(handle)
            broker.forward_to_dead_letter_queue(
                client_id=caller.client_id,
                group=group,
                topic=topic,
                receipt_handle=handle,
                message_id=request.message_id,
                now=self._port.now(),
                lite_topic=request.lite_topic if request.HasField("lite_topic") else None,
            )
            self._port.server.stats.entries[Rpc.FORWARD_MESSAGE_TO_DEAD_LETTER_QUEUE.value] += 1
            index = self._port.server.brokers.index(broker)
            self._port.server.changed(index, dead_letter_topic(group))
            if fifo or request.HasField("lite_topic"):
                self._port.server.changed(index, topic)
            return s.ForwardMessageToDeadLetterQueueResponse(status=_STATUS_OK)

        return await self._port.unary(
            Rpc.FORWARD_MESSAGE_TO_DEAD_LETTER_QUEUE,
            context,
            work,
            lambda st: s.ForwardMessageToDeadLetterQueueResponse(status=st),
        )
