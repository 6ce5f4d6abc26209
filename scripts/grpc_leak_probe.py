"""How much native memory does grpc.aio keep per call that ends a given way? (docs/reliability.md, soak)

Runs a bare grpc.aio server as a child process and, in this process, makes calls of one kind in a loop,
then prints glibc's in-use heap (`mallinfo2().uordblks`) growth per call after a warm-up. Python objects
are collected first, so what remains is native memory that nothing frees: grpc/grpc#43360 says grpc.aio
drops the `grpc_op` array (and what its ops hold) of a batch that fails or whose awaiter is cancelled.

    .venv/bin/python scripts/grpc_leak_probe.py [--calls 3000] [--kinds ok,deadline,...]

Kinds: ok, deadline (the call's own timeout expires on a live server), cancel (call.cancel() while the
reply is awaited), channel-close (5 calls in flight when their channel is closed), server-killed (10
calls in flight when the server is killed), refused (nothing listens: the channel fails fast in
TRANSIENT_FAILURE), silent (a socket that accepts and never speaks: the deadline expires while
connecting). Requests carry 32 KiB unless `--body 0`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable

import grpc
import grpc.aio


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
    ]


_libc = ctypes.CDLL("libc.so.6")
_libc.mallinfo2.restype = _MallInfo2


def _in_use() -> int:
    gc.collect()
    return int(_libc.mallinfo2().uordblks)


# -- the child server ------------------------------------------------------------------------------


async def _unary(request: bytes, context: grpc.aio.ServicerContext) -> bytes:  # type: ignore[type-arg]
    if request.startswith(b"sleep"):
        await asyncio.sleep(60)
    return b"ok"


async def _serve() -> None:
    server = grpc.aio.server()
    handler = grpc.method_handlers_generic_handler(
        "probe.Probe", {"Unary": grpc.unary_unary_rpc_method_handler(_unary)}
    )
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


# -- the probe -------------------------------------------------------------------------------------


class _Server:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve"], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()


def _free_port(listen: bool) -> tuple[int, socket.socket | None]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    if listen:
        sock.listen(512)  # the kernel completes handshakes; nobody ever reads or writes
        return port, sock
    sock.close()
    return port, None


async def _probe(kind: str, calls: int, body: bytes) -> tuple[float, int]:
    """(bytes of in-use heap kept per call, calls measured)."""
    sleep = b"sleep" + body
    server = _Server() if kind not in ("refused", "silent", "server-killed") else None
    port, keep = _free_port(kind == "silent") if server is None else (server.port, None)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    unary = channel.unary_unary("/probe.Probe/Unary")

    async def one_call() -> None:
        if kind == "ok":
            await unary(body)
        elif kind in ("deadline", "refused", "silent"):
            with contextlib.suppress(grpc.RpcError, asyncio.CancelledError):
                await unary(sleep, timeout=0.05)
        elif kind == "cancel":
            call = unary(sleep)
            await asyncio.sleep(0.005)
            call.cancel()
            with contextlib.suppress(grpc.RpcError, asyncio.CancelledError):
                await call

    async def channel_close() -> None:
        ch = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
        u = ch.unary_unary("/probe.Probe/Unary")
        pending = [asyncio.ensure_future(u(sleep, timeout=30)) for _ in range(5)]
        await asyncio.sleep(0.02)
        await ch.close(None)
        await asyncio.gather(*pending, return_exceptions=True)

    async def server_killed() -> None:
        child = _Server()
        ch = grpc.aio.insecure_channel(f"127.0.0.1:{child.port}")
        u = ch.unary_unary("/probe.Probe/Unary")
        await u(body)
        pending = [asyncio.ensure_future(u(sleep, timeout=30)) for _ in range(10)]
        await asyncio.sleep(0.2)
        child.kill()
        await asyncio.gather(*pending, return_exceptions=True)
        await ch.close(None)

    step: Callable[[], Awaitable[None]]
    if kind == "channel-close":
        step, per_step, steps = channel_close, 5, max(1, calls // 5)
    elif kind == "server-killed":
        step, per_step, steps = server_killed, 10, max(1, min(calls, 600) // 10)
    else:

        async def ten() -> None:
            await asyncio.gather(*(one_call() for _ in range(10)))

        step, per_step, steps = ten, 10, max(1, calls // 10)
    try:
        for _ in range(max(3, steps // 10)):  # warm-up: caches, pools, first connections
            await step()
        before = _in_use()
        for _ in range(steps):
            await step()
        after = _in_use()
    finally:
        await channel.close(None)
        if server is not None:
            server.kill()
        if keep is not None:
            keep.close()
    return (after - before) / (steps * per_step), steps * per_step


KINDS = ("ok", "deadline", "cancel", "channel-close", "server-killed", "refused", "silent")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--body", type=int, default=32 * 1024, help="request body bytes (default 32 KiB)")
    p.add_argument("--kinds", default=",".join(KINDS))
    args = p.parse_args()
    if args.serve:
        asyncio.run(_serve())
        return
    print(f"grpcio {grpc.__version__}; in-use heap kept per call (after a warm-up, gc collected):")
    for kind in args.kinds.split(","):
        per_call, n = asyncio.run(_probe(kind, args.calls, b"x" * args.body))
        print(f"  {kind:14s} {per_call:8.1f} B/call over {n} calls", flush=True)


if __name__ == "__main__":
    main()
