"""`TaskSet`: the one owner of a client's (or a client part's) background tasks, whose exit is `aclose()`.

A client spawns its tasks through its set instead of keeping sets of them by hand; on close it may let
them finish within a bound (`wait`), then cancels and awaits what is left, bounded too (`aclose`). A task
leaves the set when it ends, so the set never holds more than the tasks running; `limit` turns a caller
that would exceed its own bound (e.g. the producer's in-flight window) into an error instead of unbounded
growth.

Not `asyncio.TaskGroup`, on purpose. A TaskGroup cancels every sibling (and its owner) when one child
fails, and is exited by awaiting all of them; a long-lived client wants neither: a bug in one queue's
receive must not stop the other queues, and its tasks end only when the client closes, bounded in time
(docs/CONVENTIONS.md: every background task owned and cancelled on close). So a child's failure is
logged (when the set was given a logger) and its siblings go on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["Spawn", "TaskSet"]

T = TypeVar("T")

# What a part that starts tasks is given: `TaskSet.spawn` of its owner's set.
Spawn = Callable[[Coroutine[Any, Any, None], str | None], "asyncio.Task[None]"]

_logger = logging.getLogger("thrust.io")


class TaskSet:
    """Tasks started by `spawn`, each kept until it ends; `aclose` cancels and awaits the rest.

    `logger`: where a task's failure is logged; None for tasks whose result someone awaits (a producer's
    `send_async` task: its caller gets the error). `limit`: at most this many tasks at once."""

    __slots__ = ("_closed", "_limit", "_logger", "_tasks")

    def __init__(self, logger: logging.Logger | None = None, *, limit: int | None = None) -> None:
        self._logger = logger
        self._limit = limit
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    def __len__(self) -> int:
        return len(self._tasks)

    @property
    def closed(self) -> bool:
        """True once `aclose` began."""
        return self._closed

    def spawn(self, coro: Coroutine[Any, Any, T], name: str | None = None) -> asyncio.Task[T]:
        """Start `coro` as an owned task on the running loop. After `aclose` it is cancelled at once,
        before it runs, never left behind. Raises `RuntimeError` (and closes `coro`) when `limit` tasks
        are running: the caller's own bound should have held it back."""
        if self._limit is not None and len(self._tasks) >= self._limit:
            coro.close()
            raise RuntimeError(f"more than {self._limit} tasks")
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        if self._closed:
            task.cancel()
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if self._logger is not None and not task.cancelled():
            exc = task.exception()
            if exc is not None:
                # The siblings go on (module docstring); the failure is not lost.
                self._logger.error("task %s failed", task.get_name(), exc_info=exc)

    async def wait(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the running tasks to end by themselves (none is cancelled);
        True when none is left."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=max(0.0, timeout))
        return not self._tasks

    async def aclose(self, timeout: float = 0.5) -> int:
        """Cancel every task still running and await them, at most `timeout` seconds; returns how many
        had still not ended then (left behind rather than holding the close). Idempotent; tasks spawned
        afterwards are cancelled at once."""
        self._closed = True
        tasks = [t for t in self._tasks if not t.done()]
        for t in tasks:
            t.cancel()
        if not tasks:
            return 0
        _done, pending = await asyncio.wait(tasks, timeout=max(0.0, timeout))
        if pending:
            _logger.debug("%d tasks still running %.1fs after they were cancelled", len(pending), timeout)
        return len(pending)
