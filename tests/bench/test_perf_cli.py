"""`thrust perf` end to end: the embedded server in a subprocess, real clients, counts that add up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from thrust.bench.stats import Recorder, format_interval, format_summary
from thrust.cli.main import build_parser

REPO = Path(__file__).resolve().parents[2]


def _thrust(*args: str) -> list[str]:
    return [sys.executable, "-m", "thrust.cli.main", *args]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO / "src"))


@pytest.mark.slow
def test_perf_e2e_bounded_count_adds_up(tmp_path: Path) -> None:
    out_json = tmp_path / "perf.json"
    out_png = tmp_path / "perf.png"
    proc = subprocess.run(
        _thrust(
            "perf", "e2e", "--count", "600", "--interval", "1", "--warmup", "0", "--rate", "400",
            "--size", "100", "--queues", "4", "--json", str(out_json), "--plot", str(out_png),
        ),
        capture_output=True, text=True, timeout=50, env=_env(), check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out_json.read_text())
    assert data["mode"] == "e2e"
    assert data["produce"]["total"] == 600
    assert data["produce"]["errors"] == 0
    assert data["sent_ok"] == 600
    assert data["received_unique"] == 600
    assert data["consume"]["total"] == 600 + data["duplicates"]
    assert data["consume"]["extra"]["acked"] >= 600
    assert data["produce"]["bytes"] == 600 * 100
    # every interval line is in the output, and the interval counts add up to the total
    assert sum(i["count"] for i in data["produce"]["intervals"]) == 600
    assert sum(i["count"] for i in data["consume"]["intervals"]) == data["consume"]["total"]
    assert "Throughput produced:" in proc.stdout and "Throughput received:" in proc.stdout
    assert proc.stdout.count("Aggregated latency stats") == 2
    assert data["produce"]["latency"]["count"] > 0 and data["produce"]["latency"]["p50"] > 0
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # beside every interval printed (a last, partial one after whole ones is not: tests/bench/
    # test_perf_tail.py), the loop lag of perf's process and of the server it started; in the JSON, one per
    # interval
    lag_lines = [line for line in proc.stdout.splitlines() if line.startswith("Loop lag p99 / max (ms)")]
    shown = [i for i in data["produce"]["intervals"] if not i["partial"]] or data["produce"]["intervals"]
    assert len(lag_lines) == len(shown)
    assert len(data["produce"]["intervals"]) == len(data["lag"])
    assert all(" --- client: " in line and " --- server: " in line for line in lag_lines)
    assert any(row["client"]["lag_samples"] > 0 for row in data["lag"])
    assert any(row["server"] is not None and row["server"]["lag_samples"] > 0 for row in data["lag"])


@pytest.mark.slow
def test_perf_ctrl_c_prints_summary(tmp_path: Path) -> None:
    out_json = tmp_path / "perf.json"
    proc = subprocess.Popen(
        _thrust("perf", "e2e", "--rate", "300", "--interval", "1", "--json", str(out_json)),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        assert proc.stdout is not None
        while time.monotonic() < deadline:  # wait for the first stats line: the run is going
            if "Throughput produced" in proc.stdout.readline():
                break
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr[-3000:]
    assert "Aggregated throughput stats (produce)" in stdout
    assert "Aggregated throughput stats (consume)" in stdout
    data = json.loads(out_json.read_text())
    assert data["interrupted"] is True
    assert data["produce"]["total"] > 0


def test_perf_rejects_unsupported_combinations() -> None:
    from thrust.cli.perf import UsageError, options_from_args

    parser = build_parser()
    for argv in (
        ["perf", "e2e", "--tls"],
        ["perf", "e2e", "--endpoints", "127.0.0.1:1", "--queues", "4"],
        ["perf", "consume", "--consumer", "simple", "--listener-delay", "5"],
        ["perf", "produce", "--fifo", "4", "--delay", "1"],
        ["perf", "produce", "--access-key", "ak"],
    ):
        args = parser.parse_args(argv)
        try:
            options_from_args(args)
        except UsageError:
            continue
        raise AssertionError(f"{argv} was accepted")


def test_recorder_lines_and_summary() -> None:
    now = [100.0]
    rec = Recorder("produce", warmup=1.0, clock=lambda: now[0])
    rec.record(500.0, 10)  # in the warm-up: counted, no latency sample
    now[0] += 2.0
    for us in (1000.0, 2000.0, 3000.0):
        rec.record(us, 10)
    rec.record_error()
    stats = rec.report()
    assert stats.total == 4 and stats.count == 4 and stats.errors == 1
    assert stats.latency.count == 3
    assert abs(stats.latency.p50 - 2.0) < 0.01 and abs(stats.latency.max - 3.0) < 0.01
    assert abs(stats.rate - 2.0) < 1e-9
    line = format_interval("produce", stats)
    assert line.startswith("Throughput produced:") and "99.99pct" in line and "Max:" in line
    summary = rec.summary()
    assert summary.total == 4 and summary.bytes == 40 and summary.latency.count == 3
    lines = format_summary(summary)
    assert "4 records sent" in lines[0] and "99.999pct" in lines[1]
    json.dumps(summary.to_json())


@pytest.mark.slow
def test_perf_e2e_with_producer_batching_adds_up(tmp_path: Path) -> None:
    out_json = tmp_path / "perf.json"
    proc = subprocess.run(
        _thrust(
            "perf", "e2e", "--count", "640", "--interval", "1", "--warmup", "0", "--rate", "2000",
            "--size", "64", "--queues", "2", "--batch-max-messages", "16", "--batch-max-delay-ms", "5",
            "--json", str(out_json),
        ),
        capture_output=True, text=True, timeout=50, env=_env(), check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out_json.read_text())
    assert data["options"]["batch_max_messages"] == 16
    assert data["produce"]["total"] == 640 and data["produce"]["errors"] == 0
    assert data["sent_ok"] == 640 and data["received_unique"] == 640
    assert data["consume"]["total"] == 640 + data["duplicates"]
    # counted per message (latency samples too), sent in fewer calls than messages
    assert data["produce"]["latency"]["count"] == 640
    calls = data["produce"]["extra"]["send_calls"]
    assert 640 / 16 <= calls < 640
    assert sum(i["count"] for i in data["produce"]["intervals"]) == 640
    assert "send_calls" in proc.stdout


@pytest.mark.slow
def test_perf_produce_batching_full_rate_counts_every_message(tmp_path: Path) -> None:
    out_json = tmp_path / "perf.json"
    proc = subprocess.run(
        _thrust(
            "perf", "produce", "--count", "3000", "--interval", "1", "--warmup", "0", "--size", "32",
            "--batch-max-messages", "32", "--max-in-flight", "8", "--fifo", "3", "--json", str(out_json),
        ),
        capture_output=True, text=True, timeout=50, env=_env(), check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out_json.read_text())
    assert data["produce"]["total"] == 3000 and data["sent_ok"] == 3000
    # one batch per (topic, message group): 3 groups, up to 32 each
    assert 3000 / 32 <= data["produce"]["extra"]["send_calls"] < 3000


def test_perf_rejects_a_batch_size_below_one() -> None:
    from thrust.cli.perf import UsageError, options_from_args

    args = build_parser().parse_args(["perf", "produce", "--batch-max-messages", "0"])
    try:
        options_from_args(args)
    except UsageError:
        return
    raise AssertionError("--batch-max-messages 0 was accepted")


@pytest.mark.slow
def test_perf_produce_with_the_producers_linger_batch_counts_every_message(tmp_path: Path) -> None:
    out_json = tmp_path / "perf.json"
    proc = subprocess.run(
        _thrust(
            "perf", "produce", "--count", "3000", "--interval", "1", "--warmup", "0", "--size", "1024",
            "--linger-batch", "64", "--linger-batch-ms", "2", "--max-in-flight", "8", "--json", str(out_json),
        ),
        capture_output=True, text=True, timeout=50, env=_env(), check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out_json.read_text())
    assert data["options"]["linger_batch"] == 64
    assert data["produce"]["total"] == 3000 and data["sent_ok"] == 3000
    assert data["produce"]["latency"]["count"] == 3000  # per message, each from its own receipt
    # SendMessage requests the producer made: batches of up to 64
    assert 3000 / 64 <= data["produce"]["extra"]["send_calls"] < 3000


def test_perf_rejects_both_batchings_at_once() -> None:
    from thrust.cli.perf import UsageError, options_from_args

    for argv in (["--linger-batch", "0"], ["--linger-batch", "8", "--batch-max-messages", "8"]):
        args = build_parser().parse_args(["perf", "produce", *argv])
        try:
            options_from_args(args)
        except UsageError:
            continue
        raise AssertionError(f"{argv} was accepted")


@pytest.mark.slow
def test_perf_e2e_runs_on_uvloop_in_both_processes(tmp_path: Path) -> None:
    out_json = tmp_path / "perf.json"
    proc = subprocess.run(
        _thrust(
            "perf", "e2e", "--count", "300", "--interval", "1", "--warmup", "0", "--rate", "400",
            "--size", "100", "--queues", "2", "--loop", "uvloop", "--server-loop", "uvloop",
            "--json", str(out_json),
        ),
        capture_output=True, text=True, timeout=50, env=_env(), check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out_json.read_text())
    assert data["options"]["loop"] == "uvloop" and data["options"]["server_loop"] == "uvloop"
    assert data["sent_ok"] == 300 and data["received_unique"] == 300
