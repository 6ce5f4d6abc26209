"""`import thrust` makes `thrust.sync` reachable, without importing it until it is first touched."""

from __future__ import annotations

import subprocess
import sys

import pytest

_SCRIPT = """
import sys
import thrust
assert "thrust.sync" not in sys.modules, "import thrust imported thrust.sync"
producer_cls = thrust.sync.Producer
assert "thrust.sync" in sys.modules
import thrust.sync
assert producer_cls is thrust.sync.Producer
assert thrust.sync.SimpleConsumer and thrust.sync.PushConsumer
print("ok")
"""


@pytest.mark.slow
def test_thrust_sync_is_reachable_after_import_thrust_and_lazy() -> None:
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=50)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
