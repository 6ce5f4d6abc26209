"""gRPC core's own log lines (absl: `I1202 ... Handshake failed`, `E1202 ... add_port.cc ... Address already
in use`) stay out of the `thrust` command's stderr, where thrust reports the failure itself in one line,
unless the user asked for them with GRPC_VERBOSITY or GRPC_TRACE."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from thrust.testing import ServerThread

THRUST = Path(sys.executable).parent / "thrust"  # the console script of this venv
COMMANDS = {"console script": [str(THRUST)], "python -m": [sys.executable, "-m", "thrust.cli.main"]}


def _env(**extra: str) -> dict[str, str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("GRPC_VERBOSITY", "GRPC_TRACE") and not k.startswith("ROCKETMQ_")
    }
    return {**base, **extra}


def _run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.mark.parametrize("how", sorted(COMMANDS))
def test_serve_on_a_busy_port_prints_thrusts_line_only(busy_port: int, how: str) -> None:
    done = _run([*COMMANDS[how], "serve", "--port", str(busy_port)], _env())
    assert done.returncode == 1
    assert done.stderr.splitlines() == [f"thrust serve: error: cannot bind 127.0.0.1:{busy_port}"], (
        done.stderr
    )


def test_a_users_grpc_verbosity_is_kept(busy_port: int) -> None:
    done = _run([str(THRUST), "serve", "--port", str(busy_port)], _env(GRPC_VERBOSITY="ERROR"))
    assert done.returncode == 1
    assert "add_port" in done.stderr and "Address already in use" in done.stderr, done.stderr


def test_a_tls_handshake_failure_is_one_line() -> None:
    with ServerThread(topics=["t"]) as server:  # plaintext: the TLS handshake fails
        cmd = [str(THRUST), "send", "--tls", "--request-timeout", "1", "--endpoints", server.endpoint]
        done = _run([*cmd, "-t", "t", "body"], _env())
    assert done.returncode == 1
    # One line, thrust's own: a call waits for its channel's connection within its deadline and starts
    # only on a READY channel (`RpcClient._connected`), so the error names the unreachable endpoint rather
    # than gRPC's handshake detail, which only a started call reports.
    [line] = done.stderr.splitlines()
    assert line.startswith("thrust send: ConnectionError: ") and server.endpoint in line, line


def test_a_library_process_keeps_grpcs_default() -> None:
    code = "import os, thrust, thrust.producer; print(os.environ.get('GRPC_VERBOSITY'))"
    done = _run([sys.executable, "-c", code], _env())
    assert done.returncode == 0 and done.stdout.strip() == "None", done.stderr
