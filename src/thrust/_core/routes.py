"""Topic routes: the cache, endpoint isolation, and queue / endpoint selection.

The codec turns a `QueryRouteResponse` into `RouteQueue`s; `RouteCache.update` stores them per topic and says
which endpoints appeared or disappeared across all routes (sessions: heartbeats and telemetry are per
endpoint, docs/protocol.md §4.5, §4.6). Routes are refreshed every 30 s (docs/protocol.md §3.2), less
often when more than 300 are cached (`RouteCache.refresh_every`).

Producer: `QueueSelector.candidates` returns, for one send, the queues to use for attempt 1, 2, ... (the
attempt number n uses `candidates[(n - 1) % len(candidates)]`), Java `PublishingLoadBalancer` style: round
robin over writable queues, a different broker on each attempt when there is one, isolated endpoints last.
FIFO messages hash their message group to one queue and stay on it across retries, so order holds.

Consumer: `AssignmentEndpointSelector.pick` says where to send QueryAssignment (docs/protocol.md §3.4).

Isolation: an endpoint is isolated after a transport failure (the io layer calls `isolate`) and un-isolated
by any successful call to it (`on_success`, heartbeats included) or after `cooldown` seconds.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from thrust._core.assignment import QueueId
from thrust._core.endpoints import Endpoint

__all__ = [
    "AssignmentEndpointSelector",
    "Isolation",
    "Permission",
    "QueueSelector",
    "RouteCache",
    "RouteQueue",
    "RouteUpdate",
    "TopicRoute",
]

MASTER_BROKER_ID = 0

# "Not degraded": before any time (`RouteCache.degraded`).
_NEVER = float("-inf")


class Permission(IntEnum):
    """`apache.rocketmq.v2.Permission` (docs/protocol.md §3.1)."""

    UNSPECIFIED = 0
    NONE = 1
    READ = 2
    WRITE = 3
    READ_WRITE = 4


@dataclass(frozen=True, slots=True)
class RouteQueue:
    """One `MessageQueue` of a route, with its broker flattened in.

    `accept_types` holds `MessageType` values; empty means the server did not restrict them.
    """

    topic: str
    broker_name: str
    queue_id: int
    permission: Permission
    endpoint: Endpoint
    broker_id: int = MASTER_BROKER_ID
    accept_types: frozenset[int] = frozenset()

    @property
    def readable(self) -> bool:
        return self.permission in (Permission.READ, Permission.READ_WRITE)

    @property
    def writable(self) -> bool:
        return self.permission in (Permission.WRITE, Permission.READ_WRITE)

    @property
    def is_master(self) -> bool:
        return self.broker_id == MASTER_BROKER_ID

    @property
    def id(self) -> QueueId:
        return QueueId(self.topic, self.broker_name, self.queue_id)

    def accepts(self, message_type: int) -> bool:
        """Whether a message of `message_type` may be sent here (Java validateMessageType)."""
        return not self.accept_types or message_type in self.accept_types


@dataclass(frozen=True, slots=True)
class TopicRoute:
    """A topic's queues as fetched at `fetched_at` (monotonic), with derived views computed once."""

    topic: str
    queues: tuple[RouteQueue, ...]
    fetched_at: float
    writable: tuple[RouteQueue, ...] = field(init=False, repr=False, compare=False)
    endpoints: frozenset[Endpoint] = field(init=False, repr=False, compare=False)
    # The message types every writable queue accepts; None when none of them restricts its types (the
    # usual route): a send then needs no per-queue `accepts` check.
    writable_accept: frozenset[int] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        writable = tuple(q for q in self.queues if q.writable)
        object.__setattr__(self, "writable", writable)
        object.__setattr__(self, "endpoints", frozenset(q.endpoint for q in self.queues))
        common: frozenset[int] | None = None
        for q in writable:
            if q.accept_types:
                common = q.accept_types if common is None else common & q.accept_types
        object.__setattr__(self, "writable_accept", common)

    def all_writable_accept(self, message_type: int) -> bool:
        """Whether every writable queue accepts `message_type` (`RouteQueue.accepts`)."""
        common = self.writable_accept
        return common is None or message_type in common


@dataclass(frozen=True, slots=True)
class RouteUpdate:
    """Result of storing a route: the route and how the set of all known endpoints changed."""

    route: TopicRoute
    added_endpoints: frozenset[Endpoint]
    removed_endpoints: frozenset[Endpoint]


class RouteCache:
    """Routes per topic with staleness. Called by the client's route refresher and by senders/consumers.

    A route is re-fetched every `refresh_period` (30 s, as the Java client's `updateRouteCache`), except
    while it is *degraded*: it lacks a broker that the topic's route had within the last
    `degraded_memory` seconds (a broker crashed or restarts, and the proxy dropped it). Then it is
    re-fetched every `degraded_refresh_period` (5 s), so a restarted broker's messages are consumed
    seconds after it is back rather than up to 30 s later (measured on a real two-broker cluster:
    docs/reliability.md, R1). A broker gone for longer than `degraded_memory` is taken as removed.

    The routes that are not degraded are re-fetched `max_refresh_rate` a second at most on average: with
    more than `refresh_period x max_refresh_rate` routes cached (300 by default) each is re-fetched every
    `routes / max_refresh_rate` seconds instead (`refresh_every`). Java refreshes every route every 30 s,
    however many: 33 QueryRoute calls a second for a consumer of 1,000 topics, idle or not, where 10 do
    (docs/benchmarks.md, "A consumer of a thousand topics"). A route's changes that matter before then
    reach the client sooner: a broker missing makes the route degraded at its next fetch, and a consumer's
    assignments come from QueryAssignment, not from the route.
    """

    __slots__ = (
        "_degraded_until",
        "_endpoint_uses",
        "_endpoints",
        "_routes",
        "_widest",
        "degraded_memory",
        "degraded_refresh_period",
        "max_refresh_rate",
        "refresh_period",
    )

    def __init__(
        self,
        refresh_period: float = 30.0,
        *,
        degraded_refresh_period: float = 5.0,
        degraded_memory: float = 600.0,
        max_refresh_rate: float = 10.0,
    ) -> None:
        if max_refresh_rate <= 0:
            raise ValueError("max_refresh_rate must be > 0")
        self.refresh_period = refresh_period  # Java/Python updateRouteCache period (docs/protocol.md §4.6)
        self.max_refresh_rate = max_refresh_rate
        self.degraded_refresh_period = min(degraded_refresh_period, refresh_period)
        self.degraded_memory = degraded_memory
        self._routes: dict[str, TopicRoute] = {}
        self._endpoints: frozenset[Endpoint] = frozenset()
        # endpoint -> how many cached routes list it: storing one topic's route updates the set of all
        # endpoints in O(its brokers), not O(topics) (a consumer of 1,000 topics refreshes 1,000 routes
        # every 30 s).
        self._endpoint_uses: dict[Endpoint, int] = {}
        # topic -> broker name -> when a route last listed it
        self._widest: dict[str, dict[str, float]] = {}
        # topic -> until when its route stays degraded (its missing broker's last listing + memory), kept
        # at each update: the refresher asks every topic's period each round, a thousand topics included.
        self._degraded_until: dict[str, float] = {}

    def update(self, topic: str, queues: Iterable[RouteQueue], now: float) -> RouteUpdate:
        """Store the route just fetched for `topic`. Open sessions for `added_endpoints`; the io layer may
        close the sessions of `removed_endpoints` (no route uses them any more)."""
        route = TopicRoute(topic, tuple(q for q in queues if q.topic == topic), now)
        old = self._routes.get(topic)
        self._routes[topic] = route
        seen = self._widest.setdefault(topic, {})
        for q in route.queues:
            seen[q.broker_name] = now
        for name in [n for n, t in seen.items() if now - t > self.degraded_memory]:
            del seen[name]
        present = {q.broker_name for q in route.queues}
        missing = [t for n, t in seen.items() if n not in present]  # listed before, not in this route
        if missing:
            self._degraded_until[topic] = max(missing) + self.degraded_memory
        else:
            self._degraded_until.pop(topic, None)
        return self._recompute(route, old)

    def remove(self, topic: str) -> frozenset[Endpoint]:
        """Forget a topic (e.g. unsubscribed); returns the endpoints no route uses any more."""
        self._widest.pop(topic, None)
        self._degraded_until.pop(topic, None)
        old = self._routes.pop(topic, None)
        if old is None:
            return frozenset()
        _, removed = self._count_endpoints((), old.endpoints)
        if removed:
            self._endpoints = self._endpoints - removed
        return removed

    def get(self, topic: str) -> TopicRoute | None:
        return self._routes.get(topic)

    def degraded(self, topic: str, now: float) -> bool:
        """The cached route lacks a broker that a route of `topic` listed within `degraded_memory`."""
        return now <= self._degraded_until.get(topic, _NEVER)

    def refresh_every(self) -> float:
        """How often a route that is not degraded is re-fetched: `refresh_period`, or longer when more
        routes are cached than `max_refresh_rate` lets the refresher fetch in that period."""
        return max(self.refresh_period, len(self._routes) / self.max_refresh_rate)

    def period(self, topic: str, now: float) -> float:
        """How often `topic`'s route is re-fetched now."""
        return self.degraded_refresh_period if self.degraded(topic, now) else self.refresh_every()

    def stale(self, topic: str, now: float) -> bool:
        """No route yet, or it is at least `refresh_every()` old."""
        route = self._routes.get(topic)
        return route is None or now - route.fetched_at >= self.refresh_every()

    def due(self, now: float, ahead: float = 0.0) -> list[str]:
        """Topics whose route should be re-fetched now, or within `ahead` seconds (degraded ones after the
        shorter period): the refresher takes those due soon in the same round, so that routes fetched
        one after another (a thousand at start) are refreshed in a few rounds, not in one round each."""
        degraded = self._degraded_until
        long, short = self.refresh_every(), self.degraded_refresh_period
        at = now + ahead
        return [
            t
            for t, r in self._routes.items()
            if at - r.fetched_at >= (short if degraded and now <= degraded.get(t, _NEVER) else long)
        ]

    def next_refresh_at(self, now: float) -> float | None:
        """When the next route is due; None if no route is cached."""
        if not self._routes:
            return None
        degraded = self._degraded_until
        long, short = self.refresh_every(), self.degraded_refresh_period
        return min(
            r.fetched_at + (short if degraded and now <= degraded.get(t, _NEVER) else long)
            for t, r in self._routes.items()
        )

    def endpoints(self) -> frozenset[Endpoint]:
        """Every endpoint in any cached route: heartbeat and telemetry targets."""
        return self._endpoints

    def topics(self) -> list[str]:
        return list(self._routes)

    def _recompute(self, route: TopicRoute, old: TopicRoute | None) -> RouteUpdate:
        added, removed = self._count_endpoints(route.endpoints, () if old is None else old.endpoints)
        if added or removed:
            self._endpoints = (self._endpoints - removed) | added
        return RouteUpdate(route, added, removed)

    def _count_endpoints(
        self, listed: Iterable[Endpoint], unlisted: Iterable[Endpoint]
    ) -> tuple[frozenset[Endpoint], frozenset[Endpoint]]:
        """One route now lists `listed` where it listed `unlisted`: the endpoints no route listed before,
        and those no route lists any more."""
        uses = self._endpoint_uses
        added: set[Endpoint] = set()
        removed: set[Endpoint] = set()
        for ep in listed:
            n = uses.get(ep, 0)
            uses[ep] = n + 1
            if n == 0:
                added.add(ep)
        for ep in unlisted:
            n = uses[ep] - 1
            if n:
                uses[ep] = n
            else:
                del uses[ep]
                if ep in added:
                    added.discard(ep)
                else:
                    removed.add(ep)
        return frozenset(added), frozenset(removed)


class Isolation:
    """Endpoints recently failed at the transport level; producers send elsewhere while one is isolated."""

    __slots__ = ("_until", "cooldown")

    def __init__(self, cooldown: float = 30.0) -> None:
        self.cooldown = cooldown
        self._until: dict[Endpoint, float] = {}

    def isolate(self, endpoint: Endpoint, now: float) -> None:
        """A call to `endpoint` failed at the transport level (unavailable, deadline)."""
        self._until[endpoint] = now + self.cooldown

    def on_success(self, endpoint: Endpoint) -> None:
        """Any call to `endpoint` succeeded: it is healthy again."""
        self._until.pop(endpoint, None)

    def is_isolated(self, endpoint: Endpoint, now: float) -> bool:
        until = self._until.get(endpoint)
        if until is None:
            return False
        if now >= until:
            del self._until[endpoint]
            return False
        return True

    def has_entries(self) -> bool:
        """Whether any endpoint may be isolated (some may have expired: `is_isolated` says for sure)."""
        return bool(self._until)

    def isolated(self, now: float) -> frozenset[Endpoint]:
        """Currently isolated endpoints (e.g. for the heartbeat to probe)."""
        for ep in [ep for ep, until in self._until.items() if now >= until]:
            del self._until[ep]
        return frozenset(self._until)


class QueueSelector:
    """Producer queue selection for one producer: round robin per topic, FIFO by message-group hash."""

    __slots__ = ("_next", "_orders")

    def __init__(self) -> None:
        self._next: dict[str, int] = {}
        # Per topic, while no endpoint is isolated (the common case, on every send): the candidates of each
        # round-robin start, computed once per route and attempt budget, since they depend on nothing else.
        self._orders: dict[str, tuple[tuple[RouteQueue, ...], int, list[tuple[RouteQueue, ...]]]] = {}

    def candidates(
        self,
        route: TopicRoute,
        max_attempts: int,
        isolation: Isolation | None = None,
        now: float = 0.0,
        message_group: str | None = None,
    ) -> tuple[RouteQueue, ...]:
        """Queues for attempts 1..n of one send (attempt n uses `result[(n - 1) % len(result)]`).

        Empty when the topic has no writable queue (the producer fails the send). With `message_group`, the
        one queue `crc32(group) % len(writable)`: every attempt goes there, so messages of a group stay in
        order (isolation is not consulted: moving a group would break its order). Otherwise, starting at this
        topic's round-robin position: first queues on healthy endpoints of brokers not yet chosen, then other
        healthy queues, then isolated ones, so each retry moves to another broker when one exists.
        """
        writable = route.writable
        if not writable:
            return ()
        if message_group is not None:
            return (writable[zlib.crc32(message_group.encode()) % len(writable)],)
        size = len(writable)
        start = self._next.get(route.topic, 0)
        self._next[route.topic] = (start + 1) % size
        if isolation is not None and isolation.has_entries():
            return _pick(writable, start, max_attempts, isolation, now)
        cached = self._orders.get(route.topic)
        if cached is None or cached[0] is not writable or cached[1] != max_attempts:
            orders = [_pick(writable, s, max_attempts, None, now) for s in range(size)]
            cached = (writable, max_attempts, orders)
            self._orders[route.topic] = cached
        return cached[2][start]


def _pick(
    writable: tuple[RouteQueue, ...], start: int, max_attempts: int, isolation: Isolation | None, now: float
) -> tuple[RouteQueue, ...]:
    """`QueueSelector.candidates` from round-robin position `start` (see its docstring)."""
    size = len(writable)
    ordered = [writable[(start + i) % size] for i in range(size)]
    want = max(1, min(max_attempts, size))
    picked: list[RouteQueue] = []
    brokers: set[str] = set()
    healthy = [q for q in ordered if isolation is None or not isolation.is_isolated(q.endpoint, now)]
    for q in healthy:
        if q.broker_name not in brokers:
            picked.append(q)
            brokers.add(q.broker_name)
            if len(picked) == want:
                return tuple(picked)
    for pool in (healthy, ordered):
        for q in pool:
            if q not in picked:
                picked.append(q)
                if len(picked) == want:
                    return tuple(picked)
    return tuple(picked)


class AssignmentEndpointSelector:
    """Where a push consumer sends QueryAssignment for a topic (Java `pickEndpointsToQueryAssignments`)."""

    __slots__ = ("_next",)

    def __init__(self) -> None:
        self._next: dict[str, int] = {}

    def pick(self, route: TopicRoute, access_point: Endpoint | None = None) -> Endpoint | None:
        """The access point when the route contains it; else round robin over master queues whose permission
        is not NONE (docs/protocol.md §3.4). None when the route has no such queue (try again next scan)."""
        if access_point is not None and access_point in route.endpoints:
            return access_point
        queues: Sequence[RouteQueue] = route.queues
        size = len(queues)
        if not size:
            return None
        start = self._next.get(route.topic, 0)
        for i in range(size):
            q = queues[(start + i) % size]
            if q.is_master and q.permission not in (Permission.NONE, Permission.UNSPECIFIED):
                self._next[route.topic] = (start + i + 1) % size
                return q.endpoint
        return None
