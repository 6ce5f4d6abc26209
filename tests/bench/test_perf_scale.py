"""`thrust perf scale`: what it reports for a consumer of several topics and for a lite consumer, read from
its JSON (counts and shapes, never timings)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from thrust.bench.scale import ScaleRow, median_rows, percentile
from thrust.cli.main import build_parser
from thrust.cluster import ClusterInfo

REPO = Path(__file__).resolve().parents[2]


def test_percentile_nearest_rank() -> None:
    assert percentile([], 0.99) is None
    assert percentile([3.0], 0.5) == 3.0
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0


def test_median_rows_per_configuration() -> None:
    runs = [
        [ScaleRow("normal", 10, cpu_percent=c, rpcs_per_second={"QueryAssignment": q}, first_message_ms=[f])]
        for c, q, f in ((1.0, 2.0, 5.0), (3.0, 4.0, 7.0), (2.0, 3.0, 6.0))
    ]
    [row] = median_rows(runs)
    assert (row["kind"], row["topics"], row["runs"]) == ("normal", 10, 3)
    assert row["cpu_percent"] == 2.0
    assert row["rpcs_per_second"] == {"QueryAssignment": 3.0}
    assert row["first_message_ms"] == 6.0
    assert row["hot_ratio"] is None


def test_cli_parses_lists() -> None:
    args = build_parser().parse_args(
        ["perf", "scale", "--topics", "10,1000", "--kinds", "fifo", "--lite-topics", "0"]
    )
    assert (args.topics, args.kinds, args.lite_topics) == ((10, 1000), ("fifo",), ())
    with pytest.raises(SystemExit):
        build_parser().parse_args(["perf", "scale", "--kinds", "lite"])


@pytest.mark.slow
def test_perf_scale_reports_queues_polls_calls_and_the_hot_topic(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    proc = subprocess.run(
        [
            sys.executable, "-m", "thrust.cli.main", "perf", "scale", "--topics", "3",
            "--kinds", "normal,fifo",
            "--lite-topics", "5", "--idle", "1", "--settle", "0.5", "--hot-messages", "200",
            "--fifo-hot-messages", "40", "--paced-seconds", "0.5", "--paced-rate", "40",
            "--fifo-paced-rate", "20",
            "--quiet-probes", "2", "--json", str(out),
        ],
        capture_output=True, text=True, timeout=240, check=False,
        env=dict(os.environ, PYTHONPATH=str(REPO / "src")),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    [run] = data["runs"]
    normal, fifo, lite = run
    for row in (normal, fifo):
        # 3 topics on 2 brokers, 1 queue each: one queue per topic and broker either way
        assert row["queues"] == 6
        # idle: one long poll per queue parked on the server, none per `receives_per_queue`, and as
        # many open on the client
        assert row["parked_polls"] == 6 and row["receives_in_flight"] == 6
        assert 0 <= row["receive_peak_per_second"] <= 6  # polls of 5 s or more: one a queue in 1 s at most
        assert row["server"] == "embedded"
        assert row["tasks"] > 0 and row["threads"] > 0 and row["rss_mib"] > 0
        assert row["cpu_percent"] is not None and row["server_cpu_percent"] is not None
        # the split by thread: the loop's always, the native transport's thread only on that transport
        assert row["loop_cpu_percent"] is not None and row["loop_wakeups_per_second"] is not None
        native = row["transport"] == "native"
        assert (row["native_cpu_percent"] is not None) == native
        assert (row["native_wakeups_per_second"] is not None) == native
        assert len(row["first_message_ms"]) == 2  # both quiet topics probed got their message
        assert row["hot_msgs_per_second"] > 0 and row["alone_msgs_per_second"] > 0
        assert row["hot_ratio"] == pytest.approx(
            row["hot_msgs_per_second"] / row["alone_msgs_per_second"], rel=0.01
        )
        assert row["hot_p99_ms"] is not None and row["alone_p99_ms"] is not None
        # 3 routes, refreshed every 30 s: a 1 s window began after their first fetch holds no round
        assert row["route_rounds"] == 0 and row["route_period_seconds"] == 30.0
    assert (normal["kind"], fifo["kind"], lite["kind"]) == ("normal", "fifo", "lite")
    # 5 lite topics of one LITE topic on 2 brokers: one bound queue per broker, one long poll each
    assert lite["queues"] == 2 and lite["parked_polls"] == 2 and lite["receives_in_flight"] == 2
    assert [m["kind"] for m in data["medians"]] == ["normal", "fifo", "lite"]
    assert "long polls open" in proc.stdout
    assert "wake-ups/s" in proc.stdout
    assert "0.0 route refresh rounds (one every 30.0 s)" in proc.stdout


def _scale_on_real(info: ClusterInfo, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`thrust perf scale --server real` on `info` (passed as `thrust cluster --exec` would)."""
    return subprocess.run(
        [
            sys.executable, "-m", "thrust.cli.main", "perf", "scale", "--server", "real", *args,
            "--idle", "2", "--settle", "1", "--quiet-probes", "2", "--json", str(out),
        ],
        capture_output=True, text=True, timeout=400, check=False,
        env=dict(os.environ, PYTHONPATH=str(REPO / "src"), THRUST_ROCKETMQ=info.to_json()),
    )  # fmt: skip


@pytest.mark.slow
def test_perf_scale_on_the_real_cluster_counts_on_the_client(rocketmq2: ClusterInfo, tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    proc = _scale_on_real(
        rocketmq2, out, "--topics", "3", "--kinds", "normal,fifo", "--lite-topics", "0",
        "--hot-messages", "300", "--fifo-hot-messages", "64", "--paced-seconds", "0.5",
        "--paced-rate", "40", "--fifo-paced-rate", "20",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    [run] = json.loads(out.read_text())["runs"]
    for row in run:
        assert row["server"] == "real"
        # 3 topics on the cluster's 2 brokers, 1 queue each, and one long poll open per queue
        assert row["queues"] == 6 and row["receives_in_flight"] == 6
        assert row["parked_polls"] is None and row["rpcs_per_second"] == {}  # the proxy counts nothing
        assert set(row["client_rpcs_per_second"]) <= {
            "ReceiveMessage", "QueryAssignment", "QueryRoute", "Heartbeat", "AckMessage",
        }  # fmt: skip
        assert len(row["first_message_ms"]) == 2
        assert row["hot_msgs_per_second"] > 0 and row["alone_msgs_per_second"] > 0
        assert row["hot_p99_ms"] is not None and row["alone_p99_ms"] is not None
    # rows and runs never share a topic or group: a second row's alone consumer drained its own backlog
    assert [row["kind"] for row in run] == ["normal", "fifo"]


@pytest.mark.slow
def test_perf_scale_lite_row_on_real_5_5(rocketmq55: ClusterInfo, tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    proc = _scale_on_real(rocketmq55, out, "--topics", "0", "--lite-topics", "20")
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    [[lite]] = json.loads(out.read_text())["runs"]
    # 20 lite topics of one LITE topic on one broker: one bound queue, one long poll
    assert (lite["kind"], lite["server"]) == ("lite", "real")
    assert lite["queues"] == 1 and lite["receives_in_flight"] == 1
