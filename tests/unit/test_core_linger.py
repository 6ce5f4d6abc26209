"""The producer's linger batch decisions (`thrust._core.linger`), driven with plain floats for time."""

from __future__ import annotations

import random

import pytest

from thrust._core.linger import (
    MESSAGE_OVERHEAD,
    Batch,
    LingerAccumulator,
    LingerConfig,
    Pending,
    estimate_size,
    lane_for,
    split_on_refusal,
)

T = ("t", None)


def config(**kw: float) -> LingerConfig:
    base: dict[str, float] = dict(
        max_messages=4, max_bytes=1000, linger=0.005, max_pending=100, max_pending_bytes=10_000
    )
    base.update(kw)
    return LingerConfig(**base)  # type: ignore[arg-type]


def entry(lane: tuple[str, str | None] = T, size: int = 10) -> Pending:
    return Pending(lane, size)


def take_all(acc: LingerAccumulator, now: float) -> list[Batch]:
    out = []
    while (batch := acc.take_ready(now)) is not None:
        out.append(batch)
    return out


def test_a_batch_leaves_when_it_holds_max_messages_with_its_messages_in_order() -> None:
    acc = LingerAccumulator(config(max_messages=3))
    es = [entry() for _ in range(3)]
    assert acc.add(es[0], 0.0) is True  # a new batch: a new deadline for the flusher
    assert acc.add(es[1], 0.0) is False
    assert not acc.due(0.0)
    assert acc.add(es[2], 0.0) is True  # full
    assert acc.due(0.0)
    batch = acc.take_ready(0.0)
    assert batch is not None and batch.entries == es and len(batch) == 3
    assert acc.take_ready(0.0) is None
    assert (acc.queued, acc.in_flight, acc.pending) == (0, 1, 3)
    acc.on_done(batch)
    assert acc.idle() and acc.pending_bytes == 0


def test_an_open_batch_is_due_linger_seconds_after_its_first_message() -> None:
    acc = LingerAccumulator(config(linger=0.01))
    acc.add(entry(), 5.0)
    acc.add(entry(), 5.008)
    assert acc.next_wakeup() == pytest.approx(5.01)
    assert not acc.due(5.0099)
    assert acc.take_ready(5.0099) is None
    assert acc.due(5.01)
    batch = acc.take_ready(5.01)
    assert batch is not None and len(batch) == 2
    assert acc.next_wakeup() is None


def test_a_due_batch_keeps_filling_until_it_is_taken() -> None:
    # The flusher waits for a window slot before it takes a due batch: messages arriving meanwhile join.
    acc = LingerAccumulator(config(max_messages=10, linger=0.001))
    acc.add(entry(), 0.0)
    assert acc.due(1.0)
    for _ in range(4):
        acc.add(entry(), 1.0)
    batch = acc.take_ready(1.0)
    assert batch is not None and len(batch) == 5


def test_zero_linger_sends_what_arrived_before_the_flusher_ran() -> None:
    acc = LingerAccumulator(config(linger=0.0))
    acc.add(entry(), 1.0)
    acc.add(entry(), 1.0)
    assert acc.due(1.0)
    batch = acc.take_ready(1.0)
    assert batch is not None and len(batch) == 2


def test_the_byte_bound_closes_a_batch_before_the_message_that_would_overflow_it() -> None:
    acc = LingerAccumulator(config(max_bytes=100, max_messages=10))
    a, b, c = entry(size=40), entry(size=40), entry(size=40)
    for e in (a, b):
        acc.add(e, 0.0)
    assert not acc.due(0.0)
    assert acc.add(c, 0.0) is True  # does not fit: [a, b] leaves, c opens the next batch
    first = acc.take_ready(0.0)
    assert first is not None and first.entries == [a, b] and first.bytes == 80
    assert acc.take_ready(0.0) is None
    later = acc.take_ready(1.0)
    assert later is not None and later.entries == [c]


def test_a_message_larger_than_max_bytes_goes_alone_at_once() -> None:
    acc = LingerAccumulator(config(max_bytes=100, max_messages=10))
    small, big = entry(size=10), entry(size=500)
    acc.add(small, 0.0)
    acc.add(big, 0.0)
    batches = take_all(acc, 0.0)
    assert [b.entries for b in batches] == [[small], [big]]


def test_topics_batch_apart_and_due_requests_leave_oldest_first() -> None:
    acc = LingerAccumulator(config(max_messages=2, linger=1.0))
    a1 = entry(("a", None))
    b1, b2 = entry(("b", None)), entry(("b", None))
    acc.add(a1, 0.0)  # "a" opened first; lingers until 1.0
    acc.add(b1, 0.1)
    acc.add(b2, 0.1)  # "b" full now
    batches = take_all(acc, 0.5)
    assert [b.entries for b in batches] == [[b1, b2]]
    batches = take_all(acc, 1.0)
    assert [b.entries for b in batches] == [[a1]]
    # Both due at once: the one whose first message came first leaves first.
    c1, d1 = entry(("c", None)), entry(("d", None))
    acc.add(d1, 2.0)
    acc.add(c1, 2.1)
    assert [b.lane for b in take_all(acc, 5.0)] == [("d", None), ("c", None)]


def test_fifo_messages_go_alone_one_request_in_flight_per_group_in_call_order() -> None:
    acc = LingerAccumulator(config(max_messages=10, linger=1.0))
    g1 = [entry(("t", "g1")) for _ in range(3)]
    g2 = entry(("t", "g2"))
    assert acc.add(g1[0], 0.0) is True
    assert acc.add(g1[1], 0.0) is False  # its group is already waiting to leave
    acc.add(g1[2], 0.0)
    acc.add(g2, 0.0)
    # No linger for FIFO messages: due at once, one message per request, one per group.
    first = take_all(acc, 0.0)
    assert [b.entries for b in first] == [[g1[0]], [g2]]
    assert not acc.due(100.0)  # g1's next waits for its head's answer
    assert acc.on_done(first[1]) is False  # g2 done: nothing of g2 waits
    assert acc.on_done(first[0]) is True  # g1's next may leave: wake the flusher
    second = take_all(acc, 0.0)
    assert [b.entries for b in second] == [[g1[1]]]
    acc.on_done(second[0])
    third = take_all(acc, 0.0)
    assert [b.entries for b in third] == [[g1[2]]]
    acc.on_done(third[0])
    assert acc.idle()
    assert acc._lanes == {}  # finished lanes are forgotten (bounded by what is pending)


def test_fifo_and_normal_requests_interleave_by_arrival() -> None:
    acc = LingerAccumulator(config(max_messages=2, linger=0.0))
    n1, f1, n2 = entry(), entry(("t", "g")), entry()
    for e in (n1, f1, n2):
        acc.add(e, 0.0)
    assert [b.entries for b in take_all(acc, 0.0)] == [[n1, n2], [f1]]


def test_lane_for_sends_delay_priority_and_transactional_messages_alone() -> None:
    assert lane_for("t", message_group=None, delayed=False, priority=None) == ("t", None)
    assert lane_for("t", message_group="g", delayed=False, priority=None) == ("t", "g")
    assert lane_for("t", message_group=None, delayed=True, priority=None) is None
    assert lane_for("t", message_group=None, delayed=False, priority=3) is None
    assert lane_for("t", message_group=None, delayed=False, priority=None, transactional=True) is None


def test_room_is_bounded_by_count_and_bytes_and_freed_when_answered() -> None:
    acc = LingerAccumulator(config(max_messages=2, max_bytes=100, max_pending=3, max_pending_bytes=250))
    assert acc.room_for(10_000)  # an empty accumulator admits any one message: nothing waits forever
    es = [entry(size=50) for _ in range(3)]
    for e in es:
        assert acc.room_for(e.size)
        acc.add(e, 0.0)
    assert not acc.room_for(1)  # 3 messages pending
    batch = acc.take_ready(0.0)
    assert batch is not None
    assert not acc.room_for(1)  # in flight still counts
    acc.on_done(batch)
    assert acc.room_for(100) and not acc.room_for(201)  # 50 bytes pending of 250
    assert (acc.pending, acc.pending_bytes) == (1, 50)


def test_a_withdrawn_message_is_not_sent_and_frees_its_room() -> None:
    acc = LingerAccumulator(config(max_messages=3))
    a, b, c = entry(), entry(), entry()
    for e in (a, b):
        acc.add(e, 0.0)
    assert acc.withdraw(a) is True
    assert (acc.pending, acc.queued, acc.pending_bytes) == (1, 1, 10)
    assert acc.withdraw(a) is False  # once
    acc.add(c, 0.0)
    assert not acc.due(0.0)  # two live messages of three: not full
    batch = acc.take_ready(1.0)
    assert batch is not None and batch.entries == [b, c] and len(batch) == 2
    assert acc.withdraw(b) is False  # already in a request: its answer is ignored, nothing else changes
    acc.on_done(batch)
    assert acc.idle() and acc.pending_bytes == 0


def test_a_batch_whose_messages_were_all_withdrawn_is_never_sent() -> None:
    acc = LingerAccumulator(config(max_messages=2))
    open_one = entry()
    acc.add(open_one, 0.0)
    acc.withdraw(open_one)
    assert not acc.due(10.0) and acc.next_wakeup() is None and acc.take_ready(10.0) is None
    full = [entry(), entry()]
    for e in full:
        acc.add(e, 11.0)
    for e in full:
        acc.withdraw(e)
    assert acc.take_ready(20.0) is None and acc.idle()


def test_a_withdrawn_fifo_message_lets_the_next_of_its_group_leave() -> None:
    acc = LingerAccumulator(config())
    a, b = entry(("t", "g")), entry(("t", "g"))
    acc.add(a, 0.0)
    acc.add(b, 0.0)
    acc.withdraw(a)
    batch = acc.take_ready(0.0)
    assert batch is not None and batch.entries == [b]
    acc.on_done(batch)
    assert acc.idle() and acc._lanes == {}


def test_flush_all_makes_every_open_batch_due_and_drain_returns_what_never_left() -> None:
    acc = LingerAccumulator(config(max_messages=10, linger=60.0))
    a, b = entry(("a", None)), entry(("b", None))
    f1, f2 = entry(("t", "g")), entry(("t", "g"))
    for e in (a, f1, f2, b):
        acc.add(e, 0.0)
    in_flight = acc.take_ready(0.0)  # f1 (no linger for FIFO)
    assert in_flight is not None and in_flight.entries == [f1]
    assert not acc.due(1.0)
    acc.flush_all()
    assert acc.due(1.0)
    first = acc.take_ready(1.0)
    assert first is not None and first.entries == [a]
    # The deadline comes: b and f2 never left.
    assert acc.drain() == [f2, b]
    assert (acc.pending, acc.queued, acc.in_flight) == (2, 0, 2)
    assert acc.take_ready(1.0) is None
    acc.on_done(first)
    acc.on_done(in_flight)
    assert acc.idle() and acc.pending_bytes == 0 and acc._lanes == {}


def test_config_bounds() -> None:
    with pytest.raises(ValueError):
        config(max_messages=0)
    with pytest.raises(ValueError):
        config(linger=-1)
    with pytest.raises(ValueError):
        config(max_bytes=0)
    with pytest.raises(ValueError):
        config(max_pending=3)  # fewer than one batch
    with pytest.raises(ValueError):
        config(max_pending_bytes=999)


def test_split_on_refusal_only_for_per_message_refusals_of_several_messages() -> None:
    assert split_on_refusal(41301, 2)  # MESSAGE_BODY_TOO_LARGE
    assert split_on_refusal(40016, 5)  # MESSAGE_CORRUPTED
    assert not split_on_refusal(41301, 1)  # alone already
    assert not split_on_refusal(50001, 5)  # may have been stored: never resent one by one
    assert not split_on_refusal(40402, 5)  # TOPIC_NOT_FOUND: every message would fail the same
    assert not split_on_refusal(None, 5)  # transport


def test_estimate_size_counts_body_properties_tag_keys_and_overhead() -> None:
    size = estimate_size(b"x" * 100, {"k": "vv"}, "tag", ["a", "bc"], "topic")
    assert size == 100 + MESSAGE_OVERHEAD + 5 + (1 + 2 + 2) + 3 + (1 + 1) + (2 + 1)


def test_random_operations_keep_every_bound_and_every_message_ends_exactly_once() -> None:
    rng = random.Random(17)
    c = config(max_messages=5, max_bytes=300, linger=0.01, max_pending=40, max_pending_bytes=3000)
    acc = LingerAccumulator(c)
    lanes = [("a", None), ("b", None), ("a", "g1"), ("a", "g2")]
    now = 0.0
    live: list[Pending] = []
    in_flight: list[Batch] = []
    ended: dict[int, str] = {}
    order: dict[tuple[str, str | None], list[int]] = {}
    added: dict[tuple[str, str | None], list[int]] = {}
    for _ in range(5000):
        now += rng.random() * 0.004
        op = rng.random()
        if op < 0.5:
            e = entry(rng.choice(lanes), rng.randint(1, 400))
            if acc.room_for(e.size):
                acc.add(e, now)
                live.append(e)
                added.setdefault(e.lane, []).append(e.seq)
        elif op < 0.6 and live:
            e = live.pop(rng.randrange(len(live)))
            if acc.withdraw(e):
                ended[e.seq] = "withdrawn"
                added[e.lane].remove(e.seq)
        elif op < 0.85:
            while (batch := acc.take_ready(now)) is not None:
                assert 1 <= len(batch) and (len(batch) <= c.max_messages)
                assert batch.bytes <= c.max_bytes or len(batch) == 1
                assert len({e.lane for e in batch.entries}) == 1
                if batch.lane[1] is not None:
                    assert len(batch) == 1
                    assert not any(b.lane == batch.lane for b in in_flight)  # one per FIFO group
                for e in batch.entries:
                    assert e.seq not in ended
                    ended[e.seq] = "taken"
                    order.setdefault(e.lane, []).append(e.seq)
                in_flight.append(batch)
        elif in_flight:
            acc.on_done(in_flight.pop(rng.randrange(len(in_flight))))
        assert acc.pending <= c.max_pending or acc.pending == 1
        assert acc.pending == sum(len(b) for b in in_flight) + acc.queued
        assert acc.pending_bytes >= 0
    acc.flush_all()
    while (batch := acc.take_ready(now)) is not None or in_flight:
        if batch is not None:
            for e in batch.entries:
                ended[e.seq] = "taken"
                order.setdefault(e.lane, []).append(e.seq)
            in_flight.append(batch)
        else:
            acc.on_done(in_flight.pop())
    assert acc.idle() and acc.pending_bytes == 0 and acc.drain() == []
    # Every message accepted and not withdrawn was taken exactly once; FIFO groups in call order.
    for lane, seqs in added.items():
        assert sorted(order.get(lane, [])) == sorted(seqs)
        if lane[1] is not None:
            assert order.get(lane, []) == seqs
