from __future__ import annotations

import heapq
import math
import random
from collections import Counter
from collections.abc import Callable

import pytest

from thrust._core.ack import (
    AckBatch,
    AckBatcher,
    AckConfig,
    AckEntry,
    AckKey,
    Fate,
    Outcome,
    classify,
    results_for,
)
from thrust._core.backoff import BackoffPolicy
from thrust._core.endpoints import parse_endpoint

EP = parse_endpoint("127.0.0.1:8081")
KEY = AckKey(EP, "g", "t")
OK, MULTIPLE, INVALID, INTERNAL, TOO_MANY = 20000, 30000, 40013, 50001, 42900


def entry(i: int, deadline: float = 60.0) -> AckEntry:
    return AckEntry(f"m{i}", f"h{i}", deadline, token=i)


class FakeServer:
    """Answers ack batches per entry; records every attempt with its time."""

    def __init__(
        self,
        invalid: frozenset[str] | set[str] = frozenset(),
        fail_first: bool = True,
        always_fail: frozenset[str] | set[str] = frozenset(),
    ):
        self.invalid = invalid
        self.fail_first = fail_first
        self.always_fail = always_fail
        self.attempts: Counter[str] = Counter()
        self.attempt_times: list[tuple[str, float]] = []

    def answer(self, batch: AckBatch, now: float) -> list[tuple[str, int]]:
        out = []
        for e in batch.entries:
            self.attempts[e.message_id] += 1
            self.attempt_times.append((e.message_id, now))
            if e.message_id in self.invalid:
                code = INVALID
            elif e.message_id in self.always_fail:
                code = INTERNAL
            elif self.fail_first and self.attempts[e.message_id] == 1:
                code = INTERNAL
            else:
                code = OK
            out.append((e.message_id, code))
        return out


def drive(
    batcher: AckBatcher,
    server: FakeServer,
    until: float,
    rtt: float = 0.002,
    now: float = 0.0,
    check: Callable[[AckBatcher], None] | None = None,
) -> tuple[float, list[tuple[AckEntry, Fate, float]]]:
    """Simulated io loop: send what is ready, deliver results after `rtt`, sleep until the next event."""
    in_flight: list[tuple[float, int, AckBatch, list[tuple[str, int]]]] = []  # (done at, seq, batch, answer)
    finished: list[tuple[AckEntry, Fate, float]] = []
    seq = 0
    for _ in range(1_000_000):
        for batch in batcher.take_ready(now):
            seq += 1
            heapq.heappush(in_flight, (now + rtt, seq, batch, server.answer(batch, now)))
        while in_flight and in_flight[0][0] <= now:
            _, _, batch, answer = heapq.heappop(in_flight)
            code = MULTIPLE if len({c for _, c in answer}) > 1 else answer[0][1]
            batcher.on_results(batch, results_for(batch, code, answer), now)
        finished.extend((e, f, now) for e, f in batcher.take_finished())
        if check is not None:
            check(batcher)
        wake = batcher.next_wakeup()
        candidates = [t for t in (wake, in_flight[0][0] if in_flight else None) if t is not None]
        if not candidates:
            return now, finished
        nxt = max(now, min(candidates))
        if nxt > until:
            return now, finished
        now = nxt
    raise AssertionError("simulation did not settle")


def test_retriable_first_failures_are_retried_once_and_invalid_handles_dropped_within_the_bound() -> None:
    """400 acks, every first attempt fails retriably, 4 handles invalid (bench scenario 4)."""
    bound = 500
    config = AckConfig(max_retrying=bound, backoff=BackoffPolicy(0.1, 2.0, 2.0, random.Random(4)))
    batcher = AckBatcher(config)
    invalid = {"m7", "m100", "m250", "m399"}
    server = FakeServer(invalid=invalid, fail_first=True)
    deadline = 30.0
    for i in range(400):
        # 400 consumed messages arriving over 100 ms, as a consumer would produce them
        batcher.add(KEY, entry(i, deadline), now=i * 0.00025)
    peak = 0

    def check(b: AckBatcher) -> None:
        nonlocal peak
        s = b.stats()
        peak = max(peak, s.retrying)
        assert s.retrying <= bound

    _, finished = drive(batcher, server, until=15.0, now=0.1, check=check)
    fates = Counter(f for _, f, _ in finished)
    assert fates[Fate.ACKED] == 396
    assert fates[Fate.DROPPED_INVALID] == 4
    acked_at = max(t for _, f, t in finished if f is Fate.ACKED)
    assert acked_at <= 1.5, acked_at
    for mid in invalid:
        assert server.attempts[mid] == 1
    assert all(n == 2 for mid, n in server.attempts.items() if mid not in invalid)
    assert all(t < deadline for _, t in server.attempt_times)
    assert peak <= bound
    s = batcher.stats()
    assert batcher.idle()
    assert (s.acked, s.dropped_invalid, s.dropped_expired, s.dropped_overflow) == (396, 4, 0, 0)
    assert s.attempts == 396 * 2 + 4
    assert s.rpcs < 100  # batched, not one RPC per entry


def test_scenario_with_small_retry_bound_stays_bounded() -> None:
    config = AckConfig(max_retrying=50, backoff=BackoffPolicy(0.1, 2.0, 2.0, random.Random(1)))
    batcher = AckBatcher(config)
    server = FakeServer(fail_first=True)
    for i in range(400):
        batcher.add(KEY, entry(i, 30.0), now=0.0)

    def check(b: AckBatcher) -> None:
        assert b.stats().retrying <= 50

    _, finished = drive(batcher, server, until=15.0, check=check)
    fates = Counter(f for _, f, _ in finished)
    assert fates[Fate.ACKED] + fates[Fate.DROPPED_OVERFLOW] == 400
    assert fates[Fate.DROPPED_OVERFLOW] == batcher.stats().dropped_overflow > 0
    assert batcher.idle()


def test_no_head_of_line_blocking() -> None:
    batcher = AckBatcher(AckConfig(linger=0.0))
    server = FakeServer(fail_first=False, always_fail={"m0"})
    batcher.add(KEY, entry(0, deadline=10.0), 0.0)
    _, finished = drive(batcher, server, until=0.5)
    assert finished == []
    assert batcher.stats().retrying == 1
    batcher.add(KEY, entry(1, deadline=10.0), 0.5)
    _, finished = drive(batcher, server, until=0.6, now=0.5)
    assert [(e.message_id, f) for e, f, _ in finished] == [("m1", Fate.ACKED)]
    assert finished[0][2] <= 0.51


def test_never_attempted_at_or_after_deadline() -> None:
    batcher = AckBatcher(AckConfig(backoff=BackoffPolicy(0.05, 0.2)))
    server = FakeServer(fail_first=False, always_fail={"m0"})
    batcher.add(KEY, entry(0, deadline=1.0), 0.0)
    _, finished = drive(batcher, server, until=10.0)
    assert [(e.message_id, f) for e, f, _ in finished] == [("m0", Fate.DROPPED_EXPIRED)]
    assert finished[0][2] < 1.0  # given up as soon as the next attempt could not precede the deadline
    assert all(t < 1.0 for _, t in server.attempt_times)
    assert server.attempts["m0"] > 3
    assert batcher.idle()


def test_expired_while_pending_is_not_sent() -> None:
    batcher = AckBatcher(AckConfig(linger=0.01))
    batcher.add(KEY, entry(0, deadline=0.005), 0.0)
    batcher.add(KEY, entry(1, deadline=5.0), 0.0)
    [batch] = batcher.take_ready(0.01)
    assert [e.message_id for e in batch.entries] == ["m1"]
    assert [(e.message_id, f) for e, f in batcher.take_finished()] == [("m0", Fate.DROPPED_EXPIRED)]


def test_add_past_deadline_finishes_at_once() -> None:
    batcher = AckBatcher()
    e = entry(0, deadline=1.0)
    assert batcher.add(KEY, e, 1.0)
    assert batcher.take_finished() == [(e, Fate.DROPPED_EXPIRED)]
    assert batcher.idle()
    with pytest.raises(ValueError):
        batcher.add(KEY, e, 1.0)


def test_linger_and_full_batches() -> None:
    batcher = AckBatcher(AckConfig(max_batch=32, linger=0.005, max_in_flight_batches=2))
    assert batcher.add(KEY, entry(0), 0.0) is True  # first entry: arm the timer
    assert batcher.add(KEY, entry(1), 0.0) is False
    assert batcher.take_ready(0.004) == []
    assert batcher.next_wakeup() == pytest.approx(0.005)
    [b] = batcher.take_ready(0.005)
    assert len(b) == 2
    for i in range(2, 72):
        batcher.add(KEY, entry(i), 0.01)
    batches = batcher.take_ready(0.01)
    assert [len(x) for x in batches] == [32]  # in-flight limit 2: the first batch is still in flight
    assert batcher.stats().pending == 38
    batcher.on_results(b, results_for(b, OK), 0.011)
    batches = batcher.take_ready(0.011)
    assert [len(x) for x in batches] == [32]
    assert batcher.stats().pending == 6
    assert batcher.next_wakeup() is None  # blocked by in-flight: results will trigger take_ready


def test_linger_zero_flushes_at_once_and_keys_are_separate() -> None:
    batcher = AckBatcher(AckConfig(linger=0.0))
    other = AckKey(EP, "g", "other")
    assert batcher.add(KEY, entry(0), 0.0)
    assert batcher.add(other, entry(1), 0.0)
    assert batcher.add(KEY, entry(2), 0.0)
    batches = batcher.take_ready(0.0)
    assert sorted((b.key.topic, len(b)) for b in batches) == [("other", 1), ("t", 2)]


class _CountingKey(AckKey):
    """An AckKey that counts how often it is hashed (the batcher's lane lookups)."""

    hashes = 0

    def __hash__(self) -> int:
        type(self).hashes += 1
        return super().__hash__()


def test_add_many_does_what_add_does_entry_by_entry() -> None:
    def burst() -> list[tuple[AckKey, AckEntry]]:
        other = AckKey(EP, "g", "other")
        return [
            (KEY, entry(0)),
            (KEY, entry(1, deadline=1.0)),  # past its deadline at 1.0: dropped at once
            (other, entry(2)),
            (KEY, entry(3)),
            (KEY, entry(4)),  # over max_pending 3: dropped at once
        ]

    one = AckBatcher(AckConfig(max_pending=3, linger=1.0))
    kicks = [one.add(key, e, 1.0) for key, e in burst()]
    many = AckBatcher(AckConfig(max_pending=3, linger=1.0))
    assert many.add_many(burst(), 1.0) is any(kicks)

    def state(b: AckBatcher) -> tuple[object, ...]:
        finished = [(e.message_id, f) for e, f in b.take_finished()]
        batches = sorted((x.key.topic, [e.message_id for e in x.entries]) for x in b.flush_all(1.0))
        return finished, batches, b.stats().pending

    assert (
        state(many)
        == state(one)
        == (
            [("m1", Fate.DROPPED_EXPIRED), ("m4", Fate.DROPPED_OVERFLOW)],
            [("other", ["m2"]), ("t", ["m0", "m3"])],
            0,
        )
    )
    # A burst that only adds to a lane that already waits for its linger needs no wake-up; one that fills
    # a batch does.
    b = AckBatcher(AckConfig(max_batch=4, linger=1.0))
    assert b.add_many([(KEY, entry(0))], 0.0) is True
    assert b.add_many([(KEY, entry(1)), (KEY, entry(2))], 0.0) is False
    assert b.add_many([(KEY, entry(3))], 0.0) is True
    with pytest.raises(ValueError):
        b.add_many([(KEY, entry(9)), (KEY, b.flush_all(0.0)[0].entries[0])], 0.0)
    assert AckBatcher(AckConfig(linger=0.0)).add_many([], 0.0) is False  # nothing added: nothing to wake for


def test_add_many_looks_a_lane_up_once_per_run_of_one_key() -> None:
    key = _CountingKey(EP, "g", "t")
    other = _CountingKey(EP, "g", "other")
    batcher = AckBatcher(AckConfig(linger=1.0))
    _CountingKey.hashes = 0
    batcher.add_many([(key, entry(i)) for i in range(32)] + [(other, entry(32)), (key, entry(33))], 0.0)
    # key, other, key again: a lookup (and an insertion for a new lane) per run, not one per entry
    assert _CountingKey.hashes <= 5
    assert batcher.stats().pending == 34


def test_nacks_are_unbatched_and_retried_per_entry() -> None:
    batcher = AckBatcher(AckConfig.unbatched())
    for i in range(3):
        batcher.add(KEY, entry(i), 0.0)
    batches = batcher.take_ready(0.0)
    assert [len(b) for b in batches] == [1, 1, 1]
    batcher.on_results(batches[0], results_for(batches[0], OK), 0.01)
    batcher.on_results(batches[1], results_for(batches[1], INVALID), 0.01)
    batcher.on_batch_failed(batches[2], retriable=True, now=0.01)
    fates = [(e.message_id, f) for e, f in batcher.take_finished()]
    assert fates == [("m0", Fate.ACKED), ("m1", Fate.DROPPED_INVALID)]
    assert batcher.stats().retrying == 1
    assert batcher.next_wakeup() == pytest.approx(0.11)
    [retry] = batcher.take_ready(0.11)
    assert retry.entries[0].message_id == "m2" and retry.entries[0].attempts == 2


def test_whole_rpc_failure_non_retriable() -> None:
    batcher = AckBatcher(AckConfig(linger=0.0))
    batcher.add(KEY, entry(0), 0.0)
    [b] = batcher.take_ready(0.0)
    batcher.on_batch_failed(b, retriable=False, now=0.0)
    batcher.on_batch_failed(b, retriable=True, now=0.0)  # second report of the same batch is ignored
    assert [f for _, f in batcher.take_finished()] == [Fate.DROPPED_INVALID]
    assert batcher.idle()


def test_retries_rebatched_with_new_entries_of_same_key() -> None:
    batcher = AckBatcher(AckConfig(linger=0.005, backoff=BackoffPolicy(0.1, 1.0)))
    batcher.add(KEY, entry(0), 0.0)
    [b] = batcher.take_ready(0.005)
    batcher.on_batch_failed(b, True, 0.01)
    batcher.add(KEY, entry(1), 0.108)
    [b2] = batcher.take_ready(0.113)
    assert sorted(e.message_id for e in b2.entries) == ["m0", "m1"]


def test_flush_all_ignores_linger_and_backoff() -> None:
    batcher = AckBatcher(AckConfig(linger=10.0, backoff=BackoffPolicy(5.0, 5.0)))
    batcher.add(KEY, entry(0), 0.0)
    batcher.add(KEY, entry(1), 0.0)
    assert batcher.take_ready(0.0) == []
    [b] = batcher.flush_all(0.0)
    batcher.on_results(b, results_for(b, MULTIPLE, [("m0", OK)]), 0.01)  # m1 missing: retriable
    assert batcher.stats().retrying == 1
    assert not batcher.idle()
    [b2] = batcher.flush_all(0.02)
    assert [e.message_id for e in b2.entries] == ["m1"]
    batcher.on_results(b2, results_for(b2, OK), 0.03)
    assert batcher.idle()
    assert batcher.flush_all(0.04) == []


def test_pending_bound_drops_newest() -> None:
    batcher = AckBatcher(AckConfig(max_pending=2, linger=1.0))
    for i in range(3):
        batcher.add(KEY, entry(i), 0.0)
    assert [(e.message_id, f) for e, f in batcher.take_finished()] == [("m2", Fate.DROPPED_OVERFLOW)]
    assert batcher.stats().pending == 2


def test_retry_overflow_drops_earliest_deadline() -> None:
    batcher = AckBatcher(AckConfig(max_retrying=3, linger=0.0, backoff=BackoffPolicy(1.0, 1.0)))
    deadlines = [50.0, 10.0, 40.0, 20.0, 30.0]
    for i, d in enumerate(deadlines):
        batcher.add(KEY, entry(i, d), 0.0)
    [b] = batcher.take_ready(0.0)
    batcher.on_batch_failed(b, True, 0.0)
    dropped = sorted(e.deadline for e, f in batcher.take_finished() if f is Fate.DROPPED_OVERFLOW)
    assert dropped == [10.0, 20.0]
    assert batcher.stats().retrying == 3
    [r] = batcher.take_ready(1.0)
    assert sorted(e.deadline for e in r.entries) == [30.0, 40.0, 50.0]


def test_results_for_matching() -> None:
    batcher = AckBatcher(AckConfig(linger=0.0))
    for i in range(3):
        batcher.add(KEY, entry(i), 0.0)
    [b] = batcher.take_ready(0.0)
    got = {e.message_id: o for e, o in results_for(b, MULTIPLE, [("m2", INVALID), ("m0", OK), ("zz", OK)])}
    assert got == {"m0": Outcome.OK, "m2": Outcome.NON_RETRIABLE, "m1": Outcome.RETRIABLE}
    assert {o for _, o in results_for(b, TOO_MANY)} == {Outcome.RETRIABLE}
    assert {o for _, o in results_for(b, OK)} == {Outcome.OK}
    assert {o for _, o in results_for(b, MULTIPLE)} == {Outcome.RETRIABLE}
    assert {o for _, o in results_for(b, 40000)} == {Outcome.NON_RETRIABLE}


def test_results_for_duplicate_message_ids_match_in_order() -> None:
    batcher = AckBatcher(AckConfig(linger=0.0))
    a, b_ = AckEntry("m", "h1", 9.0), AckEntry("m", "h2", 9.0)
    batcher.add(KEY, a, 0.0)
    batcher.add(KEY, b_, 0.0)
    [b] = batcher.take_ready(0.0)
    assert results_for(b, MULTIPLE, [("m", OK), ("m", INVALID)]) == [
        (a, Outcome.OK),
        (b_, Outcome.NON_RETRIABLE),
    ]


def test_results_for_pairs_an_answer_in_request_order_and_falls_back_to_ids_when_it_is_not() -> None:
    batcher = AckBatcher(AckConfig(linger=0.0))
    entries = [entry(i) for i in range(3)]
    for e in entries:
        batcher.add(KEY, e, 0.0)
    [b] = batcher.take_ready(0.0)
    in_order = [("m0", OK), ("m1", INVALID), ("m2", TOO_MANY)]
    expected = [
        (entries[0], Outcome.OK),
        (entries[1], Outcome.NON_RETRIABLE),
        (entries[2], Outcome.RETRIABLE),
    ]
    assert results_for(b, MULTIPLE, in_order) == expected
    # The same answers in another order (or with an id the request did not have) match by id.
    assert sorted(results_for(b, MULTIPLE, in_order[::-1]), key=lambda r: r[0].message_id) == expected
    assert results_for(b, MULTIPLE, [("m0", OK), ("zz", OK), ("m2", OK)]) == [
        (entries[0], Outcome.OK),
        (entries[2], Outcome.OK),
        (entries[1], Outcome.RETRIABLE),
    ]


@pytest.mark.parametrize(
    ("code", "outcome"),
    [
        (OK, Outcome.OK),
        (INVALID, Outcome.NON_RETRIABLE),
        (40000, Outcome.NON_RETRIABLE),
        (40099, Outcome.NON_RETRIABLE),
        (40401, Outcome.RETRIABLE),
        (TOO_MANY, Outcome.RETRIABLE),
        (INTERNAL, Outcome.RETRIABLE),
        (50400, Outcome.RETRIABLE),
        (12345, Outcome.RETRIABLE),
        (MULTIPLE, Outcome.RETRIABLE),
    ],
)
def test_classify(code: int, outcome: Outcome) -> None:
    assert classify(code) is outcome


def test_retrying_entries_lists_exactly_the_live_retry_set() -> None:
    """Per-queue statistics read the retry set: every entry waiting for a retry once, none that left it."""
    batcher = AckBatcher(AckConfig(linger=0.0))
    entries = [entry(i) for i in range(4)]
    for e in entries:
        batcher.add(KEY, e, 0.0)
    (batch,) = batcher.take_ready(0.0)
    batcher.on_results(
        batch,
        results_for(batch, MULTIPLE, [("m0", OK), ("m1", INTERNAL), ("m2", INTERNAL), ("m3", INVALID)]),
        0.0,
    )
    assert sorted(e.message_id for e in batcher.retrying_entries()) == ["m1", "m2"]
    assert len(batcher.retrying_entries()) == batcher.stats().retrying
    # Once due, they leave the retry set for the pending lane; then they are in flight.
    (retry,) = batcher.take_ready(10.0)
    assert batcher.retrying_entries() == []
    batcher.on_results(retry, results_for(retry, OK), 10.0)
    assert batcher.retrying_entries() == [] and batcher.idle()


def test_an_entry_without_deadline_is_retried_until_it_succeeds() -> None:
    """A FIFO head's ack / forward (deadline math.inf) is never given up by age: its group waits for it."""
    batcher = AckBatcher(AckConfig.unbatched(backoff=BackoffPolicy(0.1, 1.0)))
    server = FakeServer(fail_first=False, always_fail={"m0"})
    batcher.add(KEY, entry(0, deadline=math.inf), 0.0)
    now, finished = drive(batcher, server, until=600.0)
    assert finished == []
    assert server.attempts["m0"] > 500  # ten minutes of retries, the backoff capped at 1 s
    gaps = [b - a for (_, a), (_, b) in zip(server.attempt_times, server.attempt_times[1:], strict=False)]
    assert max(gaps) <= 1.0 + 0.002 + 1e-9
    server.always_fail = frozenset()
    _, finished = drive(batcher, server, until=now + 2.0, now=now)
    assert [(e.message_id, f) for e, f, _ in finished] == [("m0", Fate.ACKED)]
    assert batcher.idle()


def test_cap_deadline_bounds_a_retrying_entry_and_never_extends() -> None:
    batcher = AckBatcher(AckConfig.unbatched(backoff=BackoffPolicy(0.1, 1.0)))
    server = FakeServer(fail_first=False, always_fail={"m0", "m1"})
    head, other = entry(0, deadline=math.inf), entry(1, deadline=5.0)
    batcher.add(KEY, head, 0.0)
    batcher.add(KEY, other, 0.0)
    now, finished = drive(batcher, server, until=3.0)
    assert finished == []
    batcher.cap_deadline(head, now + 2.0)  # its queue was dropped at `now`
    batcher.cap_deadline(other, 100.0)  # never later than it was
    assert (head.deadline, other.deadline) == (now + 2.0, 5.0)
    _, finished = drive(batcher, server, until=60.0, now=now)
    fates = {e.message_id: (f, t) for e, f, t in finished}
    assert fates["m0"][0] is Fate.DROPPED_EXPIRED and fates["m0"][1] < now + 2.0
    assert fates["m1"][0] is Fate.DROPPED_EXPIRED and fates["m1"][1] < 5.0
    assert all(t < now + 2.0 for mid, t in server.attempt_times if mid == "m0")
    assert batcher.idle()
    batcher.cap_deadline(head, 0.0)  # finished: untouched
    assert head.deadline == now + 2.0


def test_cap_deadline_of_a_pending_entry_drops_it_instead_of_sending_it() -> None:
    batcher = AckBatcher(AckConfig(linger=0.01))
    e = entry(0, deadline=math.inf)
    batcher.add(KEY, e, 0.0)
    batcher.cap_deadline(e, 0.005)
    assert batcher.take_ready(0.01) == []
    assert batcher.take_finished() == [(e, Fate.DROPPED_EXPIRED)]
    assert batcher.idle()
