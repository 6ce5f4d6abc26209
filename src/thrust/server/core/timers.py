"""A lazy-deletion min-heap of deadlines, one per kind of timer a broker keeps.

Each broker component that schedules something owns one `Timers`: the in-flight records' invisibility
deadlines and auto-renew points (inflight.py), delayed messages' due times and transaction checks
(scheduled.py). Cancelled entries stay in the heap until they reach the top or the heap is compacted
(when stale entries outnumber live ones).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Generic, TypeVar


class Timed:
    """Something a `Timers` heap can schedule: `timer_seq` identifies its one live heap entry (0: none)."""

    __slots__ = ("timer_seq",)

    def __init__(self) -> None:
        self.timer_seq = 0


_T = TypeVar("_T", bound=Timed)


class Timers(Generic[_T]):
    """A min-heap of deadlines with lazy deletion; each item has at most one live entry.

    Rescheduling or cancelling an item leaves its old entry in place (recognised as stale because its
    sequence number no longer matches `item.timer_seq`); the heap is rebuilt from live entries when stale
    ones outnumber them, so memory stays O(live) and every operation O(log n) amortised.
    """

    __slots__ = ("_heap", "_live", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _T]] = []
        self._live = 0
        self._seq = 0

    def __len__(self) -> int:
        return self._live

    @property
    def heap(self) -> list[tuple[float, int, _T]]:
        """The heap itself, for a read-only look at its top: the same list for the heap's lifetime
        (compaction rebuilds it in place), so a caller may keep it. Entry 0 is the earliest, stale or
        not; nothing outside this class may change it."""
        return self._heap

    @property
    def entries(self) -> int:
        """Heap entries, live and stale (what compaction bounds)."""
        return len(self._heap)

    def maybe_due(self, now: float) -> bool:
        """False when nothing can be due at `now`: the heap top, stale or not, lies in the future.

        The cheap check every request makes before looking for due timers.
        """
        heap = self._heap
        return bool(heap) and heap[0][0] <= now

    def push(self, item: _T, when: float) -> None:
        """(Re)schedule `item` at `when`, replacing any earlier schedule."""
        if item.timer_seq == 0:
            self._live += 1
        self._seq += 1
        item.timer_seq = self._seq
        heapq.heappush(self._heap, (when, self._seq, item))
        self._maybe_compact()

    def cancel(self, item: _T) -> None:
        """Unschedule `item` (no-op when it is not scheduled)."""
        if item.timer_seq:
            item.timer_seq = 0
            self._live -= 1
            self._maybe_compact()

    def peek(self) -> float | None:
        """The earliest live deadline, or None."""
        heap = self._heap
        while heap and heap[0][2].timer_seq != heap[0][1]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop_due(self, now: float) -> tuple[float, _T] | None:
        """Remove and return `(deadline, item)` of the earliest live entry due at `now`, else None."""
        when = self.peek()
        if when is None or when > now:
            return None
        _, _, item = heapq.heappop(self._heap)
        item.timer_seq = 0
        self._live -= 1
        return when, item

    def items(self) -> Iterator[_T]:
        """The scheduled items, in no particular order."""
        return (item for _, seq, item in self._heap if item.timer_seq == seq)

    def _maybe_compact(self) -> None:
        if len(self._heap) > 2 * self._live + 1024:
            # In place: `heap` promises the same list.
            self._heap[:] = [entry for entry in self._heap if entry[2].timer_seq == entry[1]]
            heapq.heapify(self._heap)
