"""Helpers for push-consumer integration tests (real embedded server, real gRPC on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from thrust.message import Message
from thrust.producer import Producer
from thrust.push_consumer import PushConsumer


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coro)


async def until(pred: Callable[[], bool], timeout: float = 10.0, step: float = 0.01) -> None:
    """Wait (on the loop) until `pred()` holds; fail after `timeout` seconds."""
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"condition not reached within {timeout}s")
        await asyncio.sleep(step)


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
