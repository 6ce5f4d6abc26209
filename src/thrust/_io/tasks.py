"""`TaskOwner`: the one owner of a client's background tasks.

A client spawns its tasks through its owner instead of keeping a set of them by hand; on close it lets
them finish within a bound (`wait`) and then cancels and awaits what is left (`aclose`). A task leaves
the owner when it ends, so the owner never holds more than the tasks running; `limit` turns a caller
that would exceed its own bound (e.g. the producer's in-flight window) into an error instead of
unbounded growth.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["TaskOwner"]

logger = logging.getLogger("thrust.io")

T = TypeVar("T")


class TaskOwner:
    """The running tasks of one client (or one part of it), cancelled and awaited on `aclose`."""

    __slots__ = ("_closed", "_limit", "_tasks")

    def __init__(self, limit: int | None = None) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()
        self._limit = limit
        self._closed = False

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def closed(self) -> bool:
        return self._closed

    def spawn(self, coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        """Run `coro` as a task of this owner, on the running loop.

        Raises `RuntimeError` (and closes `coro`) once `aclose` began, or when `limit` tasks are running:
        the caller's own bound should have held it back."""
        if self._closed or (self._limit is not None and len(self._tasks) >= self._limit):
            coro.close()
            raise RuntimeError("task owner closed" if self._closed else f"more than {self._limit} tasks")
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the running tasks to end by themselves (none is cancelled);
        True when none is left."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=max(0.0, timeout))
        return not self._tasks

    async def aclose(self, timeout: float = 0.5) -> None:
        """Refuse new tasks, cancel the running ones and wait up to `timeout` for them to end; idempotent.

        A task that ignores its cancellation beyond the bound is logged and left behind rather than
        holding the close."""
        self._closed = True
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=max(0.0, timeout))
            if pending:
                logger.debug("%d tasks still running %.1fs after they were cancelled", len(pending), timeout)
