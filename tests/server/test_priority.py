"""PRIORITY messages over real gRPC: honoured on PRIORITY topics, refused elsewhere (upstream 5.4+)."""

from __future__ import annotations

import pytest

import thrust
from tests.server._wire import Wire, message, messages_of, run
from thrust._codec.status import Code
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust.errors import ValidationError
from thrust.testing import embedded_server


def _prio(topic: str, priority: int, message_type: int | None = d.MessageType.PRIORITY) -> d.Message:
    m = message(topic, message_type=message_type)
    m.system_properties.priority = priority
    return m


def test_priority_topic_delivers_higher_priority_first_over_grpc() -> None:
    # 20 single sends, priorities 0..9 mixed; 8 queues, so 7, 8 and 9 are one level (queue 7).
    priorities = [(i * 7) % 10 for i in range(20)]

    async def scenario() -> list[tuple[str, int, int]]:
        async with (
            embedded_server(topics=["p:8:PRIORITY"], groups=["g"], auto_create=False) as srv,
            Wire(srv.endpoints[0]) as w,
        ):
            for p in priorities:
                response = await w.send(_prio("p", p))
                assert response.status.code == Code.OK, response
            stream = await w.receive("g", "p", batch=32)
            return [
                (m.system_properties.message_id, m.system_properties.priority, m.system_properties.queue_id)
                for m in messages_of(stream)
            ]

    got = run(scenario())
    assert len(got) == 20
    assert [queue for _, _, queue in got] == sorted((min(p, 7) for p in priorities), reverse=True)
    assert all(queue == min(priority, 7) for _, priority, queue in got)
    # Within one level, send order (message ids are increasing in send order).
    for level in range(8):
        same = [mid for mid, _, queue in got if queue == level]
        assert same == sorted(same)


@pytest.mark.parametrize(
    "message_type",
    [d.MessageType.PRIORITY, d.MessageType.NORMAL, None],
    ids=["declared-priority", "declared-normal", "unspecified"],
)
def test_priority_message_on_a_normal_topic_is_refused(message_type: int | None) -> None:
    # Upstream types a message by its properties (`TopicMessageType.parseFromMessageProperty`), and the
    # proxy's `DefaultTopicMessageTypeValidator` refuses a PRIORITY message on a NORMAL topic.
    async def scenario() -> tuple[int, list[int]]:
        async with embedded_server(topics=["n:4"], auto_create=False) as srv, Wire(srv.endpoints[0]) as w:
            response = await w.send(_prio("n", 3, message_type))
            return response.status.code, [e.status.code for e in response.entries]

    top, entries = run(scenario())
    assert top == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert entries in ([], [Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE])


def test_priority_refused_on_auto_created_topic_and_normal_refused_on_priority_topic() -> None:
    async def scenario() -> tuple[int, int, int]:
        async with embedded_server(topics=["p:4:PRIORITY"]) as srv, Wire(srv.endpoints[0]) as w:
            auto = (await w.send(_prio("fresh", 1))).status.code
            plain = (await w.send(message("p"))).status.code
            negative = (await w.send(_prio("p", -1))).status.code
            return auto, plain, negative

    auto, plain, negative = run(scenario())
    assert auto == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert plain == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    assert negative == Code.BAD_REQUEST


def test_client_receives_priority_messages_highest_first() -> None:
    # The reported scenario: the thrust Producer and SimpleConsumer, twenty messages, one broker.
    async def scenario() -> list[int]:
        async with embedded_server(topics=["jobs:4:PRIORITY"], groups=["g"], auto_create=False) as srv:
            endpoint = srv.endpoints[0]
            async with thrust.Producer(endpoints=endpoint, topics=["jobs"]) as producer:
                for i in range(20):
                    await producer.send(thrust.Message(topic="jobs", body=b"%d" % i, priority=i % 4))
                with pytest.raises(ValidationError) as err:
                    await producer.send(thrust.Message(topic="jobs", body=b"x"))
                assert err.value.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
            async with thrust.SimpleConsumer(
                endpoints=endpoint, group="g", subscriptions={"jobs": "*"}, await_duration=5
            ) as consumer:
                got = await consumer.receive(32)
                await consumer.ack_many(got)
                return [m.priority or 0 for m in got]

    priorities = run(scenario())
    assert priorities == sorted(priorities, reverse=True)
    assert len(priorities) == 20
