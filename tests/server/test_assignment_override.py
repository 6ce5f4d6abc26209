"""Assignment override (`Faults.set_assignment`): a test stages what QueryAssignment answers for one
(topic, group), e.g. the assignment moving from queue 0 to queue 1 (bench scenario 5a)."""

from __future__ import annotations

import pytest

from tests.server._wire import Wire, run
from thrust._codec.status import Code
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.server.faults import Faults, apply_fault_flag
from thrust.testing import embedded_server


def _queues(answer: s.QueryAssignmentResponse) -> list[tuple[str, int]]:
    assert answer.status.code == Code.OK, answer
    return [(a.message_queue.broker.name, a.message_queue.id) for a in answer.assignments]


def test_override_moves_the_assignment_and_clear_restores_it() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t:2"], groups=["o:fifo", "g"], brokers=2) as srv:
            default = [(f"broker-{b}", q) for b in range(2) for q in range(2)]
            async with Wire(srv.endpoints[0]) as w0, Wire(srv.endpoints[1]) as w1:
                assert _queues(await w0.assignment("t", "o")) == default
                srv.faults.set_assignment("t", "o", [(0, 0)])
                for w in (w0, w1):  # every access point answers the override
                    assert _queues(await w.assignment("t", "o")) == [("broker-0", 0)]
                # only that (topic, group): another group keeps the computed assignment
                assert sorted(_queues(await w0.assignment("t", "g"))) == [("broker-0", -1), ("broker-1", -1)]
                srv.faults.set_assignment("t", "o", [(0, 1)])  # the move: queue 0 -> queue 1
                answer = await w1.assignment("t", "o")
                assert _queues(answer) == [("broker-0", 1)]
                mq = answer.assignments[0].message_queue
                assert mq.topic.name == "t"
                assert mq.broker.endpoints.addresses[0].port == srv.ports[0]
                # No accept types on an assignment: the route has them (RouteActivity.queryAssignment).
                assert list(mq.accept_message_types) == []
                srv.faults.set_assignment("t", "o", [(1, -1), (0, 0), (7, 0)])  # broker 7 does not exist
                assert _queues(await w0.assignment("t", "o")) == [("broker-1", -1), ("broker-0", 0)]
                srv.faults.set_assignment("t", "o", [])
                assert _queues(await w0.assignment("t", "o")) == []
                srv.faults.clear()
                assert _queues(await w0.assignment("t", "o")) == default
                srv.faults.set_assignment("t", "o", [(1, 1)])
                srv.faults.set_assignment("t", "o", None)
                assert _queues(await w0.assignment("t", "o")) == default

    run(scenario())


def test_assignment_flag_and_bad_values() -> None:
    faults = Faults()
    apply_fault_flag(faults, "assignment", "t:g:0.0+1.-1")
    assert faults.assignment("t", "g") == ((0, 0), (1, -1))
    assert faults.assignment("t", "other") is None
    apply_fault_flag(faults, "assignment", "t:g:")
    assert faults.assignment("t", "g") == ()
    apply_fault_flag(faults, "assignment", "t:g")
    assert faults.assignment("t", "g") is None
    for bad in ("t", "t:g:0", "t:g:x.1", "t:g:0.-2"):
        with pytest.raises(ValueError):
            apply_fault_flag(faults, "assignment", bad)
    with pytest.raises(ValueError):
        faults.set_assignment("t", "g", [(-1, 0)])
