"""The blocking facade (`thrust.sync`) beyond send and receive: `send_batch`, `recall`, transactions rolled
back (explicitly and by an exception), `subscribe` / `unsubscribe`, `ack_many`, `change_invisible_duration`;
against both servers (tests/engines.py), same code. Each call blocks until its work is done on the server."""

from __future__ import annotations

import time

import pytest

import thrust
import thrust.sync
from tests.engines import Engine


def _receive_until(
    c: thrust.sync.SimpleConsumer, want: set[bytes], invisible: float, budget: float = 60.0
) -> list[thrust.ReceivedMessage]:
    """Receive (not ack) until every body of `want` came (fails after `budget` seconds)."""
    got: list[thrust.ReceivedMessage] = []
    end = time.monotonic() + budget
    while not want <= {m.body for m in got}:
        assert time.monotonic() < end, f"only {sorted(m.body for m in got)} of {sorted(want)}"
        got += c.receive(32, invisible)
    return got


@pytest.mark.slow
def test_sync_producer_send_batch_recall_and_rollbacks(engine: Engine) -> None:
    normal, delay, tx = engine.topic(), engine.topic("DELAY"), engine.topic("TRANSACTION")
    group = engine.group()
    invisible = engine.min_invisible + 20  # far longer than a round of receives: no redelivery meanwhile
    with thrust.sync.Producer(endpoints=engine.endpoint, topics=[normal, delay, tx]) as p:
        batch = p.send_batch([thrust.Message(topic=normal, body=b"batch-%d" % i) for i in range(4)])
        assert len({r.message_id for r in batch}) == 4
        # One batch, one queue, consecutive offsets.
        assert [r.offset for r in batch] == list(range(batch[0].offset, batch[0].offset + 4))
        at = time.time() + 3
        kept = p.send(thrust.Message(topic=delay, body=b"delay-kept", delivery_time=at))
        recalled = p.send(thrust.Message(topic=delay, body=b"delay-recalled", delivery_time=at))
        assert recalled.recall_handle
        assert p.recall(delay, recalled.recall_handle) == recalled.message_id
        t = p.transaction()
        t.send(thrust.Message(topic=tx, body=b"tx-rolled-back"))
        t.rollback()
        with pytest.raises(RuntimeError), p.transaction() as t:
            t.send(thrust.Message(topic=tx, body=b"tx-raised"))
            raise RuntimeError("local work failed: the transaction rolls back")
        with p.transaction() as t:
            committed = t.send(thrust.Message(topic=tx, body=b"tx-committed"))
    with thrust.sync.SimpleConsumer(
        endpoints=engine.endpoint,
        group=group,
        subscriptions={normal: "*", delay: "*", tx: "*"},
        await_duration=5,
    ) as c:
        want = {b"batch-0", b"batch-1", b"batch-2", b"batch-3", b"delay-kept", b"tx-committed"}
        got = _receive_until(c, want, invisible)
        assert c.ack_many(got) == [None] * len(got)
        ids = {m.body: m.message_id for m in got}
        assert ids[b"delay-kept"] == kept.message_id and ids[b"tx-committed"] == committed.message_id
        # Once every topic has been polled empty, neither the recalled nor the rolled-back messages came:
        # the delay time is long past and each rollback was final.
        for _ in range(3):
            late = c.receive(32, invisible)
            assert c.ack_many(late) == [None] * len(late)
            got += late
            assert not late or {m.body for m in late} <= want, [m.body for m in late]
        assert sorted(m.body for m in got if m.body not in want) == []


@pytest.mark.slow
def test_sync_consumer_subscribe_ack_many_change_invisible_duration_and_unsubscribe(engine: Engine) -> None:
    a, b, group = engine.topic(), engine.topic(), engine.group()
    invisible = engine.min_invisible + 20  # far longer than a round of receives: no redelivery meanwhile
    with thrust.sync.Producer(endpoints=engine.endpoint, topics=[a, b]) as p:
        for i in range(3):
            p.send(thrust.Message(topic=a, body=b"a-%d" % i))
        p.send(thrust.Message(topic=b, body=b"b-keep", tag="keep"))
        p.send(thrust.Message(topic=b, body=b"b-drop", tag="drop"))
        with thrust.sync.SimpleConsumer(
            endpoints=engine.endpoint, group=group, subscriptions={a: "*"}, await_duration=5
        ) as c:
            c.subscribe(b, "keep")
            assert set(c.aio.subscriptions) == {a, b}
            got = _receive_until(c, {b"a-0", b"a-1", b"a-2", b"b-keep"}, invisible)
            assert sorted(m.body for m in got) == [b"a-0", b"a-1", b"a-2", b"b-keep"]
            by_body = {m.body: m for m in got}
            # Nacked by a short invisible time: it comes back, with the next delivery attempt and a new
            # receipt handle; the others are acked in one call.
            nacked = by_body[b"a-0"]
            old_handle = nacked.receipt_handle
            c.change_invisible_duration(nacked, 1)
            assert nacked.receipt_handle != old_handle
            rest = [m for m in got if m is not nacked]
            assert c.ack_many(rest) == [None] * len(rest)
            [again] = _receive_until(c, {b"a-0"}, invisible)
            assert again.message_id == nacked.message_id and again.delivery_attempt == 2
            c.ack(again)
            # A second ack of the same handle: per message, not for the whole call. The embedded server
            # refuses it; the proxy keeps no state per handle and answers OK (D11, docs/interop-findings.md).
            errors = c.ack_many([again])
            if engine.real:
                assert errors == [None]
            else:
                assert len(errors) == 1 and type(errors[0]) is thrust.InvalidReceiptHandleError, errors

            c.unsubscribe(b)
            assert set(c.aio.subscriptions) == {a}
            p.send(thrust.Message(topic=b, body=b"b-after", tag="keep"))
            p.send(thrust.Message(topic=a, body=b"a-after"))
            after = _receive_until(c, {b"a-after"}, invisible)
            assert [m.body for m in after] == [b"a-after"]
            c.ack_many(after)
            assert c.receive(32, invisible) == []  # only `a` is polled: "b-after" waits for a subscriber
