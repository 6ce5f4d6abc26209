"""Broker core: FIFO groups (per message group order and blocking) and reentrant attempt ids."""

from __future__ import annotations

from tests.server.unit._broker_kit import T0, TagFilter, ack, ids, make, msg, nack, pop
from thrust.server.core.model import MessageType

FIFO = MessageType.FIFO


def _send(broker: object, group: str, *names: str) -> None:
    for name in names:
        broker.send([msg(kind=FIFO, group=group, message_id=name)], T0)  # type: ignore[attr-defined]


def test_message_group_blocked_while_earlier_message_in_flight() -> None:
    _, broker = make(FIFO, queues=1, fifo=True)
    _send(broker, "A", "A1", "A2")
    [a1] = pop(broker, T0, batch=1)
    assert a1.message.message_id == "A1"
    assert pop(broker, T0 + 1) == []  # A2 waits for A1
    ack(broker, a1, T0 + 2)
    assert ids(pop(broker, T0 + 3)) == ["A2"]


def test_other_message_groups_proceed() -> None:
    _, broker = make(FIFO, queues=1, fifo=True)
    _send(broker, "A", "A1")
    _send(broker, "B", "B1")
    _send(broker, "A", "A2")
    _send(broker, "B", "B2")
    _send(broker, "C", "C1")
    [a1] = pop(broker, T0, batch=1)
    assert a1.message.message_id == "A1"
    got = ids(pop(broker, T0, batch=32))
    assert got == ["B1", "B2", "C1"]
    assert pop(broker, T0) == []
    ack(broker, a1, T0)
    assert ids(pop(broker, T0)) == ["A2"]


def test_batch_delivers_consecutive_messages_of_a_group_in_order() -> None:
    _, broker = make(FIFO, queues=1, fifo=True)
    _send(broker, "A", "A1", "A2", "A3")
    got = pop(broker, T0, batch=32)
    assert ids(got) == ["A1", "A2", "A3"]
    assert [d.message.offset for d in got] == [0, 1, 2]


def test_redelivery_keeps_group_order() -> None:
    _, broker = make(FIFO, queues=1, fifo=True)
    _send(broker, "A", "A1", "A2")
    _, second = pop(broker, T0, invisible=10)
    ack(broker, second, T0 + 1)  # out of order ack of A2; A1 still in flight
    assert pop(broker, T0 + 5) == []
    [again] = pop(broker, T0 + 10)
    assert again.message.message_id == "A1" and again.delivery_attempt == 2
    ack(broker, again, T0 + 11)
    assert pop(broker, T0 + 12) == []


def test_nacked_head_is_redelivered_before_later_messages() -> None:
    _, broker = make(FIFO, queues=1, fifo=True)
    _send(broker, "A", "A1")
    [a1] = pop(broker, T0)
    _send(broker, "A", "A2", "A3")
    nack(broker, a1, T0 + 1, 0.0)
    got = pop(broker, T0 + 1)
    assert ids(got) == ["A1", "A2", "A3"]
    assert [d.delivery_attempt for d in got] == [2, 1, 1]


def test_later_message_blocked_even_if_visible_again() -> None:
    _, broker = make(FIFO, queues=1, fifo=True)
    _send(broker, "A", "A1", "A2")
    a1, a2 = pop(broker, T0, invisible=100)
    nack(broker, a2, T0 + 1, 0.0)  # A2 visible again, but A1 is still in flight
    assert pop(broker, T0 + 2) == []
    ack(broker, a1, T0 + 3)
    [again] = pop(broker, T0 + 4)
    assert again.message.message_id == "A2" and again.delivery_attempt == 2


def test_fifo_groups_per_queue_with_any_queue_pop() -> None:
    _, broker = make(FIFO, queues=4, fifo=True)
    names = {g: [f"{g}{i}" for i in range(3)] for g in ("alpha", "beta", "gamma", "delta", "epsilon")}
    for i in range(3):
        for g, seq in names.items():
            _send(broker, g, seq[i])
    seen: dict[str, list[str]] = {g: [] for g in names}
    now = T0
    for _ in range(10):
        batch = pop(broker, now, batch=2)
        for d in batch:
            assert d.message.message_group is not None
            seen[d.message.message_group].append(d.message.message_id)
            ack(broker, d, now)
        now += 1
    assert seen == names


def test_messages_without_group_are_not_blocked() -> None:
    _, broker = make(FIFO, MessageType.NORMAL, queues=1, fifo=True)
    broker.send([msg(message_id="N1")], T0)
    broker.send([msg(message_id="N2")], T0)
    [n1] = pop(broker, T0, batch=1)
    assert ids(pop(broker, T0, batch=1)) == ["N2"]
    assert n1.message.message_id == "N1"


def test_fifo_filter_skips() -> None:
    _, broker = make(FIFO, queues=1, fifo=True)
    broker.send([msg(kind=FIFO, group="A", tag="x", message_id="A1")], T0)
    broker.send([msg(kind=FIFO, group="A", tag="y", message_id="A2")], T0)
    broker.send([msg(kind=FIFO, group="A", tag="x", message_id="A3")], T0)
    assert ids(pop(broker, T0, flt=TagFilter(frozenset({"x"})))) == ["A1", "A3"]


def test_fifo_dlq_after_max_attempts_unblocks_group() -> None:
    _, broker = make(FIFO, queues=1, fifo=True, max_attempts=2)
    _send(broker, "A", "A1", "A2")
    [a1] = pop(broker, T0, batch=1, invisible=10)
    assert a1.delivery_attempt == 1
    [again] = pop(broker, T0 + 10, batch=1, invisible=10)
    assert again.message.message_id == "A1" and again.delivery_attempt == 2
    # Third attempt would exceed 2: A1 goes to the DLQ and A2 is next.
    assert ids(pop(broker, T0 + 20)) == ["A2"]
    assert [m.message_id for m in broker.messages("%DLQ%g")] == ["A1"]


def test_same_attempt_id_repops_the_same_batch() -> None:
    _, broker = make(FIFO, queues=1, fifo=True)
    _send(broker, "A", "A1", "A2")
    _send(broker, "B", "B1")
    first = pop(broker, T0, attempt_id="att-1", batch=2)
    assert ids(first) == ["A1", "A2"]
    again = pop(broker, T0 + 1, attempt_id="att-1", batch=2)
    assert again == first  # same messages, same handles, same attempt numbers
    assert broker.inflight("g", "t") == 2
    # A different attempt id is an ordinary pop.
    assert ids(pop(broker, T0 + 1, attempt_id="att-2")) == ["B1"]
    # Once part of the batch is acked, the attempt id no longer replays it.
    ack(broker, first[0], T0 + 2)
    assert pop(broker, T0 + 3, attempt_id="att-1") == []
    ack(broker, first[1], T0 + 4)


def test_attempt_id_not_replayed_after_expiry() -> None:
    _, broker = make(FIFO, queues=1, fifo=True)
    _send(broker, "A", "A1")
    [d] = pop(broker, T0, attempt_id="att", invisible=10)
    [again] = pop(broker, T0 + 10, attempt_id="att", invisible=10)
    assert again.delivery_attempt == 2 and again.receipt_handle != d.receipt_handle


def test_attempt_id_for_normal_groups_too() -> None:
    _, broker = make(queues=1)
    broker.send([msg(message_id="M1"), msg(message_id="M2")], T0)
    first = pop(broker, T0, attempt_id="x", batch=1)
    assert pop(broker, T0, attempt_id="x", batch=1) == first
    assert ids(pop(broker, T0, attempt_id="y", batch=1)) == ["M2"]


def test_non_fifo_group_ignores_message_groups() -> None:
    _, broker = make(FIFO, queues=1, fifo=False)
    _send(broker, "A", "A1", "A2")
    [a1] = pop(broker, T0, batch=1)
    assert ids(pop(broker, T0, batch=1)) == ["A2"]
    assert a1.message.message_id == "A1"


def test_fifo_read_ahead_is_bounded() -> None:
    _, broker = make(FIFO, queues=1, fifo=True, fifo_read_ahead=8)
    _send(broker, "A", *[f"A{i}" for i in range(20)])
    _send(broker, "B", "B1")
    [a0] = pop(broker, T0, batch=1)
    # A's backlog fills the read-ahead window, so B1 (beyond it) waits; it is not lost.
    assert pop(broker, T0) == []
    ack(broker, a0, T0)
    got = []
    now = T0
    while len(got) < 20:
        batch = pop(broker, now)
        assert batch, got
        for d in batch:
            ack(broker, d, now)
        got.extend(ids(batch))
        now += 1
    assert [name for name in got if name.startswith("A")] == [f"A{i}" for i in range(1, 20)]
    assert "B1" in got


def test_in_flight_message_in_the_middle_blocks_the_rest_of_its_group() -> None:
    _, broker = make(FIFO, queues=1, fifo=True)
    _send(broker, "A", "A1", "A2")
    a1, a2 = pop(broker, T0, invisible=100)
    nack(broker, a1, T0 + 1, 0.0)  # A1 visible again, A2 still in flight
    _send(broker, "A", "A3")
    again = pop(broker, T0 + 2)
    assert ids(again) == ["A1"]  # A3 must wait behind the in-flight A2
    ack(broker, again[0], T0 + 3)
    assert pop(broker, T0 + 4) == []
    ack(broker, a2, T0 + 5)
    assert ids(pop(broker, T0 + 6)) == ["A3"]
