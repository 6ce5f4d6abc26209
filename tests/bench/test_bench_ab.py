"""scripts/bench_ab.py: two installs' `thrust bench` runs, interleaved, and the table of B / A per metric.

The two "installs" here are folders whose bin/thrust is a stand-in that writes the bench's JSON shape
(cli/bench.py, `--json`) with a value of its own: the script's job is the interleaving and the
arithmetic, not the bench."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_ab.py"


def _install(root: Path, name: str, value: float, log: Path) -> Path:
    venv = root / name
    (venv / "bin").mkdir(parents=True)
    data = {
        "scenarios": {
            "1": {
                "rows": [{"key": "consumed_per_s", "label": "msg/s"}],
                "results": {"thrust": {"median": {"consumed_per_s": value}}, "raw": {"skipped": "n/a"}},
            }
        }
    }
    thrust = venv / "bin" / "thrust"
    thrust.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"open({str(log)!r}, 'a').write({name!r} + ' ' + ' '.join(sys.argv[1:]) + '\\n')\n"
        f"json.dump({data!r}, open(sys.argv[sys.argv.index('--json') + 1], 'w'))\n"
    )
    thrust.chmod(thrust.stat().st_mode | stat.S_IXUSR)
    return venv


def test_rounds_alternate_and_the_ratio_is_b_over_a(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    a = _install(tmp_path, "a", 1000.0, log)
    b = _install(tmp_path, "b", 1100.0, log)
    out = tmp_path / "ab.json"
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--a",
            str(a),
            "--b",
            str(b),
            "--rounds",
            "3",
            "--json",
            str(out),
            "--",
            "--scenarios",
            "1",
            "--client",
            "thrust",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    # A B, B A, A B: each round once per install, the order flipped every round.
    assert [c.split()[0] for c in calls] == ["a", "b", "b", "a", "a", "b"]
    assert all("bench --scenarios 1 --client thrust --repeat 1 --json" in c for c in calls)
    assert "| 1 | thrust | consumed_per_s | 1000 [1000-1000] | 1100 [1100-1100] | 1.100 |" in done.stdout
    # A skipped cell has no metric and no row.
    assert "| raw |" not in done.stdout
    cells = json.loads(out.read_text())["cells"]
    assert cells["1/thrust/consumed_per_s"] == {"A": [1000.0] * 3, "B": [1100.0] * 3}


def test_a_failing_bench_stops_the_comparison(tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    a = _install(tmp_path, "a", 1.0, log)
    broken = tmp_path / "broken"
    (broken / "bin").mkdir(parents=True)
    (broken / "bin" / "thrust").write_text("#!/bin/sh\nexit 3\n")
    (broken / "bin" / "thrust").chmod(0o755)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--a", str(a), "--b", str(broken), "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "thrust bench failed" in done.stderr and "exit 3" in done.stderr
