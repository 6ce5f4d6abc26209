"""The committed generated protobuf/gRPC modules match what scripts/gen_proto.py produces now."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_generated_modules_are_fresh() -> None:
    # The venv's python: grpcio-tools (dev extra) pins protoc, so a different protoc can't pass by accident.
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_proto.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=50,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 0, f"stale generated modules (run `make proto`):\n{proc.stdout}\n{proc.stderr}"
