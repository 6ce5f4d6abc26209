"""A connection the server closes under a call is UNAVAILABLE, a retriable ConnectionError, on both
transports.

The server here is a bare TCP socket: it sends HTTP/2's SETTINGS and closes the connection at once,
without GOAWAY, as a server that refuses the client's certificate after a TLS 1.3 handshake does. gRPC
core reports every variant of that as UNAVAILABLE. tonic (the native transport) reports some of them as
CANCELLED ("operation was canceled: connection closed": the call was queued on the connection when it
closed), which the extension must report as UNAVAILABLE too: CANCELLED is kept for a stream the server
itself reset. Which variant a close produces depends on timing, so the test repeats the close until the
native transport has met the queued-call one.
"""

from __future__ import annotations

import asyncio

import thrust
from tests.client._util import run
from thrust._io.native import resolve_transport

SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # an empty HTTP/2 SETTINGS frame: the server preface
QUEUED_CALL_CLOSED = "operation was canceled"  # hyper's words for a call queued on a closed connection


async def _close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(SETTINGS)
    writer.close()


def test_a_connection_closed_under_the_first_call_is_unavailable() -> None:
    async def scenario() -> None:
        server = await asyncio.start_server(_close_at_once, "127.0.0.1", 0)
        endpoint = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        native = resolve_transport(thrust.ClientConfig(endpoint)) == "native"
        texts: list[str] = []
        try:
            for _ in range(200):
                try:
                    async with thrust.Producer(endpoints=endpoint, topics=["t"], request_timeout=3):
                        pass
                except thrust.ConnectionError as exc:
                    text = str(exc)
                    texts.append(text)
                    assert exc.retriable, text
                    assert "UNAVAILABLE" in text, text
                    if not native or QUEUED_CALL_CLOSED in text:
                        break
                else:
                    raise AssertionError("a producer started against a server that closes every connection")
        finally:
            server.close()
            await server.wait_closed()
        if native:
            assert any(QUEUED_CALL_CLOSED in t for t in texts), texts[-3:]

    run(scenario)
