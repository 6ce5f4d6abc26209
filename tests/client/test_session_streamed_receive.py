"""`ClientSession.receive(..., on_message=...)`: messages after the OK status are handed over one by one
as the ReceiveMessage stream delivers them, in stream order, instead of being collected into the result
(so a consumer can start on the first while the server still streams the rest). Real embedded server.
"""

from __future__ import annotations

from typing import Any

import pytest

import thrust
from tests.client._util import run
from tests.support import transport
from thrust._codec import convert
from thrust._codec.status import Code
from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
from thrust.testing import embedded_server


def _request(consumer: thrust.SimpleConsumer, batch: int) -> tuple[Any, Any]:
    session = consumer.session
    route = session.cached_route("t")
    assert route is not None
    [queue] = route.queues
    request = spb.ReceiveMessageRequest(
        group=session.resource("g"),
        message_queue=convert.message_queue_to_pb(queue, ""),
        filter_expression=consumer._filter("t"),
        batch_size=batch,
        invisible_duration=convert.duration(30.0),
        auto_renew=False,
        long_polling_timeout=convert.duration(1.0),
    )
    return queue.endpoint, request


@pytest.mark.slow
def test_streamed_receive_hands_each_message_over_in_order() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t:1"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.Producer(endpoints=ep, topics=["t"]) as p,
                thrust.SimpleConsumer(endpoints=ep, group="g", subscriptions={"t": "*"}) as c,
            ):
                sent: list[str] = []
                for i in range(40):
                    sent.append((await p.send(thrust.Message(topic="t", body=b"%d" % i))).message_id)
                endpoint, request = _request(c, 32)
                session = c.session
                streamed: list[Any] = []
                result = await session.receive(endpoint, request, timeout=10.0, on_message=streamed.append)
                assert result.code == Code.OK
                if transport() == "native":
                    # The native transport hands over the first message as it arrives and the rest with the
                    # end of the stream (`NativeRpcClient.receive`).
                    assert len(streamed) == 1
                    streamed, result.messages = [*streamed, *result.messages], []
                assert result.messages == []  # every message went to the callback
                ids = [m.message_id for m in streamed]
                assert ids == sent[:32]  # one batch, in stream (= send) order
                # Without the callback, the next batch is collected as before.
                result = await session.receive(endpoint, request, timeout=10.0)
                assert [m.message_id for m in result.messages] == sent[32:]
                # Nothing left: MESSAGE_NOT_FOUND, the callback is never called.
                more: list[Any] = []
                result = await session.receive(endpoint, request, timeout=10.0, on_message=more.append)
                assert result.code == Code.MESSAGE_NOT_FOUND and result.messages == [] and more == []

    run(scenario)
