"""FaultProxy against a local asyncio echo server: each mode asserted by what the client sees.

Timing is only ever asserted as a generous lower bound that the mode itself guarantees (a sleep
never wakes early) or as "did not finish" with a margin of orders of magnitude.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.support import TIMER_SLACK, run, until
from thrust.reliability.proxy import (
    PASS,
    Bandwidth,
    Blackhole,
    Direction,
    FaultProxy,
    Latency,
    Refuse,
    Reset,
    Slicer,
)


class Echo:
    """Echo server that tags replies with `prefix` and remembers how its connections ended."""

    def __init__(self, prefix: bytes = b"", read: bool = True) -> None:
        self.prefix = prefix
        self.read = read
        self.reads = 0
        self.resets = 0
        self.eofs = 0
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    @property
    def address(self) -> tuple[str, int]:
        assert self.server is not None
        host, port = self.server.sockets[0].getsockname()[:2]
        return (host, port)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        if not self.read:
            await asyncio.Event().wait()  # a sink that never reads: TCP backpressure only
        try:
            while data := await reader.read(65536):
                self.reads += 1
                writer.write(self.prefix + data)
                await writer.drain()
            self.eofs += 1
        except ConnectionResetError:
            self.resets += 1
        finally:
            writer.close()


@contextlib.asynccontextmanager
async def echo_server(prefix: bytes = b"", read: bool = True) -> AsyncIterator[Echo]:
    echo = Echo(prefix, read)
    tasks: set[asyncio.Task[None]] = set()

    def accept(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        task = asyncio.get_running_loop().create_task(echo.handle(r, w))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    echo.server = await asyncio.start_server(accept, "127.0.0.1", 0)
    try:
        yield echo
    finally:
        echo.server.close()
        for w in echo.writers:
            w.transport.abort()
        for t in list(tasks):
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@contextlib.asynccontextmanager
async def connect(proxy: FaultProxy) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_connection(*proxy.address)
    try:
        yield reader, writer
    finally:
        writer.transport.abort()


async def roundtrip(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes, expect: bytes | None = None
) -> bytes:
    writer.write(data)
    await writer.drain()
    want = expect if expect is not None else data
    return await asyncio.wait_for(reader.readexactly(len(want)), 20)


async def silent(reader: asyncio.StreamReader, seconds: float = 0.5) -> bool:
    """True when nothing (not even EOF) arrives within `seconds`."""
    try:
        await asyncio.wait_for(reader.read(1), seconds)
    except TimeoutError:
        return True
    return False


async def read_until_error(reader: asyncio.StreamReader) -> BaseException | None:
    """Read to the end; return the error that ended the stream, None for a clean EOF."""
    try:
        while await asyncio.wait_for(reader.read(65536), 10):
            pass
    except OSError as exc:
        return exc
    return None


# pass ---------------------------------------------------------------------------------------------


def test_both_sockets_of_a_connection_send_without_nagles_delay() -> None:
    """A proxy that adds latency must not add Nagle's too: with it on, a small segment waits for the ACK of
    the one before, which a client with nothing to send delays by about 40 ms (the accepted socket had
    it on: asyncio leaves a socket of proto 0 alone)."""

    async def t() -> None:
        async with echo_server() as echo, FaultProxy(echo.address) as proxy:
            async with connect(proxy) as (r, w):
                assert await roundtrip(r, w, b"x") == b"x"
                [conn] = proxy._conns
                assert conn.upstream is not None
                for writer in (conn.client, conn.upstream):
                    sock = writer.get_extra_info("socket")
                    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0

    run(t)


def test_pass_forwards_both_ways_and_counts() -> None:
    async def t() -> None:
        async with echo_server() as echo, FaultProxy(echo.address) as proxy:
            assert proxy.listening and proxy.endpoint == f"127.0.0.1:{proxy.address[1]}"
            data = bytes(range(256)) * 4096  # 1 MiB
            async with connect(proxy) as (r, w):
                assert await roundtrip(r, w, data) == data
                stats = proxy.stats()
                assert stats.accepted == 1 and stats.active == 1
                assert stats.bytes_up == len(data) and stats.bytes_down == len(data)

    run(t)


def test_client_eof_is_forwarded_as_half_close() -> None:
    async def t() -> None:
        async with echo_server() as echo, FaultProxy(echo.address) as proxy:
            async with connect(proxy) as (r, w):
                w.write(b"bye")
                w.write_eof()
                assert await asyncio.wait_for(r.read(), 10) == b"bye"  # echo, then the server's EOF
            for _ in range(100):
                if proxy.stats().active == 0:
                    break
                await asyncio.sleep(0.02)
            assert proxy.stats().active == 0 and echo.eofs == 1

    run(t)


# latency ------------------------------------------------------------------------------------------


def test_latency_delays_each_direction_and_keeps_order() -> None:
    async def t() -> None:
        async with echo_server() as echo, FaultProxy(echo.address, seed=7) as proxy:
            async with connect(proxy) as (r, w):
                await roundtrip(r, w, b"warm")
                proxy.set_mode(Latency(0.15))
                start = time.monotonic()
                assert await roundtrip(r, w, b"x" * 1000) == b"x" * 1000
                assert time.monotonic() - start >= 0.3 - TIMER_SLACK  # 0.15 s up + 0.15 s down
                proxy.set_mode(Latency(0.0, jitter=0.02))
                pieces = [f"{i:05d}".encode() for i in range(200)]
                for p in pieces:
                    w.write(p)
                    await w.drain()
                    await asyncio.sleep(0)
                got = await asyncio.wait_for(r.readexactly(5 * len(pieces)), 20)
                assert got == b"".join(pieces)  # jitter never reorders bytes

    run(t)


def test_latency_in_one_direction_only() -> None:
    async def t() -> None:
        async with echo_server() as echo, FaultProxy(echo.address) as proxy:
            async with connect(proxy) as (r, w):
                proxy.set_mode(Latency(0.3, direction=Direction.DOWNSTREAM))
                start = time.monotonic()
                await roundtrip(r, w, b"ping")
                assert time.monotonic() - start >= 0.3 - TIMER_SLACK

    run(t)


# blackhole ----------------------------------------------------------------------------------------


def test_blackhole_reads_and_forwards_nothing_without_closing() -> None:
    async def t() -> None:
        async with echo_server() as echo, FaultProxy(echo.address) as proxy:
            async with connect(proxy) as (r, w):
                assert await roundtrip(r, w, b"before") == b"before"
                proxy.set_mode(Blackhole())
                w.write(b"into the void")
                await w.drain()
                assert await silent(r)  # no bytes, and no EOF or reset either
                assert proxy.stats().dropped_up == len(b"into the void")
                assert echo.reads == 1  # the server never saw the second write
                assert proxy.stats().active == 1

                async with connect(proxy) as (r2, w2):  # new connections are accepted, then go nowhere
                    w2.write(b"hello?")
                    await w2.drain()
                    assert await silent(r2)

                proxy.set_mode(PASS)
                async with connect(proxy) as (r3, w3):
                    assert await roundtrip(r3, w3, b"healed") == b"healed"

    run(t)


def test_blackhole_downstream_only_lets_requests_through() -> None:
    async def t() -> None:
        async with echo_server() as echo, FaultProxy(echo.address) as proxy:
            async with connect(proxy) as (r, w):
                proxy.set_mode(Blackhole(direction=Direction.DOWNSTREAM))
                w.write(b"request")
                await w.drain()
                assert await silent(r)
                assert echo.reads == 1  # the request arrived; only the reply vanished
                assert proxy.stats().dropped_down == len(b"request")

    run(t)


def test_blackhole_holds_back_eof() -> None:
    async def t() -> None:
        async with echo_server() as echo, FaultProxy(echo.address) as proxy:
            async with connect(proxy) as (r, w):
                await roundtrip(r, w, b"x")
                proxy.set_mode(Blackhole(direction=Direction.UPSTREAM))
                w.write_eof()
                # A negative check, so a fixed span: an EOF the black hole let through would land within it.
                await asyncio.sleep(0.3)
                assert echo.eofs == 0  # half-open: the server never learns the client left
                proxy.set_mode(PASS)
                assert await asyncio.wait_for(r.read(), 10) == b""
                assert echo.eofs == 1

    run(t)


# reset --------------------------------------------------------------------------------------------


def test_reset_rsts_live_connections_on_both_sides() -> None:
    async def t() -> None:
        async with echo_server() as echo, FaultProxy(echo.address) as proxy:
            async with connect(proxy) as (r, w):
                assert await roundtrip(r, w, b"alive") == b"alive"
                proxy.set_mode(Reset())
                assert isinstance(await read_until_error(r), ConnectionResetError)
            for _ in range(100):
                if echo.resets:
                    break
                await asyncio.sleep(0.02)
            assert echo.resets == 1  # the server side got a RST too, not a FIN
            assert proxy.stats().reset == 1 and proxy.stats().active == 0

            async with connect(proxy) as (r2, _w2):  # new connections are reset on accept
                assert isinstance(await read_until_error(r2), ConnectionResetError)
            assert proxy.stats().rejected == 1

            proxy.set_mode(PASS)
            async with connect(proxy) as (r3, w3):
                assert await roundtrip(r3, w3, b"back") == b"back"

    run(t)


def test_one_shot_reset_leaves_new_connections_working() -> None:
    async def t() -> None:
        async with echo_server() as echo, FaultProxy(echo.address) as proxy:
            async with connect(proxy) as (r, w), connect(proxy) as (r2, w2):
                await roundtrip(r, w, b"a")
                await roundtrip(r2, w2, b"b")
                assert proxy.reset_connections() == 2
                assert isinstance(await read_until_error(r), ConnectionResetError)
                assert isinstance(await read_until_error(r2), ConnectionResetError)
            async with connect(proxy) as (r3, w3):
                assert await roundtrip(r3, w3, b"c") == b"c"

    run(t)


# refuse -------------------------------------------------------------------------------------------


def test_refuse_stops_listening_and_resumes_on_the_same_port() -> None:
    async def t() -> None:
        async with echo_server() as echo, FaultProxy(echo.address) as proxy:
            address = proxy.address
            async with connect(proxy) as (r, w):
                await roundtrip(r, w, b"x")
                proxy.set_mode(Refuse())
                assert not proxy.listening
                assert await asyncio.wait_for(r.read(), 10) == b""  # scope "all": live ones closed (FIN)
            with pytest.raises(ConnectionRefusedError):
                await asyncio.open_connection(*address)
            proxy.set_mode(PASS)
            assert proxy.address == address
            async with connect(proxy) as (r2, w2):  # no sleep: the port listens when set_mode returns
                assert await roundtrip(r2, w2, b"again") == b"again"

    run(t)


def test_refuse_for_new_connections_keeps_live_ones() -> None:
    async def t() -> None:
        async with echo_server() as echo, FaultProxy(echo.address) as proxy:
            async with connect(proxy) as (r, w):
                proxy.set_mode(Refuse(), scope="new")
                with pytest.raises(ConnectionRefusedError):
                    await asyncio.open_connection(*proxy.address)
                assert await roundtrip(r, w, b"still here") == b"still here"

    run(t)


def test_refuse_without_closing_the_port_closes_new_connections_at_once() -> None:
    async def t() -> None:
        async with (
            echo_server() as echo,
            FaultProxy(echo.address, mode=Refuse(stop_listening=False)) as proxy,
        ):
            async with connect(proxy) as (r, _w):
                assert await asyncio.wait_for(r.read(), 10) == b""
            assert proxy.stats().rejected == 1 and echo.writers == []

    run(t)


def test_proxy_can_start_refusing() -> None:
    async def t() -> None:
        async with echo_server() as echo, FaultProxy(echo.address, mode=Refuse()) as proxy:
            with pytest.raises(ConnectionRefusedError):
                await asyncio.open_connection(*proxy.address)
            proxy.set_mode(PASS)
            async with connect(proxy) as (r, w):
                assert await roundtrip(r, w, b"ok") == b"ok"

    run(t)


# bandwidth and slicer -----------------------------------------------------------------------------


def test_bandwidth_caps_throughput() -> None:
    async def t() -> None:
        async with echo_server() as echo, FaultProxy(echo.address) as proxy:
            async with connect(proxy) as (r, w):
                proxy.set_mode(Bandwidth(64 * 1024, direction=Direction.UPSTREAM))
                data = b"b" * (48 * 1024)
                start = time.monotonic()
                assert await roundtrip(r, w, data) == data
                # 48 KiB at 64 KiB/s needs at least ~0.7 s; half of that is a safe floor.
                assert time.monotonic() - start >= 0.35 - TIMER_SLACK

    run(t)


def test_slicer_forwards_intact_data_in_small_pieces() -> None:
    async def t() -> None:
        async with echo_server() as echo, FaultProxy(echo.address, seed=1) as proxy:
            async with connect(proxy) as (r, w):
                proxy.set_mode(Slicer(1, 16, delay=0.002, direction=Direction.UPSTREAM))
                data = bytes(range(256)) * 8  # 2 KiB -> at least 128 slices
                assert await roundtrip(r, w, data) == data
                assert echo.reads >= 10  # the server saw the stream in many pieces

    run(t)


# scope, backpressure, retarget, upstream failure, close ------------------------------------------


def test_scope_new_leaves_live_connections_alone() -> None:
    async def t() -> None:
        async with echo_server() as echo, FaultProxy(echo.address) as proxy:
            async with connect(proxy) as (r, w):
                proxy.set_mode(Blackhole(), scope="new")
                assert await roundtrip(r, w, b"live") == b"live"
                async with connect(proxy) as (r2, w2):
                    w2.write(b"new")
                    await w2.drain()
                    assert await silent(r2)
                proxy.set_mode(PASS, scope="all")
                assert await roundtrip(r, w, b"still") == b"still"

    run(t)


def test_buffers_are_bounded_when_the_server_stops_reading() -> None:
    async def t() -> None:
        async with echo_server(read=False) as echo, FaultProxy(echo.address, queue_chunks=4) as proxy:
            async with connect(proxy) as (_r, w):
                chunk = b"z" * (1 << 20)
                written = 0

                async def flood() -> None:
                    nonlocal written
                    while True:
                        w.write(chunk)
                        await w.drain()
                        written += 1

                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(flood(), 2.0)
                # Unbounded buffering would swallow gigabytes in 2 s on loopback; the proxy holds at
                # most queue_chunks x chunk_size plus kernel socket buffers.
                assert written < 64
                assert proxy.stats().bytes_up < 64 << 20

    run(t)


def test_retarget_drops_live_connections_and_uses_the_new_target() -> None:
    async def t() -> None:
        async with echo_server(b"A:") as a, echo_server(b"B:") as b, FaultProxy(a.address) as proxy:
            async with connect(proxy) as (r, w):
                assert await roundtrip(r, w, b"1", b"A:1") == b"A:1"
                proxy.retarget(b.address)
                assert await asyncio.wait_for(r.read(), 10) == b""
            async with connect(proxy) as (r2, w2):
                assert await roundtrip(r2, w2, b"2", b"B:2") == b"B:2"

    run(t)


def test_unreachable_target_resets_the_client() -> None:
    async def t() -> None:
        async with echo_server() as echo:
            dead = echo.address
        async with FaultProxy(dead) as proxy:
            async with connect(proxy) as (r, _w):
                assert isinstance(await read_until_error(r), ConnectionResetError)
            assert proxy.stats().upstream_failures == 1

    run(t)


def test_close_cancels_every_task_and_connection() -> None:
    async def t() -> None:
        async with echo_server() as echo:
            before = len(asyncio.all_tasks())
            proxy = FaultProxy(echo.address)
            await proxy.start()
            conns: list[Any] = []
            for mode in (PASS, Latency(0.5), Blackhole()):
                proxy.set_mode(mode, scope="new")
                conns.append(await asyncio.open_connection(*proxy.address))
                conns[-1][1].write(b"pending")
            # Every connection served: its upstream connected (the echo server accepted it) and the black
            # hole's write read and dropped.
            await until(
                lambda: len(echo.writers) == 3 and proxy.stats().dropped_up == len(b"pending"),
                what="three connections proxied",
            )
            assert len(asyncio.all_tasks()) > before
            await proxy.aclose()
            assert len(asyncio.all_tasks()) == before
            assert proxy._tasks == set()
            for r, w in conns:
                assert isinstance(await read_until_error(r), ConnectionResetError | type(None))
                w.transport.abort()
            with pytest.raises(ConnectionRefusedError):
                await asyncio.open_connection(*proxy.address)
            with pytest.raises(RuntimeError):
                proxy.set_mode(PASS)
            await proxy.aclose()  # idempotent

    run(t)


def test_invalid_modes_are_rejected() -> None:
    with pytest.raises(ValueError):
        Latency(-1)
    with pytest.raises(ValueError):
        Bandwidth(0)
    with pytest.raises(ValueError):
        Slicer(10, 5)
    with pytest.raises(ValueError):
        Blackhole(direction="sideways")  # type: ignore[arg-type]
    assert Latency(0.1, direction="upstream").direction is Direction.UPSTREAM  # type: ignore[arg-type]
    with pytest.raises(RuntimeError):
        _ = FaultProxy(("127.0.0.1", 1)).address
