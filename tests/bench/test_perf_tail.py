"""`thrust perf`'s last, partial interval is not printed or plotted as a throughput cliff (it stays in the
JSON, flagged, so the intervals add up); a latency of "-" says when the warm-up took every message; a
run of a known duration gets about ten intervals, and a plot of fewer than three points says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from thrust.bench.stats import Recorder, format_interval, format_summary, plot_series, shown_intervals
from thrust.cli import perf as perf_cli
from thrust.cli.main import build_parser

REPO = Path(__file__).resolve().parents[2]


def _two_intervals_and_a_tail() -> Recorder:
    now = [100.0]
    rec = Recorder("produce", clock=lambda: now[0])
    for seconds, n, partial in ((1.0, 100, False), (1.0, 100, False), (0.07, 1, True)):
        for _ in range(n):
            rec.record(1000.0, 10)
        now[0] += seconds
        rec.report(partial=partial)
    return rec


def test_the_partial_tail_is_neither_shown_nor_plotted_but_kept() -> None:
    summary = _two_intervals_and_a_tail().summary()
    assert [i.partial for i in summary.intervals] == [False, False, True]
    assert sum(i.count for i in summary.intervals) == summary.total == 201
    assert shown_intervals(summary.intervals) == list(summary.intervals[:2])
    series = plot_series(summary)
    assert series.rate == [100.0, 100.0] and series.elapsed == [1.0, 2.0]
    assert summary.to_json()["intervals"][-1]["partial"] is True


def test_a_run_shorter_than_one_interval_shows_its_one_partial_interval() -> None:
    now = [0.0]
    rec = Recorder("produce", clock=lambda: now[0])
    rec.record(1000.0, 10)
    now[0] = 0.6
    only = rec.report(partial=True)
    assert shown_intervals(rec.intervals) == [only]
    assert format_interval("produce", only).startswith("Throughput produced (last 0.60 s): ")


def test_no_latency_sample_because_of_the_warm_up_says_so() -> None:
    now = [0.0]
    rec = Recorder("consume", warmup=1.0, clock=lambda: now[0])
    for _ in range(5):  # a backlog drained within the warm-up
        rec.record(1000.0, 10)
    now[0] = 2.0
    line = format_interval("consume", rec.report())
    assert line.endswith(" (no sample: 5 msg in the warm-up)"), line
    _, latency = format_summary(rec.summary())
    assert "mean:        - ms" in latency
    assert "(no sample: all 5 msg came during the 1 s warm-up" in latency and "--warmup 0" in latency


def test_samples_after_the_warm_up_need_no_reason() -> None:
    now = [0.0]
    rec = Recorder("consume", warmup=1.0, clock=lambda: now[0])
    rec.record(1000.0, 10)
    now[0] = 1.5
    rec.record(1000.0, 10)
    assert "no sample" not in format_interval("consume", rec.report())
    assert "no sample" not in format_summary(rec.summary())[1]


@pytest.mark.parametrize(
    ("argv", "interval"),
    [
        ([], 10.0),
        (["--duration", "5"], 1.0),
        (["--duration", "30"], 3.0),
        (["--duration", "600"], 10.0),
        (["--duration", "30", "--interval", "7"], 7.0),
    ],
)
def test_the_default_interval_follows_the_duration(argv: list[str], interval: float) -> None:
    args = build_parser().parse_args(["perf", "produce", *argv])
    assert perf_cli.options_from_args(args, {}).interval == interval


def _perf(tmp_path: Path, *argv: str) -> tuple[subprocess.CompletedProcess[str], dict]:  # type: ignore[type-arg]
    out = tmp_path / "perf.json"
    base = {k: v for k, v in os.environ.items() if not k.startswith("ROCKETMQ_")}
    done = subprocess.run(
        [sys.executable, "-m", "thrust.cli.main", "perf", *argv, "--json", str(out)],
        env={**base, "PYTHONPATH": str(REPO / "src")},
        capture_output=True,
        text=True,
        timeout=80,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done, json.loads(out.read_text())


@pytest.mark.slow
def test_perf_prints_whole_intervals_and_keeps_the_tail_in_the_json(tmp_path: Path) -> None:
    done, data = _perf(
        tmp_path, "produce", "--count", "250", "--rate", "100", "--interval", "1", "--warmup", "0"
    )
    intervals = data["produce"]["intervals"]
    assert sum(i["count"] for i in intervals) == data["produce"]["total"] == 250
    assert not any(i["partial"] for i in intervals[:-1])
    whole = [i for i in intervals if not i["partial"]]
    assert len(whole) >= 2
    printed = [line for line in done.stdout.splitlines() if line.startswith("Throughput produced")]
    assert len(printed) == len(whole) and not any("(last " in line for line in printed)


@pytest.mark.slow
def test_a_plot_of_one_point_says_so(tmp_path: Path) -> None:
    png = tmp_path / "perf.png"
    done, data = _perf(tmp_path, "produce", "--count", "20", "--warmup", "0", "--plot", str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    [only] = data["produce"]["intervals"]
    assert only["partial"] is True
    assert "the plot has 1 point(s) per curve" in done.stderr and "--interval" in done.stderr
    assert "Throughput produced (last " in done.stdout
