from __future__ import annotations

from thrust._core.assignment import AssignmentTable, QueueId, diff_topic

A0 = QueueId("a", "broker-a", 0)
A1 = QueueId("a", "broker-a", 1)
B0 = QueueId("b", "broker-a", 0)
B1 = QueueId("b", "broker-b", 0)


def test_scan_of_topic_a_never_drops_topic_b() -> None:
    """Bench scenario 5b: two topics; every scan of a touches only a's queues."""
    table = AssignmentTable()
    d = table.sync("a", [A0])
    assert (set(d.to_add), set(d.to_drop)) == ({A0}, set())
    d = table.sync("b", [B0, B1])
    assert (set(d.to_add), set(d.to_drop)) == ({B0, B1}, set())
    for _ in range(10):  # repeated scans, as every 5 s
        d = table.sync("a", [A1])
        assert B0 not in d.to_drop and B1 not in d.to_drop
        assert all(q.topic == "a" for q in d.to_add | d.to_drop)
        d = table.sync("a", [A0])
        assert all(q.topic == "a" for q in d.to_add | d.to_drop)
    assert table.queues("b") == {B0, B1}
    assert table.queues() == {A0, B0, B1}
    assert len(table) == 3
    d = table.sync("a", [])  # empty answer drops a's queues only
    assert (set(d.to_add), set(d.to_drop)) == (set(), {A0})
    assert table.queues() == {B0, B1}


def test_unchanged_assignment_is_empty_diff() -> None:
    table = AssignmentTable()
    table.sync("a", [A0, A1])
    d = table.sync("a", [A1, A0])
    assert not d


def test_expired_queue_is_recreated() -> None:
    table = AssignmentTable()
    table.sync("a", [A0, A1])
    d = table.sync("a", [A0, A1], expired=[A0, B0])
    assert (set(d.to_add), set(d.to_drop)) == ({A0}, {A0})
    assert table.queues("a") == {A0, A1}


def test_expired_and_unassigned_is_only_dropped() -> None:
    d = diff_topic([A0, A1], "a", [A1], expired=[A0])
    assert (set(d.to_add), set(d.to_drop)) == (set(), {A0})


def test_foreign_topic_in_answer_is_ignored() -> None:
    d = diff_topic([A0, B0], "a", [A0, B1])
    assert not d


def test_empty_answer_without_queues_changes_nothing() -> None:
    table = AssignmentTable()
    assert not table.sync("a", [])
    assert table.topics() == []


def test_remove_topic_and_membership() -> None:
    table = AssignmentTable()
    table.sync("a", [A0])
    table.sync("b", [B0])
    assert A0 in table and B1 not in table and "x" not in table
    assert table.remove_topic("a") == {A0}
    assert table.remove_topic("a") == frozenset()
    assert table.topics() == ["b"]
