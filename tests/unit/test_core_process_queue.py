from __future__ import annotations

import itertools
import random

import pytest

from thrust._core.process_queue import RENEWAL_WINDOW, ProcessQueue, QueueBudget, ReceiveTicket
from thrust._core.settings import ClientSettings, ServerSettings, merge


def make(budget: QueueBudget | None = None, now: float = 0.0) -> ProcessQueue:
    counter = itertools.count(1)
    return ProcessQueue("q", budget or QueueBudget(), lambda: f"a{next(counter)}", now)


def test_thresholds_split_by_demand_and_resplit() -> None:
    """Idle queues ask for `idle_batch` (at most half the cache over all of them); the active queues share
    the rest. Split evenly, 2,000 queues gave a busy queue 2 messages a receive."""
    budget = QueueBudget(4096, 64 * 1024 * 1024)
    pq = make(budget)
    assert (budget.count_limit(True), budget.idle_batch) == (4096, 32)
    budget.set_queue_count(4)
    assert not pq.active and budget.active_count == 0
    assert pq.receive_plan(0.0) == 32  # idle: one receive of idle_batch = min(32, 4096 // 8)
    t = pq.on_receive_started(32, 0.0)
    assert pq.receive_plan(0.0) == 0  # idle: one poll at a time, not max_receives_in_flight
    pq.on_received(t, 1000, 1000, 0.0)  # (a server sending more than asked: counted all the same)
    assert pq.active and budget.active_count == 1
    # active: 4096 less the 3 idle queues' 32 each, all for this queue
    assert budget.count_limit(True) == 4096 - 3 * 32
    assert pq.receive_plan(0.0) == 32
    budget.set_queue_count(2000)
    assert budget.idle_batch == 1  # 4096 // 4000
    assert budget.count_limit(True) == 4096 - 1999  # the busy queue keeps most of the cache
    assert budget.bytes_limit(True) == 64 * 1024 * 1024  # idle queues cache nothing
    budget.set_queue_count(0)
    assert budget.count_limit(True) == 4096


def test_queue_turns_idle_when_empty_and_drained_and_drop_uncounts_it() -> None:
    budget = QueueBudget(4096, 64 * 1024 * 1024)
    budget.set_queue_count(2)
    pq, other = make(budget), make(budget)
    t = pq.on_receive_started(pq.receive_plan(0.0), 0.0)
    pq.on_received(t, 3, 30, 0.0)
    assert pq.active and budget.active_count == 1
    t = pq.on_receive_started(pq.receive_plan(0.0), 0.0)
    pq.on_received(t, 0, 0, 0.0)
    assert pq.active  # an empty receive, but 3 messages still cached
    pq.on_consumed(3, 30, 0.0)
    assert not pq.active and budget.active_count == 0  # empty and drained: idle again
    t = other.on_receive_started(other.receive_plan(0.0), 0.0)
    other.on_partial(t, 1, 10, 0.0)
    assert other.active and budget.active_count == 1
    other.drop()
    assert not other.active and budget.active_count == 0
    other.on_received(t, 0, 0, 0.0)
    assert budget.active_count == 0  # a dropped queue never counts again


def test_only_an_idle_queues_receive_hands_its_first_message_over_early() -> None:
    """An idle queue's listener would wait for the whole stream; an active queue's has the receives before
    it to work on, so its receive is handed over once, at the end (one wake-up fewer per receive)."""
    pq = make()
    first = pq.on_receive_started(pq.receive_plan(0.0), 0.0)
    assert first.first_early  # a new queue is idle
    pq.on_partial(first, 1, 10, 0.0)
    busy = pq.on_receive_started(pq.receive_plan(0.0), 0.0)
    assert not busy.first_early  # the first receive brought messages: active
    pq.on_received(first, 31, 310, 0.0)
    pq.on_received(busy, 0, 0, 0.0)
    third = pq.on_receive_started(pq.receive_plan(0.0), 0.0)
    assert not third.first_early  # 32 still cached
    pq.on_received(third, 0, 0, 0.0)
    pq.on_consumed(32, 320, 0.0)
    assert not pq.active
    assert pq.on_receive_started(pq.receive_plan(0.0), 0.0).first_early  # empty and drained: idle again


def test_an_idle_queues_polls_chain_after_an_empty_answer_only() -> None:
    """`chained`: a new queue's first poll starts a chain, an empty answer continues it; messages or a
    failure end it, so that the next idle poll starts a new one (`ClientSettings.push_spread_poll`)."""
    pq = make()
    assert not pq.chained  # new
    t = pq.on_receive_started(pq.receive_plan(0.0), 0.0)
    pq.on_received(t, 0, 0, 20.0)
    assert pq.chained  # an empty answer
    t = pq.on_receive_started(pq.receive_plan(20.0), 20.0)
    pq.on_receive_failed(t, False, 21.0)
    assert not pq.chained  # a failure
    t = pq.on_receive_started(pq.receive_plan(30.0), 30.0)
    pq.on_received(t, 0, 0, 35.0)
    assert pq.chained
    t = pq.on_receive_started(pq.receive_plan(35.0), 35.0)
    pq.on_partial(t, 1, 10, 36.0)
    pq.on_received(t, 0, 0, 36.0)
    assert not pq.chained  # messages
    pq.on_consumed(1, 10, 37.0)
    t = pq.on_receive_started(pq.receive_plan(37.0), 37.0)
    pq.on_received(t, 0, 0, 57.0)
    assert pq.chained and not pq.active  # idle again, its next poll continuing from this one


def test_batch_size_comes_from_settings() -> None:
    budget = QueueBudget()
    budget.apply_settings(
        merge(ClientSettings.for_consumer(), ServerSettings(receive_batch_size=8, long_polling_timeout=5))
    )
    pq = make(budget)
    assert pq.receive_plan(0.0) == 8
    assert budget.idle_limit == (5 + 3) * 3


def test_full_cache_waits_for_consumption_not_polling() -> None:
    budget = QueueBudget(max_count=10, max_bytes=10**6, max_receives_in_flight=1)
    pq = make(budget)
    n = pq.receive_plan(0.0)
    assert n == 10
    t = pq.on_receive_started(n, 0.0)
    pq.on_received(t, 10, 100, 0.1)
    assert pq.receive_plan(0.2) == 0
    assert not pq.has_room()
    assert pq.wake_at(0.2) is None  # nothing to poll: wait for on_consumed
    assert pq.on_consumed(3, 30, 5.0) is True  # room made in a full cache: wake the receiver
    assert pq.on_consumed(1, 10, 5.0) is False  # already had room
    assert pq.receive_plan(5.0) == 4


def test_bytes_threshold() -> None:
    budget = QueueBudget(max_count=1000, max_bytes=1000)
    pq = make(budget)
    t = pq.on_receive_started(pq.receive_plan(0.0), 0.0)
    pq.on_received(t, 2, 1000, 0.0)
    assert pq.receive_plan(0.0) == 0 and not pq.has_room()
    assert pq.on_consumed(1, 500, 1.0)
    assert pq.receive_plan(1.0) == 32


def test_concurrent_receives_reserve_room() -> None:
    budget = QueueBudget(max_count=100, max_bytes=100_000, max_receives_in_flight=3)
    pq = make(budget)
    t1 = pq.on_receive_started(pq.receive_plan(0.0), 0.0)
    assert pq.receive_plan(0.0) == 0  # message size unknown: one receive at a time
    pq.on_received(t1, 32, 32 * 100, 0.1)  # 100 bytes per message now known
    t2 = pq.on_receive_started(pq.receive_plan(0.1), 0.1)
    t3 = pq.on_receive_started(pq.receive_plan(0.1), 0.1)
    assert (t2.requested, t3.requested) == (32, 32)
    t4 = pq.on_receive_started(pq.receive_plan(0.1), 0.1)
    assert t4.requested == 100 - 32 - 64  # count slots reserved by in-flight receives are not offered
    assert pq.receive_plan(0.1) == 0  # max_receives_in_flight
    assert pq.in_flight == 3
    pq.on_received(t2, 0, 0, 0.2)
    assert pq.receive_plan(0.2) == 32  # t2's slots are free again
    pq.on_received(t3, 32, 3200, 0.2)
    assert pq.receive_plan(0.2) == 100 - 64 - 4


def test_concurrent_receive_shrinks_to_fit_bytes() -> None:
    budget = QueueBudget(max_count=1000, max_bytes=10_000, max_receives_in_flight=4)
    pq = make(budget)
    t = pq.on_receive_started(pq.receive_plan(0.0), 0.0)
    pq.on_received(t, 10, 10 * 200, 0.0)  # 2000 cached, 200 B per message
    t1 = pq.on_receive_started(pq.receive_plan(0.0), 0.0)
    assert t1.requested == 32  # nothing else in flight: Java rule, only "bytes < threshold"
    assert pq.receive_plan(0.0) == (10_000 - 2000 - 32 * 200) // 200  # 8


def test_attempt_id_reuse_and_rotation() -> None:
    budget = QueueBudget(max_receives_in_flight=2)
    pq = make(budget)
    t1 = pq.on_receive_started(32, 0.0)
    assert t1.attempt_id == "a1"
    delay = pq.on_receive_failed(t1, too_many_requests=False, now=0.0)
    assert delay == pytest.approx(1.0)
    t2 = pq.on_receive_started(32, 1.0)
    assert t2.attempt_id == "a1"  # reused after failure
    pq.on_received(t2, 0, 0, 21.0)
    t3 = pq.on_receive_started(32, 21.0)
    assert t3.attempt_id == "a1"  # reused after an empty result
    t4 = pq.on_receive_started(32, 21.0)
    assert t4.attempt_id == "a2"  # concurrent receives never share an id
    pq.on_received(t3, 5, 50, 22.0)
    pq.on_received(t4, 0, 0, 22.0)
    t5 = pq.on_receive_started(32, 22.0)
    assert t5.attempt_id == "a2"  # a1 was rotated away after messages, a2 came back empty
    t6 = pq.on_receive_started(32, 22.0)
    assert t6.attempt_id == "a3"


def test_failure_backoff_java_values() -> None:
    pq = make()
    t = pq.on_receive_started(pq.receive_plan(0.0), 0.0)
    assert pq.on_receive_failed(t, too_many_requests=True, now=1.0) == pytest.approx(0.02)
    assert pq.receive_plan(1.01) == 0
    assert pq.wake_at(1.01) == pytest.approx(1.02)
    assert pq.receive_plan(1.02) == 32
    assert pq.wake_at(1.02) is None
    t = pq.on_receive_started(32, 1.02)
    assert pq.on_receive_failed(t, too_many_requests=False, now=2.0) == pytest.approx(1.0)
    assert pq.receive_plan(2.5) == 0 and pq.receive_plan(3.0) == 32


def test_ticket_closed_once() -> None:
    pq = make()
    t = pq.on_receive_started(32, 0.0)
    pq.on_received(t, 1, 10, 0.0)
    pq.on_received(t, 1, 10, 0.0)
    assert pq.on_receive_failed(t, False, 0.0) == 0.0
    assert (pq.cached_count, pq.in_flight) == (1, 0)
    with pytest.raises(ValueError):
        pq.on_receive_started(0, 0.0)


def test_dropped_queue_stops_at_once() -> None:
    pq = make()
    t = pq.on_receive_started(pq.receive_plan(0.0), 0.0)
    pq.drop()
    assert pq.dropped
    assert pq.receive_plan(0.0) == 0
    assert pq.wake_at(0.0) is None
    assert pq.on_receive_failed(t, False, 0.1) == 0.0  # the cancelled long poll only releases credit
    assert pq.in_flight == 0
    assert not pq.expired(1000.0)


def test_expiry() -> None:
    budget = QueueBudget(max_count=10, long_polling_timeout=20.0, request_timeout=3.0)
    pq = make(budget, now=0.0)
    assert budget.idle_limit == 69.0
    assert not pq.expired(68.9)
    assert pq.expired(69.0)  # no receive activity at all: stuck
    t = pq.on_receive_started(10, 70.0)
    pq.on_received(t, 10, 10, 71.0)
    assert pq.receive_plan(71.0) == 0
    assert not pq.expired(500.0)  # full: waiting for consumption, not stuck
    pq.on_consumed(10, 10, 500.0)
    assert not pq.expired(568.9)  # within the limit after the cache was last full
    assert pq.expired(569.0)


def run_invariant(seed: int, size: int | None) -> None:
    """Random receives / results / consumption; check the flow-control invariant after every step."""
    rng = random.Random(seed)
    budget = QueueBudget(max_count=200, max_bytes=20_000, max_receives_in_flight=4, batch_size=32)
    pq = make(budget)
    in_flight: list[ReceiveTicket] = []
    cached: list[int] = []
    now = 0.0
    for _ in range(5000):
        now += 0.001
        action = rng.random()
        n = pq.receive_plan(now)
        if n and action < 0.4:
            in_flight.append(pq.on_receive_started(n, now))
        elif in_flight and action < 0.75:
            t = in_flight.pop(rng.randrange(len(in_flight)))
            if rng.random() < 0.1:
                pq.on_receive_failed(t, rng.random() < 0.5, now)
            else:
                got = rng.randint(0, t.requested)
                sizes = [size or rng.randint(1, 400) for _ in range(got)]
                cached.extend(sizes)
                pq.on_received(t, got, sum(sizes), now, largest=max(sizes, default=None))
        elif cached:
            k = rng.randint(1, min(len(cached), 8))
            gone, cached[:k] = cached[:k], []
            pq.on_consumed(k, sum(gone), now)
        assert pq.cached_count == len(cached)
        assert pq.cached_bytes == sum(cached)
        assert pq.cached_count <= budget.count_limit(True)
        assert pq.in_flight <= budget.max_receives_in_flight
        if size is not None:
            assert pq.cached_bytes <= budget.bytes_limit(True) + budget.batch_size * size


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("size", [1, 100, 400, 3000])
def test_flow_control_invariant(seed: int, size: int) -> None:
    run_invariant(seed, size)


@pytest.mark.parametrize("seed", range(8))
def test_count_never_exceeds_threshold_with_mixed_sizes(seed: int) -> None:
    run_invariant(seed, None)


# -- partial results (a stream's first messages handed over before it ends; scenario 5a) ----------------


def test_partial_chunk_is_cached_at_once_and_the_rest_settles_the_reservation() -> None:
    budget = QueueBudget(max_count=100, max_bytes=100_000, max_receives_in_flight=2)
    pq = make(budget)
    t = pq.on_receive_started(pq.receive_plan(0.0), 0.0)
    assert (t.requested, pq.reserved, t.reserved) == (32, 32, 32)
    assert pq.receive_plan(0.0) == 0  # size unknown: one receive at a time
    assert pq.on_partial(t, 1, 100, 0.1) is True
    assert (pq.cached_count, pq.cached_bytes, pq.reserved, t.reserved, pq.in_flight) == (1, 100, 31, 31, 1)
    # The first message's size is known now: a second receive may start while the stream goes on, and the
    # first one's remaining reservation still counts.
    assert pq.receive_plan(0.1) == 32
    pq.on_received(t, 31, 3100, 0.2)
    assert (pq.cached_count, pq.cached_bytes, pq.reserved, t.reserved, pq.in_flight) == (32, 3200, 0, 0, 0)
    assert pq.receive_plan(0.2) == 32


def test_partial_reservations_are_released_exactly_once() -> None:
    pq = make(QueueBudget(max_count=100, max_bytes=10**6))
    t = pq.on_receive_started(32, 0.0)
    pq.on_partial(t, 1, 10, 0.0)
    pq.on_partial(t, 5, 50, 0.0)
    pq.on_received(t, 0, 0, 0.0)  # nothing after the chunks
    assert (pq.cached_count, pq.reserved, pq.in_flight) == (6, 0, 0)
    # A closed ticket changes nothing any more, whichever call comes late.
    assert pq.on_partial(t, 3, 30, 0.0) is False
    pq.on_received(t, 3, 30, 0.0)
    assert pq.on_receive_failed(t, False, 0.0) == 0.0
    assert (pq.cached_count, pq.cached_bytes, pq.reserved, pq.in_flight) == (6, 60, 0, 0)


def test_stream_broken_after_a_chunk_keeps_it_cached_and_rotates_the_attempt_id() -> None:
    pq = make(QueueBudget(max_count=100, max_bytes=10**6, max_receives_in_flight=1))
    t = pq.on_receive_started(32, 0.0)
    assert t.attempt_id == "a1"
    pq.on_partial(t, 1, 10, 0.0)
    assert pq.on_receive_failed(t, too_many_requests=False, now=0.5) == pytest.approx(1.0)  # backoff as usual
    assert (pq.cached_count, pq.cached_bytes, pq.reserved, pq.in_flight) == (1, 10, 0, 0)
    assert pq.receive_plan(1.0) == 0 and pq.receive_plan(1.5) == 32
    # Not reused: the broker would serve the broken receive's batch again, the handed-over message included.
    assert pq.on_receive_started(32, 1.5).attempt_id == "a2"
    # The handed-over message leaves the cache when its ack settles, like any other.
    assert pq.on_consumed(1, 10, 2.0) is False
    assert (pq.cached_count, pq.cached_bytes) == (0, 0)


def test_a_chunk_of_corrupted_messages_only_caches_nothing_but_rotates_the_attempt_id() -> None:
    pq = make()
    t = pq.on_receive_started(32, 0.0)
    pq.on_partial(t, 0, 0, 0.0)  # the first message failed its digest: never cached
    pq.on_received(t, 0, 0, 0.1)
    assert (pq.cached_count, pq.reserved, pq.in_flight) == (0, 0, 0)
    assert pq.on_receive_started(32, 0.1).attempt_id == "a2"
    # Without any chunk, an empty result keeps the id (MESSAGE_NOT_FOUND).
    t = pq.on_receive_started(32, 0.1)
    pq.on_received(t, 0, 0, 0.2)
    assert pq.on_receive_started(32, 0.2).attempt_id == t.attempt_id


def test_more_chunked_messages_than_asked_for_never_make_the_reservation_negative() -> None:
    pq = make(QueueBudget(max_count=100, max_bytes=10**6))
    t = pq.on_receive_started(4, 0.0)
    pq.on_partial(t, 3, 30, 0.0)
    pq.on_partial(t, 3, 30, 0.0)  # a server sending more than the batch size asked
    assert (pq.reserved, t.reserved) == (0, 0)
    pq.on_received(t, 1, 10, 0.0)
    assert (pq.cached_count, pq.reserved, pq.in_flight) == (7, 0, 0)


def run_partial_invariant(seed: int, size: int | None) -> None:
    """Random receives delivering their messages in chunks (`on_partial`), then the rest or a failure, and
    consumption; after every step: the cache within its count threshold (bytes within one batch over the
    threshold for a fixed size), and the reservation exactly what the open receives have not delivered."""
    rng = random.Random(seed)
    budget = QueueBudget(max_count=200, max_bytes=20_000, max_receives_in_flight=4, batch_size=32)
    pq = make(budget)
    # open receive -> how many messages the server will still send on it
    open_: dict[ReceiveTicket, int] = {}
    cached: list[int] = []
    closed: list[ReceiveTicket] = []
    now = 0.0

    def sizes(k: int) -> list[int]:
        return [size or rng.randint(1, 400) for _ in range(k)]

    for _ in range(5000):
        now += 0.001
        action = rng.random()
        n = pq.receive_plan(now)
        if n and action < 0.3:
            t = pq.on_receive_started(n, now)
            open_[t] = rng.randint(0, t.requested)
        elif open_ and action < 0.55:
            t = rng.choice(list(open_))
            k = rng.randint(0, open_[t])
            open_[t] -= k
            got = sizes(k)
            cached.extend(got)
            assert pq.on_partial(t, k, sum(got), now, largest=max(got, default=None))
        elif open_ and action < 0.75:
            t = rng.choice(list(open_))
            rest = open_.pop(t)
            closed.append(t)
            if rng.random() < 0.2:
                pq.on_receive_failed(t, rng.random() < 0.5, now)  # the rest never arrives
            else:
                got = sizes(rest)
                cached.extend(got)
                pq.on_received(t, rest, sum(got), now, largest=max(got, default=None))
        elif closed and action < 0.8:
            # A late call on a closed ticket: a no-op.
            t = rng.choice(closed)
            assert pq.on_partial(t, 1, 1, now) is False
            pq.on_received(t, 1, 1, now)
            assert pq.on_receive_failed(t, False, now) == 0.0
        elif cached:
            k = rng.randint(1, min(len(cached), 8))
            gone, cached[:k] = cached[:k], []
            pq.on_consumed(k, sum(gone), now)
        assert pq.cached_count == len(cached)
        assert pq.cached_bytes == sum(cached)
        assert pq.reserved == sum(t.reserved for t in open_)
        assert pq.in_flight == len(open_) <= budget.max_receives_in_flight
        assert pq.cached_count + pq.reserved <= budget.count_limit(True)
        if size is not None:
            assert pq.cached_bytes <= budget.bytes_limit(True) + budget.batch_size * size
    for t in list(open_):
        pq.on_received(t, 0, 0, now)
    assert (pq.reserved, pq.in_flight) == (0, 0)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("size", [1, 100, 400, 3000])
def test_flow_control_invariant_with_partial_results(seed: int, size: int) -> None:
    run_partial_invariant(seed, size)


@pytest.mark.parametrize("seed", range(8))
def test_count_never_exceeds_threshold_with_partial_results_and_mixed_sizes(seed: int) -> None:
    run_partial_invariant(seed, None)


def test_renewed_polls_are_receive_activity_so_a_renewing_idle_queue_never_expires() -> None:
    budget = QueueBudget(long_polling_timeout=20.0, request_timeout=3.0)
    assert budget.idle_limit == 69.0
    # the window no longer has to end before the idle limit: the renewals themselves are the activity
    assert budget.renewal_window == RENEWAL_WINDOW > budget.idle_limit
    pq = ProcessQueue("q", budget, lambda: "a", now=0.0)
    pq.on_receive_started(pq.receive_plan(0.0), 0.0)  # one receive that renews its polls for long
    assert pq.expired(69.0)  # no activity the queue heard of
    pq.on_renewed(60.0)
    assert not pq.expired(69.0)
    assert not pq.expired(128.9)
    assert pq.expired(129.0)  # no renewal for the idle limit: expired (a stuck receive)
