"""Run the official-client drivers (tests/interop/drivers) against our embedded server.

A test runs one coroutine: `embedded_server(...)` on the loop, drivers as asyncio subprocesses of the
official client's venv (so the server keeps serving while a driver runs), each bounded by a timeout.
A driver's stdout is JSON lines (see drivers/_common.py); its client log is kept for failure messages.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from tests.official_client import ensure_venv

# Re-exported: the interop tests import it from here (tests/support.py has the one definition).
from tests.support import run as run

DRIVERS = Path(__file__).resolve().parent / "drivers"
T = TypeVar("T")


@dataclass
class DriverRun:
    """What one driver did: its events, exit code, stderr and client log."""

    name: str
    events: list[dict[str, Any]]
    returncode: int | None
    stderr: str
    log: str
    timed_out: bool
    raw_stdout: str = field(repr=False, default="")

    def of(self, event: str, **match: Any) -> list[dict[str, Any]]:
        return [
            e for e in self.events if e["event"] == event and all(e.get(k) == v for k, v in match.items())
        ]

    def ids(self, event: str, **match: Any) -> list[str]:
        return [e["id"] for e in self.of(event, **match)]

    def describe(self) -> str:
        counts = Counter(e["event"] for e in self.events)
        tail = "\n".join(json.dumps(e) for e in self.events[-25:])
        return (
            f"driver {self.name}: rc={self.returncode} timed_out={self.timed_out} events={dict(counts)}\n"
            f"last events:\n{tail}\nstderr (tail):\n{self.stderr[-3000:]}\n"
            f"client log (tail):\n{self.log[-3000:]}"
        )

    def check(self) -> DriverRun:
        """Fail the test if the driver crashed, timed out or reported an error."""
        problems = self.of("error")
        assert not self.timed_out and self.returncode == 0 and not problems, self.describe()
        assert self.of("exit"), self.describe()
        return self


def _read_log(home: Path) -> str:
    path = home / "logs" / "rocketmq_python" / "rocketmq_client.log"
    return path.read_text(errors="replace") if path.exists() else ""


async def run_driver(
    name: str, cfg: dict[str, Any], *, home: Path, within: float, env: dict[str, str] | None = None
) -> DriverRun:
    """Run drivers/<name>.py with `cfg` in the official client's venv, killed after `within` seconds.

    Never raises on driver failure: the caller asserts on the returned `DriverRun` (`check()`).
    """
    python = ensure_venv()  # normally already built by the session fixture
    await asyncio.to_thread(home.mkdir, parents=True, exist_ok=True)
    child_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    # The official client logs under ~/logs/rocketmq_python; a per-driver HOME keeps runs apart.
    child_env.update(HOME=str(home), PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")
    child_env.update(env or {})
    proc = await asyncio.create_subprocess_exec(
        str(python),
        str(DRIVERS / f"{name}.py"),
        json.dumps(cfg),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
        env=child_env,
        cwd=str(DRIVERS),
    )
    timed_out = False
    try:
        out, err = await asyncio.wait_for(proc.communicate(), within)
    except TimeoutError:
        timed_out = True
        proc.kill()
        out, err = await proc.communicate()
    stdout = out.decode("utf-8", "replace")
    events = []
    for line in stdout.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            events.append({"event": "stdout", "line": line})
    log = await asyncio.to_thread(_read_log, home)
    return DriverRun(name, events, proc.returncode, err.decode("utf-8", "replace"), log, timed_out, stdout)


def once_each(ids: list[str]) -> dict[str, int]:
    """Ids seen more than once, with their counts (empty when every id is unique)."""
    return {i: n for i, n in Counter(ids).items() if n > 1}
