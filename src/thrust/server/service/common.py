"""What every RPC family of the servicer shares: the per-broker state, `_unary` (authentication, fault
hooks, errors to `Status`), name checks and filter compilation, status helpers, undecodable requests."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

import grpc

from thrust._codec.status import Code
from thrust._codec.validation import Invalid, check_group, check_topic
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2_grpc as g
from thrust.server.auth import Caller
from thrust.server.core.broker import Broker, broker_of_handle
from thrust.server.core.filter import FilterKind, MessageFilter, compile_filter
from thrust.server.core.model import BrokerError, TopicInfo
from thrust.server.faults import Action, Rpc

if TYPE_CHECKING:
    from thrust.server.service.server import EmbeddedServer

logger = logging.getLogger("thrust.server")

_FILTER_CACHE: Final = 1024
_CHECKED_NAMES: Final = 4096
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


class _Undecodable:
    """A request the deserializer could not parse."""


_UNDECODABLE: Final = _Undecodable()


def _undecodable(request: object) -> bool:
    return request is _UNDECODABLE


class ServicerBase(g.MessagingServiceServicer):  # type: ignore[misc]
    """The state of one broker's servicer and the plumbing every RPC family uses (the families are
    mixed together into `MessagingServicer`)."""

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
