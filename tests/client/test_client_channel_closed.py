"""Calls in flight on a channel that gets closed (transport recovery replaces channels) fail typed.

grpc.aio raises `asyncio.CancelledError` in the awaiting task when a call is cancelled because its
channel closed; found by the F3 reliability test (slow broker), where two timeouts in a row replace the
channel and a receive in flight on the old one escaped `SimpleConsumer.receive()` as a bare CancelledError.
"""

from __future__ import annotations

import asyncio

import pytest

import thrust
from tests.client._util import run
from tests.server._wire import message
from tests.support import until
from thrust._core.endpoints import parse_endpoint
from thrust._io.metadata import Metadata
from thrust._io.rpc import RpcClient
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.server.faults import Faults, Rpc
from thrust.testing import embedded_server


def _receive_request() -> s.ReceiveMessageRequest:
    request = s.ReceiveMessageRequest(
        group=d.Resource(name="g"),
        message_queue=d.MessageQueue(topic=d.Resource(name="t"), id=-1),
        filter_expression=d.FilterExpression(type=d.FilterType.TAG, expression="*"),
        batch_size=1,
    )
    request.invisible_duration.seconds = 30
    request.long_polling_timeout.seconds = 5
    return request


def test_calls_in_flight_on_a_closed_channel_raise_connection_error() -> None:
    async def scenario() -> None:
        faults = Faults()
        faults.add_latency(Rpc.SEND_MESSAGE, 5.0)
        async with embedded_server(topics=["t"], groups=["g"], faults=faults) as srv:
            config = thrust.ClientConfig(srv.endpoints[0])
            client = RpcClient(parse_endpoint(srv.endpoints[0]), config, Metadata(config, "closed-channel"))
            send = asyncio.create_task(
                client.unary("SendMessage", s.SendMessageRequest(messages=[message("t")]), 10.0)
            )
            receive = asyncio.create_task(client.receive(_receive_request(), 10.0))
            # both in flight: the send in its delay, the receive in its long poll
            await until(
                lambda: srv.stats.calls["SendMessage"] >= 1 and srv.stats.calls["ReceiveMessage"] >= 1
            )
            await client.close(0.1)
            # Ended by the close, not waited out: left alone, the send would succeed after its 5 s delay
            # and the receive would return MESSAGE_NOT_FOUND after its 5 s poll, neither raising.
            for task in (send, receive):
                with pytest.raises(thrust.ConnectionError) as info:
                    await task
                assert info.value.retriable
                assert "channel closed" in str(info.value)

    run(scenario)


def test_cancelling_the_task_still_cancels() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            config = thrust.ClientConfig(srv.endpoints[0])
            client = RpcClient(parse_endpoint(srv.endpoints[0]), config, Metadata(config, "cancelled-task"))
            try:
                receive = asyncio.create_task(client.receive(_receive_request(), 10.0))
                await until(lambda: srv.pending_polls("g") == 1, what="the receive waits on the server")
                receive.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await receive
            finally:
                await client.close(0.1)

    run(scenario)
