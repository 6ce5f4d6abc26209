"""On the native transport a receive handed a `Renewal` polls again by itself after each empty answer
(`Channel.receive(..., repeat_for)`), and counts the polls it renewed where its owner can read them
(`Renewal.renewed`): a push consumer's idle queue is then not taken for a stuck one (`_Queue.expired`).
A receive whose long poll was shortened while it waited for the Settings handshake is not renewed: its
renewals would all be as short.

The embedded server's `Faults.fail_next(ReceiveMessage, MESSAGE_NOT_FOUND)` answers a poll empty at once,
as a long poll that ran out does."""

from __future__ import annotations

import asyncio
import contextlib
import math

import pytest

import thrust
from tests.support import run, until
from thrust._codec.status import Code
from thrust._core.endpoints import parse_endpoint
from thrust._io.metadata import Metadata
from thrust._io.native import NativeHub, NativeRpcClient
from thrust._io.rpc import Renewal
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.message import Message
from thrust.producer import Producer
from thrust.server.faults import Rpc
from thrust.testing import embedded_server

pytestmark = pytest.mark.native

EMPTY = 5


def _request(poll: float) -> s.ReceiveMessageRequest:
    request = s.ReceiveMessageRequest(
        group=d.Resource(name="g"),
        message_queue=d.MessageQueue(topic=d.Resource(name="t"), id=0),
        filter_expression=d.FilterExpression(type=d.TAG, expression="*"),
        batch_size=1,
        auto_renew=True,
        attempt_id="attempt",
    )
    request.long_polling_timeout.FromNanoseconds(round(poll * 1e9))
    return request


def _client(endpoint: str, name: str) -> NativeRpcClient:
    config = thrust.ClientConfig(endpoint)
    return NativeRpcClient(parse_endpoint(endpoint), config, Metadata(config, name), NativeHub())


def test_a_renewing_receive_counts_its_renewed_polls_where_its_owner_reads_them() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            client = _client(ep, "renew")
            try:
                srv.faults.fail_next(Rpc.RECEIVE_MESSAGE, Code.MESSAGE_NOT_FOUND, EMPTY)
                renewal = Renewal(math.inf)  # until a message, a failure or `stop()`
                receive = asyncio.ensure_future(client.receive(_request(5.0), 8.0, renewal=renewal))
                # EMPTY answered at once and renewed, then a real long poll parked on the server
                await until(lambda: srv.stats.calls["ReceiveMessage"] == EMPTY + 1)
                assert renewal.renewed() == EMPTY
                assert client.receives_repeated == EMPTY
                assert renewal.advanced()  # what the owner had not seen yet
                assert not renewal.advanced()  # nothing renewed since it asked
                # without a poll of their own, the renewals ask for what the first poll asked
                assert [r.long_polling for r in srv.stats.receives] == [5.0] * (EMPTY + 1)
                async with Producer(endpoints=ep, topics=["t"]) as producer:
                    receipt = await producer.send(Message(topic="t", body=b"x"))
                result = await receive
                assert [m.message_id for m in result.messages] == [receipt.message_id]
                assert srv.stats.calls["ReceiveMessage"] == EMPTY + 1
                assert renewal.renewed() == 0  # the count goes with the receive
            finally:
                await client.close()

    run(scenario())


def test_renewed_polls_ask_for_the_renewals_poll_shortened_to_end_on_the_grid() -> None:
    """`Renewal(window, poll, grid)`: each renewed poll asks for `poll`, less than a `grid` step shorter so
    that it ends on a multiple of `grid` of the wall clock (`thrust._core.settings.poll_on_grid`), computed
    when it is sent; the first poll is sent as its caller built it."""

    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            client = _client(srv.endpoints[0], "grid")
            try:
                srv.faults.fail_next(Rpc.RECEIVE_MESSAGE, Code.MESSAGE_NOT_FOUND, EMPTY)
                renewal = Renewal(math.inf, 20.0, 1.0)
                receive = asyncio.ensure_future(client.receive(_request(5.0), 30.0, renewal=renewal))
                await until(lambda: srv.stats.calls["ReceiveMessage"] == EMPTY + 1)
                first, *renewed = srv.stats.receives
                assert first.long_polling == 5.0
                assert len(renewed) == EMPTY
                for r in renewed:
                    assert r.long_polling is not None and 19.0 < r.long_polling < 20.0
                    # the server saw it a moment after the transport computed it
                    end = r.arrived + r.long_polling
                    assert -0.001 < end - round(end) < 0.1
                assert len({r.long_polling for r in renewed}) > 1  # computed for each, not once
                renewal.stop()
                receive.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await receive
            finally:
                await client.close()

    run(scenario())


def test_a_receive_shortened_by_the_wait_for_the_handshake_is_not_renewed() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            client = _client(srv.endpoints[0], "short")
            try:
                srv.faults.fail_next(Rpc.RECEIVE_MESSAGE, Code.MESSAGE_NOT_FOUND, EMPTY)
                synced = asyncio.Event()  # the channel never connected: the receive waits for it
                loop = asyncio.get_running_loop()
                loop.call_later(0.3, synced.set)
                renewal = Renewal(60.0)
                result = await client.receive(_request(10.0), 13.0, settings_synced=synced, renewal=renewal)
                assert result.code == Code.MESSAGE_NOT_FOUND
                # one poll, answered empty, ends the receive: none renewed
                assert srv.stats.calls["ReceiveMessage"] == 1
                assert client.receives_repeated == 0
            finally:
                await client.close()

    run(scenario())
