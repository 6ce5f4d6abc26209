"""QueryRoute and QueryAssignment (docs/protocol.md §3.2, §3.3)."""

from __future__ import annotations

from typing import Any, cast

import grpc

from thrust._codec.validation import check_group
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.server.auth import Caller
from thrust.server.core.model import GroupInfo
from thrust.server.faults import Rpc
from thrust.server.service.port import Port
from thrust.server.service.status import _STATUS_OK


class RouteRpcs:
    """Routes and assignments."""

    def __init__(self, port: Port) -> None:
        self._port = port

    async def QueryRoute(
        self,
        request: s.QueryRouteRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> s.QueryRouteResponse:
        def work(caller: Caller) -> s.QueryRouteResponse:
            info = self._port.topic(request.topic.name)
            response = s.QueryRouteResponse(status=_STATUS_OK)
            types = [int(t) for t in sorted(info.types)]
            permission = _permission(self._port.faults.permission(info.name))
            for broker_pb in self._port.server.topic_brokers(request.endpoints, info):
                for qid in range(info.queues):
                    mq = response.message_queues.add()
                    mq.topic.CopyFrom(request.topic)
                    mq.id = qid
                    mq.permission = permission
                    mq.broker.CopyFrom(broker_pb)
                    mq.accept_message_types.extend(cast(Any, types))
            return response

        return await self._port.unary(
            Rpc.QUERY_ROUTE, context, work, lambda st: s.QueryRouteResponse(status=st)
        )

    async def QueryAssignment(
        self,
        request: s.QueryAssignmentRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> s.QueryAssignmentResponse:
        def work(caller: Caller) -> s.QueryAssignmentResponse:
            info = self._port.topic(request.topic.name)
            check_group(request.group.name)
            # The proxy reads the group's config only for its FIFO flag and assigns an unknown group as a
            # non-FIFO one (RouteActivity.queryAssignment): the refusal comes with the first receive.
            group = self._port.catalog.find_group(request.group.name) or GroupInfo(request.group.name)
            response = s.QueryAssignmentResponse(status=_STATUS_OK)
            perm = self._port.faults.permission(info.name)
            if perm is not None and not perm[0]:
                # The proxy assigns only the queues of readable brokers (RouteActivity.queryAssignment).
                return response
            # Assignments carry no accept_message_types: the proxy builds their queues from topic, id,
            # permission and broker only (RouteActivity.queryAssignment); the route has the types.
            override = self._port.faults.assignment(info.name, group.name)
            if override is not None:  # staged by a test (Faults.set_assignment), every port alike
                by_name = {pb.name: pb for pb in self._port.server.route_brokers(request.endpoints)}
                brokers = self._port.server.brokers
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
            for broker_pb in self._port.server.topic_brokers(request.endpoints, info):
                for qid in ids:
                    mq = response.assignments.add().message_queue
                    mq.topic.CopyFrom(request.topic)
                    mq.id = qid
                    mq.permission = d.Permission.READ_WRITE
                    mq.broker.CopyFrom(broker_pb)
            return response

        return await self._port.unary(
            Rpc.QUERY_ASSIGNMENT, context, work, lambda st: s.QueryAssignmentResponse(status=st)
        )


def _permission(override: tuple[bool, bool] | None) -> d.Permission:
    """A queue's Permission from a (readable, writable) override, as RouteActivity.convertToPermission."""
    if override is None:
        return d.Permission.READ_WRITE
    readable, writable = override
    if readable and writable:
        return d.Permission.READ_WRITE
    if readable:
        return d.Permission.READ
    return d.Permission.WRITE if writable else d.Permission.NONE
