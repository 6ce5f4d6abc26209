"""The loop-side driver of an `AckBatcher`: acks, nacks and dead-letter forwarding in the background.

Bench scenarios 1 and 4 (docs/benchmarks.md#scenarios). The pure `thrust._core.ack.AckBatcher` decides what to
send, when, and what to do
with each entry's result; this driver only turns its answers into RPC tasks and loop timers:

    add(key, entry)       -> batcher.add; a kick when the batcher says a new flush time exists
    _pump()               -> batcher.take_ready(now): one task per batch (several in flight per key);
                             batcher.take_finished(): report fates; then one loop timer at next_wakeup()
    RPC completion        -> batcher.on_results / on_batch_failed, then _pump() again

No task waits on a timer per entry and nothing waits behind anything else: a failing entry sits in the
batcher's retry heap while every other entry flows. `drain()` (close) sends everything at once and waits,
bounded, until the batcher is idle.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from thrust._core.ack import AckBatch, AckBatcher, AckEntry, AckKey, Fate, Outcome
from thrust.errors import ClientClosedError, ThrustError

__all__ = ["BatchDriver", "SendBatch"]

logger = logging.getLogger("thrust.consumer")

# Sends one batch; returns per-entry outcomes (thrust._core.ack.results_for) or raises a ThrustError.
SendBatch = Callable[[AckBatch], Awaitable[Sequence[tuple[AckEntry, Outcome]]]]


class BatchDriver:
    """Drives one `AckBatcher` on the running loop. `on_finished(entries_with_fates)` gets every fate."""

    def __init__(
        self,
        name: str,
        batcher: AckBatcher,
        send: SendBatch,
        on_finished: Callable[[list[tuple[AckEntry, Fate]]], None],
    ) -> None:
        self.name = name
        self.batcher = batcher
        self._send = send
        self._on_finished = on_finished
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._kicked = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._idle: asyncio.Event | None = None
        self._closed = False
        self.rpc_failures = 0

    def add(self, key: AckKey, entry: AckEntry) -> None:
        if self.batcher.add(key, entry, time.monotonic()):
            self._kick()

    def add_many(self, items: list[tuple[AckKey, AckEntry]], now: float) -> None:
        """`add` for a burst of results: one clock read and at most one kick for all of them."""
        add = self.batcher.add
        kick = False
        for key, entry in items:
            if add(key, entry, now):
                kick = True
        if kick:
            self._kick()

    def _kick(self) -> None:
        # Coalesce: many adds within one loop iteration cost one pump.
        if not self._kicked:
            self._kicked = True
            self._loop.call_soon(self._pump)

    def _pump(self) -> None:
        self._kicked = False
        now = time.monotonic()
        batcher = self.batcher
        if not self._closed:
            for batch in batcher.take_ready(now):
                self._start(batch)
        self._report()
        self._arm(batcher.next_wakeup())

    def _start(self, batch: AckBatch) -> None:
        task = self._loop.create_task(self._run(batch), name=f"thrust-{self.name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, batch: AckBatch) -> None:
        try:
            results = await self._send(batch)
        except asyncio.CancelledError:
            self.batcher.on_batch_failed(batch, False, time.monotonic())
            self._report()
            raise
        except ThrustError as exc:
            self.rpc_failures += 1
            retriable = exc.retriable and not isinstance(exc, ClientClosedError)
            if logger.isEnabledFor(logging.DEBUG):
                logger.debug("%s of %d entries failed: %s", self.name, len(batch), exc)
            self.batcher.on_batch_failed(batch, retriable, time.monotonic())
        except Exception:
            logger.exception("%s: unexpected failure", self.name)
            self.batcher.on_batch_failed(batch, True, time.monotonic())
        else:
            self.batcher.on_results(batch, results, time.monotonic())
        self._pump()

    def _report(self) -> None:
        finished = self.batcher.take_finished()
        if finished:
            try:
                self._on_finished(finished)
            except Exception:
                logger.exception("%s: result handler failed", self.name)
        if self._idle is not None and self.batcher.idle():
            self._idle.set()

    def _arm(self, at: float | None) -> None:
        if at is None or self._closed:
            return
        if self._timer is not None:
            if self._timer_at is not None and self._timer_at <= at:
                return  # an earlier (or equal) wake-up is armed already and will re-arm
            self._timer.cancel()
        self._timer_at = at
        self._timer = self._loop.call_at(self._loop.time() + max(0.0, at - time.monotonic()), self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._timer_at = None
        self._pump()

    async def drain(self, timeout: float) -> bool:
        """Send everything pending or retrying now and wait until done (at most `timeout`); True when idle."""
        batcher = self.batcher
        for batch in batcher.flush_all(time.monotonic()):
            self._start(batch)
        self._report()
        if not batcher.idle():
            self._idle = asyncio.Event()
            try:
                async with asyncio.timeout(max(0.0, timeout)):
                    while not batcher.idle():
                        self._idle.clear()
                        await self._idle.wait()
                        # Retries that became due during the drain go out at once, ignoring backoff.
                        for batch in batcher.flush_all(time.monotonic()):
                            self._start(batch)
                        self._report()
            except TimeoutError:
                pass
        return batcher.idle()

    async def close(self) -> None:
        """Stop timers and cancel RPCs still running (after `drain`)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        tasks = [t for t in self._tasks if not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=1.0)
        self._report()
