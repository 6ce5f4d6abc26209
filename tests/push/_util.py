"""Helpers for push-consumer integration tests (real embedded server, real gRPC on 127.0.0.1)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

# Re-exported: the suite's tests import them from here (tests/support.py has the one definition).
from tests.support import run as run
from tests.support import until as until
from thrust.message import Message
from thrust.producer import Producer
from thrust.push_consumer import PushConsumer


async def ready(consumer: PushConsumer, queues: int = 1) -> None:
    """Started, with `queues` queues assigned and each one polling (so new messages reach it)."""
    await until(lambda: len(consumer.stats().queues) >= queues)
    await until(lambda: all(q.receives_in_flight > 0 for q in consumer.stats().queues))


async def send_all(producer: Producer, messages: Sequence[Message], chunk: int = 16) -> list[str]:
    """Send in concurrent chunks; the message ids in order."""
    ids: list[str] = []
    for i in range(0, len(messages), chunk):
        receipts = await asyncio.gather(*(producer.send(m) for m in messages[i : i + chunk]))
        ids.extend(r.message_id for r in receipts)
    return ids
