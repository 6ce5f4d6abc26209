"""Shared helpers for client integration tests (no pytest-asyncio: each test runs its own loop)."""

from __future__ import annotations

from typing import Any, TypeVar

import thrust

# Re-exported: the suite's tests import them from here (tests/support.py has the one definition).
from tests.support import run as run

T = TypeVar("T")


async def receive_n(consumer: thrust.SimpleConsumer, n: int, **kwargs: Any) -> list[thrust.ReceivedMessage]:
    """Receive until `n` messages arrived (the server may split them over several receives)."""
    got: list[thrust.ReceivedMessage] = []
    while len(got) < n:
        got += await consumer.receive(32, **kwargs)
    return got
