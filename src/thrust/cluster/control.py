"""Kill, terminate and restart a cluster's JVMs from another process.

The JVMs are children of the process that started them (`thrust cluster`), and only it can start one
again with the same command, ports and store. So that process serves a Unix socket in the cluster's
state folder (`RocketMQCluster.serve_control`), and `ClusterControl` asks it: one JSON request per
connection, one JSON answer. `thrust cluster --exec` serves it and names it in `$THRUST_ROCKETMQ`
(`ClusterInfo.control`): that is how the fault tests restart the proxy of the suite's shared cluster.
The socket sits in the state folder (mode 0700, `tempfile.mkdtemp`), so only its owner reaches it.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from pathlib import Path
from typing import Any, Protocol

from thrust.cluster.errors import ClusterError

__all__ = ["ClusterControl", "ControlServer", "Controllable"]

_OPS = ("kill", "terminate", "restart", "pid", "returncode")
_MAX_REQUEST = 4096


class Controllable(Protocol):
    """The operations `ControlServer` serves: `RocketMQCluster`'s. A protocol rather than the class, so
    that this module does not import `process`, which imports it (`serve_control`)."""

    def kill(self, name: str) -> int | None: ...

    def terminate(self, name: str, grace: float = ...) -> int | None: ...

    def restart(self, name: str, *, timeout: float = ...) -> float: ...

    def pid(self, name: str) -> int: ...

    def returncode(self, name: str) -> int | None: ...


class ControlServer:
    """Serves `_OPS` of `cluster` on `path`, one thread per connection (a restart blocks for its boot)."""

    def __init__(self, cluster: Controllable, path: Path) -> None:
        self.cluster = cluster
        self.path = path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(path))
        self._sock.listen(8)
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="thrust-cluster-control", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed
            # Daemon: a restart in progress must not keep a finished `thrust cluster` alive.
            threading.Thread(
                target=self._serve, args=(conn,), name="thrust-cluster-control-conn", daemon=True
            ).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                raw = _read_line(conn)
                request = json.loads(raw)
                answer: dict[str, Any] = {"ok": True, "value": self._run(request)}
            except Exception as exc:  # every failure goes back to the asking process, typed by name
                answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps(answer).encode() + b"\n")

    def _run(self, request: dict[str, Any]) -> Any:
        op, name = request.get("op"), request.get("name")
        if op not in _OPS or not isinstance(name, str):
            raise ValueError(f"op must be one of {_OPS} with a process name, got {request!r}")
        if op == "kill":
            return self.cluster.kill(name)
        if op == "terminate":
            return self.cluster.terminate(name, grace=float(request.get("grace", 30.0)))
        if op == "restart":
            return self.cluster.restart(name, timeout=float(request.get("timeout", 120.0)))
        if op == "pid":
            return self.cluster.pid(name)
        return self.cluster.returncode(name)

    def close(self) -> None:
        self._closed.set()
        # shutdown() wakes the accept() that close() alone leaves blocked on Linux.
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(5)
        with contextlib.suppress(OSError):
            self.path.unlink()


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(_MAX_REQUEST)
        if not chunk:
            break
        data += chunk
        if len(data) > _MAX_REQUEST:
            raise ValueError("request too long")
    return data


class ClusterControl:
    """The `RocketMQCluster` process operations, asked of the process that owns the JVMs.

    Names are "namesrv", "proxy", "broker-a", "broker-b". Each call blocks until the owner has done it
    (a restart: until the JVM's boot line and, for the proxy, a routed QueryRoute). A failure there
    raises `ClusterError` here with the owner's message.
    """

    def __init__(self, path: str) -> None:
        self.path = path

    def _ask(self, op: str, name: str, wait: float, **extra: float) -> Any:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(wait + 30.0)  # the owner bounds the operation itself; this only ends a hang
            try:
                conn.connect(self.path)
                conn.sendall(json.dumps({"op": op, "name": name, **extra}).encode() + b"\n")
                raw = b""
                while not raw.endswith(b"\n"):
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    raw += chunk
            except OSError as exc:
                raise ClusterError(f"cluster control at {self.path}: {op} {name}: {exc}") from exc
        if not raw:
            raise ClusterError(f"cluster control at {self.path}: {op} {name}: no answer")
        answer = json.loads(raw)
        if not answer.get("ok"):
            raise ClusterError(f"{op} {name}: {answer.get('error')}")
        return answer.get("value")

    def kill(self, name: str) -> int | None:
        """SIGKILL `name` and wait for it to exit; its exit status."""
        value = self._ask("kill", name, 30.0)
        return None if value is None else int(value)

    def terminate(self, name: str, grace: float = 30.0) -> int | None:
        """SIGTERM `name`, SIGKILL after `grace` seconds; its exit status."""
        value = self._ask("terminate", name, grace, grace=grace)
        return None if value is None else int(value)

    def restart(self, name: str, *, timeout: float = 120.0) -> float:
        """Start `name` again (same command, ports and store); seconds until its boot line."""
        return float(self._ask("restart", name, timeout, timeout=timeout))

    def pid(self, name: str) -> int:
        return int(self._ask("pid", name, 5.0))

    def returncode(self, name: str) -> int | None:
        value = self._ask("returncode", name, 5.0)
        return None if value is None else int(value)
