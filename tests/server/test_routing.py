"""QueryRoute, QueryAssignment and the Telemetry settings reply (docs/protocol.md §3, §4)."""

from __future__ import annotations

from tests.server._wire import Wire, handles, message, messages_of, run
from thrust._codec.status import Code
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.testing import embedded_server


def test_query_route_with_three_brokers_lists_all_of_them() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t:3:MIXED"], brokers=3) as srv:
            assert len(srv.ports) == 3 and len(set(srv.ports)) == 3
            for endpoint in srv.endpoints:
                async with Wire(endpoint) as w:
                    route = await w.route("t")
                    assert route.status.code == Code.OK
                    names = sorted({mq.broker.name for mq in route.message_queues})
                    assert names == ["broker-0", "broker-1", "broker-2"]
                    for mq in route.message_queues:
                        index = int(mq.broker.name.rsplit("-", 1)[1])
                        address = mq.broker.endpoints.addresses[0]
                        assert (address.host, address.port) == ("127.0.0.1", srv.ports[index])
                        assert mq.broker.id == 0
                        assert mq.permission == d.Permission.READ_WRITE
                        assert sorted(mq.accept_message_types) == [
                            d.MessageType.NORMAL,
                            d.MessageType.FIFO,
                            d.MessageType.DELAY,
                            d.MessageType.TRANSACTION,
                        ]
                    per_broker = sorted(mq.id for mq in route.message_queues if mq.broker.name == "broker-1")
                    assert per_broker == [0, 1, 2]

    run(scenario())


def test_route_echoes_the_dialed_host() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv, Wire(srv.endpoints[0]) as w:
            request = s.QueryRouteRequest(
                topic=d.Resource(name="t"),
                endpoints=d.Endpoints(
                    scheme=d.AddressScheme.DOMAIN_NAME,
                    addresses=[d.Address(host="localhost", port=srv.ports[0])],
                ),
            )
            route = await w.stub.QueryRoute(request, metadata=w.md)
            endpoints = route.message_queues[0].broker.endpoints
            assert endpoints.scheme == d.AddressScheme.DOMAIN_NAME
            assert (endpoints.addresses[0].host, endpoints.addresses[0].port) == ("localhost", srv.ports[0])

    run(scenario())


def test_each_broker_owns_its_queues() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"], brokers=2) as srv:
            async with Wire(srv.endpoints[0]) as w0, Wire(srv.endpoints[1]) as w1:
                await w0.consumer("g", "t")
                await w1.consumer("g", "t")
                [m0] = await w0.send_ok("t")
                [m1] = await w1.send_ok("t")
                got0 = messages_of(await w0.receive("g", "t"))
                got1 = messages_of(await w1.receive("g", "t"))
                assert [m.system_properties.message_id for m in got0] == [m0]
                assert [m.system_properties.message_id for m in got1] == [m1]
                assert got1[0].system_properties.store_host == "broker-1"
                # An ack sent to the wrong broker still reaches the broker named in the handle.
                stream = [s.ReceiveMessageResponse(message=got1[0])]
                assert (await w0.ack("g", "t", handles(stream))).status.code == Code.OK

    run(scenario())


def test_assignment_pop_mode_and_fifo_mode() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t:4"], groups=["plain", "ordered:fifo"], brokers=2) as srv:
            async with Wire(srv.endpoints[1]) as w:
                plain = await w.assignment("t", "plain")
                assert plain.status.code == Code.OK
                got = sorted((a.message_queue.broker.name, a.message_queue.id) for a in plain.assignments)
                assert got == [("broker-0", -1), ("broker-1", -1)]
                ordered = await w.assignment("t", "ordered")
                got = sorted((a.message_queue.broker.name, a.message_queue.id) for a in ordered.assignments)
                assert got == [(f"broker-{b}", q) for b in range(2) for q in range(4)]
                for a in ordered.assignments:
                    assert a.message_queue.permission == d.Permission.READ_WRITE
                    assert a.message_queue.broker.endpoints.addresses[0].port in srv.ports
                bad = await w.assignment("t", "bad group!")
                assert bad.status.code == Code.ILLEGAL_CONSUMER_GROUP

    run(scenario())


def test_telemetry_settings_reply_for_consumer_and_producer() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["ordered:fifo"]) as srv, Wire(srv.endpoints[0]) as w:
            consumer = d.Settings(
                client_type=d.ClientType.PUSH_CONSUMER,
                subscription=d.Subscription(group=d.Resource(name="ordered")),
                user_agent=d.UA(language=d.Language.PYTHON, version="5.1.2"),
            )
            consumer.request_timeout.seconds = 3
            _, reply = await w.handshake(consumer)
            assert reply.status.code == Code.OK
            merged = reply.settings
            assert merged.client_type == d.ClientType.PUSH_CONSUMER
            assert merged.request_timeout.seconds == 3
            assert merged.user_agent.version == "5.1.2"
            assert merged.subscription.fifo is True
            assert merged.subscription.receive_batch_size == 32
            assert merged.subscription.long_polling_timeout.seconds == 20
            assert merged.backoff_policy.max_attempts == 17
            steps = [x.seconds for x in merged.backoff_policy.customized_backoff.next]
            assert steps[0] == 1 and steps[-1] == 7200 and len(steps) == 18
            assert merged.HasField("metric") and merged.metric.on is False

            producer = d.Settings(
                client_type=d.ClientType.PRODUCER, publishing=d.Publishing(topics=[d.Resource(name="t")])
            )
            _, reply = await w.handshake(producer)
            merged = reply.settings
            assert merged.backoff_policy.max_attempts == 3
            exp = merged.backoff_policy.exponential_backoff
            assert (exp.initial.nanos, exp.max.seconds, exp.multiplier) == (10_000_000, 1, 2.0)
            assert merged.publishing.max_body_size == 4 * 1024 * 1024
            assert merged.publishing.validate_message_type is True
            assert [t.name for t in merged.publishing.topics] == ["t"]
            # Every Settings gets a reply on the same stream (periodic resync, docs/protocol.md §4.1).
            call, _ = await w.handshake(producer)
            await call.write(s.TelemetryCommand(settings=producer))
            again = await call.read()
            assert again.status.code == Code.OK and again.settings.publishing.max_body_size > 0
            assert "test-client" in srv.connected_clients()

    run(scenario())


def test_send_honours_message_group_hashing() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["f:8:FIFO"]) as srv, Wire(srv.endpoints[0]) as w:
            queues = set()
            for _ in range(5):
                response = await w.send(message("f", message_group="same", message_type=d.MessageType.FIFO))
                assert response.status.code == Code.OK
            for stored in srv.brokers[0].messages("f"):
                queues.add(stored.queue_id)
            assert len(queues) == 1
            offsets = [m.offset for m in srv.brokers[0].messages("f")]
            assert offsets == sorted(offsets)

    run(scenario())
