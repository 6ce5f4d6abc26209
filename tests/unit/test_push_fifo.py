"""FIFO sequencing (pure): order per chain, parallel groups, retry vs dead-letter decisions."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from thrust._core.ack import AckConfig, Fate
from thrust._core.fifo import (
    FIFO_SETTLE_BACKOFF,
    FifoAction,
    FifoSequencer,
    fifo_failure_action,
    fifo_settle_config,
    releases_chain,
)


@dataclass(frozen=True)
class M:
    n: int
    group: str | None


def seq(parallel: bool) -> FifoSequencer[M]:
    return FifoSequencer(parallel_groups=parallel, group_of=lambda m: m.group)


def test_one_chain_runs_everything_in_arrival_order() -> None:
    s = seq(False)
    items = [M(i, "ab"[i % 2]) for i in range(6)]
    assert s.add(items[:3]) == [items[0]]
    assert s.add(items[3:]) == []
    order = [items[0]]
    nxt = s.done(items[0])
    while nxt is not None:
        order.append(nxt)
        nxt = s.done(nxt)
    assert order == items
    assert s.running == 0 and s.waiting == 0


def test_parallel_groups_keep_order_within_each_group() -> None:
    s = seq(True)
    items = [M(i, "abc"[i % 3]) for i in range(9)]
    ready = s.add(items)
    assert ready == items[:3]
    assert s.running == 3 and s.waiting == 6
    # Group b finishes first: its next one starts, the others are unaffected.
    assert s.done(items[1]) == items[4]
    assert s.done(items[4]) == items[7]
    assert s.done(items[7]) is None
    assert s.done(items[0]) == items[3]
    # A chain that emptied restarts on the next add.
    assert s.add([M(20, "b")]) == [M(20, "b")]


def test_messages_without_group_are_independent_in_parallel_mode() -> None:
    s = seq(True)
    items = [M(i, None) for i in range(3)]
    assert s.add(items) == items


def test_done_of_unknown_item_is_ignored_and_drop_forgets() -> None:
    s = seq(False)
    a, b = M(1, "g"), M(2, "g")
    s.add([a, b])
    assert s.done(b) is None  # b is not running
    assert s.drop() == [b]
    assert s.done(a) is None
    assert s.add([b]) == [b]


def test_failure_action_counts_from_the_server_attempt() -> None:
    assert fifo_failure_action(1, 17) is FifoAction.RETRY
    assert fifo_failure_action(16, 17) is FifoAction.RETRY
    assert fifo_failure_action(17, 17) is FifoAction.DEAD_LETTER
    assert fifo_failure_action(20, 17) is FifoAction.DEAD_LETTER
    assert fifo_failure_action(1, 0) is FifoAction.DEAD_LETTER


@pytest.mark.parametrize(
    ("fate", "released"),
    [
        (Fate.ACKED, True),  # acked, or in %DLQ% on the server
        (Fate.DROPPED_INVALID, True),  # the server no longer holds it under this handle: waiting cannot help
        (Fate.DROPPED_EXPIRED, False),  # given up by the client while the server still holds it invisible
        (Fate.DROPPED_OVERFLOW, False),
    ],
)
def test_a_chain_goes_on_only_once_its_head_is_settled_on_the_server(fate: Fate, released: bool) -> None:
    s = seq(False)
    head, nxt = M(1, "g"), M(2, "g")
    assert s.add([head, nxt]) == [head]
    assert releases_chain(fate) is released
    if released:
        assert s.settled(head, fate) == nxt
        assert s.running == 1 and s.waiting == 0
    else:
        # Blocked behind the head until the queue is dropped: the server redelivers the head first.
        assert s.settled(head, fate) is None
        assert s.running == 1 and s.waiting == 1
        assert s.drop() == [nxt]


def test_a_settled_head_releases_only_its_own_group() -> None:
    s = seq(True)
    a1, a2, b1, b2 = M(1, "a"), M(2, "a"), M(3, "b"), M(4, "b")
    assert s.add([a1, a2, b1, b2]) == [a1, b1]
    assert s.settled(b1, Fate.ACKED) == b2
    assert s.settled(a1, Fate.DROPPED_EXPIRED) is None
    assert s.settled(b2, Fate.ACKED) is None
    assert s.running == 1 and s.waiting == 1  # a2 still waits behind a1


def test_fifo_acks_go_out_without_linger_on_the_fifo_retry_schedule() -> None:
    base = AckConfig(max_batch=32, linger=0.01, max_pending=70_000)
    fifo = fifo_settle_config(base)
    assert fifo.linger == 0.0 and fifo.backoff is FIFO_SETTLE_BACKOFF
    assert (fifo.max_batch, fifo.max_pending) == (32, 70_000)
    # Retries start at Java's 100 ms and never wait more than 1 s: the whole group waits on them.
    assert FIFO_SETTLE_BACKOFF.delay(1) == 0.1
    assert max(FIFO_SETTLE_BACKOFF.delay(n) for n in range(1, 50)) == 1.0
