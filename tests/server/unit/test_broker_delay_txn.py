"""Broker core: delayed messages and recall, transactional messages and their checks."""

from __future__ import annotations

import pytest

from tests.server.unit._broker_kit import T0, ack, ids, make, msg, pop
from thrust._codec.status import Code
from thrust.server.core.broker import Broker, broker_of_handle
from thrust.server.core.model import BrokerError, MessageType

DELAY = MessageType.DELAY
TXN = MessageType.TRANSACTION


def _code(call: object) -> Code:
    with pytest.raises(BrokerError) as err:
        call()  # type: ignore[operator]
    return err.value.code


# ---------------------------------------------------------------- delay


def test_delayed_message_invisible_until_due() -> None:
    _, broker = make(DELAY, MessageType.NORMAL, queues=1)
    [r] = broker.send([msg(kind=DELAY, deliver_at=T0 + 30, message_id="D")], T0)
    broker.send([msg(message_id="N")], T0)
    assert r.recall_handle != "" and broker_of_handle(r.recall_handle) == "broker-a"
    assert broker.next_event_time() == T0 + 30
    assert ids(pop(broker, T0 + 29)) == ["N"]
    assert [m.message_id for m in broker.messages("t")] == ["N", "D"]  # listed while not yet due
    [d] = pop(broker, T0 + 30)
    assert d.message.message_id == "D" and d.message.delivery_timestamp == T0 + 30
    assert d.message.offset == 1  # gets its queue offset when it lands
    assert d.message.message_type == DELAY
    ack(broker, d, T0 + 31)


def test_recall_before_delivery() -> None:
    _, broker = make(DELAY, queues=1)
    [r] = broker.send([msg(kind=DELAY, deliver_at=T0 + 30, message_id="D")], T0)
    assert broker.recall(topic="t", recall_handle=r.recall_handle, now=T0 + 10) == "D"
    assert broker.next_event_time() is None
    assert pop(broker, T0 + 60) == []
    assert broker.messages("t") == []
    # Recalling twice: not found.
    assert (
        _code(lambda: broker.recall(topic="t", recall_handle=r.recall_handle, now=T0 + 11)) == Code.NOT_FOUND
    )


def test_recall_after_delivery_time_is_not_found() -> None:
    _, broker = make(DELAY, queues=1)
    [r] = broker.send([msg(kind=DELAY, deliver_at=T0 + 30)], T0)
    assert (
        _code(lambda: broker.recall(topic="t", recall_handle=r.recall_handle, now=T0 + 30)) == Code.NOT_FOUND
    )
    assert len(pop(broker, T0 + 30)) == 1


def test_recall_bad_handles() -> None:
    catalog, broker = make(DELAY, queues=1)
    catalog.create_topic("t2", 1, (DELAY,))
    [r] = broker.send([msg(kind=DELAY, deliver_at=T0 + 30)], T0)
    assert _code(lambda: broker.recall(topic="t", recall_handle="junk", now=T0)) == Code.BAD_REQUEST
    assert _code(lambda: broker.recall(topic="t", recall_handle="", now=T0)) == Code.BAD_REQUEST
    other = r.recall_handle.replace("broker-a", "broker-b")
    assert _code(lambda: broker.recall(topic="t", recall_handle=other, now=T0)) == Code.BAD_REQUEST
    assert _code(lambda: broker.recall(topic="t2", recall_handle=r.recall_handle, now=T0)) == Code.BAD_REQUEST
    forged = r.recall_handle[:-1] + ("0" if r.recall_handle[-1] != "0" else "1")
    assert _code(lambda: broker.recall(topic="t", recall_handle=forged, now=T0)) == Code.NOT_FOUND
    assert broker.recall(topic="t", recall_handle=r.recall_handle, now=T0) == r.message_id


def test_delay_in_the_past_is_immediate_and_max_delay_enforced() -> None:
    _, broker = make(DELAY, queues=1, max_delay=3600)
    [r] = broker.send([msg(kind=DELAY, deliver_at=T0 - 5, message_id="P")], T0)
    assert r.recall_handle != ""
    assert ids(pop(broker, T0)) == ["P"]
    assert _code(lambda: broker.recall(topic="t", recall_handle=r.recall_handle, now=T0)) == Code.NOT_FOUND
    broker.send([msg(kind=DELAY, deliver_at=T0 + 3600)], T0)  # exactly the limit is fine
    assert (
        _code(lambda: broker.send([msg(kind=DELAY, deliver_at=T0 + 3600.5)], T0))
        == Code.ILLEGAL_DELIVERY_TIME
    )


def test_delayed_messages_land_in_due_order() -> None:
    _, broker = make(DELAY, queues=1)
    broker.send([msg(kind=DELAY, deliver_at=T0 + 30, message_id="late")], T0)
    broker.send([msg(kind=DELAY, deliver_at=T0 + 10, message_id="early")], T0)
    broker.tick(T0 + 40)
    assert [(m.message_id, m.offset, m.store_timestamp) for m in broker.messages("t")] == [
        ("early", 0, T0 + 10),
        ("late", 1, T0 + 30),
    ]


def test_held_messages_are_bounded() -> None:
    _, broker = make(DELAY, queues=1, max_held_messages=2)
    broker.send([msg(kind=DELAY, deliver_at=T0 + 30), msg(kind=DELAY, deliver_at=T0 + 30)], T0)
    assert _code(lambda: broker.send([msg(kind=DELAY, deliver_at=T0 + 30)], T0)) == Code.TOO_MANY_REQUESTS
    broker.send([msg(kind=DELAY, deliver_at=T0)], T0)  # due at once: not held


# ---------------------------------------------------------------- transactions


def _txn_broker(**kwargs: object) -> Broker:
    _, broker = make(TXN, queues=1, **kwargs)
    return broker


def test_transaction_commit() -> None:
    broker = _txn_broker()
    [r] = broker.send([msg(kind=TXN, message_id="T")], T0)
    assert r.transaction_id != "" and r.recall_handle == ""
    assert pop(broker, T0 + 1) == []
    assert broker.messages("t") == []  # prepared, not committed
    broker.end_transaction(
        topic="t", message_id="T", transaction_id=r.transaction_id, commit=True, now=T0 + 2
    )
    [d] = pop(broker, T0 + 3)
    assert d.message.message_id == "T" and d.message.transaction_id == r.transaction_id
    assert d.message.store_timestamp == T0 + 2
    assert broker.tick(T0 + 100) == []  # no check for a resolved transaction
    # Repeating the same outcome is accepted; the opposite one is not.
    broker.end_transaction(
        topic="t", message_id="T", transaction_id=r.transaction_id, commit=True, now=T0 + 4
    )
    assert (
        _code(
            lambda: broker.end_transaction(
                topic="t", message_id="T", transaction_id=r.transaction_id, commit=False, now=T0 + 4
            )
        )
        == Code.INVALID_TRANSACTION_ID
    )


def test_transaction_left_unresolved_stays_prepared_and_is_checked() -> None:
    broker = _txn_broker()
    [r] = broker.send([msg(kind=TXN, message_id="T")], T0)
    # Upstream's UNKNOWN resolution: accepted, nothing resolved.
    broker.end_transaction(
        topic="t", message_id="T", transaction_id=r.transaction_id, commit=None, now=T0 + 1
    )
    assert pop(broker, T0 + 2) == []
    assert [c.transaction_id for c in broker.tick(T0 + 100)] == [r.transaction_id]  # still checked
    assert (
        _code(
            lambda: broker.end_transaction(
                topic="t", message_id="T", transaction_id="unknown", commit=None, now=T0 + 100
            )
        )
        == Code.INVALID_TRANSACTION_ID
    )
    broker.end_transaction(
        topic="t", message_id="T", transaction_id=r.transaction_id, commit=True, now=T0 + 101
    )
    [d] = pop(broker, T0 + 102)
    assert d.message.message_id == "T"
    # After the resolution an unspecified one changes nothing.
    broker.end_transaction(
        topic="t", message_id="T", transaction_id=r.transaction_id, commit=None, now=T0 + 103
    )


def test_transaction_rollback() -> None:
    broker = _txn_broker()
    [r] = broker.send([msg(kind=TXN, message_id="T")], T0)
    broker.end_transaction(
        topic="t", message_id="T", transaction_id=r.transaction_id, commit=False, now=T0 + 1
    )
    assert pop(broker, T0 + 2) == []
    assert broker.tick(T0 + 100) == [] and broker.next_event_time() is None
    assert (
        _code(
            lambda: broker.end_transaction(
                topic="t", message_id="T", transaction_id=r.transaction_id, commit=True, now=T0 + 3
            )
        )
        == Code.INVALID_TRANSACTION_ID
    )


def test_wrong_transaction_ids() -> None:
    catalog, broker = make(TXN, queues=1)
    catalog.create_topic("t2", 1, (TXN,))
    [r] = broker.send([msg(kind=TXN, message_id="T")], T0)
    for topic, message_id, txn_id in (
        ("t", "T", "nope"),
        ("t", "other", r.transaction_id),
        ("t2", "T", r.transaction_id),
    ):
        assert (
            _code(
                lambda t=topic, m=message_id, x=txn_id: broker.end_transaction(  # type: ignore[misc]
                    topic=t, message_id=m, transaction_id=x, commit=True, now=T0
                )
            )
            == Code.INVALID_TRANSACTION_ID
        )
    broker.end_transaction(topic="t", message_id="T", transaction_id=r.transaction_id, commit=True, now=T0)


def test_transaction_check_schedule_and_give_up() -> None:
    broker = _txn_broker(
        transaction_check_after=6.0, transaction_check_interval=10.0, transaction_max_checks=3
    )
    [r] = broker.send([msg(kind=TXN, message_id="T", producer="prod-9")], T0)
    assert broker.next_event_time() == T0 + 6
    assert broker.tick(T0 + 5.9) == []
    [check] = broker.tick(T0 + 6)
    assert check.producer_client_id == "prod-9" and check.transaction_id == r.transaction_id
    assert check.message.message_id == "T"
    assert broker.tick(T0 + 6) == []  # not twice
    assert broker.next_event_time() == T0 + 16
    assert len(broker.tick(T0 + 16)) == 1
    assert len(broker.tick(T0 + 26)) == 1
    # Three checks went unanswered: the fourth due time gives up and rolls back.
    assert broker.tick(T0 + 36) == []
    assert broker.next_event_time() is None
    assert pop(broker, T0 + 37) == []
    assert (
        _code(
            lambda: broker.end_transaction(
                topic="t", message_id="T", transaction_id=r.transaction_id, commit=True, now=T0 + 40
            )
        )
        == Code.INVALID_TRANSACTION_ID
    )


def test_transaction_check_then_commit_from_check() -> None:
    broker = _txn_broker()
    [r] = broker.send([msg(kind=TXN, message_id="T")], T0)
    [check] = broker.tick(T0 + 6)
    broker.end_transaction(
        topic="t", message_id="T", transaction_id=check.transaction_id, commit=True, now=T0 + 7
    )
    assert ids(pop(broker, T0 + 7)) == ["T"]
    assert broker.tick(T0 + 1000) == []
    assert r.transaction_id == check.transaction_id


def test_transaction_recovery_after_overrides_first_check() -> None:
    broker = _txn_broker(transaction_check_after=6.0)
    broker.send([msg(kind=TXN, recovery=30.0)], T0)
    assert broker.next_event_time() == T0 + 30
    assert broker.tick(T0 + 29) == []
    assert len(broker.tick(T0 + 30)) == 1


def test_transaction_type_must_be_accepted() -> None:
    _, broker = make(MessageType.NORMAL, queues=1)
    assert _code(lambda: broker.send([msg(kind=TXN)], T0)) == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


def test_committed_delayed_transaction_waits_for_its_time() -> None:
    _, broker = make(TXN, queues=1)
    [r] = broker.send([msg(kind=TXN, deliver_at=T0 + 50, message_id="TD")], T0)
    broker.end_transaction(
        topic="t", message_id="TD", transaction_id=r.transaction_id, commit=True, now=T0 + 1
    )
    assert pop(broker, T0 + 49) == []
    assert ids(pop(broker, T0 + 50)) == ["TD"]


def test_held_messages_report_their_offset_in_the_timer_or_half_queue() -> None:
    """SendResult.offset of a held message is its offset in the broker's holding queue, as upstream answers
    it: delayed messages go to the timer queue (rmq_sys_wheel_timer, queue 0), prepared ones to the half
    queue (RMQ_SYS_TRANS_HALF_TOPIC, queue 0); each queue counts on its own, across topics, and takes an
    offset for whatever upstream puts there (recall markers, delayed commits). A message gets its own
    topic's offset when it lands."""
    catalog, broker = make(TXN, queues=1)
    catalog.create_topic("d", 2, (DELAY,))
    assert [broker.send([msg(kind=TXN)], T0)[0].offset for _ in range(3)] == [0, 1, 2]  # half queue
    [a] = broker.send([msg("d", kind=DELAY, deliver_at=T0 + 30, message_id="A")], T0)
    [b] = broker.send([msg("d", kind=DELAY, deliver_at=T0 + 30, message_id="B")], T0)
    assert (a.offset, b.offset) == (0, 1)  # the timer queue's first two, not the half queue's next
    broker.recall(topic="d", recall_handle=b.recall_handle, now=T0 + 1)  # its delete marker takes 2
    [c] = broker.send([msg("d", kind=DELAY, deliver_at=T0 + 40, message_id="C")], T0 + 1)
    assert c.offset == 3
    [td] = broker.send([msg(kind=TXN, deliver_at=T0 + 50, message_id="TD")], T0 + 1)
    assert td.offset == 3  # half queue
    broker.end_transaction(
        topic="t", message_id="TD", transaction_id=td.transaction_id, commit=True, now=T0 + 2
    )  # the committed delayed message goes through the timer queue: 4
    [e] = broker.send([msg("d", kind=DELAY, deliver_at=T0 + 60, message_id="E")], T0 + 2)
    assert e.offset == 5
    # Already due: stored at once, so the offset is the one in its own queue.
    [now] = broker.send([msg("d", kind=DELAY, deliver_at=T0 - 1, message_id="N")], T0 + 2)
    assert now.offset == 0
    broker.tick(T0 + 60)
    landed = {m.message_id: (m.queue_id, m.offset) for m in broker.messages("d")}
    assert landed["N"] == (now.queue_id, 0)
    # A, C and E land in their queues after N, each at the next offset of its own queue.
    per_queue: dict[int, list[int]] = {}
    for queue_id, offset in landed.values():
        per_queue.setdefault(queue_id, []).append(offset)
    assert all(sorted(offsets) == list(range(len(offsets))) for offsets in per_queue.values())
    assert sorted(landed) == ["A", "C", "E", "N"]
