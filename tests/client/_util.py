"""Shared helpers for client integration tests (no pytest-asyncio: each test runs its own loop)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import thrust

T = TypeVar("T")


def run(scenario: Callable[[], Awaitable[T]], timeout: float = 50.0) -> T:
    """Run `scenario()` on a fresh loop; fail if it leaves any client task running."""

    async def main() -> T:
        result = await asyncio.wait_for(scenario(), timeout)
        leftovers = [
            t
            for t in asyncio.all_tasks()
            if t is not asyncio.current_task() and t.get_name().startswith("thrust-")
        ]
        assert not leftovers, f"tasks outlived close: {leftovers}"
        return result

    return asyncio.run(main())


async def receive_n(consumer: thrust.SimpleConsumer, n: int, **kwargs: Any) -> list[thrust.ReceivedMessage]:
    """Receive until `n` messages arrived (the server may split them over several receives)."""
    got: list[thrust.ReceivedMessage] = []
    while len(got) < n:
        got += await consumer.receive(32, **kwargs)
    return got
