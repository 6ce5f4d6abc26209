"""In-process asyncio TCP fault proxy (fault tool (b) of docs/reliability.md §3, Toxiproxy-like).

    async with FaultProxy(target=("127.0.0.1", server_port)) as proxy:
        channel = grpc.aio.insecure_channel(proxy.endpoint)
        proxy.set_mode(Blackhole())            # every live and new connection goes half-open
        proxy.set_mode(Latency(0.2, 0.05), scope="new")
        proxy.set_mode(PASS)

Modes: `Pass`, `Latency` (fixed + jitter per chunk, order kept), `Blackhole` (read and drop, forward
nothing, never close: the half-open TCP of F5 in docs/reliability.md), `Reset` (RST: SO_LINGER 0 then close),
`Refuse` (stop listening, so connects get ECONNREFUSED; or accept-and-close), `Bandwidth` (bytes/s
cap), `Slicer` (small chunks with small delays). Direction-aware modes take `direction`: "upstream"
is client -> server, "downstream" server -> client.

Each connection runs one reader and one writer task per direction joined by a queue bounded in
chunks (each chunk <= `chunk_size`), and every write is followed by `drain()`, so a slow side
pushes back through TCP instead of growing memory. Every task is owned and cancelled on close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import struct
from collections.abc import Coroutine
from dataclasses import dataclass, field
from enum import StrEnum
from types import TracebackType
from typing import Any, Literal

__all__ = [
    "PASS",
    "Bandwidth",
    "Blackhole",
    "Direction",
    "FaultProxy",
    "Latency",
    "Mode",
    "Pass",
    "ProxyStats",
    "Refuse",
    "Reset",
    "Slicer",
]

log = logging.getLogger("thrust.reliability.proxy")

Scope = Literal["all", "new"]


class Direction(StrEnum):
    UPSTREAM = "upstream"  # client -> server
    DOWNSTREAM = "downstream"  # server -> client
    BOTH = "both"


@dataclass(frozen=True)
class Mode:
    """Base of all modes; `direction` says which byte stream a per-chunk mode affects."""

    direction: Direction = field(default=Direction.BOTH, kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.direction, Direction):
            object.__setattr__(self, "direction", Direction(self.direction))

    def applies(self, direction: Direction) -> bool:
        return self.direction is Direction.BOTH or self.direction is direction


@dataclass(frozen=True)
class Pass(Mode):
    pass


@dataclass(frozen=True)
class Latency(Mode):
    """Each chunk is forwarded `fixed + uniform(0, jitter)` seconds after it arrived, in order."""

    fixed: float = 0.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.fixed < 0 or self.jitter < 0:
            raise ValueError("latency and jitter must be >= 0")


@dataclass(frozen=True)
class Blackhole(Mode):
    """Read and discard; forward neither bytes nor EOF, close nothing."""


@dataclass(frozen=True)
class Reset(Mode):
    """RST every affected connection (SO_LINGER 0 then close); new connections are reset on accept."""


@dataclass(frozen=True)
class Refuse(Mode):
    """New connections fail: with `stop_listening` the port is closed (ECONNREFUSED), otherwise
    they are accepted and closed at once. With scope "all" live connections are closed too."""

    stop_listening: bool = True


@dataclass(frozen=True)
class Bandwidth(Mode):
    bytes_per_second: int = 64 * 1024

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.bytes_per_second <= 0:
            raise ValueError("bytes_per_second must be > 0")


@dataclass(frozen=True)
class Slicer(Mode):
    """Forward in random slices of `min_size..max_size` bytes with `delay` seconds between them."""

    min_size: int = 1
    max_size: int = 64
    delay: float = 1e-5

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.min_size <= self.max_size or self.delay < 0:
            raise ValueError("need 1 <= min_size <= max_size and delay >= 0")


PASS = Pass()


@dataclass(frozen=True)
class ProxyStats:
    accepted: int  # connections accepted from clients
    active: int  # connections currently open
    rejected: int  # closed or reset right at accept (Reset / Refuse without stop_listening)
    reset: int  # live connections reset by the proxy
    upstream_failures: int  # the target refused or timed out
    bytes_up: int  # forwarded client -> server
    bytes_down: int  # forwarded server -> client
    dropped_up: int  # discarded by Blackhole
    dropped_down: int


_EOF = b""
_Chunk = tuple[float, bytes]


def _set_linger_zero(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


class _Conn:
    __slots__ = ("changed", "client", "mode", "task", "upstream")

    def __init__(self, client: asyncio.StreamWriter, mode: Mode) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.mode = mode
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def set_mode(self, mode: Mode) -> None:
        self.mode = mode
        # Wake everything waiting on the old mode (e.g. an EOF held back by Blackhole).
        self.changed.set()
        self.changed = asyncio.Event()

    def writers(self) -> list[asyncio.StreamWriter]:
        return [w for w in (self.client, self.upstream) if w is not None]

    def abort(self, rst: bool) -> None:
        for w in self.writers():
            if rst:
                _set_linger_zero(w)
            w.transport.abort()
        if self.task is not None:
            self.task.cancel()


class FaultProxy:
    """A TCP proxy on `host` (127.0.0.1) forwarding to `target`, with switchable faults."""

    def __init__(
        self,
        target: tuple[str, int],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        mode: Mode = PASS,
        chunk_size: int = 64 * 1024,
        queue_chunks: int = 16,
        connect_timeout: float = 5.0,
        seed: int | None = None,
    ) -> None:
        if chunk_size <= 0 or queue_chunks <= 0:
            raise ValueError("chunk_size and queue_chunks must be > 0")
        self._target = target
        self._host = host
        self._port = port
        self._mode = mode  # applied to new connections
        self._chunk = chunk_size
        self._queue_chunks = queue_chunks
        self._connect_timeout = connect_timeout
        self._rng = random.Random(seed)
        self._sock: socket.socket | None = None  # the listening socket, None while refusing
        self._server: asyncio.Server | None = None
        self._conns: set[_Conn] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._accepted = self._rejected = self._reset = self._upstream_failures = 0
        self._bytes = {Direction.UPSTREAM: 0, Direction.DOWNSTREAM: 0}
        self._dropped = {Direction.UPSTREAM: 0, Direction.DOWNSTREAM: 0}

    # Lifecycle -------------------------------------------------------------------------------
    async def start(self) -> FaultProxy:
        if self._sock is not None or self._closed:
            raise RuntimeError("the proxy is already started or closed")
        task = self._open_listener()
        await task
        if isinstance(self._mode, Refuse) and self._mode.stop_listening:
            self._stop_listening()
        return self

    async def __aenter__(self) -> FaultProxy:
        return await self.start()

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop listening, abort every connection and cancel and await every task started."""
        if self._closed:
            return
        self._closed = True
        self._stop_listening()
        for conn in list(self._conns):
            conn.abort(rst=False)
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # Introspection ---------------------------------------------------------------------------
    @property
    def address(self) -> tuple[str, int]:
        if self._port == 0:
            raise RuntimeError("the proxy is not started")
        return (self._host, self._port)

    @property
    def endpoint(self) -> str:
        """`host:port`, as a gRPC target or a RocketMQ endpoint string."""
        host, port = self.address
        return f"{host}:{port}"

    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def target(self) -> tuple[str, int]:
        return self._target

    @property
    def listening(self) -> bool:
        return self._sock is not None

    def stats(self) -> ProxyStats:
        return ProxyStats(
            accepted=self._accepted,
            active=len(self._conns),
            rejected=self._rejected,
            reset=self._reset,
            upstream_failures=self._upstream_failures,
            bytes_up=self._bytes[Direction.UPSTREAM],
            bytes_down=self._bytes[Direction.DOWNSTREAM],
            dropped_up=self._dropped[Direction.UPSTREAM],
            dropped_down=self._dropped[Direction.DOWNSTREAM],
        )

    # Control ---------------------------------------------------------------------------------
    def set_mode(self, mode: Mode, *, scope: Scope = "all") -> None:
        """Switch the fault for new connections, and for live ones too when `scope` is "all"."""
        if self._closed:
            raise RuntimeError("the proxy is closed")
        if scope not in ("all", "new"):
            raise ValueError(f"scope must be 'all' or 'new', not {scope!r}")
        self._mode = mode
        refusing = isinstance(mode, Refuse) and mode.stop_listening
        if refusing:
            self._stop_listening()
        elif self._sock is None and self._port != 0:
            self._open_listener()
        if scope == "all":
            if isinstance(mode, Reset):
                self.reset_connections()
            elif isinstance(mode, Refuse):
                self.close_connections()
            else:
                for conn in self._conns:
                    conn.set_mode(mode)

    def reset_connections(self) -> int:
        """One-shot: RST every live connection (both sides); returns how many."""
        conns = list(self._conns)
        for conn in conns:
            self._reset += 1
            self._drop(conn)
            conn.abort(rst=True)
        return len(conns)

    def close_connections(self) -> int:
        """One-shot: close every live connection without RST (the peers see EOF)."""
        conns = list(self._conns)
        for conn in conns:
            self._drop(conn)
            for w in conn.writers():
                w.close()
            if conn.task is not None:
                conn.task.cancel()
        return len(conns)

    def retarget(self, target: tuple[str, int]) -> None:
        """Point new connections at `target` and drop live ones (Toxiproxy upstream change, F17)."""
        self._target = target
        self.close_connections()

    # Internals -------------------------------------------------------------------------------
    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _open_listener(self) -> asyncio.Task[None]:
        # Bound and listening before this returns, so a client connecting right after
        # set_mode(PASS) is queued in the backlog rather than refused; accepting starts in a task.
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        # IPPROTO_TCP, not 0: the sockets it accepts inherit the proto, and asyncio turns Nagle's algorithm
        # off only on a socket whose proto is IPPROTO_TCP (as it does on the upstream side). With Nagle on,
        # the tail of a server stream waited here for the client's delayed ACK (about 40 ms) whenever the
        # client had nothing to send, which bounded bench scenario 1 through this proxy by that and not by
        # either client (docs/benchmarks.md, "One hand-off per receive under a backlog").
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            # Rebinding the same port after Refuse must not trip over TIME_WAIT sockets.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self._host, self._port))
            sock.listen(128)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self._port = sock.getsockname()[1]
        return self._spawn(self._accept_on(sock))

    async def _accept_on(self, sock: socket.socket) -> None:
        if self._sock is not sock:  # refused again before this task ran; the socket is closed
            return
        server = await asyncio.start_server(self._on_accept, sock=sock, limit=self._chunk)
        if self._sock is not sock:  # stopped (or closed) while starting
            server.close()
            return
        self._server = server

    def _stop_listening(self) -> None:
        sock, self._sock = self._sock, None
        if self._server is not None:
            # close() shuts the listening socket at once; live connections are not touched here.
            self._server.close()
            self._server = None
        elif sock is not None:
            sock.close()

    def _drop(self, conn: _Conn) -> None:
        self._conns.discard(conn)

    def _on_accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # A plain callback (not a coroutine) so asyncio starts no task we do not own.
        self._accepted += 1
        mode = self._mode
        if self._closed or isinstance(mode, Reset | Refuse):
            self._rejected += 1
            if isinstance(mode, Reset):
                _set_linger_zero(writer)
                writer.transport.abort()
            else:
                writer.close()
            return
        conn = _Conn(writer, mode)
        self._conns.add(conn)
        conn.task = self._spawn(self._serve(conn, reader))

    async def _serve(self, conn: _Conn, client_reader: asyncio.StreamReader) -> None:
        try:
            try:
                up_reader, up_writer = await asyncio.wait_for(
                    asyncio.open_connection(*self._target, limit=self._chunk), self._connect_timeout
                )
            except (OSError, TimeoutError) as exc:
                self._upstream_failures += 1
                log.debug("upstream %s:%s failed: %r", *self._target, exc)
                conn.abort(rst=True)
                return
            conn.upstream = up_writer
            if conn not in self._conns:  # reset/closed while connecting
                up_writer.transport.abort()
                return
            async with asyncio.TaskGroup() as tg:
                for direction, src, dst in (
                    (Direction.UPSTREAM, client_reader, up_writer),
                    (Direction.DOWNSTREAM, up_reader, conn.client),
                ):
                    queue: asyncio.Queue[_Chunk] = asyncio.Queue(self._queue_chunks)
                    tg.create_task(self._read(conn, direction, src, queue))
                    tg.create_task(self._write(conn, direction, dst, queue))
        finally:
            self._drop(conn)
            for w in conn.writers():
                w.close()

    async def _read(
        self,
        conn: _Conn,
        direction: Direction,
        src: asyncio.StreamReader,
        queue: asyncio.Queue[_Chunk],
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                data = await src.read(self._chunk)
            except OSError:
                # The peer reset us: pass the reset on to the other side.
                self._drop(conn)
                conn.abort(rst=True)
                return
            await queue.put((loop.time(), data))  # bounded: waits when the writer is behind
            if not data:
                return

    async def _write(
        self,
        conn: _Conn,
        direction: Direction,
        dst: asyncio.StreamWriter,
        queue: asyncio.Queue[_Chunk],
    ) -> None:
        loop = asyncio.get_running_loop()
        due = 0.0  # latency: chunks never overtake each other
        next_slot = 0.0  # bandwidth: earliest time the next byte may leave
        while True:
            arrived, data = await queue.get()
            mode = conn.mode if conn.mode.applies(direction) else PASS
            if not data:
                # EOF: a blackhole holds it back (half-open), anything else half-closes.
                while isinstance(conn.mode, Blackhole) and conn.mode.applies(direction):
                    await conn.changed.wait()
                if dst.can_write_eof() and not dst.is_closing():
                    with contextlib.suppress(OSError):
                        dst.write_eof()
                return
            try:
                if isinstance(mode, Blackhole):
                    self._dropped[direction] += len(data)
                    continue
                if isinstance(mode, Latency):
                    delay = mode.fixed + (self._rng.uniform(0.0, mode.jitter) if mode.jitter else 0.0)
                    due = max(due, arrived + delay)
                    wait = due - loop.time()
                    if wait > 0:
                        await asyncio.sleep(wait)
                    await self._send(dst, direction, data)
                elif isinstance(mode, Bandwidth):
                    piece = max(1, mode.bytes_per_second // 20)
                    for i in range(0, len(data), piece):
                        part = data[i : i + piece]
                        now = loop.time()
                        next_slot = max(next_slot, now)
                        if next_slot > now:
                            await asyncio.sleep(next_slot - now)
                        await self._send(dst, direction, part)
                        next_slot += len(part) / mode.bytes_per_second
                elif isinstance(mode, Slicer):
                    i = 0
                    while i < len(data):
                        n = self._rng.randint(mode.min_size, mode.max_size)
                        await self._send(dst, direction, data[i : i + n])
                        i += n
                        if i < len(data):
                            await asyncio.sleep(mode.delay)
                else:
                    await self._send(dst, direction, data)
            except OSError:
                self._drop(conn)
                conn.abort(rst=True)
                return

    async def _send(self, dst: asyncio.StreamWriter, direction: Direction, data: bytes) -> None:
        dst.write(data)
        await dst.drain()
        self._bytes[direction] += len(data)
