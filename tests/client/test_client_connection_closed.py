"""A connection the server closes under a call is UNAVAILABLE, a retriable ConnectionError, on both
transports.

The server here is a bare TCP socket: it sends HTTP/2's SETTINGS and closes the connection at once,
without GOAWAY, as a server that refuses the client's certificate after a TLS 1.3 handshake does. gRPC
core reports every variant of that as UNAVAILABLE. tonic (the native transport) reports some of them as
CANCELLED ("operation was canceled: connection closed": the call was queued on the connection when it
closed) or UNKNOWN, which the extension reports as UNAVAILABLE too. Which variant a close produces
depends on timing, so the test repeats the close and requires the same error of every one; the table
test in tests/unit/test_native.py holds each variant's code whatever this machine's timing produces.
"""

from __future__ import annotations

import asyncio

import thrust
from tests.client._util import run

SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an empty HTTP/2 SETTINGS frame: the server preface
ATTEMPTS = 20


async def _close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(SETTINGS)
    writer.close()


def test_a_connection_closed_under_the_first_call_is_unavailable() -> None:
    async def scenario() -> None:
        server = await asyncio.start_server(_close_at_once, "127.0.0.1", 0)
        endpoint = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        failures = 0
        try:
            for _ in range(ATTEMPTS):
                try:
                    async with thrust.Producer(endpoints=endpoint, topics=["t"], request_timeout=3):
                        pass
                except thrust.ConnectionError as exc:
                    text = str(exc)
                    assert exc.retriable, text
                    assert "UNAVAILABLE" in text, text
                    failures += 1
        finally:
            server.close()
            await server.wait_closed()
        assert failures == ATTEMPTS  # no producer starts against a server that closes every connection

    run(scenario)
