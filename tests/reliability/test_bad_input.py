"""Bad input B1-B17 (docs/reliability.md §4): the client rejects it before any I/O with a typed error, and the
server, reached with the client bypassed, answers the code listed there (defence in depth).

B11 (malformed protobuf, >= 10k cases) lives in test_fuzz.py; B13 (credentials) in test_security.py.
The server's per-rule codes are covered in depth by tests/server/test_validation.py; here each row is
checked end to end with the thrust client.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import grpc
import pytest

import thrust
from tests.reliability._util import assert_report, body, drain, pid_of, run, send_recorded
from tests.server._wire import Wire, message, messages_of, status_of
from thrust._codec.digest import DigestType, compute_digest
from thrust._codec.status import Code
from thrust.reliability.history import HistoryRecorder, check
from thrust.testing import embedded_server

MiB = 1024 * 1024
M = thrust.Message

# (id, build the message, expected client status code or None for "any ValidationError")
_REJECTED: list[tuple[str, Callable[[], thrust.Message], int | None]] = [
    ("B1-body-4MiB+1", lambda: M(topic="t", body=b"x" * (4 * MiB + 1)), Code.MESSAGE_BODY_TOO_LARGE),
    ("B2-empty-body", lambda: M(topic="t", body=b""), Code.MESSAGE_BODY_EMPTY),
    ("B3-topic-empty", lambda: M(topic="", body=b"x"), Code.ILLEGAL_TOPIC),
    ("B3-topic-slash", lambda: M(topic="in/valid", body=b"x"), Code.ILLEGAL_TOPIC),
    ("B3-topic-128", lambda: M(topic="a" * 128, body=b"x"), Code.ILLEGAL_TOPIC),
    ("B3-topic-non-ascii", lambda: M(topic="tö", body=b"x"), Code.ILLEGAL_TOPIC),
    ("B3-topic-rmq_sys", lambda: M(topic="rmq_sys_x", body=b"x"), Code.ILLEGAL_TOPIC),
    ("B3-topic-TBW102", lambda: M(topic="TBW102", body=b"x"), Code.ILLEGAL_TOPIC),
    ("B6-tag-bar", lambda: M(topic="t", body=b"x", tag="a|b"), Code.ILLEGAL_MESSAGE_TAG),
    ("B6-tag-nul", lambda: M(topic="t", body=b"x", tag="a\x00"), Code.ILLEGAL_MESSAGE_TAG),
    ("B6-tag-blank", lambda: M(topic="t", body=b"x", tag="   "), Code.ILLEGAL_MESSAGE_TAG),
    ("B6-tag-16KiB+1", lambda: M(topic="t", body=b"x", tag="a" * (16 * 1024 + 1)), None),
    ("B6-key-nul", lambda: M(topic="t", body=b"x", keys=["a\x00"]), Code.ILLEGAL_MESSAGE_KEY),
    (
        "B7-129-properties",
        lambda: M(topic="t", body=b"x", properties={f"k{i}": "v" for i in range(129)}),
        Code.MESSAGE_PROPERTIES_TOO_LARGE,
    ),
    (
        "B7-properties-16KiB+1",
        lambda: M(topic="t", body=b"x", properties={"k": "v" * (16 * 1024)}),
        Code.MESSAGE_PROPERTIES_TOO_LARGE,
    ),
    (
        "B7-system-key",
        lambda: M(topic="t", body=b"x", properties={"UNIQ_KEY": "v"}),
        Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
    ),
    ("B8-group-65", lambda: M(topic="f", body=b"x", message_group="g" * 65), Code.ILLEGAL_MESSAGE_GROUP),
    (
        "B8-fifo-to-normal",
        lambda: M(topic="t", body=b"x", message_group="g"),
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    (
        "B8-delay-to-fifo",
        lambda: M(topic="f", body=b"x", message_group="g", delay=5),
        Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
    ),
    (
        "B10-delivery-beyond-24h",
        lambda: M(topic="d", body=b"x", delivery_time=time.time() + 2 * 86400),
        Code.ILLEGAL_DELIVERY_TIME,
    ),
]


def test_b1_to_b10_client_rejects_bad_messages_before_any_io() -> None:
    """Every bad message of B1-B3, B6-B8 and B10 raises a ValidationError with its code
    (docs/reliability.md §4), and no SendMessage reaches the server; the producer keeps working afterwards."""

    async def scenario() -> None:
        async with embedded_server(topics=["t", "f:1:FIFO", "d:1:DELAY"]) as srv:
            ep = srv.endpoints[0]
            async with thrust.Producer(endpoints=ep, topics=["t", "f", "d"]) as p:
                for name, build, code in _REJECTED:
                    calls = srv.stats.calls["SendMessage"]
                    with pytest.raises(thrust.ValidationError) as info:
                        await p.send(build())
                    if code is not None:
                        assert info.value.code == code, (name, info.value)
                    assert srv.stats.calls["SendMessage"] == calls, f"{name} reached the server"
                # Exactly 4 MiB is fine (B1), and the producer is unharmed by the refusals.
                await p.send(M(topic="t", body=b"x" * (4 * MiB)))
                await p.send(M(topic="t", body=b"ok"))

    run(scenario)


# B10 decision: docs/reliability.md §4 (B10) asked to reject a delivery timestamp in the past with
# ILLEGAL_DELIVERY_TIME. The upstream proxy does not: `SendMessageActivity.validateDelayTime` refuses only a
# timestamp more than `ProxyConfig.maxDelayTimeMills` (1 day) ahead, and the broker's timer delivers a past
# timestamp at once. Real clusters are the reference for client and server, so thrust follows upstream
# (a producer whose clock is behind the server's, or a computed "deliver at" that has just passed, must not
# fail), and this test pins that behaviour instead of that row.
def test_b10_past_delivery_time_is_delivered_at_once_and_beyond_24h_refused() -> None:
    """B10 as upstream behaves: a delivery timestamp in the past is accepted by the client and the server
    and delivered immediately; one more than 24 h ahead is refused with ILLEGAL_DELIVERY_TIME (40012), by
    the client's validation before any I/O (ValidationError) and by the server when the client is bypassed;
    just under 24 h ahead is accepted."""

    async def scenario() -> None:
        async with embedded_server(topics=["d:1:DELAY"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.Producer(endpoints=ep, topics=["d"]) as p,
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"d": "*"}, await_duration=1
                ) as c,
            ):
                calls = srv.stats.calls["SendMessage"]
                with pytest.raises(thrust.ValidationError) as info:
                    await p.send(M(topic="d", body=b"late", delivery_time=time.time() + 86400 + 60))
                assert info.value.code == Code.ILLEGAL_DELIVERY_TIME
                assert srv.stats.calls["SendMessage"] == calls, "the client sent a > 24 h delivery time"
                sent_at = time.monotonic()
                await p.send(M(topic="d", body=b"past", delivery_time=time.time() - 3600))
                async with Wire(ep) as w:
                    now = time.time()
                    assert (
                        await w.send(message("d", b"wire-past", delivery_timestamp=now - 3600))
                    ).status.code == (Code.OK)
                    beyond = await w.send(message("d", b"beyond", delivery_timestamp=now + 86400 + 60))
                    assert beyond.status.code == Code.ILLEGAL_DELIVERY_TIME
                    within = await w.send(message("d", b"within", delivery_timestamp=now + 86400 - 60))
                    assert within.status.code == Code.OK
                got: list[thrust.ReceivedMessage] = []
                while len(got) < 2:
                    batch = await c.receive(32, 30)
                    # "At once": visible when sent, so no receive comes back empty before both arrived.
                    assert batch, f"a receive found nothing {time.monotonic() - sent_at:.1f} s after the send"
                    got += batch
                assert sorted(m.body for m in got) == [b"past", b"wire-past"]
                for m in got:
                    await c.ack(m)

    run(scenario)


def test_b4_unknown_topic_start_and_send_fail_fast_typed() -> None:
    """B4: with auto-create off (the CLI's default), an unknown topic fails `start()` and `send()` with
    NotFoundError (TOPIC_NOT_FOUND) after one route query (fast: never retried), and nothing is stored."""

    async def scenario() -> None:
        async with embedded_server(topics=["t"], auto_create=False) as srv:
            ep = srv.endpoints[0]
            with pytest.raises(thrust.NotFoundError) as info:
                async with thrust.Producer(endpoints=ep, topics=["t", "nosuch"]):
                    pass
            assert info.value.code == Code.TOPIC_NOT_FOUND
            async with thrust.Producer(endpoints=ep, topics=["t"]) as p:
                for topic in ("nosuch", "%DLQ%g"):
                    # %DLQ% topics exist only once something is dead-lettered: refused the same way.
                    routes = srv.stats.calls["QueryRoute"]
                    with pytest.raises(thrust.NotFoundError) as info:
                        await p.send(M(topic=topic, body=b"x"))
                    assert info.value.code == Code.TOPIC_NOT_FOUND and not info.value.retriable
                    assert srv.stats.calls["QueryRoute"] - routes == 1, topic
            assert srv.stats.calls["SendMessage"] == 0
            assert srv.stats.entries["SendMessage"] == 0

    run(scenario)


@pytest.mark.parametrize(
    "group",
    ["bad group!", "g" * 121, "DEFAULT_CONSUMER", "TOOLS_CONSUMER", "SELF_TEST_C_GROUP", "CID_RMQ_SYS_x"],
    ids=[
        "illegal-chars",
        "121-chars",
        "DEFAULT_CONSUMER",
        "TOOLS_CONSUMER",
        "SELF_TEST_C_GROUP",
        "CID_RMQ_SYS",
    ],
)
def test_b5_bad_consumer_group_is_refused(group: str) -> None:
    """B5 (docs/protocol.md §5.4: a group of at most 120 characters, system groups such as DEFAULT_CONSUMER ->
    ILLEGAL_CONSUMER_GROUP 40003): the client refuses the group with a ValidationError carrying 40003
    before any RPC (simple and push consumer alike), and the server, reached with the client bypassed,
    answers ReceiveMessage and QueryAssignment with 40003. Before the fix
    the 121-character and reserved names were accepted by both."""

    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv:
            ep = srv.endpoints[0]
            with pytest.raises(thrust.ValidationError) as info:
                thrust.SimpleConsumer(endpoints=ep, group=group, subscriptions={"t": "*"}, await_duration=1)
            assert info.value.code == Code.ILLEGAL_CONSUMER_GROUP, info.value
            with pytest.raises(thrust.ValidationError) as info:
                thrust.PushConsumer(
                    endpoints=ep, group=group, subscriptions={"t": "*"}, listener=lambda m: None
                )
            assert info.value.code == Code.ILLEGAL_CONSUMER_GROUP, info.value
            assert sum(srv.stats.calls.values()) == 0, "a refused group reached the server"
            async with Wire(ep) as w:
                assert status_of(await w.receive(group, "t")).code == Code.ILLEGAL_CONSUMER_GROUP
                assert (await w.assignment("t", group)).status.code == Code.ILLEGAL_CONSUMER_GROUP

    run(scenario)


def test_b5_longest_legal_group_is_accepted() -> None:
    """B5 boundary: a 120-character group (the limit) is accepted by the client and the server."""

    async def scenario() -> None:
        group = "g" * 120
        async with embedded_server(topics=["t"]) as srv:
            ep = srv.endpoints[0]
            async with Wire(ep) as w:
                assert (await w.assignment("t", group)).status.code == Code.OK
            async with (
                thrust.Producer(endpoints=ep, topics=["t"]) as p,
                thrust.SimpleConsumer(
                    endpoints=ep, group=group, subscriptions={"t": "*"}, await_duration=1
                ) as c,
            ):
                await p.send(M(topic="t", body=b"x"))
                [m] = await c.receive(1, 30)
                await c.ack(m)

    run(scenario)


def test_b9_invisible_duration_and_batch_size_out_of_range_rejected() -> None:
    """B9: invisible 9 s / 12 h + 1 ms -> ILLEGAL_INVISIBLE_TIME before I/O; batch 0 / 33 rejected; the
    server answers the same codes when the client is bypassed."""

    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with thrust.SimpleConsumer(
                endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=1
            ) as c:
                calls = srv.stats.calls["ReceiveMessage"]
                for n, invisible, code in [
                    (1, 9, Code.ILLEGAL_INVISIBLE_TIME),
                    (1, 12 * 3600 + 0.001, Code.ILLEGAL_INVISIBLE_TIME),
                    (0, 30, None),
                    (33, 30, None),
                ]:
                    with pytest.raises(thrust.ValidationError) as info:
                        await c.receive(n, invisible)
                    if code is not None:
                        assert info.value.code == code
                assert srv.stats.calls["ReceiveMessage"] == calls
            with pytest.raises(thrust.ValidationError):
                thrust.SimpleConsumer(endpoints=ep, group="g", subscriptions={"t": "*"}, invisible_duration=9)

    run(scenario)


def test_b12_missing_client_id_and_unknown_client_type_server_side() -> None:
    """B12 (client bypassed): no x-mq-client-id -> CLIENT_ID_REQUIRED 40017."""

    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv, Wire(srv.endpoints[0], client_id=None) as w:
            assert (await w.route("t")).status.code == Code.CLIENT_ID_REQUIRED
            assert (await w.send(message("t"))).status.code == Code.CLIENT_ID_REQUIRED

    run(scenario)


def test_b1_b2_b6_b7_b8_server_refuses_when_the_client_is_bypassed() -> None:
    """Defence in depth: the raw SendMessage of each bad message answers the code of
    docs/reliability.md §4."""
    cases: list[tuple[Any, int]] = [
        (message("t", b"x" * (4 * MiB + 1)), Code.MESSAGE_BODY_TOO_LARGE),
        (message("t", b"x" * (4 * MiB)), Code.OK),
        (message("t", b""), Code.MESSAGE_BODY_EMPTY),
        (message("t", tag="a|b"), Code.ILLEGAL_MESSAGE_TAG),
        (message("t", keys=["k\x00"]), Code.ILLEGAL_MESSAGE_KEY),
        (message("t", properties={"UNIQ_KEY": "x"}), Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        (message("f", message_group="g" * 65), Code.ILLEGAL_MESSAGE_GROUP),
        (message("t", delivery_timestamp=time.time() + 2 * 86400), Code.ILLEGAL_DELIVERY_TIME),
    ]

    async def scenario() -> None:
        async with embedded_server(topics=["t", "f:1:FIFO"]) as srv, Wire(srv.endpoints[0]) as w:
            for msg, code in cases:
                response = await w.send(msg)
                assert response.status.code == code, (code, response.status)

    run(scenario)


def test_b15_send_with_a_wrong_body_digest_is_refused_by_the_server() -> None:
    """B15 (send side, client bypassed): a message whose body_digest (CRC32, MD5 or SHA1) does not match
    its body is answered BAD_REQUEST 40000 for the whole request (no entries, as the proxy answers any
    invalid message) and nothing is stored; a matching digest, in upper or lower case hex, is accepted,
    and no digest means no check. Before the fix the server never
    read the producer's digest and stored the message (OK)."""
    payload = b"payload"

    def with_digest(kind: int, checksum: str) -> Any:
        msg = message("t", payload)
        msg.system_properties.body_digest.type = kind  # type: ignore[assignment]
        msg.system_properties.body_digest.checksum = checksum
        return msg

    wrong = [
        with_digest(DigestType.CRC32, compute_digest(DigestType.CRC32, b"other")),
        with_digest(DigestType.MD5, "0" * 32),
        with_digest(DigestType.SHA1, compute_digest(DigestType.SHA1, payload + b"!")),
        with_digest(DigestType.MD5, ""),
    ]
    right = [
        with_digest(kind, checksum)
        for kind in DigestType
        for checksum in (compute_digest(kind, payload), compute_digest(kind, payload).lower())
    ]

    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv, Wire(srv.endpoints[0]) as w:
            for msg in wrong:
                response = await w.send(msg)
                assert response.status.code == Code.BAD_REQUEST, response
                assert list(response.entries) == []
            assert srv.stats.entries["SendMessage"] == 0, "a message with a wrong digest was stored"
            for msg in right:
                assert (await w.send(msg)).status.code == Code.OK
            assert (await w.send(message("t", payload))).status.code == Code.OK  # no digest: no check
            # A bad digest in a batch refuses the whole batch, as any invalid message does at the proxy
            # (SendMessageActivity.buildMessage validates all before sending any).
            response = await w.send(message("t", payload), with_digest(DigestType.MD5, "0" * 32))
            assert list(response.entries) == []
            assert response.status.code == Code.BAD_REQUEST
            assert srv.stats.entries["SendMessage"] == len(right) + 1
            # Only the accepted messages can be received.
            stream = await w.receive("g", "t", batch=32)
            assert len(messages_of(stream)) == len(right) + 1

    run(scenario)


@pytest.mark.slow
def test_b15_corrupted_delivery_is_never_handed_over_and_comes_back_intact(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """B15 (receive side): the server's first delivery of a message carries a wrong MD5 digest; the client
    does not hand it to the application, releases it (ChangeInvisibleDuration) at once, and the next,
    intact delivery is received and acked; P1 holds."""
    import thrust.server.message_codec as server_convert

    real_fill = server_convert._fill
    corrupted: list[str] = []

    def corrupting_fill(out: Any, m: Any) -> Any:
        sp = real_fill(out, m)
        if m.body.startswith(b"victim") and m.message_id not in corrupted:
            corrupted.append(m.message_id)
            sp.body_digest.checksum = "0" * 32
        return sp

    monkeypatch.setattr(server_convert, "_fill", corrupting_fill)

    async def scenario() -> None:
        rec = HistoryRecorder()
        async with embedded_server(topics=["t:1"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.Producer(endpoints=ep, topics=["t"]) as p,
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=1
                ) as c,
            ):
                await send_recorded(rec, p, M(topic="t", body=body("victim")), "victim")
                await send_recorded(rec, p, M(topic="t", body=body("fine")), "fine")
                seen = await drain(rec, c, ["victim", "fine"], budget=20, idle=0.5)
                assert seen == {"victim", "fine"}
                assert corrupted, "the fault was not injected"
                assert srv.stats.calls["ChangeInvisibleDuration"] >= 1
        report = check(rec)
        assert_report(report, "P1", "P2")
        # The corrupted copy never reached the application: "victim" was delivered exactly once.
        assert report.deliveries == 2, report.summary

    run(scenario)


def test_b14_garbage_or_unreachable_endpoint() -> None:
    """B14: `"host:notaport"` and `""` raise ValueError before any I/O; an unreachable endpoint fails
    `start()` with a typed error within its bound."""
    for bad in ("host:notaport", "", "   "):
        with pytest.raises(ValueError):
            thrust.Producer(endpoints=bad)

    async def scenario() -> None:
        t0 = time.monotonic()
        # Refused connections: a transport failure (UNAVAILABLE), not a wait for a deadline.
        with pytest.raises(thrust.ConnectionError) as info:
            async with thrust.Producer(endpoints="127.0.0.1:1", topics=["t"], request_timeout=1.0):
                pass
        assert "UNAVAILABLE" in str(info.value)
        # The P3 bound (docs/reliability.md §1): max_startup_attempts (3) x request_timeout + 1 s.
        assert time.monotonic() - t0 <= 3 * 1.0 + 1.0

    run(scenario)


def test_b16_unknown_rpc_and_unsupported_feature_typed() -> None:
    """B16: an unknown RPC answers UNIMPLEMENTED; recalling a normal message (a garbage recall handle)
    raises a typed error, not a crash."""

    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv:
            ep = srv.endpoints[0]
            async with grpc.aio.insecure_channel(ep) as channel:
                call = channel.unary_unary("/apache.rocketmq.v2.MessagingService/NoSuchRpc")
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await call(b"", timeout=5)
                assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
            async with thrust.Producer(endpoints=ep, topics=["t"]) as p:
                receipt = await p.send(M(topic="t", body=b"normal"))
                assert not receipt.recall_handle  # only delay messages can be recalled
                with pytest.raises(thrust.BadRequestError) as info:
                    await p.recall("t", "not-a-recall-handle")
                assert info.value.code == Code.BAD_REQUEST and "recall handle" in info.value.message

    run(scenario)


def test_b17_utf8_keys_tags_and_properties_round_trip() -> None:
    """B17: Chinese and emoji in keys, tags and properties go through unchanged end to end; P1."""
    tag, keys, props = "标签🙂", ("键一", "🔑"), {"属性": "值🚀", "emoji🙂": "ünïcødé"}

    async def scenario() -> None:
        rec = HistoryRecorder()
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.Producer(endpoints=ep, topics=["t"]) as p,
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": tag}, await_duration=1
                ) as c,
            ):
                msg = M(topic="t", body=body("u8"), tag=tag, keys=keys, properties=props)
                await send_recorded(rec, p, msg, "u8")
                got: list[thrust.ReceivedMessage] = []
                while not got:
                    got = await c.receive(32, 30)
                [m] = got
                assert (pid_of(m), m.tag, m.keys, dict(m.properties)) == ("u8", tag, keys, props)
                ref = rec.delivered("u8", m.message_id, attempt=m.delivery_attempt)
                await m.ack()
                rec.acked(ref)
        assert_report(check(rec), "P1", "P2")

    run(scenario)
