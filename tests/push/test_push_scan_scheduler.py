"""The push consumer's scan scheduler (`AssignmentScanner`) against a fake session: it keeps
`MAX_CONCURRENT_SCANS` in flight and goes on when they all end in the same loop iteration."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from thrust._codec import convert
from thrust._core.endpoints import parse_endpoint
from thrust._core.process_queue import QueueBudget
from thrust._core.routes import Permission, RouteQueue, TopicRoute
from thrust._io.tasks import TaskSet
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
from thrust._push import scanner as scanner_module
from thrust._push.model import _Queue, logger
from thrust._push.scanner import AssignmentScanner

EP = parse_endpoint("10.0.0.1:8081")


class _Session:
    """Answers QueryAssignment with nothing, each call held until the test releases it."""

    access_point = EP
    access_point_pb = convert.endpoint_to_pb(EP)

    def __init__(self) -> None:
        self.pending: list[asyncio.Future[None]] = []
        self.listeners: list[Any] = []

    def add_route_listener(self, listener: Any) -> Any:
        self.listeners.append(listener)
        return lambda: None

    async def route(self, topic: str) -> TopicRoute:
        return TopicRoute(topic, (RouteQueue(topic, "b", 0, Permission.READ_WRITE, EP, 0),), 0.0)

    async def call(self, endpoint: Any, rpc: str, request: Any) -> spb.QueryAssignmentResponse:
        assert rpc == "QueryAssignment"
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.pending.append(fut)
        await fut
        return spb.QueryAssignmentResponse()


def test_scans_in_flight_bounded_and_resumed_after_they_all_end_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(scanner_module, "MAX_CONCURRENT_SCANS", 3)

    async def main() -> None:
        tasks = TaskSet(logger)
        topics = [f"t{i}" for i in range(10)]

        async def run_queue(q: _Queue) -> None:
            return None

        scanner = AssignmentScanner(
            group="g",
            group_pb=pb.Resource(name="g"),
            topic_pb={t: pb.Resource(name=t) for t in topics},
            filter_pb={t: pb.FilterExpression(expression="*") for t in topics},
            namespace="",
            budget=QueueBudget(),
            receives_per_queue=2,
            scan_interval=5.0,
            max_scan_rate=20.0,
            ack_retry_window=60.0,
            run_queue=run_queue,
            spawn=tasks.spawn,
        )
        session = _Session()
        await scanner.start(session)  # type: ignore[arg-type]
        answered = 0
        try:
            while answered < len(topics):
                for _ in range(100):
                    await asyncio.sleep(0)
                waiting = [f for f in session.pending if not f.done()]
                assert 0 < len(waiting) <= 3, (answered, len(waiting))
                for fut in waiting:  # every scan in flight ends in the same loop iteration
                    fut.set_result(None)
                answered += len(waiting)
            assert answered == len(topics)
        finally:
            scanner.stop()
            scanner.close_queues()
            await tasks.aclose(1.0)

    asyncio.run(main())
