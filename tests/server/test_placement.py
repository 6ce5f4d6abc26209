"""Topic placement: a topic may live on a subset of the brokers (`TopicSpec.brokers`, `NAME@B1+B2`).

QueryRoute and QueryAssignment list only the hosting brokers; the other brokers answer TOPIC_NOT_FOUND
to sends and receives, as a broker without the topic's TopicConfig does."""

from __future__ import annotations

import pytest

from tests.server._wire import Wire, message, messages_of, run
from thrust._codec.status import Code
from thrust.server.config import ServerConfig, TopicSpec, parse_topic
from thrust.server.core.catalog import Catalog
from thrust.server.core.model import BrokerError, MessageType
from thrust.server.service import EmbeddedServer
from thrust.testing import embedded_server


def test_parse_topic_placement() -> None:
    assert parse_topic("t@1") == TopicSpec("t", 4, (MessageType.NORMAL,), (1,))
    assert parse_topic("t:2:FIFO@0+2") == TopicSpec("t", 2, (MessageType.FIFO,), (0, 2))
    assert parse_topic("t:2").brokers == ()  # every broker
    for bad in ("t@", "t@x", "t@1+", "t@-1"):
        with pytest.raises(ValueError):
            parse_topic(bad)


def test_parse_topic_takes_thrust_clusters_name_colon_type_form() -> None:
    # `thrust cluster --topic orders:FIFO`: the same spec works for `thrust serve` (default 4 queues).
    assert parse_topic("orders:FIFO") == TopicSpec("orders", 4, (MessageType.FIFO,))
    assert parse_topic("jobs:priority") == TopicSpec("jobs", 4, (MessageType.PRIORITY,))
    assert parse_topic("o:MIXED@1").types == (
        MessageType.NORMAL,
        MessageType.FIFO,
        MessageType.DELAY,
        MessageType.TRANSACTION,
    )
    assert parse_topic("o:8") == TopicSpec("o", 8)
    with pytest.raises(ValueError, match="unknown message type 'FIFOO'"):
        parse_topic("o:FIFOO")
    with pytest.raises(ValueError, match="QUEUES must be at least 1"):
        parse_topic("o:0")


def test_catalog_placement_and_bad_values() -> None:
    catalog = Catalog()
    info = catalog.create_topic("t", 2, brokers=["broker-1"])
    assert info.hosted_on("broker-1") and not info.hosted_on("broker-0")
    assert catalog.create_topic("u").hosted_on("anything")
    with pytest.raises(BrokerError) as err:
        catalog.create_topic("v", brokers=[])
    assert err.value.code == Code.BAD_REQUEST


def test_placement_on_a_missing_broker_is_refused() -> None:
    with pytest.raises(ValueError, match="broker 3"):
        EmbeddedServer(ServerConfig.build(topics=["t@3"], brokers=2))


def test_route_and_assignment_list_only_the_hosting_brokers() -> None:
    async def scenario() -> None:
        topics = ["only1:2@1", "both:2", TopicSpec("spec", 3, brokers=(0, 2))]
        async with embedded_server(topics=topics, groups=["g", "o:fifo"], brokers=3) as srv:
            for endpoint in srv.endpoints:  # every access point gives the same answer
                async with Wire(endpoint) as w:
                    route = await w.route("only1")
                    assert route.status.code == Code.OK
                    got = sorted((mq.broker.name, mq.id) for mq in route.message_queues)
                    assert got == [("broker-1", 0), ("broker-1", 1)]
                    port = route.message_queues[0].broker.endpoints.addresses[0].port
                    assert port == srv.ports[1]
                    names = {mq.broker.name for mq in (await w.route("both")).message_queues}
                    assert names == {"broker-0", "broker-1", "broker-2"}
                    names = {mq.broker.name for mq in (await w.route("spec")).message_queues}
                    assert names == {"broker-0", "broker-2"}
                    plain = await w.assignment("only1", "g")
                    got = sorted((a.message_queue.broker.name, a.message_queue.id) for a in plain.assignments)
                    assert got == [("broker-1", -1)]
                    fifo = await w.assignment("spec", "o")
                    got = sorted((a.message_queue.broker.name, a.message_queue.id) for a in fifo.assignments)
                    assert got == [(f"broker-{b}", q) for b in (0, 2) for q in range(3)]

    run(scenario())


def test_send_and_receive_on_a_broker_without_the_topic_are_topic_not_found() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t:2@1"], groups=["g"], brokers=2) as srv:
            async with Wire(srv.endpoints[0]) as w0, Wire(srv.endpoints[1]) as w1:
                await w0.consumer("g", "t")
                await w1.consumer("g", "t")
                answer = await w0.send(message("t"))
                assert answer.status.code == Code.TOPIC_NOT_FOUND
                assert list(answer.entries) == []  # the whole request fails, as the proxy's does
                [sent] = await w1.send_ok("t")
                # a receive naming broker-0 (or sent to its port) finds no such topic there
                stream = await w0.receive("g", "t", polling=None)
                assert stream[0].status.code == Code.TOPIC_NOT_FOUND
                got = messages_of(await w1.receive("g", "t"))
                assert [m.system_properties.message_id for m in got] == [sent]
                assert got[0].system_properties.store_host == "broker-1"

    run(scenario())
