"""End-to-end over real gRPC: route, telemetry, send, receive, ack (docs/protocol.md §3-§7)."""

from __future__ import annotations

import hashlib

from tests.server._wire import Wire, handles, messages_of, run, status_of
from thrust._codec.status import Code
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust.testing import embedded_server


def test_route_telemetry_send_receive_ack() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["orders:2"], groups=["g"]) as srv:
            async with Wire(srv.endpoints[0]) as w:
                route = await w.route("orders")
                assert route.status.code == Code.OK
                assert [mq.id for mq in route.message_queues] == [0, 1]
                for mq in route.message_queues:
                    assert mq.permission == d.Permission.READ_WRITE
                    assert mq.broker.id == 0
                    assert mq.broker.endpoints.addresses[0].port == srv.ports[0]
                    assert list(mq.accept_message_types) == [d.MessageType.NORMAL]
                await w.consumer("g", "orders")
                ids = await w.send_ok("orders", 3, tag="TagA", keys=["k1"], properties={"p": "v"})
                stream = await w.receive("g", "orders")
                # status OK first, then the messages, then delivery_timestamp (docs/protocol.md §6.4).
                kinds = [r.WhichOneof("content") for r in stream]
                assert kinds == ["status", "message", "message", "message", "delivery_timestamp"]
                assert status_of(stream).code == Code.OK
                got = messages_of(stream)
                assert sorted(m.system_properties.message_id for m in got) == sorted(ids)
                for m in got:
                    sp = m.system_properties
                    assert sp.body_digest.type == d.DigestType.MD5
                    assert sp.body_digest.checksum == hashlib.md5(m.body).hexdigest().upper()
                    assert sp.body_encoding == d.Encoding.IDENTITY
                    assert sp.delivery_attempt == 1
                    assert sp.receipt_handle
                    assert sp.tag == "TagA"
                    assert list(sp.keys) == ["k1"]
                    assert m.user_properties["p"] == "v"
                    assert sp.message_type == d.MessageType.NORMAL
                    assert sp.store_host == "broker-0"
                    assert sp.HasField("store_timestamp") and sp.HasField("queue_offset")
                    assert sp.born_host == "test-host"
                ack = await w.ack("g", "orders", handles(stream))
                assert ack.status.code == Code.OK
                assert [e.status.code for e in ack.entries] == [Code.OK] * 3
                assert srv.stats.calls["AckMessage"] == 1
                assert srv.stats.entries["AckMessage"] == 3
                assert srv.brokers[0].inflight("g", "orders") == 0

    run(scenario())
