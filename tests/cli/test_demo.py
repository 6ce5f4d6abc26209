"""`make demo`: `thrust serve` in a subprocess, messages through Producer and SimpleConsumer."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.slow
def test_demo_accounts_for_every_message() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "thrust.cli.demo", "--count", "200"],
        capture_output=True,
        text=True,
        timeout=55,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "sent 200 normal, 10 FIFO and 1 delay message(s)" in out.stdout
    assert "received and acked 211 message(s)" in out.stdout
    assert "missing: 0, unexpected: 0" in out.stdout
