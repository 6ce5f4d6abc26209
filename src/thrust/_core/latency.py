"""A bounded latency summary: count, mean, max and percentiles from fixed logarithmic buckets.

`Producer.stats()` reports its send latency with it. One `record` is a bisect into a fixed table and
three additions, so it can sit on the send path; memory is the fixed table, whatever the number of sends.
Percentiles are bucket upper bounds (at most 1/8 of an octave, about 9 %, above the true value), capped
by the largest value seen.
"""

from __future__ import annotations

import bisect
import dataclasses

__all__ = ["LatencyRecorder", "LatencySummary"]

# 50 µs .. ~67 s, 8 buckets per doubling; anything above goes into one overflow bucket.
_BOUNDS: tuple[float, ...] = tuple(50e-6 * 2 ** (i / 8) for i in range(8 * 21))


@dataclasses.dataclass(frozen=True, slots=True)
class LatencySummary:
    """Latencies in seconds: how many, their mean and maximum, and the 50th, 90th and 99th percentiles
    (0.0 when none were recorded)."""

    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float


class LatencyRecorder:
    """Records latencies (seconds) into fixed buckets; `summary()` reads them. Pure, single-threaded."""

    __slots__ = ("_buckets", "_count", "_max", "_total")

    def __init__(self) -> None:
        self._buckets = [0] * (len(_BOUNDS) + 1)
        self._count = 0
        self._total = 0.0
        self._max = 0.0

    def record(self, seconds: float) -> None:
        if seconds < 0.0:
            seconds = 0.0
        self._buckets[bisect.bisect_left(_BOUNDS, seconds)] += 1
        self._count += 1
        self._total += seconds
        if seconds > self._max:
            self._max = seconds

    def summary(self) -> LatencySummary:
        count = self._count
        if not count:
            return LatencySummary(0, 0.0, 0.0, 0.0, 0.0, 0.0)
        return LatencySummary(
            count=count,
            mean=self._total / count,
            p50=self._quantile(0.50),
            p90=self._quantile(0.90),
            p99=self._quantile(0.99),
            max=self._max,
        )

    def _quantile(self, q: float) -> float:
        rank = q * self._count
        seen = 0
        for i, n in enumerate(self._buckets):
            seen += n
            if n and seen >= rank:
                return min(_BOUNDS[i], self._max) if i < len(_BOUNDS) else self._max
        return self._max
