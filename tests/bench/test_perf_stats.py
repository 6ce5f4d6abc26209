"""`thrust.bench.stats`: the one-pass latency figures match hdrh's own, sample for sample."""

from __future__ import annotations

import random

import pytest

from thrust.bench.stats import _PERCENTILES, LatencyStats, _histogram


@pytest.mark.parametrize("n", [1, 2, 7, 1000, 20_000])
def test_latency_stats_equal_hdrh_percentiles_and_mean(n: int) -> None:
    rng = random.Random(n)
    histogram = _histogram()
    for _ in range(n):
        # a body around 2 ms and a tail up to seconds, as a perf interval has
        value = int(rng.expovariate(1 / 2000)) + 1 if rng.random() < 0.97 else rng.randint(1, 3_000_000)
        histogram.record_value(value)
    stats = LatencyStats.of(histogram)
    expected = [histogram.get_value_at_percentile(p) / 1000.0 for p in _PERCENTILES]
    assert [stats.p50, stats.p95, stats.p99, stats.p999, stats.p9999, stats.p99999] == expected
    assert stats.mean == histogram.get_mean_value() / 1000.0
    assert stats.max == histogram.get_max_value() / 1000.0
    assert stats.count == n


def test_latency_stats_of_an_empty_histogram_are_zero() -> None:
    assert LatencyStats.of(_histogram()) == LatencyStats(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
