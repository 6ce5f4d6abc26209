"""FIFO consumption order for one process queue: which message may run next, and what to do on failure.

docs/protocol.md §7.6 (Java `FifoConsumeService`): the messages of a FIFO queue are consumed one after
another; with `enableFifoConsumeAccelerator` each `message_group` runs its own sequential chain, so different
groups go in parallel while each group keeps its order. A failed message is retried *locally* after the
server's backoff for that attempt (the proxy keeps it invisible through auto-renew) and forwarded to the
dead-letter queue once `max_attempts` is reached (docs/protocol.md §8.3). The retry waits on a timer of the
caller, never in a sleeping thread (as the Python 5.1.2 client does), and counts from the server's
`delivery_attempt`, not from 1 (docs/protocol.md §9.1, apache/rocketmq-clients #1096).

A group's next message runs only once its head is *settled on the server*: acked, or forwarded to the
dead-letter queue (docs/protocol.md §7.6: Java `FifoConsumeService` submits the next message when the future
of `ProcessQueueImpl.eraseFifoMessage` completes, and that future completes when `ackFifoMessage` /
`forwardToDeadLetterQueue` has succeeded). Releasing the group as soon as the ack or forward is merely
*queued* lets the next message run while the head may still come back: if the ack or forward then fails, the
server redelivers the head after later messages of its group. So the head's ack / forward is retried for as
long as its queue is assigned (`UNTIL_SETTLED`, every `FIFO_SETTLE_BACKOFF`), and the group waits;
`releases_chain` says which outcomes end the wait.

Pure: no I/O, no clock; the caller owns timers and RPCs.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import math
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

from thrust._core.ack import AckConfig, Fate
from thrust._core.backoff import BackoffPolicy

__all__ = [
    "FIFO_SETTLE_BACKOFF",
    "UNTIL_SETTLED",
    "FifoAction",
    "FifoSequencer",
    "fifo_failure_action",
    "fifo_settle_config",
    "releases_chain",
]

T = TypeVar("T", bound=Hashable)

_ONE_CHAIN = object()


class FifoAction(enum.Enum):
    """What to do with a FIFO message whose listener returned FAILURE."""

    RETRY = "retry"  # consume it again locally after the delay
    DEAD_LETTER = "dead_letter"  # ForwardMessageToDeadLetterQueue


def fifo_failure_action(attempt: int, max_attempts: int) -> FifoAction:
    """RETRY while `attempt` (the attempt that just failed, 1-based) is below `max_attempts`.

    `max_attempts` comes from the server's `backoff_policy.max_attempts` (17 = 16 retries + the first
    delivery, docs/protocol.md §4.3); a value below 1 is treated as 1 (dead-letter at the first failure).
    """
    return FifoAction.RETRY if attempt < max(1, max_attempts) else FifoAction.DEAD_LETTER


# The deadline of a FIFO head's ack / dead-letter forward while its queue is assigned: none. Push receives use
# auto_renew, so the proxy keeps the head invisible while this client is connected (docs/protocol.md §7.2: for
# up to `renewMaxTimeMillis` = 3 h, after which it nacks the message and the next attempt is answered
# INVALID_RECEIPT_HANDLE, which releases the chain). The head does not become visible again "anyway" within
# any shorter window, and giving up would leave the group blocked (or, if released, let the head come back
# after its successors). Java likewise retries until the ack / forward succeeds or the process queue is
# dropped (`ackFifoMessageLater`, `forwardToDeadLetterQueueLater`: "Process queue was dropped, give up"). The
# io layer bounds the entry with `AckBatcher.cap_deadline` when the queue is dropped; close bounds all.
UNTIL_SETTLED = math.inf

# How soon a FIFO head's failed ack / forward is tried again. Java waits 100 ms (`ACK_FIFO_MESSAGE_DELAY`,
# `FORWARD_FIFO_MESSAGE_TO_DLQ_DELAY` in current releases; 1 s in the release docs/protocol.md §8.3 describes)
# and re-sends a forward answered with a non-OK status at once. The whole group waits on this retry, so it
# starts as soon as Java's and is capped at Java's older 1 s, never hammering a broker in trouble.
FIFO_SETTLE_BACKOFF = BackoffPolicy(initial=0.1, maximum=1.0, multiplier=2.0)


def fifo_settle_config(config: AckConfig) -> AckConfig:
    """`config` for the acks of a FIFO consumer group: no linger and `FIFO_SETTLE_BACKOFF`.

    The group's next message waits for each ack (see module doc), so a linger that waits for company only
    adds its length to every message of a chain; acks of other chains finished in the same burst are still
    sent together, as the batcher cuts everything pending when it is next asked.
    """
    return dataclasses.replace(config, linger=0.0, backoff=FIFO_SETTLE_BACKOFF)


def releases_chain(fate: Fate) -> bool:
    """Whether a FIFO head whose ack / forward left the batcher with `fate` lets its chain go on.

    - ACKED: the server acked it, or has it in %DLQ%<group>.
    - DROPPED_INVALID: the server refused it for good (INVALID_RECEIPT_HANDLE, another 400xx, or a call
      that cannot succeed). The server no longer holds the head under this handle: it was settled by an
      earlier attempt whose answer was lost, or it is visible again and the server redelivers it itself.
      No retry can change that, and waiting would block the group for good (Java gives up the same way on
      a FIFO ack answered INVALID_RECEIPT_HANDLE, `ackFifoMessage`; its forward loops on any non-OK code).
    - DROPPED_EXPIRED, DROPPED_OVERFLOW: given up by the client while the server still holds the head
      invisible. Releasing would let a successor run before the head is redelivered; so the chain stays
      blocked until its queue is dropped or the client leaves, when the server redelivers the head ahead
      of the rest of its group. (With `UNTIL_SETTLED` this happens only once the queue is dropped, or when
      the retry set overflows, which the cache bound keeps from happening.)
    """
    return fate is Fate.ACKED or fate is Fate.DROPPED_INVALID


class FifoSequencer(Generic[T]):
    """Sequential chains of items: one chain per process queue, or one per message group.

    `add(items)` appends items in arrival order and returns those that may start now; `done(item)` is
    called once the item is settled on the server (acked, or dead-lettered; `settled(item, fate)` decides
    that from the ack / forward's fate) and returns the next item of its chain, if any. A failed item that
    will be retried stays at the head of its chain: the caller simply runs it again later and calls `done`
    only when it is finally settled. `drop()` forgets everything (queue dropped) and hands back the
    waiting items.
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

    def settled(self, item: T, fate: Fate) -> T | None:
        """The ack or dead-letter forward of `item` (a chain head) left the batcher with `fate`: the next item
        of its chain when `releases_chain(fate)`, else None and the chain stays blocked behind `item`."""
        if not releases_chain(fate):
            return None
        return self.done(item)

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
