"""`Port`: what the RPC families of one broker port share, and `ServerView`, the part of the server they
may use. The families (route, client, producer, consumer, offsets) are each given the same `Port`; they
hold no state of their own beyond it and reach the server only through `Port.server`.

`Port` holds the per-port caches (compiled filters, checked names) and the plumbing every RPC goes
through: `unary` (authentication, fault hooks, `Invalid` / `BrokerError` to `Status`), `pre_action`,
`broker_for` (the broker a handle names), `filter`, `topic`, `group`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Protocol

import grpc

from thrust._codec.filter import FilterKind, MessageFilter, compile_filter
from thrust._codec.status import Code
from thrust._codec.validation import Invalid, check_group, check_topic
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust.server.auth import Authenticator, Caller
from thrust.server.clock import Clock
from thrust.server.config import ServerConfig
from thrust.server.core.broker import Broker, broker_of_handle
from thrust.server.core.catalog import Catalog
from thrust.server.core.model import BrokerError, TopicInfo
from thrust.server.faults import Action, Faults, Rpc, Stats
from thrust.server.service.registry import ClientRegistry, _Client
from thrust.server.service.status import _R, _error_status, _status, logger

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

_FILTER_CACHE: Final = 1024
_CHECKED_NAMES: Final = 4096


class ServerView(Protocol):
    """What the RPC families use of `EmbeddedServer` (server.py), so that they need not import it."""

    @property
    def brokers(self) -> Sequence[Broker]: ...
    @property
    def broker_by_name(self) -> Mapping[str, Broker]: ...
    @property
    def catalog(self) -> Catalog: ...
    @property
    def faults(self) -> Faults: ...
    @property
    def authenticator(self) -> Authenticator: ...
    @property
    def clients(self) -> ClientRegistry: ...
    @property
    def config(self) -> ServerConfig: ...
    @property
    def stats(self) -> Stats: ...
    @property
    def clock(self) -> Clock: ...

    def topic_brokers(self, requested: d.Endpoints, topic: TopicInfo) -> list[d.Broker]: ...
    def route_brokers(self, requested: d.Endpoints) -> list[d.Broker]: ...
    def changed(self, index: int, topic: str) -> None: ...
    def reschedule(self, broker: Broker) -> None: ...
    def park(self, index: int, group: str, topic: str) -> None: ...
    def unpark(self, index: int, group: str, topic: str) -> None: ...
    async def wait_for_change(
        self, index: int, topic: str, within: float, client: _Client | None = None
    ) -> None: ...
    async def hold(self, context: grpc.aio.ServicerContext) -> None: ...  # type: ignore[type-arg]


class Port:
    """One broker port's shared state and plumbing, given to each RPC family of its servicer.

    Attributes:
        server: the server, as far as the families may use it.
        index / broker: the port's broker.
        now: the server clock's `time`, the `now` every broker call gets.
        faults, auth, catalog, clients: the server's, looked up once.
    """

    __slots__ = (
        "_checked_groups",
        "_checked_topics",
        "_filters",
        "auth",
        "broker",
        "catalog",
        "clients",
        "faults",
        "index",
        "now",
        "server",
    )

    def __init__(self, server: ServerView, index: int) -> None:
        self.server = server
        self.index = index
        self.broker = server.brokers[index]
        self.faults = server.faults
        self.auth = server.authenticator
        self.catalog = server.catalog
        self.clients = server.clients
        self.now = server.clock.time  # the brokers' time (`thrust.server.clock`)
        self._filters: dict[tuple[int, str], MessageFilter] = {}
        self._checked_topics: set[str] = set()
        self._checked_groups: set[str] = set()

    async def unary(
        self,
        rpc: Rpc,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
        work: Callable[[Caller], _R],
        fail: Callable[[d.Status], _R],
    ) -> _R:
        action = self.faults.on_call(rpc, self.index)
        if action is not None:
            early = await self.pre_action(action, context)
            if early is not None:
                return fail(early)
        try:
            caller = self.auth.check(context.invocation_metadata() or ())
            self.clients.seen(caller.client_id)
            result = work(caller)
        except (Invalid, BrokerError) as exc:
            result = fail(_error_status(exc))
        except Exception as exc:  # the proxy's catch-all (docs/protocol.md §2.2): not gRPC INTERNAL
            logger.exception("%s failed", rpc.value)
            result = fail(_status(Code.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}"))
        if action is not None and action.drop:
            await self.server.hold(context)
        return result

    async def pre_action(
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
            await self.server.hold(context)
            return _status(Code.PROXY_TIMEOUT, "response dropped")
        return None

    def broker_for(self, handle: str) -> Broker:
        """The broker a receipt/recall handle came from (the port's own broker when unknown)."""
        name = broker_of_handle(handle)
        if name is None or name == self.broker.name:
            return self.broker
        return self.server.broker_by_name.get(name, self.broker)

    def filter(self, expression: d.FilterExpression) -> MessageFilter:
        kind = expression.type or FilterKind.TAG
        key = (kind, expression.expression)
        compiled = self._filters.get(key)
        if compiled is None:
            compiled = compile_filter(kind, expression.expression)
            if len(self._filters) >= _FILTER_CACHE:
                self._filters.clear()
            self._filters[key] = compiled
        return compiled

    def topic(self, name: str) -> TopicInfo:
        # Names are checked once: a valid name stays valid, and clients repeat the same few names on
        # every call (bounded, cleared when full).
        checked = self._checked_topics
        if name not in checked:
            check_topic(name)
            if len(checked) >= _CHECKED_NAMES:
                checked.clear()
            checked.add(name)
        return self.catalog.topic(name)

    def group(self, name: str) -> None:
        checked = self._checked_groups
        if name not in checked:
            check_group(name)
            if len(checked) >= _CHECKED_NAMES:
                checked.clear()
            checked.add(name)
