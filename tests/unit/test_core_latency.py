"""`LatencyRecorder`: percentiles at most one bucket above the truth, capped by the largest value."""

from __future__ import annotations

import pytest

from thrust._core.latency import LatencyRecorder, LatencySummary


def test_empty_summary_is_zero() -> None:
    assert LatencyRecorder().summary() == LatencySummary(0, 0.0, 0.0, 0.0, 0.0, 0.0)


def test_percentiles_mean_and_max() -> None:
    r = LatencyRecorder()
    for i in range(1, 1001):  # 1 ms .. 1 s
        r.record(i / 1000)
    s = r.summary()
    assert s.count == 1000 and s.max == 1.0
    assert s.mean == pytest.approx(0.5005)
    for got, true in ((s.p50, 0.5), (s.p90, 0.9), (s.p99, 0.99)):
        assert true <= got <= true * 2 ** (1 / 8) + 1e-12, (got, true)


def test_one_value_is_its_own_percentiles_and_outliers_are_kept() -> None:
    r = LatencyRecorder()
    r.record(0.0123)
    assert r.summary().p50 == r.summary().p99 == r.summary().max == 0.0123
    r.record(500.0)  # beyond the last bucket: the overflow bucket, reported as the max
    r.record(-1.0)  # a clock step backwards counts as 0
    s = r.summary()
    assert s.count == 3 and s.max == 500.0 and s.p99 == 500.0
