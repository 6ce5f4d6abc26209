"""`thrust serve` in a child process of its own session, for `thrust perf` and `thrust bench`.

Unlike `thrust.testing.ServerProcess`, the child is started in a new session (`start_new_session`), so a
Ctrl-C at the terminal reaches only the perf tool: it can close its clients against a live server and
print its summary before it stops the server itself.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from types import TracebackType

__all__ = ["BenchServer"]

_LISTENING = re.compile(rb"listening on (\S+):(\d+)")


class BenchServer:
    """`python -m thrust.cli.main serve --port 0 ARGS...`; `endpoints` once it listens."""

    def __init__(self, args: Sequence[str] = (), *, brokers: int = 1, startup_timeout: float = 30.0) -> None:
        self._log = tempfile.TemporaryFile()
        cmd = [sys.executable, "-m", "thrust.cli.main", "serve", "--host", "127.0.0.1", "--port", "0"]
        cmd += ["--brokers", str(brokers), *args]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.process = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=self._log,
            stdin=subprocess.DEVNULL,
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
        threading.Thread(target=self._drain, daemon=True).start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _drain(self) -> None:
        stdout = self.process.stdout
        if stdout is not None:
            with contextlib.suppress(ValueError, OSError):
                while stdout.read(65536):
                    pass

    def log(self) -> str:
        with contextlib.suppress(OSError, ValueError):
            self._log.seek(0)
            return self._log.read()[-4000:].decode(errors="replace")
        return ""

    def close(self) -> None:
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

    def __enter__(self) -> BenchServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
