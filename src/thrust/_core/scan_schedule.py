"""When a push consumer scans each topic's assignment (QueryAssignment): every `interval` seconds per topic,
but at most `max_rate` periodic scans a second over all topics, started in rounds a second apart.

Java's push consumer scans every subscribed topic every 5 s (`PushConsumerImpl.scanAssignments`), which a
consumer of 1,000 topics turns into 200 QueryAssignment a second for assignments that rarely change: most
of its idle CPU (docs/benchmarks.md, "A consumer of a thousand topics"). Here each topic is scanned again
`period` seconds after its last scan, `period = max(interval, topics / max_rate)`, so they stay spread over
the period. Periodic scans start in *rounds*, one a second at most (one an interval when that is shorter,
one every `1 / max_rate` seconds when that is longer): a round starts together the periodic scans that
fell due before it, `max_rate` per second of round at most. Started in one iteration of the loop, the calls
go out in one write and their answers come back together, so the client and the server each wake a few
times a round rather than two or three times a scan, 50 ms apart (docs/benchmarks.md, "Assignment scans in
rounds"). Below the rate a topic waits at most one round past its due time; above it, the oldest due go
first. A topic's first scan and a scan asked for by a route change (`request`) are *urgent*: due at once
and not held by the rate or the round, since a consumer has no queues of the topic before its first scan,
and a route change may have moved them.

Pure: no I/O, the time is passed in. The io layer loops:

    topic, wake_at = schedule.next(now)
    if topic is None: wait until wake_at (None: until `request` / `set_topics`) or a request; continue
    schedule.started(topic); scan it; schedule.done(topic, now)
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

__all__ = ["DEFAULT_MAX_SCAN_RATE", "ScanSchedule"]

#: The most periodic assignment scans a push consumer starts a second, over all its topics.
DEFAULT_MAX_SCAN_RATE = 20.0


class ScanSchedule:
    """The due time of every topic's next scan; see the module doc."""

    __slots__ = (
        "_budget",
        "_burst",
        "_due",
        "_heap",
        "_interval",
        "_max_rate",
        "_next_round",
        "_opened",
        "_rerun",
        "_round",
        "_running",
        "_topics",
        "_urgent",
    )

    def __init__(self, *, interval: float, max_rate: float = DEFAULT_MAX_SCAN_RATE) -> None:
        if interval <= 0 or max_rate <= 0:
            raise ValueError("interval and max_rate must be > 0")
        self._interval = interval
        self._max_rate = max_rate
        self._topics: set[str] = set()
        self._due: dict[str, float] = {}  # topic -> when its periodic scan is due (not urgent, not running)
        self._heap: list[tuple[float, str]] = []  # (due, topic); stale entries skipped (`_due` decides)
        self._urgent: dict[str, None] = {}  # insertion-ordered set: first come, first scanned
        self._running: set[str] = set()
        self._rerun: set[str] = set()  # asked for while running: urgent again once done
        # Rounds: `_round` seconds apart at least, `_burst` periodic scans each (so `max_rate` a second at
        # most) of those due when it began, `_budget` of them left in the round begun last (the caller may
        # hold some back, `MAX_CONCURRENT_SCANS`), the next round not before `_next_round`.
        # A round is a second, or the interval when shorter (a scan_interval under a second keeps its
        # meaning), or `1 / max_rate` when longer (one scan a round).
        self._round = max(1.0 / max_rate, min(1.0, interval))
        self._burst = max(1, int(max_rate * self._round + 1e-9))
        self._budget = 0
        self._opened = float("-inf")  # when the last round began
        self._next_round = float("-inf")

    @property
    def period(self) -> float:
        """Seconds between two scans of one topic: the interval, or longer when the rate demands it."""
        return max(self._interval, len(self._topics) / self._max_rate)

    def topics(self) -> set[str]:
        return set(self._topics)

    def set_topics(self, topics: Iterable[str]) -> None:
        """The subscribed topics: new ones are urgent (never scanned yet), missing ones forgotten."""
        wanted = dict.fromkeys(topics)
        for topic in self._topics - wanted.keys():
            self._due.pop(topic, None)
            self._urgent.pop(topic, None)
            self._running.discard(topic)
            self._rerun.discard(topic)
        for topic in wanted:
            if topic not in self._topics:
                self._urgent[topic] = None
        self._topics = set(wanted)

    def request(self, topic: str) -> None:
        """Scan `topic` at once (a route change): urgent; if it is being scanned, once more right after."""
        if topic in self._running:
            self._rerun.add(topic)
        elif topic in self._due:
            del self._due[topic]
            self._urgent[topic] = None

    def next(self, now: float) -> tuple[str | None, float | None]:
        """The topic to scan now, if any; else None and when one is due next (None: none is scheduled)."""
        if self._urgent:
            topic = next(iter(self._urgent))
            del self._urgent[topic]
            return topic, None
        heap = self._heap
        while heap:
            due, topic = heap[0]
            if self._due.get(topic) != due:
                heapq.heappop(heap)  # stale: rescheduled, made urgent, or unsubscribed since
                continue
            if due > now:
                # Not due yet: it waits for the first round at or after its due time.
                return None, max(due, self._next_round)
            if now >= self._next_round:
                self._budget = self._burst
                self._opened = now
                self._next_round = now + self._round
            elif self._budget <= 0 or due > self._opened:
                # The round is spent, or this scan fell due after it began: the next round starts it.
                return None, self._next_round
            heapq.heappop(heap)
            del self._due[topic]
            self._budget -= 1
            return topic, None
        return None, None

    def started(self, topic: str) -> None:
        """The scan of `topic` (from `next`) begins."""
        self._running.add(topic)

    def done(self, topic: str, now: float) -> None:
        """The scan of `topic` ended (answered or failed): the next is due one period from now, or at once
        if a route change asked for it meanwhile."""
        if topic not in self._running:
            return  # unsubscribed meanwhile
        self._running.discard(topic)
        if topic in self._rerun:
            self._rerun.discard(topic)
            self._urgent[topic] = None
            return
        due = now + self.period
        self._due[topic] = due
        heapq.heappush(self._heap, (due, topic))
