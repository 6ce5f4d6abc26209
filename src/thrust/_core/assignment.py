"""Per-topic assignment diffs (bench scenario 5b, docs/benchmarks.md#scenarios).

The Rust client rebuilt its whole queue table from each topic's QueryAssignment answer, so with several
subscribed topics every scan tore down the other topics' queues. Java's `syncProcessQueue(topic, ...)` only
looks at the process queues of that topic (docs/protocol.md §3.4); so do we: a diff for topic `t` never
mentions a queue of another topic.

Who calls what: the push consumer's assignment scan (every 5 s per topic, at most 20 a second:
`thrust._core.scan_schedule`) calls
`AssignmentTable.sync(topic, assigned, expired)` with the queues from QueryAssignment, drops and cancels
`to_drop`, creates process queues for `to_add`, then re-splits the cache budget with `len(table)`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

__all__ = ["AssignmentDiff", "AssignmentTable", "QueueId", "diff_topic"]


@dataclass(frozen=True, slots=True, order=True)
class QueueId:
    """A message queue's identity: (topic, broker name, queue id). Proxy pop-mode assignments use id -1."""

    topic: str
    broker_name: str
    queue_id: int


@dataclass(frozen=True, slots=True)
class AssignmentDiff:
    """What a scan of one topic changes: queues to start and queues to stop (both of that topic only)."""

    to_add: frozenset[QueueId]
    to_drop: frozenset[QueueId]

    def __bool__(self) -> bool:
        return bool(self.to_add or self.to_drop)


def diff_topic(
    current: Iterable[QueueId],
    topic: str,
    assigned: Iterable[QueueId],
    expired: Collection[QueueId] = (),
) -> AssignmentDiff:
    """The change for `topic` alone, from the active queues (`current`, any topics) and its new assignment.

    Queues of other topics in `current` are ignored, and so are entries of `assigned` naming another topic
    (a server answer for the wrong topic must not touch a queue it does not own). A queue in `expired` that
    is still assigned is both dropped and added: it is recreated, as Java does for `pq.expired()`.
    """
    mine = {q for q in current if q.topic == topic}
    wanted = {q for q in assigned if q.topic == topic}
    stale = {q for q in expired if q.topic == topic and q in mine}
    to_drop = (mine - wanted) | stale
    to_add = (wanted - mine) | (stale & wanted)
    return AssignmentDiff(frozenset(to_add), frozenset(to_drop))


class AssignmentTable:
    """The active queues per topic of one push consumer; the only place that decides add/drop."""

    __slots__ = ("_by_topic",)

    def __init__(self) -> None:
        self._by_topic: dict[str, frozenset[QueueId]] = {}

    def sync(
        self, topic: str, assigned: Iterable[QueueId], expired: Collection[QueueId] = ()
    ) -> AssignmentDiff:
        """Apply one topic's QueryAssignment answer; returns what to drop and what to start.

        An empty answer drops the topic's queues, as Java does once assignments existed; while the topic has
        none, an empty answer changes nothing (the scan simply tries again later).
        """
        current = self._by_topic.get(topic, frozenset())
        diff = diff_topic(current, topic, assigned, expired)
        if diff:
            new = (current - diff.to_drop) | diff.to_add
            if new:
                self._by_topic[topic] = new
            else:
                self._by_topic.pop(topic, None)
        return diff

    def remove_topic(self, topic: str) -> frozenset[QueueId]:
        """Unsubscribe: the topic's queues, all to drop."""
        return self._by_topic.pop(topic, frozenset())

    def queues(self, topic: str | None = None) -> frozenset[QueueId]:
        """The active queues of `topic`, or of every topic."""
        if topic is not None:
            return self._by_topic.get(topic, frozenset())
        return frozenset().union(*self._by_topic.values())

    def topics(self) -> list[str]:
        return list(self._by_topic)

    def __len__(self) -> int:
        """Number of active queues, across topics: what the cache budget is split by."""
        return sum(len(qs) for qs in self._by_topic.values())

    def __contains__(self, queue: object) -> bool:
        return isinstance(queue, QueueId) and queue in self._by_topic.get(queue.topic, frozenset())
