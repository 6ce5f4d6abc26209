"""Offset-mode and lite RPCs: the broker core keeps no consumer offsets and no lite topics, so these answer
NOT_IMPLEMENTED."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Final

import grpc

from thrust._codec.status import Code
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.server.faults import Rpc
from thrust.server.service.port import Port
from thrust.server.service.status import _R, _status, _undecodable

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
        return await self._port.unary(
            rpc,
            context,
            lambda caller: response_type(status=_status(Code.NOT_IMPLEMENTED, text)),
            lambda st: response_type(status=st),
        )
