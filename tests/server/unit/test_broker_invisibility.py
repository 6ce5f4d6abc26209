"""Broker core: invisibility, redelivery, receipt handles, DLQ, auto-renew, release, event times."""

from __future__ import annotations

import random

import pytest

from tests.server.unit._broker_kit import T0, ack, ids, make, msg, nack, pop
from thrust._codec.status import Code
from thrust.server.core.broker import RELEASE_DELAY, Broker, broker_of_handle
from thrust.server.core.catalog import Catalog
from thrust.server.core.model import BrokerError, Delivery, GroupRetryPolicy


def _invalid(call: object) -> BrokerError:
    with pytest.raises(BrokerError) as err:
        call()  # type: ignore[operator]
    assert err.value.code == Code.INVALID_RECEIPT_HANDLE, err.value
    return err.value


def test_invisibility_expiry_redelivers_with_next_attempt() -> None:
    _, broker = make(queues=1)
    broker.send([msg(message_id="M")], T0)
    [first] = pop(broker, T0, invisible=10)
    assert pop(broker, T0 + 9.999) == []
    [second] = pop(broker, T0 + 10, invisible=10)
    assert second.message.message_id == "M" and second.delivery_attempt == 2
    assert second.receipt_handle != first.receipt_handle
    # The first handle died with the redelivery.
    _invalid(lambda: ack(broker, first, T0 + 11))
    [third] = pop(broker, T0 + 20.5)
    assert third.delivery_attempt == 3
    ack(broker, third, T0 + 21)
    assert broker.inflight("g", "t") == 0


def test_nack_via_change_invisible_duration() -> None:
    _, broker = make(queues=1)
    broker.send([msg(message_id="M")], T0)
    [d] = pop(broker, T0, invisible=60)
    new_handle = nack(broker, d, T0 + 1, 5.0)
    assert new_handle != d.receipt_handle
    assert "superseded" in _invalid(lambda: ack(broker, d, T0 + 2)).message
    assert pop(broker, T0 + 5.9) == []
    [again] = pop(broker, T0 + 6)
    assert again.delivery_attempt == 2


def test_change_invisible_extends_and_new_handle_acks() -> None:
    _, broker = make(queues=1)
    broker.send([msg()], T0)
    [d] = pop(broker, T0, invisible=10)
    handle = nack(broker, d, T0 + 5, 100.0)
    assert pop(broker, T0 + 50) == []  # still invisible past the original 10 s
    ack(broker, d, T0 + 60, handle=handle)
    assert pop(broker, T0 + 200) == []


def test_nack_zero_makes_visible_at_once() -> None:
    _, broker = make(queues=1)
    broker.send([msg()], T0)
    [d] = pop(broker, T0)
    nack(broker, d, T0 + 1, 0.0)
    assert broker.next_event_time() == T0 + 1
    [again] = pop(broker, T0 + 1)
    assert again.delivery_attempt == 2


def test_change_invisible_duration_range() -> None:
    _, broker = make(queues=1)
    broker.send([msg()], T0)
    [d] = pop(broker, T0)
    for bad in (-0.1, 12 * 3600 + 0.5):
        with pytest.raises(BrokerError) as err:
            nack(broker, d, T0, bad)
        assert err.value.code == Code.ILLEGAL_INVISIBLE_TIME
    ack(broker, d, T0)  # the failed calls did not disturb the handle


def test_expired_handle_rejected() -> None:
    _, broker = make(queues=1)
    broker.send([msg()], T0)
    [d] = pop(broker, T0, invisible=10)
    err = _invalid(lambda: ack(broker, d, T0 + 10))
    assert "expired" in err.message
    _invalid(lambda: nack(broker, d, T0 + 10, 5))


def test_expiry_is_decided_from_the_handle_alone() -> None:
    catalog, broker = make(queues=1)
    broker.send([msg()], T0)
    [d] = pop(broker, T0, invisible=10)
    # A broker of the same name that never saw the message still knows the handle has expired.
    amnesiac = Broker("broker-a", catalog)
    assert (
        _invalid(lambda: ack(amnesiac, d, T0 + 10.5)).message
        == "invalid receipt handle: receipt handle is expired"
    )
    assert "already acknowledged" in _invalid(lambda: ack(amnesiac, d, T0 + 5)).message


def test_already_acked_handle_rejected() -> None:
    _, broker = make(queues=1)
    broker.send([msg()], T0)
    [d] = pop(broker, T0)
    ack(broker, d, T0 + 1)
    _invalid(lambda: ack(broker, d, T0 + 2))
    _invalid(
        lambda: broker.forward_to_dead_letter_queue(
            client_id="c1", group="g", topic="t", receipt_handle=d.receipt_handle, message_id="", now=T0 + 2
        )
    )


def test_malformed_handles_only_raise_invalid_receipt_handle() -> None:
    _, broker = make(queues=1)
    broker.send([msg()], T0)
    [d] = pop(broker, T0)
    fields = d.receipt_handle.split(" ")
    rng = random.Random(7)
    candidates = [
        "",
        " ",
        "garbage",
        "1 2 3",
        d.receipt_handle + " extra",
        d.receipt_handle.replace(" ", "  "),
        " ".join(["2", *fields[1:]]),
        " ".join([*fields[:5], "-1", *fields[6:]]),
        " ".join([*fields[:6], "7", *fields[7:]]),
        " ".join([*fields[:3], "zz", *fields[4:]]),
        " ".join([*fields[:3], "9" * 5000, *fields[4:]]),
        " ".join([fields[0], "f" * 400, *fields[2:]]),  # pop time beyond float range
        " ".join([*fields[:2], "f" * 400, *fields[3:]]),
        " ".join([*fields[:3], "ffff", *fields[4:]]),  # queue that does not exist
        " ".join([*fields[:4], "ffff", *fields[5:]]),  # offset that does not exist
        "\x00\udcff",
    ]
    for _ in range(200):
        chars = list(d.receipt_handle)
        chars[rng.randrange(len(chars))] = rng.choice("0123456789abcdefxyz -\n")
        candidates.append("".join(chars))
    for handle in candidates:
        if handle == d.receipt_handle:
            continue
        _invalid(lambda h=handle: ack(broker, d, T0 + 1, handle=h))  # type: ignore[misc]
    ack(broker, d, T0 + 1)  # the real one still works


def test_wrong_broker_group_topic_or_message_id() -> None:
    catalog, broker = make(queues=1)
    other = Broker("broker-b", catalog)
    catalog.create_topic("t2", 1)
    broker.send([msg(message_id="M")], T0)
    broker.send([msg(topic="t2", message_id="N")], T0)
    [d] = pop(broker, T0)
    [d2] = pop(broker, T0, topic="t2")
    assert broker_of_handle(d.receipt_handle) == "broker-a"
    assert broker_of_handle("nonsense") is None
    err = _invalid(lambda: ack(other, d, T0))
    assert "broker-a" in err.message
    _invalid(lambda: ack(broker, d, T0, group="other-group"))
    _invalid(
        lambda: broker.ack(
            client_id="c1", group="g", topic="t2", receipt_handle=d.receipt_handle, message_id="", now=T0
        )
    )
    _invalid(
        lambda: broker.ack(
            client_id="c1", group="g", topic="t", receipt_handle=d.receipt_handle, message_id="X", now=T0
        )
    )
    with pytest.raises(BrokerError) as unknown:
        broker.ack(
            client_id="c1", group="g", topic="nope", receipt_handle=d.receipt_handle, message_id="", now=T0
        )
    assert unknown.value.code == Code.TOPIC_NOT_FOUND
    ack(broker, d, T0)
    ack(broker, d2, T0)


def test_signed_handles_reject_forgery() -> None:
    catalog = Catalog()
    catalog.create_topic("t", 1)
    broker = Broker("broker-a", catalog, receipt_secret=b"s3cret")
    broker.send([msg(), msg()], T0)
    first, second = pop(broker, T0, invisible=30)
    fields = first.receipt_handle.split(" ")
    assert len(fields) == 9
    # Re-point the first handle at the second message: right shape, wrong signature.
    forged = " ".join([*fields[:4], f"{second.message.offset:x}", *fields[5:]])
    err = _invalid(lambda: ack(broker, second, T0, handle=forged))
    assert "signature" in err.message
    # A handle with a made-up signature is rejected too.
    _invalid(
        lambda: broker.ack(
            client_id="c",
            group="g",
            topic="t",
            receipt_handle=" ".join(fields[:8]) + " " + "0" * 32,
            message_id="",
            now=T0,
        )
    )
    # An unsigned-shaped handle is malformed for a signing broker.
    _invalid(lambda: ack(broker, first, T0, handle=" ".join(fields[:8])))
    ack(broker, first, T0)
    ack(broker, second, T0)


def test_dlq_after_max_attempts_and_consuming_the_dlq() -> None:
    catalog, broker = make(queues=1, max_attempts=3)
    broker.send([msg(message_id="M", tag="tg", properties={"k": "v"})], T0)
    now = T0
    attempts = []
    for _ in range(3):
        [d] = pop(broker, now, invisible=10)
        attempts.append(d.delivery_attempt)
        now += 10
    assert attempts == [1, 2, 3]
    # The 4th delivery would exceed max_attempts: moved to %DLQ%g instead.
    assert pop(broker, now) == []
    assert broker.inflight("g", "t") == 0
    assert catalog.has_topic("%DLQ%g")
    info = catalog.topic("%DLQ%g")
    assert info.queues == 1
    [dead] = broker.messages("%DLQ%g")
    assert dead.message_id == "M" and dead.topic == "%DLQ%g" and dead.dead_letter_of == ("t", "M")
    [d] = pop(broker, now, group="dlq-reader", topic="%DLQ%g")
    assert d.dead_letter_of == ("t", "M") and d.message.tag == "tg" and d.message.properties == {"k": "v"}
    assert d.delivery_attempt == 1
    ack(broker, d, now, group="dlq-reader")


def test_dlq_moves_without_a_pop_when_timers_advance() -> None:
    _, broker = make(queues=1, max_attempts=1)
    broker.send([msg(message_id="M")], T0)
    pop(broker, T0, invisible=10)
    assert broker.next_event_time() == T0 + 10
    broker.tick(T0 + 10)
    assert [m.message_id for m in broker.messages("%DLQ%g")] == ["M"]
    assert broker.next_event_time() is None


def test_forward_to_dead_letter_queue() -> None:
    _, broker = make(queues=2)
    broker.send([msg(message_id="M")], T0)
    [d] = pop(broker, T0)
    broker.forward_to_dead_letter_queue(
        client_id="c1", group="g", topic="t", receipt_handle=d.receipt_handle, message_id="M", now=T0 + 1
    )
    assert broker.inflight("g", "t") == 0
    _invalid(lambda: ack(broker, d, T0 + 2))
    assert pop(broker, T0 + 100) == []
    [dead] = pop(broker, T0 + 100, group="x", topic="%DLQ%g")
    assert dead.dead_letter_of == ("t", "M") and dead.message.store_timestamp == T0 + 1
    # Dead-lettering from the DLQ keeps the original origin.
    broker.forward_to_dead_letter_queue(
        client_id="c1",
        group="x",
        topic="%DLQ%g",
        receipt_handle=dead.receipt_handle,
        message_id="M",
        now=T0 + 101,
    )
    assert [m.dead_letter_of for m in broker.messages("%DLQ%x")] == [("t", "M")]


def test_auto_renew_accepts_the_original_handle_long_after_60s() -> None:
    _, broker = make(queues=1)
    broker.send([msg(message_id="M")], T0)
    [d] = pop(broker, T0, auto_renew=True)
    assert d.invisible_until == T0 + 60
    assert broker.next_event_time() == T0 + 60  # first renew point
    for t in (T0 + 59, T0 + 61, T0 + 300, T0 + 3600):
        assert pop(broker, t) == [], t
    assert broker.inflight("g", "t") == 1
    ack(broker, d, T0 + 3601)
    assert broker.inflight("g", "t") == 0
    assert pop(broker, T0 + 8000) == []


def test_auto_renew_nack_with_original_handle() -> None:
    _, broker = make(queues=1)
    broker.send([msg()], T0)
    [d] = pop(broker, T0, auto_renew=True)
    handle = nack(broker, d, T0 + 500, 10.0)  # original handle, far past its 60 s
    _invalid(lambda: ack(broker, d, T0 + 501))  # now superseded
    assert pop(broker, T0 + 509) == []
    [again] = pop(broker, T0 + 510)
    assert again.delivery_attempt == 2
    assert handle != again.receipt_handle


def test_auto_renew_stops_after_three_hours_with_retry_delay() -> None:
    catalog, broker = make(queues=1)
    catalog.create_group("g", retry=GroupRetryPolicy(customized=(7.0,)))
    broker.send([msg()], T0)
    [d] = pop(broker, T0, auto_renew=True)
    # Renew points: 60, +60, +180, +300, +600, +1800, +3600, +3600, ... until 3 h of consumption.
    points = [T0 + 60]
    step = iter([60.0, 180.0, 300.0, 600.0, 1800.0, 3600.0, 3600.0, 3600.0])
    while points[-1] - T0 < 3 * 3600:
        points.append(points[-1] + next(step))
    stop = points[-1]
    assert pop(broker, stop - 0.001) == []
    broker.tick(stop)  # renewing stops: nacked with the group's retry delay
    assert pop(broker, stop + 6.9) == []
    [again] = pop(broker, stop + 7)
    assert again.delivery_attempt == 2
    _invalid(lambda: ack(broker, d, stop + 8))


def test_release_client_makes_auto_renew_messages_visible_after_1s() -> None:
    _, broker = make(queues=1)
    broker.send([msg(message_id="A"), msg(message_id="B"), msg(message_id="C")], T0)
    [a] = pop(broker, T0, auto_renew=True, client="c1", batch=1)
    [b] = pop(broker, T0, auto_renew=False, invisible=600, client="c1", batch=1)
    [c] = pop(broker, T0, auto_renew=True, client="c2", batch=1)
    broker.release_client("c1", T0 + 100)
    assert broker.next_event_time() == T0 + 100 + RELEASE_DELAY
    assert pop(broker, T0 + 100.5) == []
    [again] = pop(broker, T0 + 101, invisible=1000)
    assert again.message.message_id == "A" and again.delivery_attempt == 2
    # B (no auto-renew) keeps its own invisibility; C belongs to another client.
    assert pop(broker, T0 + 500) == []
    _invalid(lambda: ack(broker, a, T0 + 102))
    ack(broker, b, T0 + 501)
    ack(broker, c, T0 + 501)
    broker.release_client("unknown", T0 + 502)  # harmless


def test_release_client_handle_valid_until_visible() -> None:
    _, broker = make(queues=1)
    broker.send([msg()], T0)
    [a] = pop(broker, T0, auto_renew=True)
    broker.release_client("c1", T0 + 10)
    ack(broker, a, T0 + 10.5)
    assert pop(broker, T0 + 20) == []


def test_retry_messages_mix_with_new_ones() -> None:
    _, broker = make(queues=1)
    broker.send([msg(message_id=f"R{i}") for i in range(4)], T0)
    pop(broker, T0, invisible=10, batch=4)  # all four expire at T0 + 10
    broker.send([msg(message_id=f"N{i}") for i in range(40)], T0 + 1)
    got = ids(pop(broker, T0 + 10, batch=10))
    retries = [i for i, name in enumerate(got) if name.startswith("R")]
    # Neither starved nor exclusive: a redelivery at least every fifth message.
    assert 1 <= len(retries) <= 3
    assert all(b - a <= 5 for a, b in zip([-1, *retries], retries, strict=False))
    assert got[0].startswith("R") or got[0] == "N0"


def test_next_event_time_tracks_the_earliest_change() -> None:
    _, broker = make(queues=1)
    assert broker.next_event_time() is None
    broker.send([msg(), msg()], T0)
    first, second = pop(broker, T0, invisible=50, batch=1) + pop(broker, T0 + 5, invisible=20, batch=1)
    assert broker.next_event_time() == T0 + 25
    ack(broker, second, T0 + 6)
    assert broker.next_event_time() == T0 + 50
    broker.send([msg(kind=msg().message_type, deliver_at=T0 + 40)], T0 + 7)
    assert broker.next_event_time() == T0 + 40
    broker.tick(T0 + 40)
    assert broker.next_event_time() == T0 + 50
    ack(broker, first, T0 + 41)
    assert broker.next_event_time() is None


def test_stale_timer_entries_are_compacted() -> None:
    _, broker = make(queues=1)
    broker.send([msg() for _ in range(3000)], T0)
    for _ in range(100):
        for d in pop(broker, T0, invisible=100):
            ack(broker, d, T0)
    assert broker.inflight("g", "t") == 0
    assert broker.next_event_time() is None
    assert broker.invisibility_timer_entries <= 1024 + 2


def test_deliveries_are_consistent_objects() -> None:
    _, broker = make(queues=1)
    broker.send([msg()], T0)
    [d] = pop(broker, T0)
    assert isinstance(d, Delivery)
