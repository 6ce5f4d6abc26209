"""Lite topics (RocketMQ 5.5) against both servers: the embedded server and a real RocketMQ 5.5 cluster.

Each test runs twice through `lite_engine` (tests/conftest.py): against thrust's embedded server, then
against `thrust cluster --lite` (a cluster-mode 5.5 proxy and one broker with `enableLmq` and
`enableMultiDispatch`). A lite consumer group is bound to its LITE topic (`Engine.lite_group`, upstream's
group attribute `lite.bind.topic`). The lite tests that need the embedded server's internals (its
registry, its TTL, a lite simple consumer, which 5.5.0's proxy does not serve) stay in tests/push and
tests/client.
"""

from __future__ import annotations

import threading

import pytest

import thrust
import thrust.sync
from tests.engines import Engine
from tests.support import run, until
from thrust._codec.status import Code

# A real broker redelivers after its revive scan, a few seconds after the invisible time ends.
REDELIVERY = 40.0


def test_lite_push_consumer_receives_only_its_lite_topics_each_in_order(lite_engine: Engine) -> None:
    topic = lite_engine.topic("LITE", queues=1)
    group = lite_engine.lite_group(topic, fifo=True)
    got: list[tuple[str | None, bytes]] = []
    lock = threading.Lock()

    def listener(message: thrust.ReceivedMessage) -> None:
        with lock:
            got.append((message.lite_topic, message.body))

    async def scenario() -> None:
        ep = lite_engine.endpoint
        async with (
            thrust.Producer(endpoints=ep, topics=[topic]) as producer,
            thrust.LitePushConsumer(endpoints=ep, group=group, bind_topic=topic, listener=listener) as c,
        ):
            # Both servers send the 5.5 defaults to a group without its own quota.
            assert (c.lite_subscription_quota, c.max_lite_topic_size) == (2000, 64)
            for i in range(5):
                for lt in ("a", "b"):
                    await producer.send(thrust.Message(topic=topic, body=b"%d" % i, lite_topic=lt))
            await c.subscribe_lite("a")
            assert c.lite_topics == {"a"}
            # A group that never read the lite topic starts at its oldest message on both servers.
            await until(lambda: len(got) == 5, timeout=30, what="a's five messages")
            assert got == [("a", b"%d" % i) for i in range(5)]
            await c.subscribe_lite("b")
            await until(lambda: len(got) == 10, timeout=30, what="b's five messages")
            assert [body for lt, body in got if lt == "b"] == [b"%d" % i for i in range(5)]
            await until(lambda: c.stats().acked == 10, timeout=30)
            await c.unsubscribe_lite("a")
            assert c.lite_topics == {"b"}
            await producer.send(thrust.Message(topic=topic, body=b"late", lite_topic="a"))
            await producer.send(thrust.Message(topic=topic, body=b"last", lite_topic="b"))
            await until(lambda: ("b", b"last") in got, timeout=30, what="b's last message")
            # "late" was sent before "last": had `a` still been subscribed, it would be here by now on
            # the embedded server; the real broker's order across lite topics is not promised, so
            # the check is that nothing of `a` arrived among the eleven.
            assert ("a", b"late") not in got
            assert len(got) == 11

    run(scenario, 90)


@pytest.mark.timeout(120)
def test_a_failed_lite_message_is_redelivered_through_its_lite_topic(lite_engine: Engine) -> None:
    topic = lite_engine.topic("LITE", queues=1)
    group = lite_engine.lite_group(topic)
    attempts: list[int] = []

    def listener(message: thrust.ReceivedMessage) -> thrust.ConsumeResult:
        attempts.append(message.delivery_attempt)
        return thrust.ConsumeResult.FAILURE if len(attempts) == 1 else thrust.ConsumeResult.SUCCESS

    async def scenario() -> None:
        ep = lite_engine.endpoint
        async with (
            thrust.Producer(endpoints=ep, topics=[topic]) as producer,
            thrust.LitePushConsumer(endpoints=ep, group=group, bind_topic=topic, listener=listener) as c,
        ):
            await c.subscribe_lite("s")
            await producer.send(thrust.Message(topic=topic, body=b"x", lite_topic="s"))
            await until(lambda: attempts == [1, 2], timeout=REDELIVERY, what="a redelivery")
            await until(lambda: c.stats().acked == 1, timeout=30)
            assert c.stats().nacked == 1

    run(scenario, 100)


def test_a_groups_lite_quota_reaches_the_client_and_is_enforced_before_io(lite_engine: Engine) -> None:
    topic = lite_engine.topic("LITE", queues=1)
    group = lite_engine.lite_group(topic, quota=2)

    async def scenario() -> None:
        async with thrust.LitePushConsumer(
            endpoints=lite_engine.endpoint, group=group, bind_topic=topic, listener=lambda m: None
        ) as c:
            assert c.lite_subscription_quota == 2
            await c.subscribe_lite("a")
            await c.subscribe_lite("b")
            with pytest.raises(thrust.LiteSubscriptionQuotaExceededError) as quota:
                await c.subscribe_lite("c")
            assert quota.value.code == Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED
            await c.unsubscribe_lite("a")
            await c.subscribe_lite("c")
            assert c.lite_topics == {"b", "c"}

    run(scenario, 60)


def test_lite_messages_only_go_to_a_lite_topic(lite_engine: Engine) -> None:
    lite, plain = lite_engine.topic("LITE", queues=1), lite_engine.topic("NORMAL", queues=1)

    async def scenario() -> None:
        async with thrust.Producer(endpoints=lite_engine.endpoint, topics=[lite, plain]) as producer:
            receipt = await producer.send(thrust.Message(topic=lite, body=b"hi", lite_topic="s1"))
            assert receipt.topic == lite and receipt.message_id
            # The route says the plain topic takes no LITE message (both servers): refused before I/O.
            with pytest.raises(thrust.ValidationError, match="does not accept LITE") as info:
                await producer.send(thrust.Message(topic=plain, body=b"x", lite_topic="s1"))
            assert info.value.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
            # And a LITE topic takes only lite messages.
            with pytest.raises(thrust.ValidationError):
                await producer.send(thrust.Message(topic=lite, body=b"x"))

    run(scenario, 60)


def test_a_suspended_lite_message_comes_back_after_the_suspend_time(lite_engine: Engine) -> None:
    topic = lite_engine.topic("LITE", queues=1)
    group = lite_engine.lite_group(topic)
    seen: list[int] = []

    def listener(message: thrust.ReceivedMessage) -> thrust.ConsumeSuspend | None:
        seen.append(message.delivery_attempt)
        return thrust.ConsumeSuspend(1.0) if len(seen) == 1 else None

    async def scenario() -> None:
        ep = lite_engine.endpoint
        async with (
            thrust.Producer(endpoints=ep, topics=[topic]) as producer,
            thrust.LitePushConsumer(endpoints=ep, group=group, bind_topic=topic, listener=listener) as c,
        ):
            await c.subscribe_lite("s")
            await producer.send(thrust.Message(topic=topic, body=b"x", lite_topic="s"))
            await until(lambda: len(seen) == 2, timeout=REDELIVERY, what="the suspended message")
            await until(lambda: c.stats().acked == 1, timeout=30)
            assert c.stats().nacked == 1

    run(scenario, 90)


def test_sync_lite_push_consumer(lite_engine: Engine) -> None:
    topic = lite_engine.topic("LITE", queues=1)
    group = lite_engine.lite_group(topic, fifo=True)
    ep = lite_engine.endpoint
    got: list[bytes] = []
    done = threading.Event()

    def listener(message: thrust.ReceivedMessage) -> None:
        got.append(message.body)
        if len(got) == 3:
            done.set()

    with (
        thrust.sync.Producer(endpoints=ep, topics=[topic]) as producer,
        thrust.sync.LitePushConsumer(endpoints=ep, group=group, bind_topic=topic, listener=listener) as c,
    ):
        c.subscribe_lite("t1")
        assert c.lite_topics == {"t1"}
        for i in range(3):
            producer.send(thrust.Message(topic=topic, body=b"%d" % i, lite_topic="t1"))
        assert done.wait(30)
        assert got == [b"0", b"1", b"2"]
        c.unsubscribe_lite("t1")
        assert c.lite_topics == frozenset()


def test_subscribing_to_a_topic_that_is_not_lite_is_refused(lite_engine: Engine) -> None:
    plain = lite_engine.topic("NORMAL", queues=1)
    lite = lite_engine.topic("LITE", queues=1)
    group = lite_engine.lite_group(lite)

    async def scenario() -> None:
        async with thrust.LitePushConsumer(
            endpoints=lite_engine.endpoint, group=group, bind_topic=lite, listener=lambda m: None
        ) as c:
            await c.subscribe_lite("ok")
        other = thrust.LitePushConsumer(
            endpoints=lite_engine.endpoint, group=group, bind_topic=plain, listener=lambda m: None
        )
        # Both servers refuse the consumer's Settings: its group is bound to another topic
        # (`lite.bind.topic`).
        with pytest.raises(thrust.BadRequestError):
            await other.start()
            try:
                await other.subscribe_lite("a")
            finally:
                await other.close()

    run(scenario, 60)


def test_an_exclusive_group_moves_a_lite_topic_and_notifies_the_previous_client(lite_engine: Engine) -> None:
    topic = lite_engine.topic("LITE", queues=1)
    group = lite_engine.lite_group(topic, exclusive=True)

    async def scenario() -> None:
        ep = lite_engine.endpoint
        async with (
            thrust.LitePushConsumer(
                endpoints=ep, group=group, bind_topic=topic, listener=lambda m: None
            ) as one,
            thrust.LitePushConsumer(
                endpoints=ep, group=group, bind_topic=topic, listener=lambda m: None
            ) as two,
        ):
            await one.subscribe_lite("x")
            await one.subscribe_lite("y")
            await two.subscribe_lite("x")
            # NotifyUnsubscribeLiteCommand reaches `one` over its Telemetry stream.
            await until(lambda: one.lite_topics == {"y"}, timeout=30, what="the notice")
            assert one.unsubscribe_notices == 1
            assert two.lite_topics == {"x"}

    run(scenario, 60)
