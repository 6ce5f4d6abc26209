"""Lite topics (RocketMQ 5.5, RIP-83) on the embedded server, over real gRPC: sending creates a lite topic,
SyncLiteSubscription decides which lite topics a client receives, each in order, idle lite topics expire,
and an exclusive group's clients are told when another takes their lite topic."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from tests.server._wire import Wire, handles, message, messages_of, run, status_of
from thrust._codec.status import Code
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.cli import serve
from thrust.cli.main import build_parser, main
from thrust.cli.messages import message_to_json
from thrust.message import ReceivedMessage
from thrust.server.clock import ManualClock
from thrust.server.config import parse_group
from thrust.server.core.model import MessageType
from thrust.testing import ServerThread, embedded_server

A = d.LiteSubscriptionAction


def _lite(
    topic: str, lite_topic: str | None, body: bytes = b"body", message_type: int | None = None
) -> d.Message:
    m = message(topic, body, message_type=message_type)
    if lite_topic is not None:
        m.system_properties.lite_topic = lite_topic
    return m


async def _sync(
    w: Wire, group: str, topic: str, action: int, *names: str, **offset: Any
) -> s.SyncLiteSubscriptionResponse:
    request = s.SyncLiteSubscriptionRequest(
        action=action,  # type: ignore[arg-type]
        topic=d.Resource(name=topic),
        group=d.Resource(name=group),
        lite_topic_set=names,
    )
    if offset:
        request.offset_option.CopyFrom(d.OffsetOption(**offset))
    return await w.stub.SyncLiteSubscription(request, metadata=w.md, timeout=5)


async def _ack(w: Wire, group: str, topic: str, lite_topic: str, message_id: str, handle: str) -> int:
    response = await w.stub.AckMessage(
        s.AckMessageRequest(
            group=d.Resource(name=group),
            topic=d.Resource(name=topic),
            entries=[s.AckMessageEntry(message_id=message_id, receipt_handle=handle, lite_topic=lite_topic)],
        ),
        metadata=w.md,
        timeout=5,
    )
    return int(response.status.code)


def test_first_send_creates_the_lite_topic_and_names_are_checked() -> None:
    async def scenario() -> None:
        async with (
            embedded_server(topics=["parent:2:LITE", "plain:2"], auto_create=False) as srv,
            Wire(srv.endpoints[0]) as w,
        ):
            ok = await w.send(_lite("parent", "chat-1"), _lite("parent", "chat_2"))
            assert ok.status.code == Code.OK, ok
            assert srv.brokers[0].lite_topics("parent") == ["chat-1", "chat_2"]
            stored = srv.brokers[0].lite_messages("parent", "chat-1")
            assert [m.message_type for m in stored] == [d.MessageType.LITE]
            for bad in ("x" * 65, "has space", "dot.ted", "  "):
                refused = await w.send(_lite("parent", bad))
                assert refused.status.code == Code.ILLEGAL_LITE_TOPIC, bad
            assert (await w.send(_lite("parent", "x" * 64))).status.code == Code.OK
            # LITE without a lite topic, a lite topic on another type, and on a topic that is not LITE.
            missing = await w.send(_lite("parent", None, message_type=d.MessageType.LITE))
            assert missing.status.code == Code.ILLEGAL_LITE_TOPIC
            normal = await w.send(_lite("parent", "a", message_type=d.MessageType.NORMAL))
            assert normal.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
            other = await w.send(_lite("plain", "a"))
            assert other.status.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE

    run(scenario())


def test_settings_carry_the_lite_quota_and_name_size() -> None:
    async def scenario() -> None:
        async with (
            embedded_server(
                topics=["parent:1:LITE"], lite_subscription_quota=7, max_lite_topic_size=12
            ) as srv,
            Wire(srv.endpoints[0]) as w,
        ):
            settings = d.Settings(
                client_type=d.ClientType.LITE_PUSH_CONSUMER,
                subscription=d.Subscription(group=d.Resource(name="g")),
            )
            _, reply = await w.handshake(settings)
            assert reply.settings.subscription.lite_subscription_quota == 7
            assert reply.settings.subscription.max_lite_topic_size == 12
            assert (await w.send(_lite("parent", "x" * 13))).status.code == Code.ILLEGAL_LITE_TOPIC
            assert (
                await _sync(w, "g", "parent", A.PARTIAL_ADD, "y" * 13)
            ).status.code == Code.ILLEGAL_LITE_TOPIC

    run(scenario())


def test_receive_delivers_only_subscribed_lite_topics_each_in_order() -> None:
    async def scenario() -> None:
        async with (
            embedded_server(topics=["parent:2:LITE"], groups=["g"], auto_create=False) as srv,
            Wire(srv.endpoints[0]) as w,
        ):
            await w.consumer("g", "parent", kind=d.ClientType.LITE_PUSH_CONSUMER)
            # Nothing subscribed yet: nothing delivered, whatever was sent.
            for i in range(3):
                assert (
                    await w.send(_lite("parent", "a", b"a%d" % i), _lite("parent", "b", b"b%d" % i))
                ).status.code == Code.OK
            assert status_of(await w.receive("g", "parent", polling=0.5)).code == Code.MESSAGE_NOT_FOUND
            assert (await _sync(w, "g", "parent", A.PARTIAL_ADD, "a")).status.code == Code.OK
            first = await w.receive("g", "parent", batch=1)
            got = messages_of(first)
            assert [(m.body, m.system_properties.lite_topic, m.topic.name) for m in got] == [
                (b"a0", "a", "parent")
            ]
            # Ordered like a FIFO message group: a1 waits for a0's ack.
            assert status_of(await w.receive("g", "parent", polling=0.5)).code == Code.MESSAGE_NOT_FOUND
            ((mid, handle),) = handles(first)
            assert await _ack(w, "g", "parent", "a", mid, handle) == Code.OK
            rest = messages_of(await w.receive("g", "parent", batch=32))
            assert [m.body for m in rest] == [b"a1", b"a2"]
            # An ack without the lite topic cannot find the message (upstream's AckMessageEntry names it).
            plain = await w.ack(
                "g",
                "parent",
                [(rest[0].system_properties.message_id, rest[0].system_properties.receipt_handle)],
            )
            assert plain.entries[0].status.code == Code.INVALID_RECEIPT_HANDLE

    run(scenario())


def test_a_parked_receive_wakes_for_a_new_subscription() -> None:
    async def scenario() -> None:
        async with (
            embedded_server(topics=["parent:1:LITE"], groups=["g"]) as srv,
            Wire(srv.endpoints[0]) as w,
        ):
            await w.consumer("g", "parent", kind=d.ClientType.LITE_PUSH_CONSUMER)
            assert (await w.send(_lite("parent", "late"))).status.code == Code.OK
            loop = asyncio.get_running_loop()
            start = loop.time()
            poll = asyncio.ensure_future(w.receive("g", "parent", polling=10))
            await asyncio.sleep(0.3)
            assert (await _sync(w, "g", "parent", A.PARTIAL_ADD, "late")).status.code == Code.OK
            got = messages_of(await poll)
            assert [m.system_properties.lite_topic for m in got] == ["late"]
            assert loop.time() - start < 5

    run(scenario())


def test_sync_actions_and_the_quota() -> None:
    async def scenario() -> None:
        async with (
            embedded_server(
                topics=["parent:1:LITE", "plain:1"], groups=["g"], lite_subscription_quota=3
            ) as srv,
            Wire(srv.endpoints[0]) as w,
        ):
            broker = srv.brokers[0]
            assert (await _sync(w, "g", "parent", A.PARTIAL_ADD, "a", "b")).status.code == Code.OK
            assert broker.lite_subscription("test-client") == ("g", "parent", ["a", "b"])
            assert (await _sync(w, "g", "parent", A.PARTIAL_REMOVE, "a", "zz")).status.code == Code.OK
            assert broker.lite_subscription("test-client") == ("g", "parent", ["b"])
            assert (await _sync(w, "g", "parent", A.COMPLETE_ADD, "c", "d", "b")).status.code == Code.OK
            assert broker.lite_subscription("test-client") == ("g", "parent", ["b", "c", "d"])
            over = await _sync(w, "g", "parent", A.PARTIAL_ADD, "e")
            assert over.status.code == Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED
            over = await _sync(w, "g", "parent", A.COMPLETE_ADD, "a", "b", "c", "d")
            assert over.status.code == Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED
            assert broker.lite_subscription("test-client") == ("g", "parent", ["b", "c", "d"])
            assert (await _sync(w, "g", "parent", A.COMPLETE_REMOVE)).status.code == Code.OK
            assert broker.lite_subscription("test-client") is None
            # Only a LITE topic has lite subscriptions (ILLEGAL_TOPIC, as 5.5.0's proxy answers).
            assert (await _sync(w, "g", "plain", A.PARTIAL_ADD, "a")).status.code == Code.ILLEGAL_TOPIC
            # Names are checked on PARTIAL_ADD only, as upstream's ClientActivity.syncLiteSubscription.
            bad = await _sync(w, "g", "parent", A.PARTIAL_ADD, "a b")
            assert bad.status.code == Code.ILLEGAL_LITE_TOPIC
            assert (await _sync(w, "g", "parent", A.COMPLETE_ADD, "a b")).status.code == Code.OK
            assert broker.lite_subscription("test-client") == ("g", "parent", ["a b"])

    run(scenario())


def test_offset_option_min_and_max() -> None:
    async def scenario() -> None:
        async with (
            embedded_server(topics=["parent:1:LITE"], groups=["g"]) as srv,
            Wire(srv.endpoints[0]) as w,
        ):
            await w.consumer("g", "parent", kind=d.ClientType.LITE_PUSH_CONSUMER)
            for i in range(3):
                assert (await w.send(_lite("parent", "a", b"%d" % i))).status.code == Code.OK
            policy = d.OffsetOption.Policy
            assert (
                await _sync(w, "g", "parent", A.PARTIAL_ADD, "a", policy=policy.MAX)
            ).status.code == Code.OK
            assert status_of(await w.receive("g", "parent", polling=0.5)).code == Code.MESSAGE_NOT_FOUND
            assert (await w.send(_lite("parent", "a", b"new"))).status.code == Code.OK
            assert [m.body for m in messages_of(await w.receive("g", "parent"))] == [b"new"]
            assert (
                await _sync(w, "g", "parent", A.PARTIAL_ADD, "a", policy=policy.MIN)
            ).status.code == Code.OK
            assert [m.body for m in messages_of(await w.receive("g", "parent"))] == [b"0", b"1", b"2", b"new"]

    run(scenario())


def test_idle_lite_topics_expire_after_the_ttl() -> None:
    clock = ManualClock()

    async def scenario() -> None:
        async with (
            embedded_server(topics=["parent:1:LITE"], groups=["g"], lite_ttl=60, clock=clock) as srv,
            Wire(srv.endpoints[0]) as w,
        ):
            broker = srv.brokers[0]
            assert (await w.send(_lite("parent", "old"), _lite("parent", "busy"))).status.code == Code.OK
            assert (await _sync(w, "g", "parent", A.PARTIAL_ADD, "old", "busy")).status.code == Code.OK
            clock.advance(40)
            assert (await w.send(_lite("parent", "busy"))).status.code == Code.OK
            clock.advance(30)  # "old" idle 70 s, "busy" 30 s
            assert broker.lite_topics("parent") == ["busy"]
            assert broker.lite_messages("parent", "old") == []
            # Unsubscribed without a notice (upstream deleteLmq: cleanSubscription(lmq, false)).
            assert broker.lite_subscription("test-client") == ("g", "parent", ["busy"])
            clock.advance(61)
            assert broker.lite_topics("parent") == []
            # A new message creates it again.
            assert (await w.send(_lite("parent", "old"))).status.code == Code.OK
            assert broker.lite_topics("parent") == ["old"]

    run(scenario())


def test_an_exclusive_group_moves_a_lite_topic_and_notifies_the_previous_client() -> None:
    assert parse_group("g:lite-exclusive").lite_exclusive

    async def scenario() -> None:
        async with (
            embedded_server(topics=["parent:1:LITE"], groups=["g:lite-exclusive", "shared"]) as srv,
            Wire(srv.endpoints[0], "client-a") as a,
            Wire(srv.endpoints[0], "client-b") as b,
        ):
            telemetry_a = await a.consumer("g", "parent", kind=d.ClientType.LITE_PUSH_CONSUMER)
            await b.consumer("g", "parent", kind=d.ClientType.LITE_PUSH_CONSUMER)
            assert (await _sync(a, "g", "parent", A.PARTIAL_ADD, "x", "y")).status.code == Code.OK
            assert (await _sync(b, "g", "parent", A.PARTIAL_ADD, "x")).status.code == Code.OK
            command = await asyncio.wait_for(telemetry_a.read(), 5)
            assert command.WhichOneof("command") == "notify_unsubscribe_lite_command"
            assert command.notify_unsubscribe_lite_command.lite_topic == "x"
            broker = srv.brokers[0]
            assert broker.lite_subscription("client-a") == ("g", "parent", ["y"])
            assert broker.lite_subscription("client-b") == ("g", "parent", ["x"])
            # A group that is not exclusive shares the lite topic.
            assert (await _sync(a, "shared", "parent", A.PARTIAL_ADD, "x")).status.code == Code.OK
            assert (await _sync(b, "shared", "parent", A.PARTIAL_ADD, "x")).status.code == Code.OK
            assert broker.lite_subscription("client-a") == ("shared", "parent", ["x"])

    run(scenario())


@pytest.mark.parametrize("leave", ["terminate", "complete-remove"])
def test_a_client_that_leaves_loses_its_lite_subscription(leave: str) -> None:
    async def scenario() -> None:
        async with (
            embedded_server(topics=["parent:1:LITE"], groups=["g"]) as srv,
            Wire(srv.endpoints[0]) as w,
        ):
            await w.consumer("g", "parent", kind=d.ClientType.LITE_PUSH_CONSUMER)
            assert (await _sync(w, "g", "parent", A.PARTIAL_ADD, "a")).status.code == Code.OK
            if leave == "terminate":
                response = await w.stub.NotifyClientTermination(
                    s.NotifyClientTerminationRequest(group=d.Resource(name="g")), metadata=w.md, timeout=5
                )
                assert response.status.code == Code.OK
            else:
                assert (await _sync(w, "g", "parent", A.COMPLETE_REMOVE)).status.code == Code.OK
            assert srv.brokers[0].lite_subscription("test-client") is None

    run(scenario())


def test_serve_flags_for_lite_topics() -> None:
    args = build_parser().parse_args(
        [
            "serve",
            "--topic",
            "chat:2:LITE",
            "--group",
            "g:fifo:lite-exclusive",
            "--lite-ttl",
            "30",
            "--lite-subscription-quota",
            "5",
        ]
    )
    config = serve._config(args)
    assert config.topics[0].types == (MessageType.LITE,)
    assert config.groups[0].fifo and config.groups[0].lite_exclusive
    assert (config.lite_ttl, config.lite_subscription_quota) == (30.0, 5)


def test_a_dead_lettered_lite_message_keeps_its_lite_topic_and_can_be_acked() -> None:
    async def scenario() -> None:
        async with (
            embedded_server(topics=["parent:1:LITE"], groups=["g"]) as srv,
            Wire(srv.endpoints[0]) as w,
        ):
            await w.consumer("g", "parent", kind=d.ClientType.LITE_PUSH_CONSUMER)
            assert (await w.send(_lite("parent", "a", b"doomed"))).status.code == Code.OK
            assert (await _sync(w, "g", "parent", A.PARTIAL_ADD, "a")).status.code == Code.OK
            ((mid, handle),) = handles(await w.receive("g", "parent"))
            forwarded = await w.stub.ForwardMessageToDeadLetterQueue(
                s.ForwardMessageToDeadLetterQueueRequest(
                    group=d.Resource(name="g"),
                    topic=d.Resource(name="parent"),
                    receipt_handle=handle,
                    message_id=mid,
                    delivery_attempt=1,
                    max_delivery_attempts=1,
                    lite_topic="a",
                ),
                metadata=w.md,
                timeout=5,
            )
            assert forwarded.status.code == Code.OK
            stream = await w.receive("dlq-reader", "%DLQ%g")
            (dead,) = messages_of(stream)
            assert (dead.body, dead.system_properties.lite_topic) == (b"doomed", "a")
            ((dead_id, dead_handle),) = handles(stream)
            assert await _ack(w, "dlq-reader", "%DLQ%g", "a", dead_id, dead_handle) == Code.OK

    run(scenario())


def test_thrust_send_lite_topic(capsys: pytest.CaptureFixture[str]) -> None:
    with ServerThread(topics=["chat:1:LITE"], auto_create=False) as srv:
        code = main(["send", "--endpoints", srv.endpoints[0], "-t", "chat", "--lite-topic", "s-1", "hello"])
        assert code == 0, capsys.readouterr().err
        assert srv.call(lambda: srv.server.brokers[0].lite_topics("chat")) == ["s-1"]
        capsys.readouterr()
        assert (
            main(["send", "--endpoints", srv.endpoints[0], "-t", "chat", "--lite-topic", "bad name", "x"])
            == 1
        )
        assert "ValidationError" in capsys.readouterr().err
    received = ReceivedMessage(topic="chat", body=b"x", message_id="m", lite_topic="s-1")
    assert message_to_json(received)["lite_topic"] == "s-1"


def test_a_groups_lite_quota_overrides_the_servers() -> None:
    assert parse_group("g:lite-quota=1").lite_quota == 1
    assert parse_group("g").lite_quota is None
    for bad in ("g:lite-quota=-1", "g:lite-quota=x", "g:lite-quota"):
        with pytest.raises(ValueError, match="lite-quota"):
            parse_group(bad)

    async def scenario() -> None:
        async with (
            embedded_server(topics=["parent:1:LITE"], groups=["g:lite-quota=1", "h"]) as srv,
            Wire(srv.endpoints[0]) as w,
        ):
            # Settings carry the group's quota (GrpcClientSettingsManager reads lite.sub.client.quota),
            # another group's the server's default.
            settings = d.Settings(
                client_type=d.ClientType.LITE_PUSH_CONSUMER,
                subscription=d.Subscription(group=d.Resource(name="g")),
            )
            _, reply = await w.handshake(settings)
            assert reply.settings.subscription.lite_subscription_quota == 1
            assert (await _sync(w, "g", "parent", A.PARTIAL_ADD, "a")).status.code == Code.OK
            over = await _sync(w, "g", "parent", A.PARTIAL_ADD, "b")
            assert over.status.code == Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED
            assert (await _sync(w, "h", "parent", A.PARTIAL_ADD, "a", "b")).status.code == Code.OK

    run(scenario())


def test_a_bound_group_takes_lite_consumers_of_its_topic_only() -> None:
    assert parse_group("g:lite=parent").lite_bind_topic == "parent"
    with pytest.raises(ValueError, match="lite=PARENT"):
        parse_group("g:lite=")

    async def scenario() -> None:
        async with (
            embedded_server(
                topics=["parent:1:LITE", "other:1:LITE"], groups=["g:lite=parent", "free"]
            ) as srv,
            Wire(srv.endpoints[0], "bound-ok") as ok,
            Wire(srv.endpoints[0], "bound-wrong") as wrong,
            Wire(srv.endpoints[0], "unbound") as unbound,
        ):
            await ok.consumer("g", "parent", kind=d.ClientType.LITE_PUSH_CONSUMER)
            assert (await _sync(ok, "g", "parent", A.PARTIAL_ADD, "a")).status.code == Code.OK
            # Another topic: the Settings end the stream (gRPC INVALID_ARGUMENT, as 5.5.0's proxy), and a
            # subscription to it is ILLEGAL_TOPIC.
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await wrong.consumer("g", "other", kind=d.ClientType.LITE_PUSH_CONSUMER)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "expected to bind topic parent" in (refused.value.details() or "")
            assert (await _sync(wrong, "g", "other", A.PARTIAL_ADD, "a")).status.code == Code.ILLEGAL_TOPIC
            # An unbound group takes any LITE topic (D18); a bound group's ordinary consumers are not checked.
            await unbound.consumer("free", "other", kind=d.ClientType.LITE_PUSH_CONSUMER)
            assert (await _sync(unbound, "free", "other", A.PARTIAL_ADD, "a")).status.code == Code.OK
            await unbound.consumer("g", "other")

    run(scenario())
