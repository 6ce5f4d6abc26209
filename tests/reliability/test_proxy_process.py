"""ProxyProcess: the FaultProxy in a child process, switched over its pipe (used by the soak)."""

from __future__ import annotations

import asyncio
import os

import pytest

from tests.reliability.test_proxy import echo_server, run
from thrust.reliability.proxy_process import ProxyProcess


async def _roundtrip(endpoint: str, payload: bytes, timeout: float = 5.0) -> bytes:
    host, port = endpoint.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(payload)
        await writer.drain()
        async with asyncio.timeout(timeout):
            return await reader.readexactly(len(payload))
    finally:
        writer.close()


@pytest.mark.timeout(60)
def test_commands_switch_the_child_proxy_and_close_ends_it() -> None:
    async def scenario() -> None:
        async with echo_server() as echo:
            proxy = ProxyProcess(echo.address)
            async with proxy:
                assert proxy.pid != os.getpid()
                assert await _roundtrip(proxy.endpoint, b"ping") == b"ping"

                # A live connection, then "blackhole" for every connection: nothing comes back.
                host, port = proxy.endpoint.rsplit(":", 1)
                reader, writer = await asyncio.open_connection(host, int(port))
                writer.write(b"a")
                assert await reader.readexactly(1) == b"a"
                assert await proxy.command("blackhole") is None
                writer.write(b"b")
                await writer.drain()
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.5):
                        await reader.readexactly(1)

                # "pass" for new connections only: new ones work, the live one stays black-holed.
                await proxy.command("pass", scope="new")
                assert await _roundtrip(proxy.endpoint, b"new") == b"new"
                writer.write(b"c")
                with pytest.raises(TimeoutError):
                    async with asyncio.timeout(0.5):
                        await reader.readexactly(1)

                # "reset": the live connection gets an RST.
                assert await proxy.command("reset") >= 1
                with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
                    async with asyncio.timeout(5.0):
                        await reader.readexactly(1)
                writer.close()

                # "refuse": the port is closed; "pass" opens it again.
                await proxy.command("refuse")
                with pytest.raises(ConnectionRefusedError):
                    await _roundtrip(proxy.endpoint, b"x")
                await proxy.command("pass")
                assert await _roundtrip(proxy.endpoint, b"back") == b"back"

                stats = await proxy.stats()
                assert stats["accepted"] >= 4 and stats["reset"] >= 1

                # A bad command is refused with its reason and changes nothing.
                with pytest.raises(ValueError, match="unknown command 'latency'"):
                    await proxy.command("latency")
                assert await _roundtrip(proxy.endpoint, b"still") == b"still"
                child = proxy._proc
                assert child is not None
            assert child.returncode == 0  # stdin closed: the child stopped its proxy and exited
            await proxy.aclose()  # idempotent

    run(scenario)
