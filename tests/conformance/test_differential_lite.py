"""Differential conformance of lite topics (RocketMQ 5.5): `thrust serve` against a real 5.5.0 proxy.

The same table as tests/conformance/test_differential.py (its `Row`, `run_pair` and `diff`), for what
only 5.5 has: LITE topics, lite messages, SyncLiteSubscription, the lite consumers' Settings and the
receive, ack and retry of lite messages. The real side is `rocketmq55` (`thrust cluster --lite
--brokers 1`: a cluster-mode proxy, since 5.5.0's local mode serves no lite subscriptions). Deviations
are explained in docs/interop-findings.md, section "thrust serve vs the real proxy".
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from tests.conformance._differential import ROW_TIMEOUT, Ctx, Row, diff, run_pair
from tests.conformance.test_differential import _code, _producer, _receive_all
from tests.engines import Engine, real_engine
from tests.server._wire import Wire, message, messages_of
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.cluster import ClusterInfo

ADD, REMOVE = d.LiteSubscriptionAction.PARTIAL_ADD, d.LiteSubscriptionAction.PARTIAL_REMOVE
COMPLETE_ADD = d.LiteSubscriptionAction.COMPLETE_ADD


def _lite_message(topic: str, lite_topic: str, body: bytes = b"body") -> d.Message:
    m = message(topic, body, message_type=d.MessageType.LITE)
    m.system_properties.lite_topic = lite_topic
    return m


def _lite_settings(group: str, topic: str, kind: int = d.ClientType.LITE_PUSH_CONSUMER) -> d.Settings:
    settings = d.Settings(client_type=kind)  # type: ignore[arg-type]
    settings.request_timeout.seconds = 3
    settings.subscription.group.name = group
    settings.subscription.subscriptions.add(
        topic=d.Resource(name=topic), expression=d.FilterExpression(type=d.FilterType.TAG, expression="*")
    )
    return settings


async def _lite_consumer(ctx: Ctx, group: str, topic: str) -> Wire:
    w, outcome = await _try_lite_consumer(ctx, group, topic)
    assert outcome == "OK", outcome
    return w


async def _try_lite_consumer(ctx: Ctx, group: str, topic: str) -> tuple[Wire, str]:
    """A lite push consumer's Settings handshake: "OK", the reply's status, or the gRPC code that ended
    the Telemetry stream (how 5.5.0's proxy refuses a group that is no lite group of `topic`)."""
    w = ctx.wire()
    try:
        _, reply = await w.handshake(_lite_settings(group, topic))
    except grpc.aio.AioRpcError as exc:
        return w, f"grpc {exc.code().name}"
    return w, _code(reply)


async def _sync(
    w: Wire, group: str, topic: str, action: int, *names: str, offset: d.OffsetOption | None = None
) -> str:
    request = s.SyncLiteSubscriptionRequest(
        action=action,  # type: ignore[arg-type]
        topic=d.Resource(name=topic),
        group=d.Resource(name=group),
        lite_topic_set=list(names),
    )
    if offset is not None:
        request.offset_option.CopyFrom(offset)
    reply = await w.stub.SyncLiteSubscription(request, metadata=w.md, timeout=10)
    return _code(reply)


# ----------------------------------------------------------------------------------------------
# rows


async def _route_lite(ctx: Ctx) -> Any:
    topic = await ctx.topic("LITE", queues=2)
    return ctx.n(await ctx.wire().route(topic))


def _settings_lite(quota: int | None = None, kind: int = d.ClientType.LITE_PUSH_CONSUMER) -> Any:
    async def scenario(ctx: Ctx) -> Any:
        topic = await ctx.topic("LITE", queues=1)
        group = await ctx.lite_group(topic, quota=quota)
        _, reply = await ctx.wire().handshake(_lite_settings(group, topic, kind))
        return ctx.n(reply)

    return scenario


async def _lite_simple_consumer_settings(ctx: Ctx) -> Any:
    topic = await ctx.topic("LITE", queues=1)
    group = await ctx.lite_group(topic)
    w = ctx.wire()
    try:
        _, reply = await w.handshake(_lite_settings(group, topic, d.ClientType.LITE_SIMPLE_CONSUMER))
    except grpc.aio.AioRpcError as exc:
        return {"settings": f"grpc {exc.code().name}"}
    return {"settings": _code(reply)}


async def _send_lite(ctx: Ctx) -> Any:
    topic = await ctx.topic("LITE", queues=1)
    w = await _producer(ctx, topic)
    return ctx.n(await w.send(_lite_message(topic, "s1")))


def _bad_lite_send(lite_topic: str, kind: str = "LITE", message_type: int = d.MessageType.LITE) -> Any:
    async def scenario(ctx: Ctx) -> Any:
        topic = await ctx.topic(kind, queues=1)
        w = await _producer(ctx, topic)
        m = message(topic, message_type=message_type)
        if lite_topic:
            m.system_properties.lite_topic = lite_topic
        return _code(await w.send(m))

    return scenario


def _sync_row(kind: str = "LITE", *names: str, quota: int | None = None, bound: bool = True) -> Any:
    """PARTIAL_ADD of `names` by a lite push consumer of a group bound to a LITE topic (or not), then
    PARTIAL_REMOVE of the first and COMPLETE_ADD of them all."""

    async def scenario(ctx: Ctx) -> Any:
        topic = await ctx.topic(kind, queues=1)
        lite = topic if kind == "LITE" else await ctx.topic("LITE", queues=1)
        group = await ctx.lite_group(lite, quota=quota) if bound else await ctx.group()
        w, settings = await _try_lite_consumer(ctx, group, topic)
        return {
            "settings": settings,
            "add": await _sync(w, group, topic, ADD, *names),
            "remove": await _sync(w, group, topic, REMOVE, names[0]),
            "complete add": await _sync(w, group, topic, COMPLETE_ADD, *names),
        }

    return scenario


async def _sync_other_lite_topic(ctx: Ctx) -> Any:
    """A lite group bound to one LITE topic: its consumer's Settings naming another, and a
    SyncLiteSubscription on the other."""
    bound, other = await ctx.topic("LITE", queues=1), await ctx.topic("LITE", queues=1)
    group = await ctx.lite_group(bound)
    w, settings = await _try_lite_consumer(ctx, group, other)
    return {"settings": settings, "add": await _sync(w, group, other, ADD, "a")}


async def _sync_unknown_group(ctx: Ctx) -> Any:
    topic = await ctx.topic("LITE", queues=1)
    group = ctx.name("never-created-group-l1", "group")
    w = ctx.wire()
    return await _sync(w, group, topic, ADD, "a")


async def _sync_over_quota(ctx: Ctx) -> Any:
    topic = await ctx.topic("LITE", queues=1)
    group = await ctx.lite_group(topic, quota=2)
    w = await _lite_consumer(ctx, group, topic)
    return {
        "two": await _sync(w, group, topic, ADD, "a", "b"),
        "third": await _sync(w, group, topic, ADD, "c"),
        "three at once": await _sync(w, group, topic, COMPLETE_ADD, "a", "b", "c"),
    }


async def _ack(w: Wire, group: str, topic: str, m: d.Message) -> str:
    """Ack one lite message, naming its lite topic."""
    reply = await w.stub.AckMessage(
        s.AckMessageRequest(
            group=d.Resource(name=group),
            topic=d.Resource(name=topic),
            entries=[
                s.AckMessageEntry(
                    message_id=m.system_properties.message_id,
                    receipt_handle=m.system_properties.receipt_handle,
                    lite_topic=m.system_properties.lite_topic,
                )
            ],
        ),
        metadata=w.md,
        timeout=5,
    )
    return _code(reply)


async def _receive_acking(
    w: Wire, group: str, topic: str, want: int, *, empty: int = 2
) -> tuple[list[d.Message], list[str]]:
    """Receive until `want` messages came or `empty` receives came back empty, acking each batch
    before the next receive. A FIFO group needs it: the real broker pops what its consume queue has
    dispatched so far (a send's reply does not wait for the dispatch), and holds the rest of a lite
    topic until that batch is acked, so a receive that does not ack may see only the first message."""
    got: list[d.Message] = []
    acks: list[str] = []
    while len(got) < want and empty > 0:
        batch = messages_of(await w.receive(group, topic, invisible=20))
        if not batch:
            empty -= 1
        for m in batch:
            acks.append(await _ack(w, group, topic, m))
        got.extend(batch)
    return got, acks


async def _lite_round_trip(ctx: Ctx) -> Any:
    """Subscribe a, send to a and b, receive (only a's, in order) acking naming the lite topic, receive
    again (nothing), then subscribe b and receive its message."""
    topic = await ctx.topic("LITE", queues=1)
    group = await ctx.lite_group(topic, fifo=True)
    producer = await _producer(ctx, topic)
    w = await _lite_consumer(ctx, group, topic)
    subscribed = await _sync(w, group, topic, ADD, "a")
    for i in range(3):
        for lt in ("a", "b"):
            reply = await producer.send(_lite_message(topic, lt, b"%s%d" % (lt.encode(), i)))
            assert reply.status.code == d.Code.OK, reply
    got, acks = await _receive_acking(w, group, topic, 3)
    after = messages_of(await w.receive(group, topic, invisible=20))
    await _sync(w, group, topic, ADD, "b")
    b = await _receive_all(w, group, topic, 3, empty=2, invisible=20)
    return {
        "subscribe": subscribed,
        "a": [
            (
                m.system_properties.lite_topic,
                m.body.decode(),
                d.MessageType.Name(m.system_properties.message_type),
            )
            for m in got
        ],
        "acks": acks,
        "after acks": len(after),
        "b": [m.body.decode() for m in b],
    }


async def _lite_nack_and_ack_without_lite_topic(ctx: Ctx) -> Any:
    """A lite message made visible again with ChangeInvisibleDuration naming its lite topic comes back
    with attempt 2; an ack that does not name the lite topic, then one that does."""
    topic = await ctx.topic("LITE", queues=1)
    group = await ctx.lite_group(topic)
    producer = await _producer(ctx, topic)
    w = await _lite_consumer(ctx, group, topic)
    await _sync(w, group, topic, ADD, "n")
    reply = await producer.send(_lite_message(topic, "n", b"x"))
    assert reply.status.code == d.Code.OK, reply
    first = await _receive_all(w, group, topic, 1, empty=2, invisible=20)
    m = first[0]
    change = s.ChangeInvisibleDurationRequest(
        group=d.Resource(name=group),
        topic=d.Resource(name=topic),
        receipt_handle=m.system_properties.receipt_handle,
        message_id=m.system_properties.message_id,
        lite_topic="n",
    )
    change.invisible_duration.seconds = 1
    changed = await w.stub.ChangeInvisibleDuration(change, metadata=w.md, timeout=5)
    again = await _receive_all(w, group, topic, 1, empty=4, invisible=20)
    entry = (
        s.AckMessageEntry(
            message_id=again[0].system_properties.message_id,
            receipt_handle=again[0].system_properties.receipt_handle,
        )
        if again
        else None
    )
    unnamed = None
    named = None
    if entry is not None:
        request = s.AckMessageRequest(
            group=d.Resource(name=group), topic=d.Resource(name=topic), entries=[entry]
        )
        unnamed = ctx.n(await w.stub.AckMessage(request, metadata=w.md, timeout=5))
        entry.lite_topic = "n"
        request = s.AckMessageRequest(
            group=d.Resource(name=group), topic=d.Resource(name=topic), entries=[entry]
        )
        named = ctx.n(await w.stub.AckMessage(request, metadata=w.md, timeout=5))
    return {
        "first attempt": m.system_properties.delivery_attempt,
        "change": _code(changed),
        "again": [(a.system_properties.lite_topic, a.system_properties.delivery_attempt) for a in again],
        "ack without lite topic": unnamed,
        "ack naming it": named,
    }


async def _offset_options(ctx: Ctx) -> Any:
    """Three messages in each of two lite topics before anyone subscribed; a new group subscribes one
    with `tail_n` 1, which counts back from the group's position: a group without one starts at the
    oldest message (upstream's `LiteSubscriptionRegistryImpl.resetOffset`); then the other with
    `OffsetOption` MAX (only what comes next). The MAX subscription waits until tl2 was received: the
    broker dispatches its commit log in order, so mx2 (sent before tl2) is in its queue by then and
    MAX lies past it."""
    topic = await ctx.topic("LITE", queues=1)
    group = await ctx.lite_group(topic, fifo=True)
    producer = await _producer(ctx, topic)
    for i in range(3):
        for lt in ("mx", "tl"):
            reply = await producer.send(_lite_message(topic, lt, b"%s%d" % (lt.encode(), i)))
            assert reply.status.code == d.Code.OK, reply
    w = await _lite_consumer(ctx, group, topic)
    tail = await _sync(w, group, topic, ADD, "tl", offset=d.OffsetOption(tail_n=1))
    tl, _ = await _receive_acking(w, group, topic, 3)
    most = await _sync(w, group, topic, ADD, "mx", offset=d.OffsetOption(policy=d.OffsetOption.Policy.MAX))
    reply = await producer.send(_lite_message(topic, "mx", b"mx-new"))
    assert reply.status.code == d.Code.OK, reply
    mx, _ = await _receive_acking(w, group, topic, 2, empty=1)
    return {
        "sync": [tail, most],
        "tl": [m.body.decode() for m in tl],
        "mx": [m.body.decode() for m in mx],
    }


ROWS: list[Row] = [
    Row("lite-route", _route_lite),
    Row("lite-settings-push-consumer", _settings_lite()),
    Row("lite-settings-group-quota-3", _settings_lite(quota=3)),
    # D20: 5.5.0 has no lite simple consumer ("Client type is not consumer"); the embedded server has.
    Row(
        "lite-settings-simple-consumer",
        _lite_simple_consumer_settings,
        deviation={"settings": ("OK", "grpc INTERNAL")},
    ),
    Row("lite-send", _send_lite),
    Row("lite-send-to-normal-topic", _bad_lite_send("s1", "NORMAL")),
    Row("lite-send-normal-message-to-lite-topic", _bad_lite_send("", message_type=d.MessageType.NORMAL)),
    Row("lite-send-illegal-name", _bad_lite_send("a b")),
    Row("lite-send-name-65-bytes", _bad_lite_send("x" * 65)),
    Row("lite-sync-add-remove-complete", _sync_row("LITE", "a", "b")),
    # Names are checked on PARTIAL_ADD only, by both (5.5.0's ClientActivity.syncLiteSubscription).
    Row("lite-sync-illegal-name", _sync_row("LITE", "a b")),
    # A lite group's consumer of another topic: both end its Telemetry stream (`lite.bind.topic`) and
    # answer ILLEGAL_TOPIC.
    Row("lite-sync-not-a-lite-topic", _sync_row("NORMAL", "a")),
    # D18: an ordinary group is refused lite mode by 5.5.0 ("regular group cannot use LITE mode", then
    # ILLEGAL_TOPIC for each subscription); the embedded server lets an unbound group subscribe.
    Row(
        "lite-sync-unbound-group",
        _sync_row("LITE", "a", bound=False),
        deviation={
            "settings": ("OK", "grpc INVALID_ARGUMENT"),
            "add": ("OK", "ILLEGAL_TOPIC"),
            "remove": ("OK", "ILLEGAL_TOPIC"),
            "complete add": ("OK", "ILLEGAL_TOPIC"),
        },
    ),
    # D19: an unknown group is CONSUMER_GROUP_NOT_FOUND here, as on every other RPC; 5.5.0 answers
    # ILLEGAL_CONSUMER_GROUP (it is no lite group).
    Row("lite-sync-other-lite-topic", _sync_other_lite_topic),
    Row(
        "lite-sync-unknown-group",
        _sync_unknown_group,
        deviation={"": ("CONSUMER_GROUP_NOT_FOUND", "ILLEGAL_CONSUMER_GROUP")},
    ),
    # D17: upstream's broker counts only its broker-wide maxLiteSubscriptionCount; the per-client quota
    # (lite.sub.client.quota) is the clients' to keep. The embedded server also enforces it.
    Row(
        "lite-sync-over-group-quota",
        _sync_over_quota,
        deviation={
            "third": ("LITE_SUBSCRIPTION_QUOTA_EXCEEDED", "OK"),
            "three at once": ("LITE_SUBSCRIPTION_QUOTA_EXCEEDED", "OK"),
        },
    ),
    Row("lite-round-trip", _lite_round_trip),
    Row("lite-offset-options", _offset_options),
    # D21: the embedded server finds a lite message by its lite topic, so an ack that does not name it
    # is INVALID_RECEIPT_HANDLE; 5.5.0 keeps no state per handle (D11) and answers OK.
    Row(
        "lite-nack-then-ack",
        _lite_nack_and_ack_without_lite_topic,
        timeout=90.0,
        deviation={
            "ack without lite topic.entries[0].status": ("INVALID_RECEIPT_HANDLE", "OK"),
            "ack without lite topic.status": ("INVALID_RECEIPT_HANDLE", "OK"),
        },
    ),
]


# ----------------------------------------------------------------------------------------------
# the test


def _params() -> list[Any]:
    out = []
    for row in ROWS:
        marks = []
        if row.timeout > ROW_TIMEOUT:
            marks.append(pytest.mark.timeout(row.timeout + 40.0))
        out.append(pytest.param(row, id=row.name, marks=marks))
    return out


@pytest.mark.parametrize("row", _params())
def test_differential_lite(row: Row, request: pytest.FixtureRequest) -> None:
    embedded: Engine = request.getfixturevalue("embedded_engine")
    info: ClusterInfo = request.getfixturevalue("rocketmq55")
    got_embedded, got_real = run_pair(embedded, real_engine(info, "rocketmq55"), row.scenario, row.timeout)
    assert got_real not in (None, {}, []), "a row must compare something"
    found = diff(got_embedded, got_real)
    assert found == dict(row.deviation), (found, got_embedded, got_real)
