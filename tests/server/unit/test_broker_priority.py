"""PRIORITY topics in the broker core: stored by priority, popped highest queue first (upstream 5.4+
`SendMessageProcessor.sendMessage` and `PopMessageProcessor.processRequest`)."""

from __future__ import annotations

from dataclasses import replace

from tests.server.unit._broker_kit import T0, ids, make, msg, nack, pop
from thrust.server.core.catalog import Catalog
from thrust.server.core.model import InboundMessage, MessageType

PRIORITY = MessageType.PRIORITY


def _p(priority: int, message_id: str) -> InboundMessage:
    return replace(msg(kind=PRIORITY, message_id=message_id), priority=priority)


def test_single_sends_are_stored_by_priority_and_popped_highest_first() -> None:
    _, broker = make(PRIORITY, queues=4)
    sent = [(i % 6, f"M{i:02d}") for i in range(12)]  # priorities 0..5 on 4 queues: 3, 4, 5 share queue 3
    for priority, message_id in sent:
        (result,) = broker.send([_p(priority, message_id)], T0)
        assert result.queue_id == min(priority, 3)
    got = pop(broker, T0 + 1)
    expected = sorted(sent, key=lambda s: -min(s[0], 3))  # stable: one level keeps send order
    assert ids(got) == [message_id for _, message_id in expected]
    assert [d.message.priority for d in got] == [priority for priority, _ in expected]


def test_a_batch_is_stored_in_one_queue_whatever_its_priorities() -> None:
    _, broker = make(PRIORITY, queues=4)
    results = broker.send([_p(0, "LOW"), _p(3, "HIGH")], T0)
    assert len({r.queue_id for r in results}) == 1  # upstream's sendBatchMessage keeps the proxy's queue
    assert ids(pop(broker, T0 + 1)) == ["LOW", "HIGH"]


def test_redeliveries_come_after_every_new_message() -> None:
    _, broker = make(PRIORITY, queues=4)
    broker.send([_p(3, "FIRST")], T0)
    (first,) = pop(broker, T0 + 1)
    nack(broker, first, T0 + 1, 0.0)  # visible again at once, from the retry side
    for i in range(3):
        broker.send([_p(0, f"NEW{i}")], T0 + 2)
    assert ids(pop(broker, T0 + 3)) == ["NEW0", "NEW1", "NEW2", "FIRST"]


def test_batch_size_cuts_the_highest_queues_first() -> None:
    _, broker = make(PRIORITY, queues=3)
    for i in range(4):
        broker.send([_p(i % 3, f"M{i}")], T0)  # M0:0 M1:1 M2:2 M3:0
    assert ids(pop(broker, T0 + 1, batch=2)) == ["M2", "M1"]
    assert ids(pop(broker, T0 + 1, batch=2)) == ["M0", "M3"]


def test_fifo_group_on_a_priority_topic_is_not_in_priority_mode() -> None:
    # Upstream's priority mode needs a non-orderly pop (`!requestHeader.isOrder()`).
    _, broker = make(PRIORITY, queues=2, fifo=True)
    broker.send([_p(0, "LOW")], T0)
    broker.send([_p(1, "HIGH")], T0)
    assert ids(pop(broker, T0 + 1)) == ["LOW", "HIGH"]  # the rotation starts at queue 0


def test_auto_created_topics_do_not_accept_priority() -> None:
    catalog = Catalog(auto_create_topics=True)
    info = catalog.topic("anything")
    assert PRIORITY not in info.types and not info.priority
    assert MessageType.FIFO in info.types
