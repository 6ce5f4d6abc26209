"""The committed generated protobuf/gRPC modules match what scripts/gen_proto.py produces now."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


# The first run builds gen_proto's grpcio-tools venv (cached under $XDG_CACHE_HOME/thrust/protoc) from PyPI.
@pytest.mark.timeout(300)
def test_generated_modules_are_fresh() -> None:
    # gen_proto.py runs protoc from the grpcio-tools it pins, so a different protoc can't pass by accident.
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_proto.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 0, f"stale generated modules (run `make proto`):\n{proc.stdout}\n{proc.stderr}"
