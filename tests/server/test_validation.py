"""One status code per validation rule, over real gRPC (docs/protocol.md §2.3)."""

from __future__ import annotations

import time

import grpc
import pytest

from tests.server._wire import Wire, handles, message, messages_of, run, status_of
from thrust._codec.filter import MATCH_ALL
from thrust._codec.status import Code
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.server.clock import ManualClock
from thrust.testing import embedded_server


def _send_code(msg: d.Message, **server: object) -> tuple[int, list[int]]:
    async def scenario() -> tuple[int, list[int]]:
        async with embedded_server(topics=["t"], **server) as srv, Wire(srv.endpoints[0]) as w:  # type: ignore[arg-type]
            response = await w.send(msg)
            return response.status.code, [e.status.code for e in response.entries]

    return run(scenario())


@pytest.mark.parametrize(
    ("build", "code"),
    [
        (lambda: message("t", b"x" * (4 * 1024 * 1024 + 1)), Code.MESSAGE_BODY_TOO_LARGE),
        (lambda: message("t", b""), Code.MESSAGE_BODY_EMPTY),
        (lambda: message("t", tag="a|b"), Code.ILLEGAL_MESSAGE_TAG),
        (lambda: message("t", tag="  "), Code.ILLEGAL_MESSAGE_TAG),
        (lambda: message("t", keys=["bad\x01key"]), Code.ILLEGAL_MESSAGE_KEY),
        (lambda: message("t", properties={"UNIQ_KEY": "x"}), Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        (lambda: message("t", properties={"k\x02": "v"}), Code.ILLEGAL_MESSAGE_PROPERTY_KEY),
        (lambda: message("t", message_id=""), Code.ILLEGAL_MESSAGE_ID),
        (lambda: message("t", delivery_timestamp=time.time() + 2 * 86400), Code.ILLEGAL_DELIVERY_TIME),
        (lambda: message("t", message_group="g" * 64), Code.ILLEGAL_MESSAGE_GROUP),
    ],
    ids=[
        "body-4MiB+1",
        "empty-body",
        "tag-with-bar",
        "blank-tag",
        "control-char-key",
        "reserved-property",
        "control-char-property",
        "missing-message-id",
        "delivery-time-too-far",
        "message-group-too-long",
    ],
)
def test_send_entry_validation(build: object, code: Code) -> None:
    # The proxy validates every message before sending any: the request fails as a whole, with the
    # code on top and no entries (SendMessageActivity.buildMessage; tests/conformance/test_differential).
    top, entries = _send_code(build())  # type: ignore[operator]
    assert entries == []
    assert top == code


def test_body_of_exactly_4mib_is_accepted() -> None:
    top, entries = _send_code(message("t", b"x" * (4 * 1024 * 1024)))
    assert (top, entries) == (Code.OK, [Code.OK])


def test_illegal_topic_name() -> None:
    top, entries = _send_code(message("bad topic!"))
    assert top == Code.ILLEGAL_TOPIC and entries == []


def test_unknown_topic_without_auto_create() -> None:
    top, _ = _send_code(message("nope"), auto_create=False)
    assert top == Code.TOPIC_NOT_FOUND

    async def route() -> int:
        async with embedded_server(auto_create=False) as srv, Wire(srv.endpoints[0]) as w:
            return (await w.route("nope")).status.code

    assert run(route()) == Code.TOPIC_NOT_FOUND


def test_unknown_topic_with_auto_create() -> None:
    top, _ = _send_code(message("fresh"), auto_create=True)
    assert top == Code.OK


def test_message_corrupted_for_no_messages_and_mixed_topics() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["a", "b"]) as srv, Wire(srv.endpoints[0]) as w:
            assert (await w.send()).status.code == Code.MESSAGE_CORRUPTED
            assert (await w.send(message("a"), message("b"))).status.code == Code.MESSAGE_CORRUPTED

    run(scenario())


def test_one_invalid_message_fails_the_whole_request() -> None:
    """As the proxy: one bad message of a batch refuses the whole request (its code on top, no entries)
    and stores nothing (SendMessageActivity.buildMessage throws before the batch is sent)."""

    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv, Wire(srv.endpoints[0]) as w:
            response = await w.send(message("t"), message("t", b""))
            assert response.status.code == Code.MESSAGE_BODY_EMPTY
            assert list(response.entries) == []
            assert srv.stats.entries["SendMessage"] == 0
            first, second = message("t"), message("t")
            ok = await w.send(first, second)
            # A batch is one entry (the proxy's one SendResult for a MessageBatch): the first message's
            # offset and key (as transaction id), and a broker id that is not the client's.
            [entry] = ok.entries
            assert entry.status.code == Code.OK
            assert entry.transaction_id == first.system_properties.message_id
            assert entry.message_id not in (
                first.system_properties.message_id,
                second.system_properties.message_id,
            )
            assert srv.stats.entries["SendMessage"] == 2
            single = await w.send(message("t"))
            # A single message's entry names its id, and its id as the transaction id (as the proxy).
            assert [e.transaction_id for e in single.entries] == [e.message_id for e in single.entries]

    run(scenario())


def test_missing_client_id_on_unary_stream_and_telemetry() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv, Wire(srv.endpoints[0], client_id=None) as w:
            assert (await w.route("t")).status.code == Code.CLIENT_ID_REQUIRED
            assert (await w.send(message("t"))).status.code == Code.CLIENT_ID_REQUIRED
            stream = await w.receive("g", "t")
            # Refused before the receive starts: the status alone, no delivery_timestamp (the proxy's
            # request pipeline, GrpcMessagingApplication.validateContext).
            assert [r.WhichOneof("content") for r in stream] == ["status"]
            assert status_of(stream).code == Code.CLIENT_ID_REQUIRED
            call = w.open_telemetry()
            # The server refuses at call start, before reading (a write may race with that refusal).
            first = await call.read()
            assert first.status.code == Code.CLIENT_ID_REQUIRED
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call.read()
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    run(scenario())


def test_receive_validation() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv, Wire(srv.endpoints[0]) as w:
            await w.consumer("g", "t")
            code = lambda stream: status_of(stream).code  # noqa: E731
            assert code(await w.receive("bad group!", "t")) == Code.ILLEGAL_CONSUMER_GROUP
            assert code(await w.receive("g", "t", invisible=5)) == Code.ILLEGAL_INVISIBLE_TIME
            assert code(await w.receive("g", "t", invisible=13 * 3600)) == Code.ILLEGAL_INVISIBLE_TIME
            assert code(await w.receive("g", "t", invisible=None)) == Code.ILLEGAL_INVISIBLE_TIME
            assert (
                code(await w.receive("g", "t", expression="a > ", filter_type=2))
                == Code.ILLEGAL_FILTER_EXPRESSION
            )
            # Less than the 5 s minimum polling time left before the deadline (docs/protocol.md §6.2).
            assert code(await w.receive("g", "t", rpc_timeout=3)) == Code.ILLEGAL_POLLING_TIME
            assert code(await w.receive("g", "$bad")) == Code.ILLEGAL_TOPIC

    run(scenario())


def test_receipt_handles_expired_malformed_superseded() -> None:
    # On a manual clock: the handle expires when the test moves time past its invisible duration.
    clock = ManualClock()

    async def scenario() -> None:
        async with (
            embedded_server(topics=["t"], groups=["g"], clock=clock) as srv,
            Wire(srv.endpoints[0]) as w,
        ):
            await w.consumer("g", "t")
            [mid] = await w.send_ok("t")
            # An expiry of the server's own: pop with a short invisible time straight from the broker core.
            [delivery] = srv.brokers[0].pop(
                client_id="test-client",
                group="g",
                topic="t",
                queue_id=-1,
                message_filter=MATCH_ALL,
                batch_size=1,
                invisible_duration=0.2,
                auto_renew=False,
                attempt_id=None,
                now=clock.time(),
            )
            clock.advance(0.3)
            ack = await w.ack("g", "t", [(mid, delivery.receipt_handle)])
            assert ack.status.code == Code.INVALID_RECEIPT_HANDLE
            change = await w.change_invisible("g", "t", mid, delivery.receipt_handle, 10)
            assert change.status.code == Code.INVALID_RECEIPT_HANDLE
            ack = await w.ack("g", "t", [(mid, "not a handle")])
            assert ack.entries[0].status.code == Code.INVALID_RECEIPT_HANDLE
            # ChangeInvisibleDuration returns a new handle; the old one is dead (docs/protocol.md §7.4).
            stream = await w.receive("g", "t")
            [(mid2, handle)] = handles(stream)
            assert mid2 == mid and messages_of(stream)[0].system_properties.delivery_attempt == 2
            change = await w.change_invisible("g", "t", mid, handle, 30)
            assert change.status.code == Code.OK and change.receipt_handle != handle
            assert (await w.ack("g", "t", [(mid, handle)])).status.code == Code.INVALID_RECEIPT_HANDLE
            assert (await w.ack("g", "t", [(mid, change.receipt_handle)])).status.code == Code.OK

    run(scenario())


def test_change_invisible_duration_limits() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv, Wire(srv.endpoints[0]) as w:
            await w.consumer("g", "t")
            await w.send_ok("t")
            [(mid, handle)] = handles(await w.receive("g", "t"))
            too_long = await w.change_invisible("g", "t", mid, handle, 12 * 3600 + 1)
            assert too_long.status.code == Code.ILLEGAL_INVISIBLE_TIME

    run(scenario())


def test_ack_mixed_entries_multiple_results() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv, Wire(srv.endpoints[0]) as w:
            await w.consumer("g", "t")
            await w.send_ok("t", 2)
            entries = handles(await w.receive("g", "t"))
            response = await w.ack("g", "t", [*entries, ("MSGX", "garbage")])
            assert response.status.code == Code.MULTIPLE_RESULTS
            assert [e.status.code for e in response.entries] == [
                Code.OK,
                Code.OK,
                Code.INVALID_RECEIPT_HANDLE,
            ]
            assert [e.receipt_handle for e in response.entries] == [h for _, h in entries] + ["garbage"]
            # Every entry failing alike: that code at the top (docs/protocol.md §7.3).
            again = await w.ack("g", "t", entries)
            assert again.status.code == Code.INVALID_RECEIPT_HANDLE

    run(scenario())


def test_settings_validation_and_heartbeat() -> None:
    async def scenario() -> None:
        async with embedded_server() as srv, Wire(srv.endpoints[0], client_id="c-hb") as w:
            heartbeat = await w.stub.Heartbeat(
                s.HeartbeatRequest(client_type=d.ClientType.PRODUCER), metadata=w.md, timeout=5
            )
            assert heartbeat.status.code == Code.UNRECOGNIZED_CLIENT_TYPE
            bad = d.Settings(client_type=d.ClientType.PRODUCER, publishing=d.Publishing())
            bad.client_properties["rocketmq.reserved"] = "x"
            _, reply = await w.handshake(bad)
            assert reply.status.code == Code.INVALID_CLIENT_PROPERTIES
            too_many = d.Settings(client_type=d.ClientType.PRODUCER, publishing=d.Publishing())
            for i in range(33):
                too_many.client_properties[f"k{i}"] = "v"
            _, reply = await w.handshake(too_many)
            assert reply.status.code == Code.INVALID_CLIENT_PROPERTIES
            fine = d.Settings(client_type=d.ClientType.PRODUCER, publishing=d.Publishing())
            fine.client_properties["app.name"] = "demo"
            _, reply = await w.handshake(fine)
            assert reply.status.code == Code.OK
            heartbeat = await w.stub.Heartbeat(
                s.HeartbeatRequest(client_type=d.ClientType.PRODUCER), metadata=w.md, timeout=5
            )
            assert heartbeat.status.code == Code.OK
            # PUBSUB_NOT_SET is the one gRPC error (docs/protocol.md §2.2).
            call = w.open_telemetry()
            await call.write(s.TelemetryCommand(settings=d.Settings(client_type=d.ClientType.PRODUCER)))
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await call.read()
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    run(scenario())


def test_offset_rpcs_answer_not_implemented() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv, Wire(srv.endpoints[0]) as w:
            mq = d.MessageQueue(topic=d.Resource(name="t"), id=0)
            group = d.Resource(name="g")
            got = await w.stub.GetOffset(s.GetOffsetRequest(group=group, message_queue=mq), metadata=w.md)
            assert got.status.code == Code.NOT_IMPLEMENTED
            upd = await w.stub.UpdateOffset(
                s.UpdateOffsetRequest(group=group, message_queue=mq), metadata=w.md
            )
            assert upd.status.code == Code.NOT_IMPLEMENTED
            qo = await w.stub.QueryOffset(s.QueryOffsetRequest(message_queue=mq), metadata=w.md)
            assert qo.status.code == Code.NOT_IMPLEMENTED
            pulled = [
                r
                async for r in w.stub.PullMessage(
                    s.PullMessageRequest(group=group, message_queue=mq), metadata=w.md
                )
            ]
            assert [r.status.code for r in pulled] == [Code.NOT_IMPLEMENTED]

    run(scenario())


def test_undecodable_request_is_invalid_argument() -> None:
    async def scenario() -> None:
        async with embedded_server() as srv, Wire(srv.endpoints[0]) as w:
            for method in ("/apache.rocketmq.v2.MessagingService/SendMessage",):
                call = w.channel.unary_unary(method, request_serializer=None, response_deserializer=None)
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await call(b"\xff\xff\xff", metadata=w.md, timeout=5)
                assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            stream = w.channel.unary_stream("/apache.rocketmq.v2.MessagingService/ReceiveMessage")
            with pytest.raises(grpc.aio.AioRpcError) as info:
                _ = [r async for r in stream(b"\xff\xff\xff", metadata=w.md, timeout=5)]
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    run(scenario())
