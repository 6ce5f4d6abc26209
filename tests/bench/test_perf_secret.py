"""`thrust perf --secret-key`: the secret is in no output file, no output line, no child command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from thrust.cli.main import build_parser

REPO = Path(__file__).resolve().parents[2]
SECRET = "s3cret-DO-NOT-PRINT-7f3a"


@pytest.mark.slow
def test_perf_json_and_output_do_not_contain_the_secret_key(tmp_path: Path) -> None:
    out_json = tmp_path / "perf.json"
    # Against the embedded server started with these credentials: the run signs every request.
    proc = subprocess.run(
        [
            sys.executable, "-m", "thrust.cli.main", "perf", "produce", "--count", "20", "--interval", "1",
            "--warmup", "0", "--queues", "1", "--access-key", "ak", "--secret-key", SECRET,
            "--json", str(out_json),
        ],
        capture_output=True, text=True, timeout=50, env=dict(os.environ, PYTHONPATH=str(REPO / "src")),
        check=False, cwd=str(tmp_path),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out_json.read_text()
    data = json.loads(text)
    assert data["produce"]["total"] == 20 and data["produce"]["errors"] == 0
    assert data["options"]["access_key"] == "ak"
    assert data["options"]["secret_key"] == "<redacted>"
    assert SECRET not in text
    assert SECRET not in proc.stdout and SECRET not in proc.stderr
    assert all(SECRET not in p.read_text(errors="replace") for p in tmp_path.iterdir() if p.is_file())


def test_the_embedded_server_gets_the_secret_in_its_environment_not_argv() -> None:
    from thrust.cli.perf import server_args, server_env

    args = build_parser().parse_args(["perf", "produce", "--access-key", "ak", "--secret-key", SECRET])
    assert SECRET not in " ".join(server_args(args, ["perf"]))
    assert server_env(args) == {"THRUST_SECRET_KEY": SECRET}
