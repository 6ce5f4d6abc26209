"""A FaultProxy in a child process, switched by commands over a pipe.

The soak (L5, docs/reliability.md §2) judges the memory of the *client* process. A FaultProxy in that process
would charge the client with the proxy's own memory: a 64 KiB bytes object per chunk read, in each direction,
for every byte of traffic, plus its queues, which moves glibc's heap as much as the client does. In a child
process the proxy is the network, as the server child is the broker.

    async with ProxyProcess(target=("127.0.0.1", server_port), host="127.0.0.2") as proxy:
        ...  # clients connect to proxy.endpoint
        await proxy.command("blackhole")            # every live and new connection goes half-open
        await proxy.command("pass", scope="new")    # new connections pass; live ones stay black-holed
        await proxy.command("reset")                # one-shot: RST every live connection
        stats = await proxy.stats()

The child (`python -m thrust.reliability.proxy_process --target HOST:PORT [--host H] [--port P]
[--latency S]`) prints `ready PORT` when it listens, then answers one JSON line per command line on stdin
(`{"cmd": "blackhole", "scope": "all"}`) and exits when stdin closes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import sys
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from thrust.reliability.proxy import PASS, Blackhole, FaultProxy, Latency, Mode, Refuse

__all__ = ["COMMANDS", "ProxyProcess", "main"]

# The modes a command can switch to; "reset" (RST every live connection) and "stats" are one-shots.
_MODES: dict[str, Mode] = {"pass": PASS, "blackhole": Blackhole(), "refuse": Refuse()}
COMMANDS = (*_MODES, "reset", "stats")


def _apply(proxy: FaultProxy, request: dict[str, Any]) -> Any:
    cmd = request.get("cmd")
    scope = request.get("scope", "all")
    if cmd in _MODES:
        proxy.set_mode(_MODES[cmd], scope=scope)
        return None
    if cmd == "reset":
        return proxy.reset_connections()
    if cmd == "stats":
        return dataclasses.asdict(proxy.stats())
    raise ValueError(f"unknown command {cmd!r} (one of {', '.join(COMMANDS)})")


async def _serve(target: tuple[str, int], host: str, port: int, latency: float = 0.0) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    mode: Mode = Latency(latency) if latency > 0 else PASS
    async with FaultProxy(target=target, host=host, port=port, mode=mode) as proxy:
        print(f"ready {proxy.address[1]}", flush=True)
        while line := await reader.readline():
            try:
                reply = {"ok": True, "result": _apply(proxy, json.loads(line))}
            except (ValueError, TypeError, RuntimeError) as exc:
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(reply), flush=True)


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m thrust.reliability.proxy_process", description=__doc__.split("\n")[0]
    )
    p.add_argument("--target", type=_host_port, required=True, help="HOST:PORT to forward to")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="port to listen on (default: a free one)")
    p.add_argument(
        "--latency",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="start in Latency mode: every chunk is forwarded SECONDS late, in each direction (default 0)",
    )
    args = p.parse_args(argv)
    asyncio.run(_serve(args.target, args.host, args.port, args.latency))
    return 0


class ProxyProcess:
    """The parent's handle on a proxy child: start it, send it commands, stop it (idempotent)."""

    def __init__(
        self, target: tuple[str, int], *, host: str = "127.0.0.1", port: int = 0, latency: float = 0.0
    ) -> None:
        """`latency` > 0: the proxy starts in `Latency(latency)` (both directions, so a round trip
        through it takes 2 x `latency` longer)."""
        self._argv = [
            sys.executable,
            "-m",
            "thrust.reliability.proxy_process",
            "--target",
            f"{target[0]}:{target[1]}",
            "--host",
            host,
            "--port",
            str(port),
            "--latency",
            str(latency),
        ]
        self.host = host
        self.port = port
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()  # one command at a time: replies come back in order

    @property
    def pid(self) -> int:
        if self._proc is None:
            raise RuntimeError("the proxy process is not started")
        return self._proc.pid

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    async def start(self, timeout: float = 15.0) -> ProxyProcess:
        if self._proc is not None:
            raise RuntimeError("the proxy process is already started")
        self._proc = await asyncio.create_subprocess_exec(
            *self._argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        try:
            line = await self._readline(timeout)
            word, _, port = line.partition(" ")
            if word != "ready":
                raise RuntimeError(f"the proxy process did not start: {line!r}")
            self.port = int(port)
        except BaseException:
            await self.aclose()
            raise
        return self

    async def command(self, cmd: str, *, scope: str = "all", timeout: float = 10.0) -> Any:
        """Run `cmd` (one of COMMANDS) in the child and return its result; a refused command raises
        ValueError, a child that does not answer within `timeout` raises TimeoutError."""
        proc = self._proc
        if proc is None or proc.stdin is None:
            raise RuntimeError("the proxy process is not started")
        async with self._lock:
            proc.stdin.write(json.dumps({"cmd": cmd, "scope": scope}).encode() + b"\n")
            await proc.stdin.drain()
            reply = json.loads(await self._readline(timeout))
        if not reply["ok"]:
            raise ValueError(reply["error"])
        return reply["result"]

    async def stats(self) -> dict[str, int]:
        result: dict[str, int] = await self.command("stats")
        return result

    async def _readline(self, timeout: float) -> str:
        assert self._proc is not None and self._proc.stdout is not None
        async with asyncio.timeout(timeout):
            line = await self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the proxy process exited (status {self._proc.returncode})")
        return line.decode().strip()

    async def aclose(self, timeout: float = 5.0) -> None:
        """Close the child's stdin (it stops its proxy and exits); kill it if it has not within `timeout`."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
            with contextlib.suppress(OSError):
                await proc.stdin.wait_closed()
        try:
            async with asyncio.timeout(timeout):
                await proc.wait()
        except TimeoutError:
            proc.kill()
            await proc.wait()

    async def __aenter__(self) -> ProxyProcess:
        return await self.start()

    async def __aexit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


if __name__ == "__main__":
    sys.exit(main())
