"""`ClientSession.receive(..., on_message=...)`: messages after the OK status are handed over one by one
as the ReceiveMessage stream delivers them, in stream order, instead of being collected into the result
(so a consumer can start on the first while the server still streams the rest). Real embedded server.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

import thrust
from tests.client._util import run
from tests.support import transport
from thrust._codec import convert
from thrust._codec.status import Code
from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
from thrust.server.service.consumer import ConsumerRpcs
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


@contextlib.asynccontextmanager
async def _backlog(n: int) -> AsyncIterator[tuple[thrust.SimpleConsumer, list[str]]]:
    """A SimpleConsumer of group g on an embedded server whose topic t (one queue) holds `n` messages, and
    their ids in send order."""
    async with embedded_server(topics=["t:1"], groups=["g"]) as srv:
        ep = srv.endpoints[0]
        async with (
            thrust.Producer(endpoints=ep, topics=["t"]) as p,
            thrust.SimpleConsumer(endpoints=ep, group="g", subscriptions={"t": "*"}) as c,
        ):
            sent = [(await p.send(thrust.Message(topic="t", body=b"%d" % i))).message_id for i in range(n)]
            yield c, sent


@pytest.mark.slow
def test_streamed_receive_hands_each_message_over_in_order() -> None:
    async def scenario() -> None:
        async with _backlog(40) as (c, sent):
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


@pytest.mark.slow
def test_a_receive_not_asked_to_hand_its_first_message_early_collects_the_whole_stream() -> None:
    """`first_early=False` (an active push queue's receive): every message comes in the result, together,
    and `on_message` is not called for a stream that completes."""

    async def scenario() -> None:
        async with _backlog(5) as (c, sent):
            endpoint, request = _request(c, 32)
            streamed: list[Any] = []
            result = await c.session.receive(
                endpoint, request, timeout=10.0, on_message=streamed.append, first_early=False
            )
            assert result.code == Code.OK and streamed == []
            assert [m.message_id for m in result.messages] == sent

    run(scenario)


@pytest.mark.slow
def test_a_stream_that_breaks_hands_what_it_brought_to_on_message_even_when_not_asked_early(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The messages of a stream that breaks after its OK status are invisible on the broker for this
    client: they go to `on_message` before the error is raised, in stream order, not dropped."""
    original = ConsumerRpcs.ReceiveMessage

    async def broken(self: Any, request: Any, context: Any) -> AsyncIterator[Any]:
        written = 0
        async for response in original(self, request, context):
            yield response
            if response.WhichOneof("content") == "message":
                written += 1
                if written == 3:
                    await context.abort(grpc.StatusCode.INTERNAL, "stream broken after three messages")

    monkeypatch.setattr(ConsumerRpcs, "ReceiveMessage", broken)

    async def scenario() -> None:
        async with _backlog(10) as (c, sent):
            endpoint, request = _request(c, 5)
            for batch, first_early in ((sent[:5], False), (sent[5:], True)):
                streamed: list[Any] = []
                with pytest.raises(thrust.ThrustError) as caught:
                    await c.session.receive(
                        endpoint,
                        request,
                        timeout=10.0,
                        on_message=streamed.append,
                        first_early=first_early,
                    )
                assert caught.value._after_ok
                # each receive popped five and its stream broke after three: those three are handed
                # over, in order (the other two stay invisible on the broker until they time out)
                assert [m.message_id for m in streamed] == batch[:3]

    run(scenario)
