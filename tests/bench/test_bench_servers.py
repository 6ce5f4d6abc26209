"""`thrust bench` and `thrust perf` against any server: the server options and their
refusals, message sizes, the raw and Java columns, and CPU per message. Runs are short; no speed
thresholds, only that every row was measured."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from thrust.bench.java_driver import JAVA_CLIENT_VERSION, build_java_driver
from thrust.bench.scenarios import DEFAULT, SCENARIOS
from thrust.cli.bench import _clients, _select
from thrust.cli.main import build_parser
from thrust.cluster import ClusterInfo
from thrust.cluster.process import wait_routable

REPO = Path(__file__).resolve().parents[2]


def _thrust(
    *args: str, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "thrust.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PYTHONPATH=str(REPO / "src"), **(env or {})),
        cwd=REPO,
        check=False,
    )


def _rows(stdout: str) -> list[list[str]]:
    lines = [line for line in stdout.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[1:]]


# -- selection and refusals ------------------------------------------------------------------------


def test_default_selection_adds_the_1k_rows() -> None:
    labels = [label for label, _sid, _size in _select("all")]
    assert labels == list(DEFAULT)
    sizes = {label: size for label, _sid, size in _select("all")}
    assert sizes["1"] == 64 and sizes["1@1k"] == 1024 and sizes["drain@1k"] == 1024
    assert sizes["produce@1k"] == 1024 and sizes["5a"] == 64


def test_size_option_and_explicit_sizes() -> None:
    chosen = _select("1,drain@4096,3", 256)
    assert chosen == [("1@256", "1", 256), ("drain@4k", "drain", 4096), ("3", "3", 64)]
    # the same run named twice is run once
    assert _select("drain@1k,drain", 1024) == [("drain@1k", "drain", 1024)]
    with pytest.raises(ValueError, match="no message size"):
        _select("5a@1k")
    with pytest.raises(ValueError, match="unknown scenario"):
        _select("drain,9")


def test_real_servers_leave_out_the_embedded_only_scenarios() -> None:
    ids = [sid for _label, sid, _size in _select("all", embedded=False)]
    assert ids == [sid for sid in (s for _l, s, _z in _select("all")) if not SCENARIOS[sid].embedded_only]
    assert {"3", "4", "5a", "ceiling", "server"}.isdisjoint(ids)
    assert {"1", "drain", "produce", "6", "7b"} <= set(ids)
    for sid in ("3", "4", "5a"):
        assert "fault hooks" in (SCENARIOS[sid].embedded_only or "")
        with pytest.raises(ValueError, match="runs only on the embedded server"):
            _select(sid, embedded=False)


def test_clients() -> None:
    assert _clients("both") == ["thrust", "official"]
    assert _clients("all") == ["thrust", "official", "java", "raw"]
    assert _clients("raw,thrust,raw") == ["thrust", "raw"]
    with pytest.raises(ValueError, match="unknown client"):
        _clients("go")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--server", "real", "--scenarios", "3"], "scenario 3 runs only on the embedded server"),
        (["--endpoints", "127.0.0.1:1", "--scenarios", "1,5a"], "scenario 5a runs only on the embedded"),
        (["--server", "embedded", "--endpoints", "127.0.0.1:1"], "choose one"),
        (["--server-pids", "1"], "--server-pids goes with --endpoints"),
        (["--scenarios", "4@1k"], "no message size"),
        (["--client", "rust"], "unknown client"),
    ],
)
def test_bench_refusals_are_one_line(args: list[str], message: str) -> None:
    proc = _thrust("bench", *args, timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr  # nothing was started


def test_bench_size_must_be_positive() -> None:
    proc = _thrust("bench", "--size", "0", timeout=30)
    assert proc.returncode == 2 and "the size must be >= 1" in proc.stderr


def test_list_resources_names_one_topic_per_size() -> None:
    proc = _thrust(
        "bench", "--endpoints", "127.0.0.1:1", "--scenarios", "1,1@1k,drain,5b,produce@1k",
        "--list-resources", timeout=30,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "topics (NORMAL): bench-s1 bench-s1-1024 bench-drain bench-a bench-b bench-produce-1024",
        "groups: bench",
    ]


def test_help_says_what_an_existing_cluster_needs() -> None:
    text = _thrust("bench", "--help", timeout=30).stdout
    assert "must exist" in text and "--list-resources" in text and "--server real" in text


def test_perf_server_options() -> None:
    from thrust.cli.perf import UsageError, options_from_args

    parser = build_parser()
    options = options_from_args(parser.parse_args(["perf", "produce", "--message-size", "300"]))
    assert options.size == 300
    for argv in (
        ["perf", "e2e", "--server", "real", "--endpoints", "127.0.0.1:1"],
        ["perf", "produce", "--server", "real", "--access-key", "a", "--secret-key", "b"],
    ):
        with pytest.raises(UsageError):
            options_from_args(parser.parse_args(argv))


# -- short runs on the embedded server ----------------------------------------------------------------


@pytest.mark.slow
def test_bench_raw_column_sizes_and_cpu_per_message(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = _thrust(
        "bench", "--scenarios", "1,drain@1k,produce", "--client", "thrust,raw", "--repeat", "1",
        "--duration", "1", "--warmup", "0.3", "--json", str(out), timeout=80,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert list(data["scenarios"]) == ["1", "drain@1k", "produce"]
    assert data["server"]["kind"] == "embedded"
    rows = _rows(proc.stdout)
    assert len(rows) == sum(len(SCENARIOS[s].rows) for s in ("1", "drain", "produce"))
    assert all(len(r) == 5 for r in rows)  # scenario, metric, thrust, raw, thrust / raw
    assert rows[len(SCENARIOS["1"].rows)][0].endswith("(1 KiB messages)")
    for label in ("1", "drain@1k", "produce"):
        for client in ("thrust", "raw"):
            median = data["scenarios"][label]["results"][client]["median"]
            rate = median["produced_per_s" if label == "produce" else "consumed_per_s"]
            assert rate > 0, (label, client)
            assert median["client_us"] > 0 and median["server_us"] > 0, (label, client)
            # The server's idle was sampled before the window, and its share taken out of the busy figure.
            assert median["server_idle_cpu_pct"] >= 0, (label, client)
            assert 0 <= median["server_busy_us"] <= median["server_us"], (label, client)
    produce = data["scenarios"]["produce"]["results"]["thrust"]["median"]
    assert produce["p99_ms"] >= produce["p50_ms"] > 0


# -- the Java client ---------------------------------------------------------------------------------


def test_java_driver_pins_the_client_version() -> None:
    pom = (REPO / "src/thrust/bench/java/pom.xml").read_text()
    assert f"<rocketmq.client.version>{JAVA_CLIENT_VERSION}</rocketmq.client.version>" in pom


@pytest.fixture(scope="module")
def java_driver() -> list[str]:
    # Maven fetches rocketmq-client-java on the first build (cached in ~/.m2 and the driver's cache
    # folder): outside the test's own timeout, which is func_only below.
    return build_java_driver()


@pytest.mark.slow
@pytest.mark.timeout(120, func_only=True)
def test_bench_java_client_end_to_end(java_driver: list[str], tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = _thrust(
        "bench", "--scenarios", "drain,produce", "--client", "java", "--repeat", "1",
        "--duration", "2", "--warmup", "1", "--java-warmup", "1", "--json", str(out), timeout=110,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    drain = data["scenarios"]["drain"]["results"]["java"]["median"]
    assert drain["consumed_per_s"] > 0 and drain["acked_per_s"] > 0
    assert drain["client_us"] > 0 and drain["server_us"] > 0
    produce = data["scenarios"]["produce"]["results"]["java"]["median"]
    assert produce["produced_per_s"] > 0 and produce["errors"] == 0
    assert produce["client_us"] > 0 and produce["p50_ms"] > 0


# -- a real RocketMQ (the `real` phase: the `rocketmq` fixture marks it) ------------------------------


@pytest.mark.timeout(240, func_only=True)
def test_bench_server_real_short(rocketmq: ClusterInfo, tmp_path: Path) -> None:
    """`--server real` on the real phase's local-mode cluster ($THRUST_ROCKETMQ, which it attaches to
    rather than starting JVMs of its own): a topic and group per run, a produced backlog, the latency
    FaultProxy, CPU per message from the proxy's JVM."""
    out = tmp_path / "bench.json"
    env = {"THRUST_ROCKETMQ": json.dumps([json.loads(rocketmq.to_json())])}
    proc = _thrust(
        "bench", "--server", "real", "--scenarios", "1,drain@1k", "--client", "thrust,raw",
        "--repeat", "1", "--duration", "1", "--warmup", "0.5", "--json", str(out), timeout=230, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"using the local-mode RocketMQ of \$THRUST_ROCKETMQ", proc.stderr)
    data = json.loads(out.read_text())
    assert data["server"]["kind"] == "real"
    # Two scenarios, not the three of the default real table: the shared cluster is busy with the other
    # real tests, so each run waits up to 20 s for the broker to go quiet (`Target.sample_idle`).
    for label in ("1", "drain@1k"):
        for client in ("thrust", "raw"):
            median = data["scenarios"][label]["results"][client]["median"]
            assert median["consumed_per_s"] > 0, (label, client)
            assert median["client_us"] > 0, (label, client)
            if rocketmq.control:  # the proxy's pid comes from `thrust cluster`'s control socket
                assert median["server_us"] > 0, (label, client)
            assert "acked_per_s" not in median  # the embedded server's counters only


@pytest.mark.timeout(180, func_only=True)
def test_bench_endpoints_on_an_existing_cluster(rocketmq: ClusterInfo, tmp_path: Path) -> None:
    """`--endpoints`: nothing is created; the topic `--list-resources` names, made here beforehand, and the
    group `bench` are used as they are (a backlog is produced into the topic before the window)."""
    listed = _thrust(
        "bench", "--endpoints", rocketmq.endpoint, "--scenarios", "drain", "--list-resources", timeout=30
    )
    assert listed.stdout.splitlines() == ["topics (NORMAL): bench-drain", "groups: bench"]
    admin = rocketmq.admin()
    admin.create_topic("bench-drain", "NORMAL", queues=4)
    admin.create_group("bench")
    wait_routable(rocketmq.endpoint, "bench-drain", deadline=time.monotonic() + 30)
    out = tmp_path / "bench.json"
    proc = _thrust(
        "bench", "--endpoints", rocketmq.endpoint, "--scenarios", "drain", "--client", "thrust",
        "--repeat", "1", "--duration", "1", "--warmup", "0.5", "--json", str(out), timeout=170,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["server"]["kind"] == "external"
    median = data["scenarios"]["drain"]["results"]["thrust"]["median"]
    assert median["consumed_per_s"] > 0 and median["client_us"] > 0
    assert "server_us" not in median  # no --server-pids: the server's CPU is not known


@pytest.mark.slow
@pytest.mark.timeout(120, func_only=True)
def test_java_driver_record_mode_prints_each_consumed_payload_and_stops_on_stdin_eof(
    java_driver: list[str],
) -> None:
    """`mode=record` (the reliability suite's Java group, R8): one `m` line per consumed message with its
    payload id (the body up to '|'), message id and attempt, then `closed` once stdin closes."""
    import asyncio

    import thrust
    from thrust.testing import embedded_server

    async def main() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            proc = await asyncio.create_subprocess_exec(
                *java_driver, "mode=record", f"endpoints={ep}", "group=g", "topics=t",
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )  # fmt: skip
            assert proc.stdin is not None and proc.stdout is not None
            try:
                started = json.loads(await asyncio.wait_for(proc.stdout.readline(), 60))
                assert started == {"event": "started"}
                async with thrust.Producer(endpoints=ep, topics=["t"]) as producer:
                    ids = {
                        (await producer.send(thrust.Message(topic="t", body=b"m%d|pad" % i))).message_id
                        for i in range(3)
                    }
                lines = [json.loads(await asyncio.wait_for(proc.stdout.readline(), 60)) for _ in range(3)]
                assert {(e["event"], e["pid"], e["attempt"]) for e in lines} == {
                    ("m", f"m{i}", 1) for i in range(3)
                }
                assert {e["id"] for e in lines} == ids
                proc.stdin.close()
                closed = json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
                assert closed == {"event": "closed"}
                assert await asyncio.wait_for(proc.wait(), 30) == 0
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()

    asyncio.run(main())
