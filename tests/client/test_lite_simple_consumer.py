"""`LiteSimpleConsumer` against the embedded server over real gRPC: receive on demand from the subscribed
lite topics, each in order; acks and invisibility changes name the lite topic."""

from __future__ import annotations

import pytest

import thrust
import thrust.sync
from tests.client._util import run
from thrust.testing import ServerThread, embedded_server


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


def test_sync_lite_simple_consumer_receives_and_settles_blocking() -> None:
    """`thrust.sync.LiteSimpleConsumer` from plain code: `msg.ack()` blocks until the ack (naming the lite
    topic) is done, so nothing is left in flight on the server."""
    with ServerThread(topics=["chat:1:LITE"], groups=["svc"], auto_create=False) as srv:
        ep = srv.endpoints[0]
        with thrust.sync.Producer(endpoints=ep, topics=["chat"]) as producer:
            for i in range(2):
                producer.send(thrust.Message(topic="chat", body=b"a%d" % i, lite_topic="a"))
        with thrust.sync.LiteSimpleConsumer(
            endpoints=ep, group="svc", bind_topic="chat", await_duration=5
        ) as consumer:
            consumer.subscribe_lite("a")
            assert consumer.lite_topics == {"a"}
            got: list[thrust.ReceivedMessage] = []
            while len(got) < 2:
                got += consumer.receive(8)
            assert [(m.lite_topic, m.body) for m in got] == [("a", b"a0"), ("a", b"a1")]
            consumer.change_invisible_duration(got[0], 30)
            got[0].ack()
            consumer.ack(got[1])
            with pytest.raises(thrust.InvalidReceiptHandleError):
                consumer.ack(got[1])  # acked already
            consumer.unsubscribe_lite("a")
            assert consumer.lite_topics == frozenset()
            assert "sync.<LiteSimpleConsumer" in repr(consumer)
        assert srv.server.brokers[0].inflight("svc", "%LMQ%chat$a") == 0
