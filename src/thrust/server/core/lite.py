"""Lite topics on one broker (RocketMQ 5.5, RIP-83): who subscribed which lite topic, and idle-topic expiry.

A lite topic is a lightweight ordered sub-channel of a parent topic of type LITE, created by its first
message. Its messages live in a queue log of their own in the `MessageStore`, under `lmq_name(parent,
lite)` (upstream stores each in a light message queue, `LiteUtil.toLmqName`), and each group consumes it
in order, like one FIFO message group (upstream's `PopLiteMessageProcessor` blocks a lite topic while a
message of it is in flight).

`LiteRegistry` follows upstream's broker classes (apache/rocketmq 5.5.0, `broker/lite`):

- `LiteSubscriptionRegistryImpl`: one subscription per client id (its group, the parent topic it is bound
  to, its set of lite topics). `SyncLiteSubscription`'s actions: PARTIAL_ADD adds (checked against the
  quota first), PARTIAL_REMOVE removes, COMPLETE_ADD replaces the whole set (the clients' 30 s resync),
  COMPLETE_REMOVE drops the client. In a group with exclusive lite subscriptions
  (`SubscriptionGroupConfig.liteSubExclusive`) a client adding a lite topic takes it from the group's
  other clients, which are told by a `NotifyUnsubscribeLiteCommand` (`excludeClientByLmqName`); that
  is the only place upstream sends the notice. A client that leaves loses its subscriptions
  (`removeCompleteSubscription`).
- `AbstractLiteLifecycleManager`: a lite topic whose newest message is older than the TTL is deleted
  with its consumption state, and removed from every subscription without a notice
  (`deleteLmq` calls `cleanSubscription(lmqName, false)`). Upstream's TTL is a per-parent-topic attribute
  in minutes; here it is one value per server, in seconds.

Quotas: upstream counts subscriptions broker-wide (`maxLiteSubscriptionCount`) and tells each client its
own `lite_subscription_quota` in Settings; the embedded server checks that per-client quota here, so a
client that ignores it gets LITE_SUBSCRIPTION_QUOTA_EXCEEDED. `max_lite_topics` bounds the lite topics
of one parent topic (LITE_TOPIC_QUOTA_EXCEEDED on the send that would create one more).

Pure and synchronous, like the rest of the core: every call that depends on time takes `now`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from thrust._codec.status import Code
from thrust.server.core.model import BrokerError

__all__ = ["LMQ_PREFIX", "LiteRegistry", "lmq_name"]

#: Prefix of the store names of lite topics. `$` is outside the topic charset, so no topic can collide.
LMQ_PREFIX = "%LMQ%"


def lmq_name(parent: str, lite_topic: str) -> str:
    """The store name of lite topic `lite_topic` of `parent`."""
    return f"{LMQ_PREFIX}{parent}${lite_topic}"


class _ClientLite:
    """One client's lite subscription (upstream `LiteSubscription`)."""

    __slots__ = ("group", "names", "topic")

    def __init__(self, group: str, topic: str) -> None:
        self.group = group
        self.topic = topic
        self.names: dict[str, None] = {}  # insertion-ordered set of lite topic names


class LiteRegistry:
    """Lite subscriptions per client and the lite topics of each parent topic, with their expiry.

    Args:
        ttl: seconds without a new message after which a lite topic expires (0: never).
        max_lite_topics: lite topics one parent topic may have on this broker.
    """

    __slots__ = (
        "_clients",
        "_heap",
        "_last_store",
        "_max_lite_topics",
        "_per_parent",
        "_subscribers",
        "_ttl",
    )

    def __init__(self, *, ttl: float, max_lite_topics: int) -> None:
        if ttl < 0 or max_lite_topics < 1:
            raise ValueError("lite ttl must be >= 0 and max_lite_topics >= 1")
        self._ttl = ttl
        self._max_lite_topics = max_lite_topics
        self._clients: dict[str, _ClientLite] = {}
        # (parent, lite topic) -> client ids subscribed to it
        self._subscribers: dict[tuple[str, str], set[str]] = {}
        # (parent, lite topic) -> store time of its newest message; one heap entry per lite topic
        self._last_store: dict[tuple[str, str], float] = {}
        self._per_parent: dict[str, set[str]] = {}
        self._heap: list[tuple[float, str, str]] = []

    # ------------------------------------------------------------------ subscriptions

    def add(
        self,
        client_id: str,
        group: str,
        topic: str,
        names: Iterable[str],
        *,
        quota: int,
        exclusive: bool,
    ) -> list[tuple[str, str]]:
        """PARTIAL_ADD: subscribe the client to `names`; returns the (client id, lite topic) pairs taken
        from the group's other clients in an exclusive group (each to be notified).

        Raises:
            BrokerError(LITE_SUBSCRIPTION_QUOTA_EXCEEDED): the client would hold more than `quota`.
        """
        sub = self._client(client_id, group, topic)
        new = [n for n in dict.fromkeys(names) if n not in sub.names]
        if len(sub.names) + len(new) > quota:
            raise BrokerError(
                Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED, f"lite subscription quota exceeded {quota}"
            )
        evicted: list[tuple[str, str]] = []
        for name in new:
            if exclusive:
                for other in list(self._subscribers.get((topic, name), ())):
                    other_sub = self._clients.get(other)
                    if other != client_id and other_sub is not None and other_sub.group == group:
                        self._unsubscribe(other, other_sub, name)
                        evicted.append((other, name))
            sub.names[name] = None
            self._subscribers.setdefault((topic, name), set()).add(client_id)
        return evicted

    def remove(self, client_id: str, group: str, topic: str, names: Iterable[str]) -> None:
        """PARTIAL_REMOVE: unsubscribe the client from `names` (unknown names are ignored)."""
        sub = self._clients.get(client_id)
        if sub is None or sub.group != group or sub.topic != topic:
            return
        for name in names:
            self._unsubscribe(client_id, sub, name)

    def replace(self, client_id: str, group: str, topic: str, names: Iterable[str], *, quota: int) -> None:
        """COMPLETE_ADD: the client's set becomes exactly `names` (the clients' periodic full resync).

        Raises:
            BrokerError(LITE_SUBSCRIPTION_QUOTA_EXCEEDED): more than `quota` names.
        """
        wanted = dict.fromkeys(names)
        if len(wanted) > quota:
            raise BrokerError(
                Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED, f"lite subscription quota exceeded {quota}"
            )
        sub = self._client(client_id, group, topic)
        for name in [n for n in sub.names if n not in wanted]:
            self._unsubscribe(client_id, sub, name)
        for name in wanted:
            if name not in sub.names:
                sub.names[name] = None
                self._subscribers.setdefault((topic, name), set()).add(client_id)

    def drop_client(self, client_id: str) -> None:
        """COMPLETE_REMOVE, or the client left: forget its whole subscription."""
        sub = self._clients.pop(client_id, None)
        if sub is None:
            return
        for name in list(sub.names):
            self._unsubscribe(client_id, sub, name)

    def lite_topics(self, client_id: str, group: str, topic: str) -> list[str]:
        """The lite topics of `topic` the client subscribed in `group`, in subscription order."""
        sub = self._clients.get(client_id)
        if sub is None or sub.group != group or sub.topic != topic:
            return []
        return list(sub.names)

    def subscription(self, client_id: str) -> tuple[str, str, list[str]] | None:
        """(group, parent topic, lite topics) of the client's subscription, or None (inspection)."""
        sub = self._clients.get(client_id)
        return None if sub is None else (sub.group, sub.topic, list(sub.names))

    def _client(self, client_id: str, group: str, topic: str) -> _ClientLite:
        sub = self._clients.get(client_id)
        if sub is not None and (sub.group != group or sub.topic != topic):
            # One lite subscription per client id (upstream keys `client2Subscription` by client id).
            self.drop_client(client_id)
            sub = None
        if sub is None:
            sub = self._clients[client_id] = _ClientLite(group, topic)
        return sub

    def _unsubscribe(self, client_id: str, sub: _ClientLite, name: str) -> None:
        sub.names.pop(name, None)
        key = (sub.topic, name)
        clients = self._subscribers.get(key)
        if clients is not None:
            clients.discard(client_id)
            if not clients:
                del self._subscribers[key]

    # ------------------------------------------------------------------ lite topics and their TTL

    def exists(self, parent: str, lite_topic: str) -> bool:
        """True while the lite topic holds state on this broker (created by a send, not expired)."""
        return (parent, lite_topic) in self._last_store

    def check_create(self, parent: str, lite_topic: str) -> None:
        """Before a send creates a lite topic.

        Raises:
            BrokerError(LITE_TOPIC_QUOTA_EXCEEDED): the parent has `max_lite_topics` already.
        """
        if (parent, lite_topic) in self._last_store:
            return
        if len(self._per_parent.get(parent, ())) >= self._max_lite_topics:
            raise BrokerError(
                Code.LITE_TOPIC_QUOTA_EXCEEDED,
                f"lite topic quota exceeded {self._max_lite_topics} for {parent!r}",
            )

    def stored(self, parent: str, lite_topic: str, now: float) -> None:
        """A message of the lite topic was stored at `now` (creating the lite topic on its first one)."""
        key = (parent, lite_topic)
        first = key not in self._last_store
        self._last_store[key] = now
        if first:
            self._per_parent.setdefault(parent, set()).add(lite_topic)
            if self._ttl > 0:
                heapq.heappush(self._heap, (now + self._ttl, parent, lite_topic))

    def of_parent(self, parent: str) -> list[str]:
        """The live lite topics of `parent` on this broker, sorted."""
        return sorted(self._per_parent.get(parent, ()))

    def expire(self, now: float) -> list[tuple[str, str]]:
        """Forget every lite topic idle for longer than the TTL; returns their (parent, lite topic) so the
        broker deletes their messages and consumption state."""
        heap = self._heap
        out: list[tuple[str, str]] = []
        while heap and heap[0][0] <= now:
            _, parent, name = heapq.heappop(heap)
            key = (parent, name)
            last = self._last_store.get(key)
            if last is None:
                continue
            if last + self._ttl > now:
                heapq.heappush(heap, (last + self._ttl, parent, name))  # written to since: check again then
                continue
            del self._last_store[key]
            names = self._per_parent.get(parent)
            if names is not None:
                names.discard(name)
                if not names:
                    del self._per_parent[parent]
            for client_id in list(self._subscribers.get(key, ())):
                sub = self._clients.get(client_id)
                if sub is not None:
                    self._unsubscribe(client_id, sub, name)
            out.append(key)
        return out

    def next_time(self) -> float | None:
        """When the next lite topic may expire, or None."""
        return self._heap[0][0] if self._heap else None
