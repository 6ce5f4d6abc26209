"""`LiteSimpleConsumer` against the embedded server over real gRPC: receive on demand from the subscribed
lite topics, each in order; acks and invisibility changes name the lite topic."""

from __future__ import annotations

import pytest

import thrust
from tests.client._util import run
from thrust.testing import embedded_server


def test_lite_simple_consumer_receives_its_lite_topics_and_settles_them() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["chat:1:LITE"], groups=["svc"], auto_create=False) as srv:
            ep = srv.endpoints[0]
            async with thrust.Producer(endpoints=ep, topics=["chat"]) as producer:
                for i in range(3):
                    for lt in ("a", "b"):
                        await producer.send(
                            thrust.Message(topic="chat", body=b"%s%d" % (lt.encode(), i), lite_topic=lt)
                        )
            async with thrust.LiteSimpleConsumer(
                endpoints=ep, group="svc", bind_topic="chat", await_duration=5
            ) as consumer:
                assert await consumer.receive(8) == []  # nothing subscribed yet (after the 5 s long poll)
                await consumer.subscribe_lite("a")
                assert consumer.lite_topics == {"a"}
                first = await consumer.receive(8)
                assert [(m.lite_topic, m.body) for m in first] == [("a", b"a0"), ("a", b"a1"), ("a", b"a2")]
                # Hidden again for a moment, then acked with the new handle.
                await consumer.change_invisible_duration(first[0], 30)
                for m in first:
                    await m.ack()
                await consumer.subscribe_lite("b")
                second = await consumer.receive(8)
                assert [m.body for m in second] == [b"b0", b"b1", b"b2"]
                await consumer.ack(second[0])
                with pytest.raises(thrust.InvalidReceiptHandleError):
                    await consumer.ack(second[0])  # acked already
                await consumer.unsubscribe_lite("a")
                assert consumer.lite_topics == {"b"}
                assert srv.brokers[0].inflight("svc", "%LMQ%chat$a") == 0

    run(scenario)


def test_lite_simple_consumer_refuses_subscriptions_before_start() -> None:
    async def scenario() -> None:
        consumer = thrust.LiteSimpleConsumer(endpoints="127.0.0.1:1", group="svc", bind_topic="chat")
        with pytest.raises(thrust.ClientClosedError):
            await consumer.subscribe_lite("a")

    run(scenario)
