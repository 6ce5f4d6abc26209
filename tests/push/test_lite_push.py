"""Lite topics from the client side, against the embedded server over real gRPC: `Message(lite_topic=...)`,
`LitePushConsumer` (subscribe / unsubscribe at run time, the full resync, the Settings' quota and name
size, the server's unsubscribe notice) and `thrust.sync.LitePushConsumer`."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import thrust
import thrust.sync
from tests.push._util import run, until
from thrust._codec.status import Code
from thrust.server.config import GroupSpec
from thrust.server.core.broker import LITE_COMPLETE_REMOVE
from thrust.server.core.model import GroupRetryPolicy
from thrust.server.service.consumer import ConsumerRpcs
from thrust.testing import ServerThread, embedded_server


def test_message_lite_topic_is_validated_like_upstream() -> None:
    m = thrust.Message(topic="chat", body=b"x", lite_topic="session-1")
    assert m.message_type is thrust.MessageType.LITE
    assert "lite_topic='session-1'" in repr(m)
    for bad in ("", "  ", "a b", "x" * 65, "dot.ted"):
        with pytest.raises(thrust.ValidationError) as info:
            thrust.Message(topic="chat", body=b"x", lite_topic=bad)
        assert info.value.code == Code.ILLEGAL_LITE_TOPIC, bad
    for other in ({"message_group": "g"}, {"delay": 5}, {"priority": 1}):
        with pytest.raises(thrust.ValidationError) as info:
            thrust.Message(topic="chat", body=b"x", lite_topic="a", **other)  # type: ignore[arg-type]
        assert info.value.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


def test_producer_sends_lite_messages_only_to_a_lite_topic() -> None:
    async def scenario() -> None:
        async with (
            embedded_server(topics=["chat:2:LITE", "plain:2"], auto_create=False) as srv,
            thrust.Producer(endpoints=srv.endpoints[0], topics=["chat", "plain"]) as producer,
        ):
            receipt = await producer.send(thrust.Message(topic="chat", body=b"hi", lite_topic="s1"))
            assert receipt.topic == "chat"
            assert srv.brokers[0].lite_topics("chat") == ["s1"]
            assert [m.body for m in srv.brokers[0].lite_messages("chat", "s1")] == [b"hi"]
            calls = srv.stats.calls["SendMessage"]
            # The route says "plain" takes no LITE message: refused before any SendMessage.
            with pytest.raises(thrust.ValidationError, match="does not accept LITE") as info:
                await producer.send(thrust.Message(topic="plain", body=b"x", lite_topic="s1"))
            assert info.value.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
            assert srv.stats.calls["SendMessage"] == calls
            # Transactions exclude a lite topic (the Java client's PublishingMessageImpl).
            async with thrust.Producer(endpoints=srv.endpoints[0], topics=["chat"]) as p2:
                transaction = p2.transaction()
                with pytest.raises(thrust.ValidationError):
                    await transaction.send(thrust.Message(topic="chat", body=b"x", lite_topic="s1"))
                await transaction.rollback()

    run(scenario)


def test_lite_push_consumer_receives_its_lite_topics_in_order() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["chat:2:LITE"], groups=["svc:fifo"], auto_create=False) as srv:
            ep = srv.endpoints[0]
            got: list[tuple[str | None, bytes]] = []
            lock = threading.Lock()

            def listener(message: thrust.ReceivedMessage) -> None:
                with lock:
                    got.append((message.lite_topic, message.body))

            async with (
                thrust.Producer(endpoints=ep, topics=["chat"]) as producer,
                thrust.LitePushConsumer(endpoints=ep, group="svc", bind_topic="chat", listener=listener) as c,
            ):
                assert c.lite_topics == frozenset()
                for i in range(10):
                    for lt in ("a", "b"):
                        await producer.send(thrust.Message(topic="chat", body=b"%d" % i, lite_topic=lt))
                await c.subscribe_lite("a")
                await c.subscribe_lite("a")  # no-op
                assert c.lite_topics == {"a"}
                await until(lambda: len(got) == 10, what="a's ten messages")
                assert got == [("a", b"%d" % i) for i in range(10)]
                await c.subscribe_lite("b")
                await until(lambda: len(got) == 20, what="b's ten messages")
                assert [body for lt, body in got if lt == "b"] == [b"%d" % i for i in range(10)]
                # Every message was acked under its lite topic: nothing stays in flight.
                await until(lambda: srv.brokers[0].inflight("svc", "%LMQ%chat$a") == 0)
                await until(lambda: srv.brokers[0].inflight("svc", "%LMQ%chat$b") == 0)
                await c.unsubscribe_lite("a")
                assert c.lite_topics == {"b"}
                await producer.send(thrust.Message(topic="chat", body=b"late", lite_topic="a"))
                await producer.send(thrust.Message(topic="chat", body=b"last", lite_topic="b"))
                await until(lambda: ("b", b"last") in got)
                await asyncio.sleep(0.3)
                assert ("a", b"late") not in got
                assert c.client_id is not None
                assert srv.brokers[0].lite_subscription(c.client_id) == ("svc", "chat", ["b"])

    run(scenario)


def test_a_failed_lite_message_is_redelivered_through_its_lite_topic(monkeypatch: pytest.MonkeyPatch) -> None:
    # A non-FIFO group: the failure is a ChangeInvisibleDuration naming the lite topic (with `suspend`, as
    # the Java client's ConsumerImpl.wrapChangeInvisibleDuration), the redelivery the server's, one backoff
    # step later.
    group = GroupSpec("svc", retry=GroupRetryPolicy(max_attempts=5, customized=(0.2,)))
    seen: list[tuple[str, bool]] = []
    original = ConsumerRpcs.ChangeInvisibleDuration

    async def spy(self: ConsumerRpcs, request: Any, context: Any) -> Any:
        seen.append((request.lite_topic, request.suspend))
        return await original(self, request, context)

    monkeypatch.setattr(ConsumerRpcs, "ChangeInvisibleDuration", spy)

    async def scenario() -> None:
        async with embedded_server(topics=["chat:1:LITE"], groups=[group], auto_create=False) as srv:
            ep = srv.endpoints[0]
            attempts: list[int] = []

            async def listener(message: thrust.ReceivedMessage) -> thrust.ConsumeResult:
                attempts.append(message.delivery_attempt)
                return thrust.ConsumeResult.FAILURE if len(attempts) == 1 else thrust.ConsumeResult.SUCCESS

            async with (
                thrust.Producer(endpoints=ep, topics=["chat"]) as producer,
                thrust.LitePushConsumer(endpoints=ep, group="svc", bind_topic="chat", listener=listener) as c,
            ):
                await c.subscribe_lite("s")
                await producer.send(thrust.Message(topic="chat", body=b"x", lite_topic="s"))
                await until(lambda: attempts == [1, 2], what="a redelivery")
                await until(lambda: c.stats().acked == 1)
                assert c.stats().nacked == 1
                assert seen == [("s", True)]

    run(scenario)


def test_quota_and_name_size_come_from_settings_and_are_checked_before_io() -> None:
    async def scenario() -> None:
        async with embedded_server(
            topics=["chat:1:LITE"], groups=["svc"], lite_subscription_quota=2, max_lite_topic_size=8
        ) as srv:
            async with thrust.LitePushConsumer(
                endpoints=srv.endpoints[0], group="svc", bind_topic="chat", listener=lambda m: None
            ) as c:
                await c.subscribe_lite("a")
                assert (c.lite_subscription_quota, c.max_lite_topic_size) == (2, 8)
                await c.subscribe_lite("b")
                calls = srv.stats.calls["SyncLiteSubscription"]
                with pytest.raises(thrust.LiteSubscriptionQuotaExceededError) as quota:
                    await c.subscribe_lite("c")
                assert quota.value.code == Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED
                assert not quota.value.retriable
                await c.unsubscribe_lite("a")
                with pytest.raises(thrust.ValidationError) as size:
                    await c.subscribe_lite("x" * 9)
                assert size.value.code == Code.ILLEGAL_LITE_TOPIC
                assert srv.stats.calls["SyncLiteSubscription"] == calls + 1  # only the unsubscribe
                assert c.lite_topics == {"b"}

    run(scenario)


def test_the_full_resync_restores_what_the_server_lost() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["chat:1:LITE"], groups=["svc"]) as srv:
            async with thrust.LitePushConsumer(
                endpoints=srv.endpoints[0],
                group="svc",
                bind_topic="chat",
                listener=lambda m: None,
                resync_interval=0.2,
            ) as c:
                await c.subscribe_lite("a")
                await c.subscribe_lite("b")
                broker = srv.brokers[0]
                cid = c.client_id
                assert cid is not None
                broker.sync_lite_subscription(
                    client_id=cid,
                    group="svc",
                    topic="chat",
                    action=LITE_COMPLETE_REMOVE,
                    lite_topics=(),
                    quota=10,
                    now=srv.clock.time(),
                )
                assert broker.lite_subscription(cid) is None
                await until(lambda: broker.lite_subscription(cid) == ("svc", "chat", ["a", "b"]))

    run(scenario)


def test_the_unsubscribe_notice_drops_the_lite_topic() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["chat:1:LITE"], groups=["svc:lite-exclusive"]) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.LitePushConsumer(
                    endpoints=ep, group="svc", bind_topic="chat", listener=lambda m: None
                ) as one,
                thrust.LitePushConsumer(
                    endpoints=ep, group="svc", bind_topic="chat", listener=lambda m: None
                ) as two,
            ):
                await one.subscribe_lite("x")
                await one.subscribe_lite("y")
                await two.subscribe_lite("x")
                await until(lambda: one.lite_topics == {"y"}, what="the notice")
                assert one.unsubscribe_notices == 1
                assert two.lite_topics == {"x"}

    run(scenario)


def test_not_started_or_closed_consumers_refuse_subscriptions() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["chat:1:LITE"]) as srv:
            c = thrust.LitePushConsumer(
                endpoints=srv.endpoints[0], group="svc", bind_topic="chat", listener=lambda m: None
            )
            with pytest.raises(thrust.ClientClosedError):
                await c.subscribe_lite("a")
            await c.start()
            await c.close()
            with pytest.raises(thrust.ClientClosedError):
                await c.unsubscribe_lite("a")

    run(scenario)


def test_sync_lite_push_consumer() -> None:
    with ServerThread(topics=["chat:1:LITE"], groups=["svc:fifo"]) as srv:
        ep = srv.endpoints[0]
        got: list[bytes] = []
        done = threading.Event()

        def listener(message: thrust.ReceivedMessage) -> None:
            got.append(message.body)
            if len(got) == 3:
                done.set()

        with (
            thrust.sync.Producer(endpoints=ep, topics=["chat"]) as producer,
            thrust.sync.LitePushConsumer(
                endpoints=ep, group="svc", bind_topic="chat", listener=listener
            ) as c,
        ):
            c.subscribe_lite("t1")
            assert c.lite_topics == {"t1"}
            for i in range(3):
                producer.send(thrust.Message(topic="chat", body=b"%d" % i, lite_topic="t1"))
            assert done.wait(10)
            assert got == [b"0", b"1", b"2"]
            c.unsubscribe_lite("t1")
            assert c.lite_topics == frozenset()


def test_the_lite_topic_quota_is_a_typed_error_and_not_retried() -> None:
    async def scenario() -> None:
        async with (
            embedded_server(topics=["chat:1:LITE"], max_lite_topics=1) as srv,
            thrust.Producer(endpoints=srv.endpoints[0], topics=["chat"]) as producer,
        ):
            await producer.send(thrust.Message(topic="chat", body=b"x", lite_topic="one"))
            calls = srv.stats.calls["SendMessage"]
            with pytest.raises(thrust.LiteTopicQuotaExceededError) as info:
                await producer.send(thrust.Message(topic="chat", body=b"x", lite_topic="two"))
            assert info.value.code == Code.LITE_TOPIC_QUOTA_EXCEEDED
            assert srv.stats.calls["SendMessage"] == calls + 1
            await producer.send(thrust.Message(topic="chat", body=b"y", lite_topic="one"))

    run(scenario)


def test_a_suspended_lite_message_comes_back_after_the_suspend_time() -> None:
    # Not FIFO: ChangeInvisibleDuration by the suspend time (not the group's 10 s backoff), then the
    # server's redelivery.
    group = GroupSpec("svc", retry=GroupRetryPolicy(max_attempts=5, customized=(10.0,)))

    async def scenario() -> None:
        async with embedded_server(topics=["chat:1:LITE"], groups=[group], auto_create=False) as srv:
            ep = srv.endpoints[0]
            seen: list[int] = []

            def listener(message: thrust.ReceivedMessage) -> thrust.ConsumeSuspend | None:
                seen.append(message.delivery_attempt)
                return thrust.ConsumeSuspend(0.3) if len(seen) == 1 else None

            async with (
                thrust.Producer(endpoints=ep, topics=["chat"]) as producer,
                thrust.LitePushConsumer(endpoints=ep, group="svc", bind_topic="chat", listener=listener) as c,
            ):
                await c.subscribe_lite("s")
                await producer.send(thrust.Message(topic="chat", body=b"x", lite_topic="s"))
                waited = await until(lambda: len(seen) == 2, timeout=5, what="the suspended message")
                assert waited < 5
                await until(lambda: c.stats().acked == 1)
                assert c.stats().nacked == 1

    run(scenario)


def test_a_suspended_fifo_head_puts_its_lite_topic_aside() -> None:
    # FIFO: the head is suspended, and the messages of its lite topic received behind it are suspended
    # with it instead of reaching the listener (Java LiteFifoConsumeService); another lite topic goes on.
    async def scenario() -> None:
        async with embedded_server(topics=["chat:1:LITE"], groups=["svc:fifo"], auto_create=False) as srv:
            ep = srv.endpoints[0]
            seen: list[bytes] = []
            suspended = False

            def listener(message: thrust.ReceivedMessage) -> thrust.ConsumeSuspend | None:
                nonlocal suspended
                seen.append(message.body)
                if message.body == b"a0" and not suspended:
                    suspended = True
                    return thrust.ConsumeSuspend(0.5)
                return None

            async with thrust.Producer(endpoints=ep, topics=["chat"]) as producer:
                for body in (b"a0", b"a1", b"a2"):
                    await producer.send(thrust.Message(topic="chat", body=body, lite_topic="a"))
            async with thrust.LitePushConsumer(
                endpoints=ep, group="svc", bind_topic="chat", listener=listener
            ) as c:
                await c.subscribe_lite("a")
                await until(lambda: seen[-3:] == [b"a0", b"a1", b"a2"] and len(seen) == 4, what="a again")
                assert seen == [b"a0", b"a0", b"a1", b"a2"]
                await until(lambda: c.stats().acked == 3)

    run(scenario)


def test_a_plain_push_consumer_takes_a_suspend_as_a_failure() -> None:
    group = GroupSpec("g", retry=GroupRetryPolicy(max_attempts=5, customized=(0.2,)))

    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=[group]) as srv:
            ep = srv.endpoints[0]
            attempts: list[int] = []

            def listener(message: thrust.ReceivedMessage) -> thrust.ConsumeSuspend | None:
                attempts.append(message.delivery_attempt)
                return thrust.ConsumeSuspend(30) if len(attempts) == 1 else None

            async with (
                thrust.Producer(endpoints=ep, topics=["t"]) as producer,
                thrust.PushConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, listener=listener
                ) as c,
            ):
                await producer.send(thrust.Message(topic="t", body=b"x"))
                await until(lambda: attempts == [1, 2], what="the backoff's redelivery, not 30 s")
                await until(lambda: c.stats().acked == 1)

    run(scenario)
