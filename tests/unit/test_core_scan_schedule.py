"""The assignment scan schedule: first scans and route changes at once, periodic scans at most `max_rate`
a second over all topics and spread out (docs/benchmarks.md, "A consumer of a thousand topics")."""

from __future__ import annotations

import itertools

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


def test_periodic_scans_at_most_max_rate_and_spread() -> None:
    schedule = ScanSchedule(interval=5.0, max_rate=20.0)
    schedule.set_topics(f"t{i}" for i in range(1000))
    _drain(schedule, 0.0)
    assert schedule.next(49.0) == (None, 50.0)
    # Step the clock 10 ms at a time from the due time on: scans start one per 50 ms, never in a burst.
    starts: list[float] = []
    now = 50.0
    while now < 110.0:
        topic, _ = schedule.next(now)
        if topic is not None:
            schedule.started(topic)
            schedule.done(topic, now)
            starts.append(now)
            continue
        now = round(now + 0.01, 2)
    assert len(starts) == pytest.approx(20 * 60, abs=2)  # 20 a second over 60 s
    assert min(b - a for a, b in itertools.pairwise(starts)) >= 0.05 - 1e-9


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
