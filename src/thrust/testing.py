"""Helpers for tests: an embedded RocketMQ 5 server in-process or in a subprocess.

In-process, on free ports of 127.0.0.1 (state in memory only):

    async with thrust.testing.embedded_server(topics=["orders:4:FIFO", "events"], groups=["g:fifo"]) as srv:
        endpoints = srv.endpoints[0]          # "127.0.0.1:PORT"
        srv.faults.fail_next("SendMessage", "TOO_MANY_REQUESTS")
        ...
        assert srv.stats.calls["AckMessage"] == 1

On a thread of its own (its own event loop), for synchronous tests or tests that run several
`asyncio.run`s; this is what the pytest plugin's `thrust_server` fixture gives:

    with thrust.testing.ServerThread(topics=["orders"], groups=["billing"]) as srv:
        srv.endpoint                 # "127.0.0.1:PORT"
        srv.call(srv.faults.fail_next, "SendMessage", "TOO_MANY_REQUESTS")   # on the server's loop

In a subprocess (`python -m thrust.cli.main serve ...`), for tests that kill -9, pause or restart it:

    with thrust.testing.ServerProcess(brokers=2, groups=["g:max-attempts=2"]) as proc:
        proc.endpoints               # ["127.0.0.1:P", "127.0.0.1:P+1"]
        proc.stop(); proc.cont()     # SIGSTOP / SIGCONT
        proc.kill(); proc.restart()  # same ports, empty state

Both create unknown topics and consumer groups on first use unless given `auto_create=False` (`thrust
serve` needs `--auto-create` for that); without it, declare every topic and group the test uses, as a real
cluster needs them created. Groups take `NAME[:fifo][:max-attempts=N]`, as `thrust serve --group`.

This module never imports the thrust client.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, TypedDict, Unpack

from thrust.server.clock import Clock
from thrust.server.config import GroupSpec, ServerConfig, TopicSpec, parse_group, parse_topic
from thrust.server.faults import Faults, Rpc, Stats
from thrust.server.service import EmbeddedServer

__all__ = [
    "EmbeddedServer",
    "Faults",
    "GroupSpec",
    "Rpc",
    "ServerOptions",
    "ServerProcess",
    "ServerThread",
    "ServerThreadOptions",
    "Stats",
    "TopicSpec",
    "embedded_server",
]


class ServerOptions(TypedDict, total=False):
    """The `ServerConfig` fields `embedded_server()` takes as further keywords (limits and timeouts); see
    `thrust.server.config.ServerConfig` for what each means. tests/server/test_testing_options.py keeps
    this in step with ServerConfig."""

    ports: tuple[int, ...]
    tls_client_ca: bytes | None
    insecure_allow_remote: bool
    advertise_host: str | None
    broker_prefix: str
    date_time_window: float | Literal["auto"] | None
    max_inbound_message_size: int
    max_pending_polls: int
    max_concurrent_streams: int
    min_ping_interval: float
    keepalive_time: float
    keepalive_timeout: float
    idle_timeout: float
    handshake_timeout: float
    channel_expiry: float
    lite_ttl: float
    lite_subscription_quota: int
    max_lite_topic_size: int
    max_lite_topics: int


class ServerThreadOptions(ServerOptions, total=False):
    """Every keyword of `ServerThread` (those of `embedded_server()`, `faults` apart)."""

    topics: Iterable[str | TopicSpec]
    groups: Iterable[str | GroupSpec]
    brokers: int
    auto_create: bool
    credentials: Mapping[str, str] | None
    tls_cert: bytes | None
    tls_key: bytes | None
    host: str
    port: int
    default_queues: int
    transaction_check_after: float
    transaction_check_interval: float
    client_expiry: float


@contextlib.asynccontextmanager
async def embedded_server(
    *,
    topics: Iterable[str | TopicSpec] = (),
    groups: Iterable[str | GroupSpec] = (),
    brokers: int = 1,
    auto_create: bool = True,
    faults: Faults | None = None,
    credentials: Mapping[str, str] | None = None,
    tls_cert: bytes | None = None,
    tls_key: bytes | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    default_queues: int = 4,
    transaction_check_after: float = 6.0,
    transaction_check_interval: float = 6.0,
    client_expiry: float = 120.0,
    clock: Clock | None = None,
    **options: Unpack[ServerOptions],
) -> AsyncIterator[EmbeddedServer]:
    """Run an `EmbeddedServer` on the current event loop for the duration of the block.

    `topics` are `NAME[:QUEUES][:TYPE][@B1+B2]` strings or `TopicSpec`s, `groups`
    `NAME[:fifo][:max-attempts=N]` strings (as `thrust serve --group`) or `GroupSpec`s; `max-attempts=2`
    makes a message nacked twice go to `%DLQ%NAME`. `options` are further `ServerConfig` fields (limits and
    timeouts such as `channel_expiry=2.0`, `max_pending_polls=1`, `date_time_window=...`).

    Unknown topics are created on first use (`default_queues` queues, every message type but PRIORITY) and
    unknown groups on their first receive, as with `ServerProcess`; `auto_create=False` answers
    TOPIC_NOT_FOUND and CONSUMER_GROUP_NOT_FOUND for them instead, like `thrust serve` without
    `--auto-create`. The server object exposes `endpoints` (`"127.0.0.1:PORT"` per broker),
    `ports`, `brokers`, `catalog`, `faults` and `stats`. With `clock=ManualClock()`
    (`thrust.server.clock`) the brokers' timers (invisibility, redelivery, delayed messages, transaction
    checks) move only with `clock.advance(seconds)`, which applies what fell due at once.
    """
    config = _server_config(
        topics=topics,
        groups=groups,
        brokers=brokers,
        auto_create=auto_create,
        credentials=credentials,
        tls_cert=tls_cert,
        tls_key=tls_key,
        host=host,
        port=port,
        default_queues=default_queues,
        transaction_check_after=transaction_check_after,
        transaction_check_interval=transaction_check_interval,
        client_expiry=client_expiry,
        **options,
    )
    server = EmbeddedServer(config, faults=faults, clock=clock)
    await server.start()
    try:
        yield server
    finally:
        await server.stop(grace=None)


def _server_config(
    *,
    topics: Iterable[str | TopicSpec] = (),
    groups: Iterable[str | GroupSpec] = (),
    brokers: int = 1,
    auto_create: bool = True,
    credentials: Mapping[str, str] | None = None,
    tls_cert: bytes | None = None,
    tls_key: bytes | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    default_queues: int = 4,
    transaction_check_after: float = 6.0,
    transaction_check_interval: float = 6.0,
    client_expiry: float = 120.0,
    **options: Unpack[ServerOptions],
) -> ServerConfig:
    return ServerConfig(
        host=host,
        port=port,
        brokers=brokers,
        auto_create_topics=auto_create,
        auto_create_groups=auto_create,
        default_queues=default_queues,
        topics=tuple(parse_topic(t) for t in topics),
        groups=tuple(parse_group(g) for g in groups),
        credentials=dict(credentials or {}),
        tls_cert=tls_cert,
        tls_key=tls_key,
        transaction_check_after=transaction_check_after,
        transaction_check_interval=transaction_check_interval,
        client_expiry=client_expiry,
        **options,
    )


class ServerThread:
    """An `EmbeddedServer` on its own event loop in a daemon thread, started by the constructor.

    The keyword arguments are `embedded_server`'s (topics, groups, brokers, auto_create, faults, ...).
    Tests on any thread, with or without their own event loop, connect to `endpoint`. The server's state
    (`faults`, `catalog`, `stats`) belongs to its loop: change it through `call`, which runs a function
    there and returns its result. `close()` (or leaving the `with` block) stops it; it is idempotent.
    """

    def __init__(self, *, faults: Faults | None = None, **options: Unpack[ServerThreadOptions]) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="thrust-embedded-server", daemon=True
        )
        self._thread.start()
        self.server = EmbeddedServer(_server_config(**options), faults=faults)
        self._closed = False
        try:
            self._run(self.server.start())
        except BaseException:
            self._stop_loop()
            raise

    @property
    def endpoints(self) -> list[str]:
        """`"127.0.0.1:PORT"` per broker; the first is the access point."""
        return list(self.server.endpoints)

    @property
    def endpoint(self) -> str:
        return self.server.endpoints[0]

    @property
    def faults(self) -> Faults:
        return self.server.faults

    @property
    def stats(self) -> Stats:
        return self.server.stats

    def _run(self, coro: Any, timeout: float = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)` on the server's loop; its result (or its exception, raised here)."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def invoke() -> None:
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # handed to the caller's thread
                future.set_exception(exc)

        self._loop.call_soon_threadsafe(invoke)
        return future.result(30)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self.server.stop(grace=None))
        finally:
            self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> ServerThread:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class ServerProcess:
    """`thrust serve` in a child process.

    Unknown topics and groups are created on first use, as with `embedded_server()` (this passes
    `--auto-create`; `thrust serve` itself answers TOPIC_NOT_FOUND and CONSUMER_GROUP_NOT_FOUND unless
    given it). `auto_create=False` turns that off.

    Args:
        args: extra `thrust serve` arguments, e.g. `["--topic", "t:8", "--fault-fail", "SendMessage:42900"]`;
            they come after the flags the other arguments make.
        topics: topics to create, `NAME[:QUEUES][:TYPE][@B1+B2]` (`--topic`).
        groups: consumer groups to create, `NAME[:fifo][:max-attempts=N]` (`--group`).
        auto_create: create unknown topics and groups on first use (default True).
        brokers: number of brokers.
        host: the bind address.
        port: the first port; 0 picks free ports (kept across `restart()`).
        start: start at once (else call `start()`).
        startup_timeout: seconds to wait for the `listening on` lines.
        env: extra environment variables for the child.

    Attributes:
        ports / endpoints: the bound ports and `host:port` strings, in broker order.
        log_path: the child's stderr (its log).
    """

    def __init__(
        self,
        args: Sequence[str] = (),
        *,
        topics: Iterable[str] = (),
        groups: Iterable[str] = (),
        auto_create: bool = True,
        brokers: int = 1,
        host: str = "127.0.0.1",
        port: int = 0,
        start: bool = True,
        startup_timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        flags: list[str] = ["--auto-create"] if auto_create else []
        # Parsed here as well, so that a bad spec raises ValueError in the caller rather than a child
        # that fails to start.
        for topic in topics:
            parse_topic(topic)
            flags += ["--topic", topic]
        for group in groups:
            parse_group(group)
            flags += ["--group", group]
        self.args = flags + list(args)
        self.brokers = brokers
        self.host = host
        self.ports: list[int] = []
        self._port = port
        self.startup_timeout = startup_timeout
        self._env = dict(env or {})
        self._dir = tempfile.TemporaryDirectory(prefix="thrust-serve-")
        self.log_path = Path(self._dir.name) / "serve.log"
        self._log = open(self.log_path, "ab")  # closed in close()
        self.process: subprocess.Popen[bytes] | None = None
        if start:
            try:
                self.start()
            except BaseException:
                # The caller never gets the object, so nobody else could close the log and the folder.
                self.close()
                raise

    @property
    def endpoints(self) -> list[str]:
        """`host:port` per broker."""
        return [f"{self.host}:{port}" for port in self.ports]

    @property
    def pid(self) -> int:
        """The child's process id."""
        if self.process is None:
            raise RuntimeError("not started")
        return self.process.pid

    def command(self) -> list[str]:
        """The command line of the child."""
        cmd = [sys.executable, "-m", "thrust.cli.main", "serve", "--host", self.host]
        if self.ports:
            cmd += ["--ports", ",".join(str(p) for p in self.ports)]
        else:
            cmd += ["--port", str(self._port), "--brokers", str(self.brokers)]
        return cmd + self.args

    def start(self) -> None:
        """Start the child and wait for its `listening on HOST:PORT` lines."""
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("already running")
        env = dict(os.environ)
        env.update(self._env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.process = subprocess.Popen(
            self.command(), stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL, env=env
        )
        ports = self._read_ports(self.process)
        self.ports = ports
        # Keep draining stdout so the child can never block on a full pipe.
        threading.Thread(target=_drain, args=(self.process,), daemon=True).start()

    def _read_ports(self, process: subprocess.Popen[bytes]) -> list[int]:
        assert process.stdout is not None
        ports: list[int] = []
        box: list[BaseException] = []

        def read() -> None:
            try:
                assert process.stdout is not None
                while len(ports) < self.brokers:
                    line = process.stdout.readline()
                    if not line:
                        return
                    text = line.decode("utf-8", "replace").strip()
                    if text.startswith("listening on "):
                        ports.append(int(text.rsplit(":", 1)[1]))
            except BaseException as exc:  # pragma: no cover - surfaced below
                box.append(exc)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        reader.join(self.startup_timeout)
        if len(ports) < self.brokers:
            self.kill()
            log = self.log_path.read_text(errors="replace")[-4000:]
            raise RuntimeError(f"thrust serve did not start (got ports {ports}); log:\n{log}") from (
                box[0] if box else None
            )
        return ports

    def terminate(self, timeout: float = 10.0) -> int | None:
        """SIGTERM and wait; the exit code."""
        return self._signal_and_wait(signal.SIGTERM, timeout)

    def kill(self) -> int | None:
        """SIGKILL (kill -9) and wait; the exit code."""
        return self._signal_and_wait(signal.SIGKILL, 10.0)

    def stop(self) -> None:
        """SIGSTOP: freeze the server (connections stay open, nothing is answered)."""
        self._signal(signal.SIGSTOP)

    def cont(self) -> None:
        """SIGCONT after `stop()`."""
        self._signal(signal.SIGCONT)

    def restart(self, *, kill: bool = True) -> None:
        """Kill (or terminate) the child and start a fresh one on the same ports (state is lost)."""
        if self.process is not None and self.process.poll() is None:
            if kill:
                self.kill()
            else:
                self.terminate()
        deadline = time.monotonic() + self.startup_timeout
        while True:
            try:
                self.start()
                return
            except RuntimeError:
                # The old ports may linger briefly; retry until the deadline.
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def _signal(self, sig: signal.Signals) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(sig)

    def _signal_and_wait(self, sig: signal.Signals, timeout: float) -> int | None:
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            if sig != signal.SIGKILL:
                process.send_signal(signal.SIGCONT)
            process.send_signal(sig)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stdout is not None:
            process.stdout.close()
        return process.returncode

    def close(self) -> None:
        """Stop the child (SIGTERM, then SIGKILL) and remove its log."""
        self.terminate()
        self._log.close()
        self._dir.cleanup()

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _drain(process: subprocess.Popen[bytes]) -> None:
    stdout = process.stdout
    if stdout is None:
        return
    with contextlib.suppress(ValueError, OSError):
        while stdout.read(65536):
            pass
