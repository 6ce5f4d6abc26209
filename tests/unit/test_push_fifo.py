"""FIFO sequencing (pure): order per chain, parallel groups, retry vs dead-letter decisions."""

from __future__ import annotations

from dataclasses import dataclass

from thrust._core.fifo import FifoAction, FifoSequencer, fifo_failure_action


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
