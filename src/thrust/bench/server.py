"""`thrust serve` in a child process of its own session, for `thrust perf` and `thrust bench`.

Unlike `thrust.testing.ServerProcess`, the child is started in a new session (`start_new_session`), so a
Ctrl-C at the terminal reaches only the perf tool: it can close its clients against a live server and
print its summary before it stops the server itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from thrust.bench.lag import LagWindow, parse_line

__all__ = ["BenchServer", "ControlServer"]

_LISTENING = re.compile(rb"listening on (\S+):(\d+)")


class BenchServer:
    """`python -m thrust.cli.main serve --port 0 ARGS...`; `endpoints` once it listens. `env` is added to
    the child's environment (secrets such as `THRUST_SECRET_KEY` go there, not in `args`)."""

    def __init__(
        self,
        args: Sequence[str] = (),
        *,
        brokers: int = 1,
        startup_timeout: float = 30.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        cmd = [sys.executable, "-m", "thrust.cli.main", "serve", "--host", "127.0.0.1", "--port", "0"]
        cmd += ["--brokers", str(brokers), *args]
        self._extra_env = dict(env or {})
        self._spawn(cmd, brokers, startup_timeout, stdin=subprocess.DEVNULL)
        threading.Thread(target=self._drain, daemon=True).start()

    def _spawn(self, cmd: list[str], brokers: int, startup_timeout: float, *, stdin: int) -> None:
        self._log = tempfile.TemporaryFile()
        self._lag = LagWindow()
        self._lag_lock = threading.Lock()
        self._lag_seen = False
        env = dict(os.environ, PYTHONUNBUFFERED="1", **getattr(self, "_extra_env", {}))
        self.process = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=self._log,
            stdin=stdin,
            env=env,
            start_new_session=True,
        )
        self.endpoints: list[str] = []
        assert self.process.stdout is not None
        deadline = time.monotonic() + startup_timeout
        stdout = self.process.stdout
        while len(self.endpoints) < brokers:
            line = stdout.readline()
            if not line:
                self.close()
                raise RuntimeError(f"thrust serve exited before listening:\n{self.log()}")
            match = _LISTENING.search(line)
            if match:
                self.endpoints.append(f"{match.group(1).decode()}:{int(match.group(2))}")
            if time.monotonic() > deadline:
                self.close()
                raise RuntimeError("thrust serve did not start in time")

    @property
    def pid(self) -> int:
        return self.process.pid

    def _drain(self) -> None:
        # Read line by line: with `thrust serve --report-lag`, the child writes its loop lag and GC pauses
        # as `thrust-lag` lines, gathered here for `take_lag`.
        stdout = self.process.stdout
        if stdout is not None:
            with contextlib.suppress(ValueError, OSError):
                for raw in stdout:
                    samples = parse_line(raw.decode(errors="replace"))
                    if samples is not None:
                        with self._lag_lock:
                            self._lag.add(*samples)
                            self._lag_seen = True

    def take_lag(self) -> LagWindow | None:
        """The server's lag samples and GC pauses since the last call; None before any arrived (the server
        was started without `--report-lag`, or has not reported yet)."""
        with self._lag_lock:
            return self._lag.take() if self._lag_seen else None

    def log(self) -> str:
        with contextlib.suppress(OSError, ValueError):
            self._log.seek(0)
            return self._log.read()[-4000:].decode(errors="replace")
        return ""

    def close(self) -> None:
        if self.process.stdin is not None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self.process.stdout is not None:
            with contextlib.suppress(OSError):
                self.process.stdout.close()
        self._log.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class ControlServer(BenchServer):
    """`thrust.bench.control_server` in a child process: the embedded server plus a JSON command channel
    (faults, backlog fill, counters, CPU time) on its stdin/stdout."""

    def __init__(self, spec: dict[str, Any], *, startup_timeout: float = 30.0) -> None:
        cmd = [sys.executable, "-m", "thrust.bench.control_server", json.dumps(spec)]
        self._spawn(cmd, int(spec.get("brokers", 1)), startup_timeout, stdin=subprocess.PIPE)

    def command(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one command and wait for its reply (blocking; takes well under a millisecond when idle)."""
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write((json.dumps({"op": op, **fields}) + "\n").encode())
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"control server exited:\n{self.log()}")
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"control server: {reply['error']}")
        return reply
