"""The assignment scan schedule: first scans and route changes at once, periodic scans at most `max_rate`
a second over all topics, in rounds a second apart (docs/benchmarks.md, "A consumer of a thousand topics")."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from thrust._core.scan_schedule import ScanSchedule


def _drain(schedule: ScanSchedule, now: float) -> list[str]:
    """Every topic `next` hands out at `now`, each scanned and done at once."""
    out = []
    while True:
        topic, _ = schedule.next(now)
        if topic is None:
            return out
        schedule.started(topic)
        schedule.done(topic, now)
        out.append(topic)


def test_first_scans_are_urgent_and_not_rate_limited() -> None:
    schedule = ScanSchedule(interval=5.0, max_rate=20.0)
    topics = [f"t{i}" for i in range(1000)]
    schedule.set_topics(topics)
    assert _drain(schedule, 0.0) == topics  # all at once, in order
    assert schedule.period == 50.0  # 1,000 topics at 20 scans a second


def _step(
    schedule: ScanSchedule, start: float, end: float, took: float = 0.0
) -> list[tuple[float, str, float | None]]:
    """Step the clock 10 ms at a time over [start, end): (start time, topic, due time) of every scan `next`
    hands out, each done `took` seconds after it starts (on the 10 ms grid). The due time is one period
    after the topic's last scan in this window ended (None for its first)."""
    starts: list[tuple[float, str, float | None]] = []
    running: list[tuple[float, str]] = []
    due: dict[str, float] = {}
    now = start
    while now < end:
        for t in [t for t in running if t[0] <= now]:
            running.remove(t)
            schedule.done(t[1], now)
            due[t[1]] = now + schedule.period
        topic, _ = schedule.next(now)
        if topic is not None:
            schedule.started(topic)
            starts.append((now, topic, due.get(topic)))
            if took:
                running.append((round(now + took, 2), topic))
            else:
                schedule.done(topic, now)
                due[topic] = now + schedule.period
            continue
        now = round(now + 0.01, 2)
    return starts


def test_periodic_scans_at_most_max_rate_in_rounds_a_second_apart() -> None:
    schedule = ScanSchedule(interval=5.0, max_rate=20.0)
    schedule.set_topics(f"t{i}" for i in range(1000))
    _drain(schedule, 0.0)
    assert schedule.next(49.0) == (None, 50.0)
    starts = [t for t, _, _ in _step(schedule, 50.0, 110.0)]
    assert len(starts) == pytest.approx(20 * 60, abs=2)  # 20 a second over 60 s
    rounds = Counter(starts)
    assert max(rounds.values()) == 20  # started together, 20 at most
    assert min(b - a for a, b in itertools.pairwise(sorted(rounds))) >= 1.0 - 1e-9  # a second apart


def test_below_the_rate_a_scan_due_between_rounds_waits_for_the_next_round_at_most() -> None:
    """50 topics every 5 s (10 scans a second, under 20), each scan 30 ms long, so they fall due at
    scattered times: every round starts what fell due since the last, none waits longer than a round, and
    the rounds stay a second apart."""
    schedule = ScanSchedule(interval=5.0, max_rate=20.0)
    topics = [f"t{i}" for i in range(50)]
    schedule.set_topics(topics)
    for i, topic in enumerate(topics):  # first scans (urgent) that end 0.1 s apart: due 5.0, 5.1, ... 9.9
        assert schedule.next(0.0) == (topic, None)
        schedule.started(topic)
        schedule.done(topic, i / 10)
    scans = _step(schedule, 5.0, 60.0, took=0.03)
    waits = [t - due for t, _, due in scans if due is not None]
    assert len(waits) > 400
    assert 0.0 <= min(waits) and max(waits) <= 1.0 + 1e-9
    assert max(waits) > 0.5  # the test bites: scans did wait for their round
    rounds = sorted({t for t, _, _ in scans})
    assert min(b - a for a, b in itertools.pairwise(rounds)) >= 1.0 - 1e-9


def test_a_slow_rate_keeps_its_spacing() -> None:
    schedule = ScanSchedule(interval=1.0, max_rate=0.5)  # a round every 2 s, one scan each
    schedule.set_topics(["a", "b", "c"])
    _drain(schedule, 0.0)
    starts = [t for t, _, _ in _step(schedule, 6.0, 20.0)]
    assert min(b - a for a, b in itertools.pairwise(starts)) >= 2.0 - 1e-9
    assert len(starts) == 7


def test_few_topics_keep_the_interval() -> None:
    schedule = ScanSchedule(interval=5.0, max_rate=20.0)
    schedule.set_topics(["a", "b"])
    _drain(schedule, 0.0)
    assert schedule.period == 5.0
    assert schedule.next(4.9) == (None, 5.0)
    topic, _ = schedule.next(5.0)
    assert topic == "a"


def test_route_change_request_is_urgent_and_reruns_a_running_scan() -> None:
    schedule = ScanSchedule(interval=5.0, max_rate=1.0)
    schedule.set_topics(["a", "b"])
    _drain(schedule, 0.0)
    schedule.request("b")
    assert schedule.next(0.1) == ("b", None)  # not held by the period nor the rate
    schedule.started("b")
    schedule.request("b")  # asked for while it runs: once more right after
    schedule.done("b", 0.2)
    assert schedule.next(0.2) == ("b", None)
    schedule.started("b")
    schedule.done("b", 0.3)
    assert schedule.next(0.3) == (None, 5.0)  # "a" is due at 5 s


def test_set_topics_adds_urgent_and_forgets_removed() -> None:
    schedule = ScanSchedule(interval=5.0)
    schedule.set_topics(["a", "b"])
    _drain(schedule, 0.0)
    schedule.set_topics(["b", "c"])
    assert schedule.topics() == {"b", "c"}
    assert schedule.next(0.0) == ("c", None)
    schedule.started("c")
    schedule.set_topics(["b"])
    schedule.done("c", 1.0)  # unsubscribed while running: not scheduled again
    assert schedule.topics() == {"b"}
    assert _drain(schedule, 5.0) == ["b"]


def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        ScanSchedule(interval=0)
    with pytest.raises(ValueError):
        ScanSchedule(interval=5, max_rate=0)


def test_an_interval_under_a_second_keeps_its_meaning() -> None:
    schedule = ScanSchedule(interval=0.1, max_rate=20.0)  # rounds of 0.1 s, 2 scans each
    schedule.set_topics(["a"])
    _drain(schedule, 0.0)
    starts = [t for t, _, _ in _step(schedule, 0.1, 2.1)]
    assert len(starts) == 20  # every 0.1 s, not every second
