"""Messages from `thrust.sync.SimpleConsumer` settle for real when `msg.ack()` is called from a thread.

Bound to the asyncio consumer, `msg.ack()` returned a coroutine that a plain thread never awaited: no ack
was sent and the message came back after its invisible duration."""

from __future__ import annotations

import time

import pytest

import thrust
import thrust.sync
from tests.engines import Engine


@pytest.mark.slow
def test_sync_msg_ack_is_not_redelivered_and_change_invisible_duration_applies(
    embedded_engine: Engine,
) -> None:
    engine = embedded_engine
    topic, group = engine.topic(), engine.group()
    with thrust.sync.Producer(endpoints=engine.endpoint, topics=[topic]) as producer:
        acked_id = producer.send(thrust.Message(topic=topic, body=b"ack me")).message_id
        hidden_id = producer.send(thrust.Message(topic=topic, body=b"show me soon")).message_id
    with thrust.sync.SimpleConsumer(
        endpoints=engine.endpoint, group=group, subscriptions={topic: "*"}, await_duration=5
    ) as consumer:
        got: dict[str, thrust.ReceivedMessage] = {}
        deadline = time.monotonic() + 30
        while len(got) < 2 and time.monotonic() < deadline:
            for m in consumer.receive(32, invisible_duration=10):
                got[m.message_id] = m
        received_at = time.monotonic()
        assert set(got) == {acked_id, hidden_id}

        assert got[acked_id].ack() is not None  # an already-finished awaitable, not a pending coroutine
        old_handle = got[hidden_id].receipt_handle
        got[hidden_id].change_invisible_duration(1)

        # Past the 10 s invisible duration of the first receive: the acked message never comes back, the
        # one made visible again after 1 s does.
        again: list[str] = []
        while time.monotonic() < received_at + 13:
            for m in consumer.receive(32, invisible_duration=10):
                again.append(m.message_id)
                consumer.ack(m)
        assert acked_id not in again
        assert hidden_id in again
        assert got[hidden_id].receipt_handle != old_handle  # the server's new handle: the call happened
