"""FIFO consumption order for one process queue: which message may run next, and what to do on failure.

Reference §4.6 (Java `FifoConsumeService`): the messages of a FIFO queue are consumed one after another; with
`enableFifoConsumeAccelerator` each `message_group` runs its own sequential chain, so different groups go in
parallel while each group keeps its order. A failed message is retried *locally* after the server's backoff
for that attempt (the proxy keeps it invisible through auto-renew) and forwarded to the dead-letter queue
once `max_attempts` is reached (reference §4.7). The retry waits on a timer of the caller, never in a
sleeping thread (Python 5.1.2 weakness §6.3), and counts from the server's `delivery_attempt`, not from 1
(weakness §6.4 item 10, Java issue #1096).

Pure: no I/O, no clock; the caller owns timers and RPCs.
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

__all__ = ["FifoAction", "FifoSequencer", "fifo_failure_action"]

T = TypeVar("T", bound=Hashable)

_ONE_CHAIN = object()


class FifoAction(enum.Enum):
    """What to do with a FIFO message whose listener returned FAILURE."""

    RETRY = "retry"  # consume it again locally after the delay
    DEAD_LETTER = "dead_letter"  # ForwardMessageToDeadLetterQueue


def fifo_failure_action(attempt: int, max_attempts: int) -> FifoAction:
    """RETRY while `attempt` (the attempt that just failed, 1-based) is below `max_attempts`.

    `max_attempts` comes from the server's `backoff_policy.max_attempts` (17 = 16 retries + the first
    delivery, reference §1.4); a value below 1 is treated as 1 (dead-letter at the first failure).
    """
    return FifoAction.RETRY if attempt < max(1, max_attempts) else FifoAction.DEAD_LETTER


class FifoSequencer(Generic[T]):
    """Sequential chains of items: one chain per process queue, or one per message group.

    `add(items)` appends items in arrival order and returns those that may start now; `done(item)` is
    called once the item is settled (acked, or dead-lettered) and returns the next item of its chain, if
    any. A failed item that will be retried stays at the head of its chain: the caller simply runs it again
    later and calls `done` only when it is finally settled. `drop()` forgets everything (queue dropped) and
    hands back the waiting items.
    """

    __slots__ = ("_chains", "_group_of", "_parallel", "_running")

    def __init__(self, *, parallel_groups: bool, group_of: Callable[[T], object]) -> None:
        self._parallel = parallel_groups
        self._group_of = group_of
        self._chains: dict[object, collections.deque[T]] = {}
        # item -> its chain key, for items that are running (head of their chain).
        self._running: dict[T, object] = {}

    def _key(self, item: T) -> object:
        if not self._parallel:
            return _ONE_CHAIN
        group = self._group_of(item)
        # Messages without a group have no order promise between them; each gets its own chain.
        return group if group is not None else ("_no_group", id(item))

    def add(self, items: Iterable[T]) -> list[T]:
        ready: list[T] = []
        for item in items:
            key = self._key(item)
            chain = self._chains.get(key)
            if chain is None:
                self._chains[key] = collections.deque()
                self._running[item] = key
                ready.append(item)
            else:
                chain.append(item)
        return ready

    def done(self, item: T) -> T | None:
        key = self._running.pop(item, None)
        if key is None:
            return None
        chain = self._chains[key]
        if not chain:
            del self._chains[key]
            return None
        nxt = chain.popleft()
        self._running[nxt] = key
        return nxt

    def drop(self) -> list[T]:
        """Forget every chain; returns the items that were waiting (never started), in chain order."""
        waiting = [item for chain in self._chains.values() for item in chain]
        self._chains.clear()
        self._running.clear()
        return waiting

    @property
    def running(self) -> int:
        """Chains with an item at their head (being consumed, or waiting for a local retry)."""
        return len(self._running)

    @property
    def waiting(self) -> int:
        """Items queued behind a running item."""
        return sum(len(c) for c in self._chains.values())
