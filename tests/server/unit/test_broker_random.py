"""Broker core: seeded random operation sequences checked against invariants (no event loop, no sleeps)."""

from __future__ import annotations

import random

import pytest

from tests.server.unit._broker_kit import T0, make, msg, pop
from thrust.server.core.model import BrokerError, Delivery, MessageType


@pytest.mark.parametrize("fifo", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_random_operations_keep_invariants(fifo: bool, seed: int) -> None:
    rng = random.Random(seed * 2 + fifo)
    max_attempts = 4
    _, broker = make(MessageType.FIFO, MessageType.NORMAL, queues=3, fifo=fifo, max_attempts=max_attempts)
    now = T0
    sent: dict[str, tuple[str | None, int]] = {}  # id -> (message group, send order)
    held: dict[str, Delivery] = {}  # id -> latest delivery the "client" holds
    acked: set[str] = set()
    nacked: dict[str, float] = {}  # id -> until, for messages nacked and not redelivered since
    order = 0

    def check_fifo(d: Delivery, before: dict[str, Delivery], nacked: dict[str, float]) -> None:
        group = d.message.message_group
        if not fifo or group is None:
            return
        mine = sent[d.message.message_id][1]
        # No earlier message of the same group may still be in flight from an earlier pop (messages
        # of one pop may be consecutive messages of a group).
        for other_id, other in before.items():
            if other_id == d.message.message_id or other.message.message_group != group:
                continue
            if sent[other_id][1] < mine and other.invisible_until > now:
                raise AssertionError(f"{d.message.message_id} delivered while {other_id} in flight")
        for other_id, until in nacked.items():
            if sent[other_id][0] == group and sent[other_id][1] < mine and until > now:
                raise AssertionError(f"{d.message.message_id} delivered while {other_id} invisible")

    for _ in range(400):
        op = rng.random()
        now += rng.choice((0.0, 0.5, 3.0, 12.0))
        if op < 0.3:
            group = rng.choice((None, "A", "B", "C")) if fifo else None
            kind = MessageType.FIFO if group else MessageType.NORMAL
            m = msg(kind=kind, group=group)
            broker.send([m], now)
            sent[m.message_id] = (group, order)
            order += 1
        elif op < 0.6:
            before = dict(held)
            for d in pop(broker, now, batch=rng.randint(1, 8), invisible=rng.choice((10.0, 30.0))):
                assert d.message.message_id in sent
                assert d.message.message_id not in acked, "acked message redelivered"
                assert 1 <= d.delivery_attempt <= max_attempts
                check_fifo(d, before, nacked)
                held[d.message.message_id] = d
                nacked.pop(d.message.message_id, None)
        elif op < 0.8 and held:
            mid = rng.choice(sorted(held))
            d = held.pop(mid)
            try:
                broker.ack(
                    client_id="c",
                    group="g",
                    topic="t",
                    receipt_handle=d.receipt_handle,
                    message_id=mid,
                    now=now,
                )
                acked.add(mid)
            except BrokerError as err:
                assert d.invisible_until <= now, f"live handle refused: {err}"
        elif op < 0.9 and held:
            mid = rng.choice(sorted(held))
            d = held[mid]
            duration = rng.choice((0.0, 5.0))
            try:
                handle = broker.change_invisible_duration(
                    client_id="c",
                    group="g",
                    topic="t",
                    receipt_handle=d.receipt_handle,
                    message_id=mid,
                    duration=duration,
                    now=now,
                )
                held.pop(mid)
                nacked[mid] = now + duration
                assert handle
            except BrokerError:
                assert d.invisible_until <= now
                held.pop(mid)
        else:
            broker.tick(now)
        broker.tick(now)  # inflight() reflects the state as of the last call that advanced time
        live = sum(1 for d in held.values() if d.invisible_until > now)
        live += sum(1 for until in nacked.values() if until > now)
        assert broker.inflight("g", "t") == live

    # Drain: every message ends up acked exactly once or in the DLQ.
    for _ in range(200):
        now += 40
        batch = pop(broker, now, batch=32)
        for d in batch:
            assert d.message.message_id not in acked
            broker.ack(
                client_id="c",
                group="g",
                topic="t",
                receipt_handle=d.receipt_handle,
                message_id=d.message.message_id,
                now=now,
            )
            acked.add(d.message.message_id)
        if not batch and broker.next_event_time() is None:
            break
    dead = {m.message_id for m in broker.messages("%DLQ%g")}
    assert acked.isdisjoint(dead)
    assert acked | dead == set(sent)
    assert broker.inflight("g", "t") == 0 and broker.backlog("t", "g") == 0
