"""The broker's parts on their own, each given only what it needs (broker.py composes them)."""

from __future__ import annotations

import pytest

from tests.server.unit._broker_kit import T0, msg
from thrust.server.core.model import BrokerError, MessageType, StoredMessage, TopicInfo
from thrust.server.core.scheduled import DelayedMessages, Transactions
from thrust.server.core.store import MessageStore, TopicQueues
from thrust.server.core.timers import Timed, Timers


def _stored(store: MessageStore, topic: str = "t") -> tuple[StoredMessage, TopicQueues]:
    tq = store.queues(TopicInfo(topic, 2, frozenset(MessageType)))
    return store.append(tq, 0, msg(), T0), tq


def test_timers_compact_stale_entries_and_skip_them() -> None:
    timers: Timers[Timed] = Timers()
    items = [Timed() for _ in range(3000)]
    for i, item in enumerate(items):
        timers.push(item, float(i))
    for item in items[:-1]:
        timers.cancel(item)
    assert len(timers) == 1
    assert timers.entries <= 2 * len(timers) + 1024 + 1
    assert timers.maybe_due(2999.0)  # (a stale entry on top may also answer "maybe")
    assert timers.peek() == 2999.0
    assert timers.pop_due(2998.0) is None
    assert timers.pop_due(2999.0) == (2999.0, items[-1])


def test_store_grows_queues_and_trims_past_retention() -> None:
    store = MessageStore("b", retention_messages=16, retention_bytes=1 << 20)
    tq = store.queues(TopicInfo("t", 1, frozenset(MessageType)))
    for _ in range(17):
        store.append(tq, 0, msg(), T0)
    log = tq.logs[0]
    assert log.base > 0 and log.end == 17
    assert store.queues(TopicInfo("t", 3, frozenset(MessageType))) is tq and len(tq.logs) == 3
    assert store.get("other") is None and list(store.stored("other")) == []


def test_delayed_messages_recall_and_release_on_time() -> None:
    store = MessageStore("b", retention_messages=100, retention_bytes=1 << 20)
    _, tq = _stored(store)
    delayed = DelayedMessages("b")
    handle = delayed.new_recall_handle()
    due = StoredMessage.of(msg(), queue_id=0, offset=delayed.next_offset(), store_timestamp=T0, broker="b")
    object.__setattr__(due, "delivery_timestamp", T0 + 5)
    delayed.hold(handle, due, tq)
    assert len(delayed) == 1 and delayed.next_time() == T0 + 5
    with pytest.raises(BrokerError):
        delayed.recall("t", "r other 1 x")
    assert delayed.pop_due(T0 + 4) is None
    released = delayed.pop_due(T0 + 5)
    assert released is not None and released[1].msg is due and len(delayed) == 0
    with pytest.raises(BrokerError):
        delayed.recall("t", handle)  # already delivered


def test_transactions_check_then_give_up_without_touching_the_store() -> None:
    store = MessageStore("b", retention_messages=100, retention_bytes=1 << 20)
    _, tq = _stored(store)
    txns = Transactions("b", check_after=1.0, check_interval=1.0, max_checks=2)
    half = txns.prepare(msg(kind=MessageType.TRANSACTION), 0, tq, T0)
    assert [c.transaction_id for c in txns.due_checks(T0 + 1)] == [half.transaction_id]
    assert len(txns.due_checks(T0 + 2)) == 1
    assert txns.due_checks(T0 + 3) == [] and len(txns) == 0  # gave up: rolled back
    with pytest.raises(BrokerError):
        txns.end("t", half.message_id, half.transaction_id, True)
    assert txns.end("t", half.message_id, half.transaction_id, False) is None  # the same outcome again
