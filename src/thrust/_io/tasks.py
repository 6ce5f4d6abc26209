"""`TaskSet`: the one owner of a client part's background tasks, whose exit is its `aclose()`.

Not `asyncio.TaskGroup`, on purpose. A TaskGroup cancels every sibling (and its owner) when one child
fails, and is exited by awaiting all of them; a long-lived consumer wants neither: a bug in one queue's
receive must not stop the other queues, and its tasks end only when the client closes, bounded in time
(docs/CONVENTIONS.md: every background task owned and cancelled on close). So a child's failure is
logged and its siblings go on, and `aclose()` cancels what is left and awaits it for at most a given
time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["Spawn", "TaskSet"]

# What a part that starts tasks is given: `TaskSet.spawn` of its owner's set.
Spawn = Callable[[Coroutine[Any, Any, None], str | None], "asyncio.Task[None]"]


class TaskSet:
    """Tasks started by `spawn`, each kept until it ends; `aclose` cancels and awaits the rest."""

    __slots__ = ("_closed", "_logger", "_tasks")

    def __init__(self, logger: logging.Logger) -> None:
        self._logger = logger
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def spawn(self, coro: Coroutine[Any, Any, None], name: str | None = None) -> asyncio.Task[None]:
        """Start `coro` as an owned task on the running loop. After `aclose` it is cancelled at once,
        before it runs, never left behind."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        if self._closed:
            task.cancel()
        return task

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            exc = task.exception()
            if exc is not None:
                # The siblings go on (module docstring); the failure is not lost.
                self._logger.error("task %s failed", task.get_name(), exc_info=exc)

    def __len__(self) -> int:
        return len(self._tasks)

    async def aclose(self, timeout: float) -> int:
        """Cancel every task still running and await them, at most `timeout` seconds; returns how many
        had still not ended then. Idempotent; tasks spawned afterwards are cancelled at once."""
        self._closed = True
        tasks = [t for t in self._tasks if not t.done()]
        for t in tasks:
            t.cancel()
        if not tasks:
            return 0
        _done, pending = await asyncio.wait(tasks, timeout=max(0.0, timeout))
        return len(pending)
