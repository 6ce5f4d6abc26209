"""A topic's permission, as the route states it (a real broker's topic `perm`, changed with
`mqadmin updateTopicPerm`; the embedded server stages it with `Faults.set_permission`).

The clients decide from the route, as the Java client's PublishingLoadBalancer and SubscriptionLoadBalancer
do: a producer sends only to writable queues and a simple consumer receives only from readable master
queues. With none, the call fails with ForbiddenError (code FORBIDDEN, the class the status code maps to)
and makes no call to the server."""

from __future__ import annotations

import pytest

import thrust
from tests.client._util import receive_n, run
from tests.server._wire import Wire
from thrust._codec.status import Code
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust.errors import ForbiddenError
from thrust.testing import embedded_server


def test_a_producer_refuses_a_topic_with_no_writable_queue_and_sends_nothing() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t:2"]) as srv:
            srv.faults.set_permission("t", writable=False)
            async with thrust.Producer(endpoints=srv.endpoints[0], topics=["t"]) as p:
                with pytest.raises(ForbiddenError) as info:
                    await p.send(thrust.Message(topic="t", body=b"x"))
                assert info.value.code is Code.FORBIDDEN and "no writable queue" in info.value.message
                assert srv.stats.calls["SendMessage"] == 0
            # read-only queues still serve a consumer, and the override is the only difference:
            srv.faults.set_permission("t")
            async with thrust.Producer(endpoints=srv.endpoints[0], topics=["t"]) as p:
                await p.send(thrust.Message(topic="t", body=b"x"))
            assert srv.stats.entries["SendMessage"] == 1

    run(scenario)


def test_a_simple_consumer_refuses_a_topic_with_no_readable_queue_and_receives_nothing() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t:2"], groups=["g"]) as srv:
            async with thrust.Producer(endpoints=srv.endpoints[0], topics=["t"]) as p:
                await p.send(thrust.Message(topic="t", body=b"kept"))
            srv.faults.set_permission("t", readable=False)
            async with thrust.SimpleConsumer(
                endpoints=srv.endpoints[0], group="g", subscriptions={"t": "*"}, await_duration=5
            ) as c:
                with pytest.raises(ForbiddenError) as info:
                    await c.receive(32, 30)
                assert info.value.code is Code.FORBIDDEN and "no readable queue" in info.value.message
                assert srv.stats.calls["ReceiveMessage"] == 0
            srv.faults.set_permission("t")
            async with thrust.SimpleConsumer(
                endpoints=srv.endpoints[0], group="g", subscriptions={"t": "*"}, await_duration=5
            ) as c:
                (got,) = await receive_n(c, 1, invisible_duration=30)  # nothing was lost
                assert got.body == b"kept"
                await c.ack(got)

    run(scenario)


def test_the_route_and_assignment_follow_the_permission_like_the_proxy() -> None:
    """RouteActivity.genMessageQueueFromQueueData: READ, WRITE or NONE queues in the route;
    RouteActivity.queryAssignment: a non-readable topic is assigned no queue."""

    async def scenario() -> None:
        async with embedded_server(topics=["t:2"], groups=["g"]) as srv:
            async with Wire(srv.endpoints[0]) as w:
                for readable, writable, name in [
                    (True, False, "READ"),
                    (False, True, "WRITE"),
                    (False, False, "NONE"),
                    (True, True, "READ_WRITE"),
                ]:
                    srv.faults.set_permission("t", readable=readable, writable=writable)
                    route = await w.route("t")
                    assert route.status.code == Code.OK
                    perms = {d.Permission.Name(q.permission) for q in route.message_queues}
                    assert perms == {name}
                    assignment = await w.assignment("t", "g")
                    assert len(assignment.assignments) == (1 if readable else 0)
                assert srv.faults.permission("t") is None  # READ_WRITE removed the override

    run(scenario)
