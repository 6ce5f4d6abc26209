"""Calls on a channel that cannot connect wait for the connection within their deadline, then fail
typed, without ever starting a gRPC call.

A channel in TRANSIENT_FAILURE fails calls at once with UNAVAILABLE and reconnects on its own after its
backoff, even when the server is already back; thrust waits for the connection within each call's deadline
(as gRPC's wait_for_ready) and raises the same retriable ConnectionError when it does not come, before
starting the call, because grpc.aio leaks the native op array of a share of calls that fail while the
channel cannot connect (grpc/grpc#43360; docs/reliability.md bug 8). These tests pin all three: no call
reaches gRPC while the channel is down, a call waiting when the server comes up goes through, and the
channel comes back by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

import grpc
import pytest

import thrust
from tests.client._util import run
from tests.client.test_client_channel_closed import _receive_request
from tests.server._wire import message
from tests.support import until
from thrust._core.endpoints import parse_endpoint
from thrust._io.metadata import Metadata
from thrust._io.rpc import RpcClient
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.testing import embedded_server


class _CountingStub:
    """The real stub, counting the calls started through it."""

    def __init__(self, stub: Any) -> None:
        self.stub = stub
        self.started = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.stub, name)

        def start(*args: Any, **kwargs: Any) -> Any:
            self.started += 1
            return method(*args, **kwargs)

        return start


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _client_for_an_unused_port(name: str) -> tuple[RpcClient, int]:
    """An RpcClient for a port nothing listens on (yet), and that port."""
    port = _free_port()
    endpoint = f"127.0.0.1:{port}"
    config = thrust.ClientConfig(endpoint)
    return RpcClient(parse_endpoint(endpoint), config, Metadata(config, name)), port


async def _until_backing_off(channel: Any) -> None:
    await until(
        lambda: channel.get_state() is grpc.ChannelConnectivity.TRANSIENT_FAILURE,
        10.0,
        "the channel never reached TRANSIENT_FAILURE",
    )


def test_no_grpc_call_while_the_channel_cannot_connect_and_it_comes_back_alone() -> None:
    async def scenario() -> None:
        client, port = _client_for_an_unused_port("unreachable")
        stub = _CountingStub(client._stub)
        client._stub = stub
        channel = client._channel
        try:
            # Nothing listens: the first call waits for a connection that fails, and leaves the channel in
            # TRANSIENT_FAILURE.
            with pytest.raises(thrust.ConnectionError):
                await client.unary("QueryRoute", s.QueryRouteRequest(), 0.5)
            await _until_backing_off(channel)
            for _ in range(5):
                with pytest.raises(thrust.ConnectionError) as info:
                    await client.unary("SendMessage", s.SendMessageRequest(messages=[message("t")]), 0.2)
                assert info.value.retriable
                assert info.value.code is None  # a transport failure: it counts towards recovery
                assert "unreachable" in str(info.value)
                # Without the wait (a producer with another broker to try), at once.
                with pytest.raises(thrust.ConnectionError, match="TRANSIENT_FAILURE"):
                    await client.unary(
                        "SendMessage",
                        s.SendMessageRequest(messages=[message("t")]),
                        2.0,
                        wait_for_connection=False,
                    )
                # A receive whose deadline leaves no time beyond the 5 s minimum poll cannot wait.
                with pytest.raises(thrust.ConnectionError):
                    await client.receive(_receive_request(), 2.0)
            assert stub.started == 0  # none of the calls above started a gRPC call

            # The server comes up; with no call made, the channel reconnects on its own (its backoff is
            # at most 5 s), and the next call goes through.
            async with embedded_server(topics=["t"], groups=["g"], port=port) as srv:
                await until(
                    lambda: channel.get_state() is grpc.ChannelConnectivity.READY,
                    20.0,
                    "the channel did not reconnect by itself",
                )
                response = await client.unary(
                    "SendMessage", s.SendMessageRequest(messages=[message("t")]), 5.0
                )
                assert response.entries[0].message_id
                assert srv.stats.calls["SendMessage"] == 1
                assert stub.started == 1
        finally:
            await client.close(0.1)

    run(scenario)


def test_a_call_started_in_the_backoff_goes_through_when_the_server_comes_up() -> None:
    async def scenario() -> None:
        client, port = _client_for_an_unused_port("backoff")
        channel = client._channel
        try:
            with pytest.raises(thrust.ConnectionError):
                await client.unary("QueryRoute", s.QueryRouteRequest(), 0.2)
            await _until_backing_off(channel)
            # Started while the channel backs off; the server starts afterwards, within the call's deadline.
            call = asyncio.ensure_future(
                client.unary("SendMessage", s.SendMessageRequest(messages=[message("t")]), 30.0)
            )
            # A negative check, so a fixed span: a call failed at once ("is unreachable") is done within it.
            await asyncio.sleep(0.3)
            assert not call.done()  # failed at once here before: "is unreachable"
            async with embedded_server(topics=["t"], groups=["g"], port=port) as srv:
                response = await call
                assert response.entries[0].message_id
                assert srv.stats.calls["SendMessage"] == 1
        finally:
            await client.close(0.1)

    run(scenario)


def test_a_receive_after_a_reconnection_waits_for_its_settings_to_be_answered() -> None:
    # A restarted proxy fails a receive from a client whose Settings its new Telemetry stream has not
    # delivered yet (D14, docs/interop-findings.md), and that stream comes back on its own schedule: a
    # receive that had to wait for the connection also waits, within its budget, for the session's
    # `synced` event. (The embedded server serves such a receive, so the event stands in for the stream.)
    async def scenario() -> None:
        client, port = _client_for_an_unused_port("resync")
        channel = client._channel
        try:
            with pytest.raises(thrust.ConnectionError):
                await client.unary("QueryRoute", s.QueryRouteRequest(), 0.2)
            await _until_backing_off(channel)
            synced = asyncio.Event()
            async with embedded_server(topics=["t"], groups=["g"], port=port) as srv:
                request = _receive_request()
                request.long_polling_timeout.seconds = 20
                call = asyncio.ensure_future(client.receive(request, 23.0, None, synced))
                await until(
                    lambda: channel.get_state() is grpc.ChannelConnectivity.READY,
                    20.0,
                    "the channel did not reconnect",
                )
                # A negative check, so a fixed span: a receive not held for its Settings would be sent in it.
                await asyncio.sleep(0.3)
                assert not call.done()
                assert srv.stats.calls["ReceiveMessage"] == 0  # held until the Settings are answered
                synced.set()
                await until(lambda: srv.stats.calls["ReceiveMessage"] == 1, 10.0, "the receive never came")
                call.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await call
        finally:
            await client.close(0.1)

    run(scenario)
