"""Throughput and latency recording for `thrust perf` and `thrust bench`, in the pulsar-perf shape.

Two HdrHistograms per recorder, as pulsar-perf keeps two `Recorder`s (apache/pulsar
`PerformanceProducer.java`: `recorder` and `cumulativeRecorder`): one per reporting interval (reset at every
report) and one for the whole run. Latencies are recorded in microseconds, 3 significant digits, clamped to
one hour (pulsar-perf master's precision and range: 5 digits would cost megabytes per histogram for nothing we
print). Messages and bytes are counted from the start; latencies only once the warm-up is over (pulsar-perf
`--warmup-time`).

Not thread-safe: record from the event loop's thread. Listener threads hand their samples over through
`SampleInbox` (a deque appended from any thread, drained on the loop).
"""

from __future__ import annotations

import collections
import dataclasses
import math
import time
from collections.abc import Sequence
from typing import Any, Final

from hdrh.histogram import HdrHistogram

__all__ = [
    "IntervalStats",
    "LatencyStats",
    "PlotSeries",
    "Recorder",
    "SampleInbox",
    "Summary",
    "format_interval",
    "format_summary",
    "plot",
    "plot_series",
    "shown_intervals",
]

HIGHEST_US: Final = 3_600_000_000  # one hour in µs: pulsar-perf master's producer clamp
SIGNIFICANT_DIGITS: Final = 3
_PERCENTILES: Final = (50.0, 95.0, 99.0, 99.9, 99.99, 99.999)


def _histogram() -> Any:
    return HdrHistogram(1, HIGHEST_US, SIGNIFICANT_DIGITS)


@dataclasses.dataclass(frozen=True, slots=True)
class LatencyStats:
    """Latency of a set of samples, in milliseconds (recorded in µs)."""

    count: int
    mean: float
    p50: float
    p95: float
    p99: float
    p999: float
    p9999: float
    p99999: float
    max: float

    @classmethod
    def of(cls, histogram: Any) -> LatencyStats:
        count = int(histogram.get_total_count())
        if count == 0:
            return cls(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        mean, percentiles = _one_pass(histogram, _PERCENTILES)
        p50, p95, p99, p999, p9999, p99999 = (v / 1000.0 for v in percentiles)
        return cls(
            count=count,
            mean=mean / 1000.0,
            p50=p50,
            p95=p95,
            p99=p99,
            p999=p999,
            p9999=p9999,
            p99999=p99999,
            max=float(histogram.get_max_value()) / 1000.0,
        )


def _one_pass(histogram: Any, percentiles: Sequence[float]) -> tuple[float, list[int]]:
    """The mean and the values at `percentiles` (ascending), exactly as hdrh's `get_mean_value` and
    `get_value_at_percentile` compute them, in one pass over the non-zero counts.

    hdrh walks its 23,552 counters in Python once per percentile and once more, through its iterator, for
    the mean: about 90 ms per histogram on an idle core, 200-400 ms per report line pair under load, all of
    it on the event loop of `thrust perf`, which stalled the sends and the consumer at every interval
    (docs/benchmarks.md, "The main job's latency tails"). Here the counters are copied out at C speed
    (`ctypes` slicing) and only the recorded ones are visited."""
    counts = histogram.counts[: histogram.counts_len]
    total_count = int(histogram.get_total_count())
    targets = [max(int(p * total_count / 100 + 0.5), 1) for p in percentiles]
    values: list[int] = []
    weighted = 0
    running = 0
    value_from_index = histogram.get_value_from_index
    highest = histogram.get_highest_equivalent_value
    median = histogram._hdr_median_equiv_value
    for index in [i for i, c in enumerate(counts) if c]:
        c = counts[index]
        value = value_from_index(index)
        weighted += c * median(value)
        running += c
        while len(values) < len(targets) and running >= targets[len(values)]:
            values.append(highest(value))
    values += [0] * (len(targets) - len(values))
    return weighted / total_count, values


@dataclasses.dataclass(frozen=True, slots=True)
class IntervalStats:
    """One reporting interval. `total` is cumulative (pulsar-perf prints the running total)."""

    elapsed: float  # seconds from the recorder's start to the end of this interval
    seconds: float  # length of this interval
    total: int
    count: int
    rate: float  # msg/s over the interval
    mbit: float  # Mbit/s of payload over the interval (bytes * 8 / 2**20, as pulsar-perf)
    errors: int
    latency: LatencyStats
    # messages of the interval that came during the warm-up: counted, without a latency sample
    warmup_messages: int = 0
    # the run's last interval, cut short when the run ended (`seconds` says how long it was)
    partial: bool = False

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, slots=True)
class Summary:
    """The whole run (pulsar-perf's "Aggregated" lines)."""

    name: str
    seconds: float
    total: int
    bytes: int
    rate: float
    mbit: float
    errors: int
    latency: LatencyStats
    intervals: tuple[IntervalStats, ...]
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    warmup_messages: int = 0  # messages that came during the warm-up (no latency sample)
    warmup: float = 0.0  # the warm-up, seconds

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["intervals"] = [i.to_json() for i in self.intervals]
        return data


class Recorder:
    """Counts messages, bytes and errors and records latencies for one side (producer or consumer).

    Args:
        name: "produce" or "consume" (used in the printed lines).
        warmup: seconds from `start` during which latencies are not recorded.
        clock: monotonic seconds.
    """

    def __init__(self, name: str, *, warmup: float = 0.0, clock: Any = time.monotonic) -> None:
        self.name = name
        self._clock = clock
        self.started = clock()
        self._warm_at = self.started + max(0.0, warmup)
        self._warm = warmup <= 0
        self._interval = _histogram()
        self._cumulative = _histogram()
        self.total = 0
        self.bytes = 0
        self.errors = 0
        self._last_report = self.started
        self._last_total = 0
        self._last_bytes = 0
        self._last_errors = 0
        self.warmup_messages = 0
        self._last_warmup_messages = 0
        self.intervals: list[IntervalStats] = []
        self.extra: dict[str, Any] = {}

    def restart(self) -> None:
        """Start the clock now (counters and histograms stay as they are, normally empty)."""
        warmup = self._warm_at - self.started
        self.started = self._last_report = self._clock()
        self._warm_at = self.started + warmup
        self._warm = warmup <= 0

    def record(self, latency_us: float, nbytes: int) -> None:
        """One message: its size and its latency (µs; negative values, from clock skew, are not kept)."""
        self.total += 1
        self.bytes += nbytes
        if not self._warm:
            if self._clock() < self._warm_at:
                self.warmup_messages += 1
                return
            self._warm = True
        if latency_us >= 0:
            value = min(max(int(latency_us), 1), HIGHEST_US)
            self._interval.record_value(value)
            self._cumulative.record_value(value)

    def record_error(self, count: int = 1) -> None:
        self.errors += count

    def report(self, *, partial: bool = False) -> IntervalStats:
        """Close the current interval, reset its histogram and return its numbers (`partial`: the last one,
        cut short by the end of the run)."""
        now = self._clock()
        seconds = max(now - self._last_report, 1e-9)
        count = self.total - self._last_total
        nbytes = self.bytes - self._last_bytes
        errors = self.errors - self._last_errors
        stats = IntervalStats(
            elapsed=now - self.started,
            seconds=seconds,
            total=self.total,
            count=count,
            rate=count / seconds,
            mbit=nbytes * 8 / seconds / (1024 * 1024),
            errors=errors,
            latency=LatencyStats.of(self._interval),
            warmup_messages=self.warmup_messages - self._last_warmup_messages,
            partial=partial,
        )
        self._interval.reset()
        self._last_report = now
        self._last_total = self.total
        self._last_bytes = self.bytes
        self._last_errors = self.errors
        self._last_warmup_messages = self.warmup_messages
        self.intervals.append(stats)
        return stats

    def current_rate(self) -> float:
        """msg/s since the last report (for the live display)."""
        seconds = self._clock() - self._last_report
        return (self.total - self._last_total) / seconds if seconds > 0 else 0.0

    def summary(self, end: float | None = None) -> Summary:
        seconds = max((self._clock() if end is None else end) - self.started, 1e-9)
        return Summary(
            name=self.name,
            seconds=seconds,
            total=self.total,
            bytes=self.bytes,
            rate=self.total / seconds,
            mbit=self.bytes * 8 / seconds / (1024 * 1024),
            errors=self.errors,
            latency=LatencyStats.of(self._cumulative),
            intervals=tuple(self.intervals),
            extra=dict(self.extra),
            warmup_messages=self.warmup_messages,
            warmup=self._warm_at - self.started,
        )


class SampleInbox:
    """Samples from listener threads, drained into a `Recorder` on the loop. `collections.deque.append`
    and `popleft` are atomic, so no lock is taken per message."""

    def __init__(self) -> None:
        self._samples: collections.deque[tuple[float, int]] = collections.deque()

    def put(self, latency_us: float, nbytes: int) -> None:
        self._samples.append((latency_us, nbytes))

    def drain(self, recorder: Recorder) -> int:
        samples = self._samples
        n = 0
        while samples:
            latency_us, nbytes = samples.popleft()
            recorder.record(latency_us, nbytes)
            n += 1
        return n


_VERB: Final = {"produce": "produced", "consume": "received"}


def _latency_fields(lat: LatencyStats, *, with_99999: bool = False) -> str:
    # No sample (an idle interval, or one still in the warm-up) has no latency: "-", not 0.000 ms, which
    # would read as an impossibly fast interval. `LatencyStats` keeps 0.0 there for the JSON output,
    # where `count` says so.
    def ms(value: float) -> str:
        return f"{value:8.3f}" if lat.count else f"{'-':>8}"

    parts = [
        f"Latency: mean: {ms(lat.mean)} ms",
        f"med: {ms(lat.p50)}",
        f"95pct: {ms(lat.p95)}",
        f"99pct: {ms(lat.p99)}",
        f"99.9pct: {ms(lat.p999)}",
        f"99.99pct: {ms(lat.p9999)}",
    ]
    if with_99999:
        parts.append(f"99.999pct: {ms(lat.p99999)}")
    parts.append(f"Max: {ms(lat.max)}")
    return " - ".join(parts)


def _no_sample_reason(lat: LatencyStats, warmup_messages: int) -> str:
    """Why a latency shows "-" although messages came: they all came during the warm-up."""
    if lat.count or not warmup_messages:
        return ""
    return f" (no sample: {warmup_messages} msg in the warm-up)"


def format_interval(name: str, stats: IntervalStats) -> str:
    """`Throughput produced: N msg --- R msg/s --- M Mbit/s --- errors E --- Latency: mean ...` (ms); a
    partial interval says how long it was (`Throughput produced (last 0.60 s): ...`)."""
    verb = _VERB.get(name, name)
    if stats.partial:
        verb += f" (last {stats.seconds:.2f} s)"
    return (
        f"Throughput {verb}: {stats.total:8d} msg --- {stats.rate:9.1f} msg/s --- {stats.mbit:7.3f} Mbit/s "
        f"--- errors {stats.errors:4d} --- {_latency_fields(stats.latency)}"
        + _no_sample_reason(stats.latency, stats.warmup_messages)
    )


def format_summary(summary: Summary) -> list[str]:
    """pulsar-perf's two "Aggregated" lines (the latency line adds 99.999pct)."""
    verb = {"produce": "sent", "consume": "received"}.get(summary.name, summary.name)
    extra = "".join(f" --- {k} {v}" for k, v in summary.extra.items() if isinstance(v, (int, float, str)))
    return [
        f"Aggregated throughput stats ({summary.name}) --- {summary.total} records {verb} --- "
        f"{summary.rate:.1f} msg/s --- {summary.mbit:.3f} Mbit/s --- errors {summary.errors}{extra}",
        f"Aggregated latency stats ({summary.name}) --- {_latency_fields(summary.latency, with_99999=True)}"
        + _no_summary_sample_reason(summary),
    ]


def _no_summary_sample_reason(summary: Summary) -> str:
    if summary.latency.count or not summary.warmup_messages:
        return ""
    return (
        f" (no sample: all {summary.warmup_messages} msg came during the {summary.warmup:g} s warm-up,"
        " a backlog drained before it ended; --warmup 0 measures them)"
    )


_PLOTTED_LATENCIES: Final = (("p50", "p50"), ("p99", "p99"), ("p99.9", "p999"), ("max", "max"))


@dataclasses.dataclass(frozen=True, slots=True)
class PlotSeries:
    """What `plot` draws for one side: x (seconds), msg/s, and per label a latency line (ms)."""

    elapsed: list[float]
    rate: list[float]
    latency: dict[str, list[float]]


def shown_intervals(intervals: Sequence[IntervalStats]) -> list[IntervalStats]:
    """The intervals printed and plotted: all but a last, partial one after whole ones. That tail is the
    fraction of an interval in which the run ended (often a few hundredths of a second, the last messages
    or none): as a rate it reads as a throughput cliff. Its messages are in the totals and the JSON."""
    if len(intervals) > 1 and intervals[-1].partial:
        return list(intervals[:-1])
    return list(intervals)


def plot_series(summary: Summary) -> PlotSeries:
    """The per-interval data `plot` hands to matplotlib (`shown_intervals`). An interval without latency
    samples is NaN on the latency lines, which matplotlib leaves as a gap: 0 would draw a drop to the
    bottom of the log axis for an interval that measured nothing. Its rate stays 0 msg/s, which it was."""
    intervals = shown_intervals(summary.intervals)
    return PlotSeries(
        elapsed=[i.elapsed for i in intervals],
        rate=[i.rate for i in intervals],
        latency={
            label: [getattr(i.latency, field) if i.latency.count else math.nan for i in intervals]
            for label, field in _PLOTTED_LATENCIES
        },
    )


def plot(summaries: Sequence[Summary], path: str) -> None:
    """A PNG of msg/s and latency percentiles per interval, one column per side. matplotlib is imported
    here (Agg backend) so that the CLI starts without it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = max(1, len(summaries))
    fig, axes = plt.subplots(2, columns, figsize=(6 * columns, 7), squeeze=False, sharex="col")
    for col, summary in enumerate(summaries):
        series = plot_series(summary)
        xs = series.elapsed
        top, bottom = axes[0][col], axes[1][col]
        top.plot(xs, series.rate, marker="o")
        top.set_title(f"{summary.name}: throughput")
        top.set_ylabel("msg/s")
        top.set_ylim(bottom=0)
        for label, ys in series.latency.items():
            bottom.plot(xs, ys, marker=".", label=label)
        bottom.set_title(f"{summary.name}: latency")
        bottom.set_ylabel("ms")
        bottom.set_xlabel("seconds")
        bottom.set_yscale("log")
        bottom.legend()
        for ax in (top, bottom):
            ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
