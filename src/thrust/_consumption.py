"""The listener executor: user code runs off the event loop, results come back in batches.

Bench scenario 2 (docs/benchmarks.md#scenarios): the Rust push consumer ran the synchronous listener on the
runtime's worker threads, so a listener blocking 10 ms delayed every timer and I/O callback of the client.
Here a plain-function listener runs on `thread_count` dedicated threads (Java: `consumptionThreadCount`,
default 20, docs/protocol.md §8.2) and an `async def` listener runs on the loop as a bounded number of tasks.

Hand-offs are batched (bench scenario 6, after apache/pulsar#16336: one thread hop per message costs
far more than one hop that carries a whole batch):

* loop -> pool: `submit()` appends a whole burst to one deque under one lock and wakes at most as many
  idle workers as there are new items. A worker that finishes a message takes the next one without any
  wake-up, so a busy pool costs no cross-thread signal per message. Each worker takes one message at a time,
  so a slow listener never holds other messages back.
* pool -> loop: a worker appends `(item, ok)` to a shared deque and calls `call_soon_threadsafe` only when
  it is the first to append since the loop last drained (the deque went from empty to non-empty). The loop
  drains every result at once and hands them to `on_results` as one list: one wake-up per burst.

Everything queued here is bounded upstream: an item exists only for a message that sits in a process
queue's cache, which is bounded by count and bytes (docs/protocol.md §8.1).
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["Consumable", "ExecutorStats", "ListenerExecutor", "RateLimitedLog", "is_async_callable"]

logger = logging.getLogger("thrust.consumer")


class Consumable(Protocol):
    """What the executor hands to the listener: `item.message`. The item itself comes back with the result."""

    @property
    def message(self) -> Any: ...


T = TypeVar("T", bound=Consumable)

# (item, outcome): True when the listener returned the success value (or None), False for a failure, or the
# listener's own result when it is of the executor's `passthrough` type (a lite consumer's `ConsumeSuspend`).
Results = list[tuple[T, object]]


class RateLimitedLog:
    """Logs a failure at most once per `interval` seconds, counting what it suppressed.

    A listener that fails for every message must not turn into one log record per message (conventions:
    no per-message logging unless DEBUG is enabled); the first failure carries the traceback. `template`
    words the record (`%s` is the failure); the default is a listener's.
    """

    __slots__ = ("_interval", "_last", "_lock", "_suppressed", "_template", "total")

    def __init__(self, interval: float = 10.0, template: str = "listener %s; counted as FAILURE") -> None:
        self._interval = interval
        self._template = template
        self._last = -float("inf")
        self._suppressed = 0
        self._lock = threading.Lock()
        self.total = 0

    def failure(self, what: str, exc: BaseException | None) -> None:
        now = time.monotonic()
        with self._lock:
            self.total += 1
            if now - self._last < self._interval:
                self._suppressed += 1
                emit = False
            else:
                suppressed, self._suppressed = self._suppressed, 0
                self._last = now
                emit = True
        if emit:
            more = f" ({suppressed} more since the last report)" if suppressed else ""
            logger.warning(self._template + "%s", what, more, exc_info=exc)
        elif logger.isEnabledFor(logging.DEBUG):
            logger.debug(self._template, what, exc_info=exc)


class ExecutorStats:
    """Counters of one executor. Read on the loop; `in_flight`/`queued` are exact snapshots there."""

    __slots__ = ("completed", "drains", "failed", "peak_in_flight", "submitted", "wakeups")

    def __init__(self) -> None:
        self.submitted = 0
        self.completed = 0
        self.failed = 0
        self.peak_in_flight = 0
        # How many times a worker woke the loop (call_soon_threadsafe) and how many drains ran.
        self.wakeups = 0
        self.drains = 0


class ListenerExecutor(Generic[T]):
    """Runs `listener(item.message)` for every submitted item and reports `(item, ok)` in batches.

    `listener` is a plain function (run on `thread_count` daemon threads) or an `async def` (run on the loop,
    at most `async_concurrency` at once). A result equal to `success`, or None (a listener that returns
    nothing did not fail: Python's habit), means ok; anything else, including an exception, means FAILURE.
    `on_results` is called on the loop with every result that arrived since the previous call. Must be
    constructed and used on the loop that `on_results` belongs to.

    `invoke`, when given, is called with the item instead of `listener(item.message)` (an `async def` when
    the listener is one): an instrumented consumer wraps the listener's call in its process span there,
    on the thread or task that runs it (`thrust._push.tracing`). None costs one check per message.

    `passthrough`, when given, is a type of result reported as it is instead of as a failure (a lite push
    consumer's `ConsumeSuspend`); looked at only when the result is not the success value.
    """

    def __init__(
        self,
        listener: Callable[[Any], Any],
        *,
        success: object,
        on_results: Callable[[Results[T]], None],
        thread_count: int = 20,
        async_concurrency: int = 64,
        name: str = "thrust-consume",
        failure_log_interval: float = 10.0,
        invoke: Callable[[T], Any] | None = None,
        passthrough: type | None = None,
    ) -> None:
        if thread_count < 1:
            raise ValueError("thread_count must be >= 1")
        if async_concurrency < 1:
            raise ValueError("async_concurrency must be >= 1")
        self._listener = listener
        self._invoke = invoke
        self._passthrough = passthrough
        self._success = success
        self._on_results = on_results
        self._loop = asyncio.get_running_loop()
        self._log = RateLimitedLog(failure_log_interval)
        self.stats = ExecutorStats()
        self.is_async = is_async_callable(listener)
        self._closing = False
        self._closed = False
        # Items accepted but not yet started, and items started but not finished.
        self._pending: collections.deque[T] = collections.deque()
        self._in_flight = 0
        # Results on their way back to the loop. `_wake_pending` is True from the first append after a drain
        # until the next drain: exactly one wake-up is scheduled for a burst.
        self._results: collections.deque[tuple[T, object]] = collections.deque()
        self._out_lock = threading.Lock()
        self._wake_pending = False
        self._idle_waiter: asyncio.Future[None] | None = None
        # Thread mode.
        # The workers take `_lock` itself (`with lock:`, a C call) where `with cond:` would add two Python
        # calls per message; `cond.wait` and `notify` work the same under either.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._idle_threads = 0
        self._threads: list[threading.Thread] = []
        self._alive_threads = 0
        # Async mode.
        self._async_concurrency = async_concurrency
        self._tasks: set[asyncio.Task[None]] = set()
        self._runners = 0
        if not self.is_async:
            self._alive_threads = thread_count
            for i in range(thread_count):
                t = threading.Thread(target=self._worker, name=f"{name}-{i}", daemon=True)
                self._threads.append(t)
                t.start()

    # -- the loop side ------------------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        """Listener calls running now."""
        return self._in_flight

    @property
    def queued(self) -> int:
        """Items accepted and not started yet."""
        return len(self._pending)

    @property
    def thread_count(self) -> int:
        return len(self._threads)

    @property
    def listener_failures(self) -> int:
        """Listener calls that raised or returned something that is not a ConsumeResult."""
        return self._log.total

    def submit(self, items: Iterable[T]) -> int:
        """Queue `items` for the listener; returns how many were accepted (0 once closing)."""
        if self._closing:
            return 0
        if self.is_async:
            return self._submit_async(items)
        cond = self._cond
        with cond:
            before = len(self._pending)
            self._pending.extend(items)
            n = len(self._pending) - before
            # Wake only as many sleeping workers as there is new work; busy workers pick the rest up
            # on their own when they finish.
            if n and self._idle_threads:
                cond.notify(min(n, self._idle_threads))
        self.stats.submitted += n
        return n

    def _drain(self) -> None:
        with self._out_lock:
            batch = list(self._results)
            self._results.clear()
            self._wake_pending = False
        if not batch:
            return
        self.stats.drains += 1
        failed = 0
        for _, ok in batch:
            if ok is not True:
                failed += 1
        self.stats.completed += len(batch)
        self.stats.failed += failed
        if not self._closed:
            try:
                self._on_results(batch)
            except Exception:
                logger.exception("consumption result handler failed")
        self._maybe_idle()

    def _maybe_idle(self) -> None:
        w = self._idle_waiter
        if w is not None and not w.done() and self._is_idle():
            w.set_result(None)

    def _is_idle(self) -> bool:
        if self.is_async:
            return self._runners == 0 and not self._results
        return self._alive_threads == 0 and not self._results

    def stop(self) -> list[T]:
        """Stop accepting and starting items; return the queued-but-unstarted ones (their messages are then
        the caller's to settle, e.g. to nack at once rather than leave them invisible until they time out).
        Running listener calls go on; `close()` waits for them. Idempotent (a second call returns [])."""
        if self._closing:
            return []
        self._closing = True
        with self._cond:
            unstarted = list(self._pending)
            self._pending.clear()
            self._cond.notify_all()
        return unstarted

    async def close(self, grace: float) -> int:
        """Stop accepting, drop what has not started, let running listeners finish for up to `grace` s.

        Returns how many queued-but-unstarted items were dropped (their messages are neither acked nor
        nacked, so the server redelivers them once their invisible time runs out). Results that arrive
        within the bound are still delivered to `on_results`; later ones are discarded. Idempotent.
        """
        if self._closed:
            return 0
        dropped = 0
        if not self._closing:
            self._closing = True
            with self._cond:
                dropped = len(self._pending)
                self._pending.clear()
                self._cond.notify_all()
        if not self._is_idle():
            self._idle_waiter = self._loop.create_future()
            try:
                await asyncio.wait_for(asyncio.shield(self._idle_waiter), grace)
            except TimeoutError:
                logger.warning(
                    "%d listener call(s) still running after the %.1f s shutdown bound; "
                    "their messages will be redelivered",
                    self._in_flight,
                    grace,
                )
                stuck = list(self._tasks)
                for task in stuck:
                    task.cancel()
                if stuck:
                    # A listener that swallows the cancellation is left behind rather than awaited forever.
                    await asyncio.wait(stuck, timeout=1.0)
        self._drain()
        self._closed = True
        if self._alive_threads == 0:
            # Every worker has left its loop and is only returning: joining takes microseconds.
            for t in self._threads:
                t.join()
        # Otherwise a listener stuck past the bound keeps its daemon thread, which exits when the listener
        # returns; nothing waits for it.
        return dropped

    # -- the thread side ----------------------------------------------------------------------------------

    def _worker(self) -> None:
        cond = self._cond
        lock = self._lock
        pending = self._pending
        listener = self._listener
        invoke = self._invoke
        success = self._success
        try:
            while True:
                with lock:
                    while not pending:
                        if self._closing:
                            return
                        self._idle_threads += 1
                        cond.wait()
                        self._idle_threads -= 1
                    item = pending.popleft()
                    self._in_flight += 1
                    if self._in_flight > self.stats.peak_in_flight:
                        self.stats.peak_in_flight = self._in_flight
                outcome: object
                try:
                    result = listener(item.message) if invoke is None else invoke(item)
                    outcome = ok = result is success or result is None or result == success
                    if not ok:
                        outcome = self._not_ok(result)
                except BaseException as exc:  # any exception is a FAILURE, never fatal to the worker
                    outcome = False
                    self._log.failure(f"raised {type(exc).__name__}", exc)
                with lock:
                    self._in_flight -= 1
                self._post(item, outcome)
        finally:
            with cond:
                self._alive_threads -= 1
                last = self._alive_threads == 0
            if last:
                self._call_loop(self._maybe_idle)

    def _not_ok(self, result: object) -> object:
        """The outcome of a result that is not the success value: a `passthrough` result as it is, else
        False (a failure, logged unless it is a FAILURE value)."""
        if self._passthrough is not None and type(result) is self._passthrough:
            return result
        self._bad_result(result)
        return False

    def _bad_result(self, result: object) -> None:
        if inspect.isawaitable(result):
            close = getattr(result, "close", None)
            if close is not None:
                close()
            self._log.failure("returned an awaitable from a plain function", None)
        elif result is None or not _looks_like_consume_result(result):
            self._log.failure(f"returned {type(result).__name__}, not a ConsumeResult", None)

    def _post(self, item: T, ok: object) -> None:
        with self._out_lock:
            self._results.append((item, ok))
            wake = not self._wake_pending
            self._wake_pending = True
        if wake:
            self.stats.wakeups += 1
            self._call_loop(self._drain)

    def _call_loop(self, fn: Callable[[], None]) -> None:
        try:
            self._loop.call_soon_threadsafe(fn)
        except RuntimeError:
            # The loop is closed: the client is gone and nobody will act on the result.
            pass

    # -- async listeners ----------------------------------------------------------------------------------

    def _submit_async(self, items: Iterable[T]) -> int:
        before = len(self._pending)
        self._pending.extend(items)
        n = len(self._pending) - before
        self.stats.submitted += n
        self._spawn_runners()
        return n

    def _spawn_runners(self) -> None:
        # A runner drains the shared deque until it is empty, so a burst costs at most `async_concurrency`
        # task creations, not one per message. A runner is either running a listener (`_in_flight`) or
        # about to take an item; spawn only for items that no starting runner will take.
        while (
            not self._closing
            and self._runners < self._async_concurrency
            and self._runners - self._in_flight < len(self._pending)
        ):
            self._runners += 1
            task = self._loop.create_task(self._runner())
            self._tasks.add(task)
            task.add_done_callback(self._runner_done)

    def _runner_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._maybe_idle()

    async def _runner(self) -> None:
        pending = self._pending
        listener: Callable[[Any], Awaitable[Any]] = self._listener
        invoke: Callable[[T], Awaitable[Any]] | None = self._invoke
        success = self._success
        try:
            # No await between the emptiness check and the exit below, so `_runners` is exact whenever
            # `submit` looks at it.
            while pending and not self._closing:
                item = pending.popleft()
                self._in_flight += 1
                if self._in_flight > self.stats.peak_in_flight:
                    self.stats.peak_in_flight = self._in_flight
                outcome: object
                try:
                    result = await (listener(item.message) if invoke is None else invoke(item))
                    outcome = ok = result is success or result is None or result == success
                    if not ok:
                        outcome = self._not_ok(result)
                except Exception as exc:
                    outcome = False
                    self._log.failure(f"raised {type(exc).__name__}", exc)
                finally:
                    # CancelledError (only close() cancels, after the shutdown bound) passes through: the
                    # message is abandoned and redelivered by the server.
                    self._in_flight -= 1
                self._post_local(item, outcome)
        finally:
            self._runners -= 1

    def _post_local(self, item: T, ok: object) -> None:
        # On the loop already: no lock contention worth avoiding, but the same coalescing keeps one
        # on_results call per loop iteration instead of one per message.
        with self._out_lock:
            self._results.append((item, ok))
            wake = not self._wake_pending
            self._wake_pending = True
        if wake:
            self._loop.call_soon(self._drain)


def is_async_callable(fn: Callable[..., Any]) -> bool:
    """Whether `fn` is an `async def` (or an object with an `async def __call__`)."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - a callable object with `async def __call__`
    return call is not None and inspect.iscoroutinefunction(call)


def _looks_like_consume_result(result: object) -> bool:
    # A FAILURE value is a legitimate answer and is not logged; anything else (None, True, a string) is a
    # listener bug worth one rate-limited warning.
    return type(result).__name__ == "ConsumeResult"
