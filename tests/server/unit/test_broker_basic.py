"""Broker core: send / pop / ack, queue selection, catalog errors, filters, inspection."""

from __future__ import annotations

import zlib

import pytest

from tests.server.unit._broker_kit import ALL, T0, TagFilter, ack, ids, make, msg, pop
from thrust._codec.status import Code
from thrust.server.core.broker import Broker
from thrust.server.core.catalog import Catalog
from thrust.server.core.model import BrokerError, MessageType, StoredMessage


def test_send_pop_ack_round_trip() -> None:
    _, broker = make()
    [result] = broker.send([msg(body=b"hello", message_id="M1", tag="a")], T0)
    assert result.message_id == "M1" and result.offset == 0
    assert result.transaction_id == "" and result.recall_handle == ""
    [d] = pop(broker, T0 + 1)
    assert d.message.body == b"hello" and d.message.message_id == "M1" and d.message.tag == "a"
    assert d.message.queue_id == result.queue_id and d.message.offset == 0
    assert d.message.broker == "broker-a" and d.message.store_timestamp == T0
    assert d.delivery_attempt == 1 and d.invisible_until == T0 + 31
    assert d.dead_letter_of is None
    assert broker.inflight("g", "t") == 1
    ack(broker, d, T0 + 2)
    assert broker.inflight("g", "t") == 0
    assert pop(broker, T0 + 100) == []  # acked: never redelivered
    assert broker.next_event_time() is None


def test_offsets_monotonic_per_queue_and_round_robin() -> None:
    _, broker = make(queues=3)
    results = [broker.send([msg()], T0)[0] for _ in range(7)]
    assert [r.queue_id for r in results] == [0, 1, 2, 0, 1, 2, 0]
    assert [r.offset for r in results] == [0, 0, 0, 1, 1, 1, 2]


def test_batch_request_goes_to_one_queue() -> None:
    _, broker = make(queues=4)
    results = broker.send([msg(), msg(), msg()], T0)
    assert {r.queue_id for r in results} == {0}
    assert [r.offset for r in results] == [0, 1, 2]
    assert broker.send([msg()], T0)[0].queue_id == 1


def test_message_group_hashing_is_stable_crc32() -> None:
    _, broker = make(MessageType.FIFO, queues=5)
    for name in ("alpha", "beta", "gamma", "order-17"):
        expected = zlib.crc32(name.encode()) % 5
        for _ in range(3):
            [r] = broker.send([msg(kind=MessageType.FIFO, group=name)], T0)
            assert r.queue_id == expected
    # Round robin is not disturbed by hashed sends.
    _, other = make(MessageType.FIFO, MessageType.NORMAL, queues=5)
    other.send([msg(kind=MessageType.FIFO, group="alpha")], T0)
    assert other.send([msg()], T0)[0].queue_id == 0


def test_batch_cap_is_32() -> None:
    _, broker = make(queues=1)
    broker.send([msg() for _ in range(50)], T0)
    first = pop(broker, T0, batch=100)
    assert len(first) == 32
    assert [d.message.offset for d in first] == list(range(32))
    second = pop(broker, T0, batch=100)
    assert [d.message.offset for d in second] == list(range(32, 50))


def test_pop_specific_queue_and_any_queue() -> None:
    _, broker = make(queues=2)
    broker.send([msg(message_id="Q0")], T0)
    broker.send([msg(message_id="Q1")], T0)
    assert ids(pop(broker, T0, queue_id=1)) == ["Q1"]
    assert pop(broker, T0, queue_id=1) == []
    assert ids(pop(broker, T0, queue_id=-1)) == ["Q0"]


def test_pop_any_queue_collects_across_queues() -> None:
    _, broker = make(queues=4)
    for _ in range(8):
        broker.send([msg()], T0)
    got = pop(broker, T0, batch=32)
    assert len(got) == 8
    assert sorted((d.message.queue_id, d.message.offset) for d in got) == [
        (q, o) for q in range(4) for o in range(2)
    ]


def test_groups_have_independent_progress_and_start_at_the_beginning() -> None:
    _, broker = make(queues=1)
    broker.send([msg(message_id="A"), msg(message_id="B")], T0)
    assert ids(pop(broker, T0, group="g")) == ["A", "B"]
    # A group that never consumed before still sees the messages sent before it subscribed.
    assert ids(pop(broker, T0, group="late")) == ["A", "B"]
    assert pop(broker, T0, group="g") == []


def test_unknown_topic_vs_auto_create() -> None:
    catalog = Catalog()
    broker = Broker("b", catalog)
    with pytest.raises(BrokerError) as err:
        broker.send([msg(topic="nope")], T0)
    assert err.value.code == Code.TOPIC_NOT_FOUND
    with pytest.raises(BrokerError) as err:
        pop(broker, T0, topic="nope")
    assert err.value.code == Code.TOPIC_NOT_FOUND

    auto = Catalog(auto_create_topics=True, default_queues=3)
    broker = Broker("b", auto)
    broker.send([msg(topic="fresh", kind=MessageType.TRANSACTION)], T0)  # every type accepted
    info = auto.topic("fresh")
    # ...but PRIORITY, which needs a topic created as PRIORITY (test_broker_priority.py).
    assert info.queues == 3 and info.types == frozenset(MessageType) - {MessageType.PRIORITY}


def test_unknown_group_vs_auto_create() -> None:
    catalog = Catalog(auto_create_groups=False)
    catalog.create_topic("t")
    broker = Broker("b", catalog)
    with pytest.raises(BrokerError) as err:
        pop(broker, T0, group="who")
    assert err.value.code == Code.CONSUMER_GROUP_NOT_FOUND
    auto = Catalog()
    auto.create_topic("t")
    assert pop(Broker("b", auto), T0, group="who") == []
    assert auto.group("who").fifo is False


def test_type_conflict_and_corrupted_requests() -> None:
    _, broker = make(MessageType.NORMAL)
    with pytest.raises(BrokerError) as err:
        broker.send([msg(kind=MessageType.FIFO, group="x")], T0)
    assert err.value.code == Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
    with pytest.raises(BrokerError) as err:
        broker.send([], T0)
    assert err.value.code == Code.MESSAGE_CORRUPTED
    with pytest.raises(BrokerError) as err:
        broker.send([msg(topic="t"), msg(topic="other")], T0)
    assert err.value.code == Code.MESSAGE_CORRUPTED
    # All or nothing: a bad message anywhere in the request stores none of it.
    with pytest.raises(BrokerError):
        broker.send([msg(), msg(kind=MessageType.DELAY, deliver_at=T0 + 5)], T0)
    assert broker.messages("t") == []


def test_bad_pop_arguments() -> None:
    _, broker = make(queues=2)
    with pytest.raises(BrokerError) as err:
        pop(broker, T0, queue_id=2)
    assert err.value.code == Code.BAD_REQUEST
    with pytest.raises(BrokerError) as err:
        pop(broker, T0, batch=0)
    assert err.value.code == Code.BAD_REQUEST
    for bad in (0.0, -1.0, 12 * 3600 + 1):
        with pytest.raises(BrokerError) as err:
            pop(broker, T0, invisible=bad)
        assert err.value.code == Code.ILLEGAL_INVISIBLE_TIME
    # auto_renew ignores the requested duration (the broker picks 60 s).
    assert pop(broker, T0, invisible=0.0, auto_renew=True) == []


def test_filter_skips_non_matching_for_good() -> None:
    _, broker = make(queues=1)
    broker.send(
        [msg(tag="a", message_id="A1"), msg(tag="b", message_id="B1"), msg(tag="a", message_id="A2")], T0
    )
    only_a = TagFilter(frozenset({"a"}))
    assert ids(pop(broker, T0, flt=only_a)) == ["A1", "A2"]
    # B1 was skipped for this group (upstream acks it); a filter change does not bring it back.
    assert pop(broker, T0, flt=ALL) == []
    assert broker.backlog("t", "g") == 0
    # Other groups are unaffected.
    assert ids(pop(broker, T0, group="other")) == ["A1", "B1", "A2"]


def test_filter_is_evaluated_on_redelivery_too() -> None:
    _, broker = make(queues=1)
    broker.send([msg(tag="a")], T0)
    [d] = pop(broker, T0, invisible=10)
    assert pop(broker, T0 + 11, flt=TagFilter(frozenset({"b"}))) == []
    assert broker.inflight("g", "t") == 0
    assert pop(broker, T0 + 100) == []  # dropped for good
    assert d.delivery_attempt == 1


def test_inspection_backlog_inflight_messages() -> None:
    _, broker = make(queues=2)
    assert broker.backlog("t") == 0 and broker.messages("t") == []
    broker.send([msg(message_id=f"M{i}") for i in range(3)], T0)
    broker.send([msg(message_id="M3")], T0)
    assert broker.backlog("t") == 4
    assert [m.message_id for m in broker.messages("t")] == ["M0", "M1", "M2", "M3"]
    got = pop(broker, T0, batch=3)
    assert broker.backlog("t", "g") == 1 and broker.inflight("g", "t") == 3
    assert broker.backlog("t") == 1
    for d in got:
        ack(broker, d, T0)
    assert broker.inflight("g", "t") == 0
    assert broker.inflight("g", "unknown") == 0 and broker.backlog("unknown") == 0


def test_retention_trims_oldest_messages() -> None:
    _, broker = make(queues=1, retention_messages=16)
    broker.send([msg(message_id=f"M{i}") for i in range(40)], T0)
    stored = broker.messages("t")
    assert len(stored) <= 16
    assert stored[-1].message_id == "M39" and stored[-1].offset == 39
    got = pop(broker, T0, batch=32)
    assert got[0].message.offset == stored[0].offset  # the group starts at the oldest retained message
    assert ids(got)[-1] == "M39"


def test_catalog_validation() -> None:
    catalog = Catalog()
    for bad in ({"queues": 0}, {"types": ()}):
        with pytest.raises(BrokerError) as err:
            catalog.create_topic("x", **bad)  # type: ignore[arg-type]
        assert err.value.code == Code.BAD_REQUEST
    with pytest.raises(BrokerError):
        catalog.create_topic("")
    with pytest.raises(BrokerError):
        catalog.create_topic("x", 1, (99,))  # type: ignore[arg-type]
    catalog.create_topic("a")
    catalog.create_group("g", fifo=True)
    assert [t.name for t in catalog.topics()] == ["a"]
    assert [(g.name, g.fifo) for g in catalog.groups()] == [("g", True)]


def test_topic_growth_adds_queues() -> None:
    catalog, broker = make(queues=1)
    broker.send([msg()], T0)
    catalog.create_topic("t", 3)
    results = [broker.send([msg()], T0)[0].queue_id for _ in range(3)]
    assert sorted(results) == [0, 1, 2]
    assert len(pop(broker, T0)) == 4


def test_stored_message_fast_constructor_is_a_real_frozen_instance() -> None:
    import dataclasses

    inbound = msg(tag="x", properties={"k": "v"}, group="grp")
    fast = StoredMessage.of(
        inbound, queue_id=2, offset=7, store_timestamp=T0, broker="b", transaction_id="tx"
    )
    plain = StoredMessage(
        **{f.name: getattr(inbound, f.name) for f in dataclasses.fields(inbound)},
        queue_id=2,
        offset=7,
        store_timestamp=T0,
        broker="b",
        transaction_id="tx",
    )
    assert type(fast) is StoredMessage and fast == plain and repr(fast) == repr(plain)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.offset = 8  # type: ignore[misc]
    assert dataclasses.replace(fast, offset=9).offset == 9
