"""`import thrust.sync` works where `os.register_at_fork` does not exist (Windows)."""

from __future__ import annotations

import subprocess
import sys

_SCRIPT = """
import os
del os.register_at_fork, os.fork  # as on Windows (the stdlib checks for fork, thrust must not assume)
import thrust
import thrust.sync
assert thrust.sync.Producer and thrust.sync.SimpleConsumer and thrust.sync.PushConsumer
print("ok")
"""


def test_import_thrust_sync_without_register_at_fork() -> None:
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=50)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
