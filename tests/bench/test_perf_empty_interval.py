"""`thrust perf` intervals without latency samples: printed as "-", drawn as a gap (NaN), not as 0 ms."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from thrust.bench.stats import Recorder, format_interval, format_summary, plot, plot_series


def _recorder_with_an_idle_middle_interval() -> Recorder:
    """Three 1 s intervals: samples, none (nothing arrived), samples."""
    now = [100.0]
    rec = Recorder("consume", clock=lambda: now[0])
    for interval, latencies in enumerate(((1000.0, 3000.0), (), (2000.0,))):
        for us in latencies:
            rec.record(us, 10)
        now[0] += 1.0
        stats = rec.report()
        assert stats.latency.count == len(latencies), interval
    return rec


def test_an_interval_without_samples_prints_dashes_not_zero_ms() -> None:
    rec = _recorder_with_an_idle_middle_interval()
    busy, idle, _ = rec.intervals
    line = format_interval("consume", idle)
    latency = line.split("Latency:", 1)[1]
    assert "0.000" not in latency
    # every latency field is "-": mean, med, 95, 99, 99.9, 99.99 and Max
    assert re.findall(r"(?:mean|med|pct|Max): +(\S+)", latency) == ["-"] * 7
    assert "mean:        - ms" in latency  # same width as a number, so columns stay aligned
    assert len(line) == len(format_interval("consume", busy))
    assert "0.0 msg/s" in line and "0.000 Mbit/s" in line  # no throughput is a real 0
    busy_latency = format_interval("consume", busy).split("Latency:", 1)[1]
    assert "-" not in busy_latency.replace(" - ", "")


def test_a_run_without_samples_prints_dashes_in_the_summary() -> None:
    rec = Recorder("produce", warmup=10.0, clock=lambda: 100.0)
    rec.record(1000.0, 10)  # in the warm-up: counted, no latency sample
    _, latency_line = format_summary(rec.summary())
    assert "0.000" not in latency_line
    assert re.findall(r"(?:mean|med|pct|Max): +(\S+)", latency_line) == ["-"] * 8


def test_plot_data_has_a_gap_for_the_interval_without_samples() -> None:
    series = plot_series(_recorder_with_an_idle_middle_interval().summary())
    assert series.elapsed == [1.0, 2.0, 3.0]
    assert series.rate == [2.0, 0.0, 1.0]  # no messages is a real 0 msg/s
    assert set(series.latency) == {"p50", "p99", "p99.9", "max"}
    for label, ys in series.latency.items():
        assert len(ys) == 3
        assert ys[0] > 0 and ys[2] > 0, label
        assert math.isnan(ys[1]), label


@pytest.mark.slow
def test_plot_hands_matplotlib_nan_for_the_gap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lines `plot` draws on the latency axis carry NaN where the interval had no sample."""
    from matplotlib.axes import Axes

    drawn: list[tuple[str | None, list[float]]] = []
    original = Axes.plot

    def recording(self: Axes, *args: Any, **kwargs: Any) -> Any:
        drawn.append((kwargs.get("label"), list(args[1])))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Axes, "plot", recording)
    out = tmp_path / "perf.png"
    plot([_recorder_with_an_idle_middle_interval().summary()], str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    latency_lines = {label: ys for label, ys in drawn if label is not None}
    assert set(latency_lines) == {"p50", "p99", "p99.9", "max"}
    for ys in latency_lines.values():
        assert ys[0] > 0 and math.isnan(ys[1]) and ys[2] > 0
    [(_, rate)] = [(label, ys) for label, ys in drawn if label is None]
    assert rate == [2.0, 0.0, 1.0]
