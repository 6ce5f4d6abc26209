"""Offset-mode and lite RPCs: the broker core keeps no consumer offsets, so the offset RPCs answer
NOT_IMPLEMENTED; SyncLiteSubscription updates the port's broker's lite subscriptions (core/lite.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Final

import grpc

from thrust._codec.status import Code
from thrust._codec.validation import Invalid, check_lite_topic
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.server.auth import Caller
from thrust.server.core.model import MessageType
from thrust.server.faults import Rpc
from thrust.server.service.port import Port
from thrust.server.service.status import _R, _STATUS_OK, _status, _undecodable

_NO_OFFSETS: Final = "offset-mode consumption is not supported by the embedded server (no consumer offsets)"


class OffsetRpcs:
    """PullMessage, UpdateOffset, GetOffset, QueryOffset, SyncLiteSubscription."""

    def __init__(self, port: Port) -> None:
        self._port = port

    async def PullMessage(
        self,
        request: s.PullMessageRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> AsyncIterator[s.PullMessageResponse]:
        if _undecodable(request):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request cannot be decoded")
        status = await self._port.unary(
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
        # Follows 5.5.0's SyncLiteSubscriptionActivity: validate the parent topic, the group and every lite
        # topic name, then apply the action to the broker's LiteSubscriptionRegistry. The clients send it
        # to every broker of the route, so each broker keeps the subscriptions of its own port.
        def work(caller: Caller) -> s.SyncLiteSubscriptionResponse:
            topic = request.topic.name
            group = request.group.name
            self._port.group(group)
            info = self._port.topic(topic)
            ginfo = self._port.catalog.group(group)
            if MessageType.LITE not in info.types or ginfo.lite_bind_topic not in (None, topic):
                # ILLEGAL_TOPIC, as a 5.5.0 proxy answers a subscription to a topic that is not LITE, or
                # not the one the group is bound to (tests/conformance/test_differential_lite.py).
                raise Invalid(Code.ILLEGAL_TOPIC, f"topic {topic!r} is not a LITE topic")
            config = self._port.server.config
            names = list(request.lite_topic_set)
            # Only PARTIAL_ADD's names are checked, as 5.5.0's ClientActivity.syncLiteSubscription does:
            # a COMPLETE_ADD (the clients' resync) carries names a PARTIAL_ADD already let through.
            if request.action == d.LiteSubscriptionAction.PARTIAL_ADD:
                for name in names:
                    check_lite_topic(name, max_size=config.max_lite_topic_size)
            evicted = self._port.broker.sync_lite_subscription(
                client_id=caller.client_id,
                group=group,
                topic=topic,
                action=int(request.action),
                lite_topics=names,
                quota=config.lite_subscription_quota if ginfo.lite_quota is None else ginfo.lite_quota,
                offset=_offset(request.offset_option) if request.HasField("offset_option") else None,
                now=self._port.now(),
            )
            for client_id, name in evicted:
                # LiteSubscriptionRegistryImpl.notifyUnsubscribeLite, through the client's Telemetry stream
                # (the proxy's processNotifyUnsubscribeLite).
                command = s.TelemetryCommand(
                    notify_unsubscribe_lite_command=s.NotifyUnsubscribeLiteCommand(lite_topic=name)
                )
                self._port.clients.send_command(client_id, command, broker=self._port.index)
            # Parked long polls of the group pop again: they may have lite topics to read now.
            self._port.server.changed(self._port.index, topic)
            return s.SyncLiteSubscriptionResponse(status=_STATUS_OK)

        return await self._port.unary(
            Rpc.SYNC_LITE_SUBSCRIPTION, context, work, lambda st: s.SyncLiteSubscriptionResponse(status=st)
        )

    async def _not_implemented(
        self,
        rpc: Rpc,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
        response_type: Callable[..., _R],
        message: str = "",
    ) -> _R:
        text = message or _NO_OFFSETS
        return await self._port.unary(
            rpc,
            context,
            lambda caller: response_type(status=_status(Code.NOT_IMPLEMENTED, text)),
            lambda st: response_type(status=st),
        )


def _offset(option: d.OffsetOption) -> tuple[str, int] | None:
    """`OffsetOption` as `Broker.sync_lite_subscription` takes it (None for a timestamp or nothing)."""
    kind = option.WhichOneof("offset_type")
    if kind == "policy":
        if option.policy == d.OffsetOption.Policy.MIN:
            return ("min", 0)
        if option.policy == d.OffsetOption.Policy.MAX:
            return ("max", 0)
        return None  # LAST: the group's last position, which it keeps anyway
    if kind == "offset":
        return ("offset", option.offset)
    if kind == "tail_n":
        return ("tail", option.tail_n)
    return None
