"""The loop side of a pure batcher: one driver pattern for the push consumer's acks, nacks and dead-letter
forwards (`thrust._core.ack.AckBatcher`) and the producer's linger batch
(`thrust._core.linger.LingerAccumulator`).

The pure batcher decides what shares a request, when it leaves and what each answer means; a driver only
turns its answers into tasks. Every driver is a `BatchingDriver`:

    wake()            -> something changed (an add, an answer): the flusher takes a turn soon; many
                         wake-ups within one loop iteration cost one turn
    flusher task      -> each turn `_flush(now)` takes and starts what is due (one owned task per request;
                         the linger driver first waits for a slot of the producer's window); then it
                         sleeps until woken or until the batcher's `next_wakeup()`
    request task      -> sends, feeds the answer back to the batcher; wakes the flusher only when that
                         made something due now, else re-arms its timer (a lingering batch costs no turn)
    drain / close     -> everything due now; a bounded wait until the batcher is idle; then the flusher
                         and the requests still running are cancelled and awaited (bounded)

Nothing waits behind anything else: a request in flight, or an entry waiting in the ack batcher's retry
heap, never holds up the others, and no task or timer exists per entry.

`AckDriver` (bench scenarios 1 and 4, docs/benchmarks.md#scenarios) reports every finished entry with its
fate to `on_finished`; `drain()` (close) sends everything at once and waits, bounded, until idle.

`LingerDriver` hands each message's future back from `submit` (waiting first, first come first served,
while the accumulator has no room); a request resolves each future from its own outcome. A cancelled
waiting `send()` withdraws its message if the request has not left yet (`acc.withdraw`); a future
cancelled by its holder (`send_async`) is left out when its request is built. Either way the other messages
of the batch are untouched. `close(timeout)` fails what never left and cancels what is still in flight
with `ClientClosedError`.
"""

from __future__ import annotations

import abc
import asyncio
import copy
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from thrust import errors
from thrust._core.ack import AckBatch, AckBatcher, AckEntry, AckKey, Fate, Outcome
from thrust._core.linger import Batch, LaneKey, LingerAccumulator, LingerConfig, Pending
from thrust._io.tasks import TaskSet
from thrust.errors import ClientClosedError, ThrustError

__all__ = ["AckDriver", "BatchingDriver", "LingerDriver", "LingerEntry", "SendBatch", "own_error"]

_ack_logger = logging.getLogger("thrust.consumer")
_linger_logger = logging.getLogger("thrust.producer")


class BatchingDriver(abc.ABC):
    """One flusher task and the request tasks, owned by one `TaskSet`, and the wake-up and idle signals
    between them.

    Subclasses say when something is due (`_due`), when to look again (`_next_wakeup`), how to take and
    start what is due (`_flush`), whether the batcher is idle (`_is_idle`), and what a failure of the
    flusher itself means (`_flusher_failed`)."""

    def __init__(self, name: str, logger: logging.Logger, flusher_name: str) -> None:
        self.name = name
        self._logger = logger
        self._loop = asyncio.get_running_loop()
        # The flusher's wake-up: `_woken` says a turn is owed; `_waiter` is the future it awaits when idle.
        # A plain future and one loop timer, not an Event under `asyncio.timeout_at`: that costs an Event
        # waiter, a Timeout, a timer and a raised TimeoutError per timed sleep, several per ack RPC.
        self._woken = False
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self.wakeups = 0  # wake() calls that owed the flusher a turn (tests count them)
        self._idle = asyncio.Event()
        self._tasks = TaskSet(logger)
        self._flusher = self._tasks.spawn(self._flush_loop(), flusher_name)

    # -- what a subclass says ---------------------------------------------------------------------

    @abc.abstractmethod
    def _next_wakeup(self) -> float | None:
        """When (monotonic) something becomes due without a wake-up; None: only a wake-up can."""

    def _due(self, now: float, at: float | None) -> bool:
        """Whether `_flush` has something to take now; `at` is `_next_wakeup()`, read once per turn."""
        return at is not None and at <= now

    @abc.abstractmethod
    async def _flush(self, now: float) -> None:
        """Take what is due and start its requests (`_spawn`); runs on every turn of the flusher."""

    @abc.abstractmethod
    def _is_idle(self) -> bool:
        """Nothing queued, in flight or waiting for a retry."""

    def _flusher_failed(self, exc: Exception) -> bool:
        """The flusher raised (a bug); True to go on with the next turn, False to stop it."""
        self._logger.exception("%s: the flusher failed", self.name)
        return True

    # -- the pattern ------------------------------------------------------------------------------

    def wake(self) -> None:
        """Owe the flusher a turn; many wake-ups before it runs cost one turn."""
        if self._woken:
            return
        self._woken = True
        self.wakeups += 1
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _arm(self, at: float, now: float) -> None:
        """A wake-up at monotonic `at`: one loop timer, replaced only by an earlier one (a later `at`
        is seen again when the earlier timer's turn reads `_next_wakeup()`)."""
        if self._timer is not None:
            if self._timer_at is not None and self._timer_at <= at:
                return
            self._timer.cancel()
        self._timer_at = at
        self._timer = self._loop.call_at(self._loop.time() + max(0.0, at - now), self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._timer_at = None
        self.wake()

    def _due_now_or_arm(self) -> bool:
        """True when something is due now; otherwise arm the timer for the next wake-up, if there is one."""
        now = time.monotonic()
        at = self._next_wakeup()
        if self._due(now, at):
            return True
        if at is not None:
            self._arm(at, now)
        return False

    def _reschedule(self) -> None:
        """After an answer: a turn only when something is due now (a key its in-flight limit held back, a
        retry due at once); otherwise the timer for what comes next. A batch lingering when the answer
        came is already covered by the timer the flusher armed, so most answers cost no turn."""
        if not self._woken and self._due_now_or_arm():
            self.wake()

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        self._tasks.spawn(coro, name)

    def _check_idle(self) -> None:
        if self._is_idle():
            self._idle.set()

    async def _flush_loop(self) -> None:
        while True:
            try:
                await self._turns()
            except Exception as exc:
                if not self._flusher_failed(exc):
                    return

    async def _turns(self) -> None:
        loop = self._loop
        while True:
            # Cleared before the turn: a wake-up during it (an add while awaiting a slot) means one more.
            self._woken = False
            await self._flush(time.monotonic())
            if self._woken or self._due_now_or_arm():
                continue
            waiter = self._waiter = loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    async def _until_idle(self, timeout: float, between: Callable[[], None] | None = None) -> bool:
        """Wait until `_is_idle()`, at most `timeout` seconds; `between` runs after each idle signal."""
        if not self._is_idle():
            try:
                async with asyncio.timeout(max(0.0, timeout)):
                    while not self._is_idle():
                        self._idle.clear()
                        await self._idle.wait()
                        if between is not None:
                            between()
            except TimeoutError:
                pass
        return self._is_idle()

    async def _stop_tasks(self) -> None:
        """Cancel the flusher, its timer and the requests still running; await them, at most 1 s."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._timer_at = None
        await self._tasks.aclose(1.0)


# -- acks, nacks and dead-letter forwards ----------------------------------------------------------------

# Sends one batch; returns per-entry outcomes (thrust._core.ack.results_for) or raises a ThrustError.
SendBatch = Callable[[AckBatch], Awaitable[Sequence[tuple[AckEntry, Outcome]]]]


class AckDriver(BatchingDriver):
    """Drives one `AckBatcher` on the running loop. `on_finished(entries_with_fates)` gets every fate."""

    def __init__(
        self,
        name: str,
        batcher: AckBatcher,
        send: SendBatch,
        on_finished: Callable[[list[tuple[AckEntry, Fate]]], None],
    ) -> None:
        self.batcher = batcher
        self._send = send
        self._on_finished = on_finished
        self._closed = False
        self.rpc_failures = 0
        super().__init__(name, _ack_logger, f"thrust-{name}-flusher")

    def add(self, key: AckKey, entry: AckEntry) -> None:
        if self.batcher.add(key, entry, time.monotonic()):
            self.wake()

    def add_many(self, items: list[tuple[AckKey, AckEntry]], now: float) -> None:
        """`add` for a burst of results: one clock read and at most one wake-up for all of them."""
        if self.batcher.add_many(items, now):
            self.wake()

    def _next_wakeup(self) -> float | None:
        return None if self._closed else self.batcher.next_wakeup()

    def _is_idle(self) -> bool:
        return self.batcher.idle()

    async def _flush(self, now: float) -> None:
        if not self._closed:
            for batch in self.batcher.take_ready(now):
                self._start(batch)
        # Entries an add or a cut finished at once (past their deadline, over the bound) are reported here.
        self._report()

    def _start(self, batch: AckBatch) -> None:
        self._spawn(self._run(batch), f"thrust-{self.name}")

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
            if _ack_logger.isEnabledFor(logging.DEBUG):
                _ack_logger.debug("%s of %d entries failed: %s", self.name, len(batch), exc)
            self.batcher.on_batch_failed(batch, retriable, time.monotonic())
        except Exception:
            _ack_logger.exception("%s: unexpected failure", self.name)
            self.batcher.on_batch_failed(batch, True, time.monotonic())
        else:
            self.batcher.on_results(batch, results, time.monotonic())
        # The fates at once (they free cache slots); the key's next batches when they are due.
        self._report()
        self._reschedule()

    def _report(self) -> None:
        finished = self.batcher.take_finished()
        if finished:
            try:
                self._on_finished(finished)
            except Exception:
                _ack_logger.exception("%s: result handler failed", self.name)
        self._check_idle()

    def _flush_all(self) -> None:
        for batch in self.batcher.flush_all(time.monotonic()):
            self._start(batch)
        self._report()

    async def drain(self, timeout: float) -> bool:
        """Send everything pending or retrying now and wait until done (at most `timeout`); True when idle."""
        self._flush_all()
        # Retries that became due during the drain go out at once, ignoring backoff.
        return await self._until_idle(timeout, self._flush_all)

    async def close(self) -> None:
        """Stop the flusher and cancel RPCs still running (after `drain`)."""
        self._closed = True
        await self._stop_tasks()
        self._report()


# -- the producer's linger batch -------------------------------------------------------------------------


class LingerEntry(Pending):
    """One message in the accumulator: the core's bookkeeping plus what the request and the caller need."""

    __slots__ = ("born", "future", "message", "message_id")

    def __init__(
        self,
        lane: LaneKey,
        size: int,
        message_id: str,
        message: Any,
        born: float,
        future: asyncio.Future[Any],
    ) -> None:
        super().__init__(lane, size)
        self.message_id = message_id  # assigned (and the message checked) when send() was called
        self.message = message
        self.born = born  # epoch seconds of the send() call: the message's born timestamp
        self.future = future


# Sends one request's messages (in order); one outcome per message: its receipt, or its own error.
SendEntries = Callable[[Sequence[LingerEntry]], Awaitable[Sequence[Any]]]


_E = TypeVar("_E", bound=BaseException)


def own_error(exc: _E) -> _E:
    """A copy of `exc` for one more caller: several callers raising one exception object would chain
    each other's tracebacks onto it."""
    try:
        clone = copy.copy(exc)
    except Exception:  # an exception type that cannot be copied: share it rather than lose it
        return exc
    clone.__traceback__ = None
    return clone


class LingerDriver(BatchingDriver):
    """Drives one `LingerAccumulator` on the running loop (module docstring). Each request holds a slot
    of `window` (the producer's in-flight bound) from before it is taken until it is answered."""

    def __init__(self, config: LingerConfig, send: SendEntries, window: asyncio.Semaphore) -> None:
        self.acc = LingerAccumulator(config)
        self._send = send
        self._window = window
        self._room: deque[list[Any]] = deque()  # waiting submits: [size, future], first come first served
        self._closed = False  # no new messages
        self._closing = False  # close() ran
        self._broken: errors.ThrustError | None = None  # the flusher died of a bug: every send fails
        super().__init__("linger", _linger_logger, "thrust-producer-linger")

    # -- submitting --------------------------------------------------------------------------------

    async def submit(self, entry: LingerEntry) -> asyncio.Future[Any]:
        """Accept `entry` once there is room; returns the future of its outcome.

        Raises ClientClosedError when the driver is (or gets) closed while waiting for room."""
        if self._closed:
            if self._broken is not None:
                raise own_error(self._broken)
            raise ClientClosedError("the producer is closed")
        acc = self.acc
        if self._room or not acc.room_for(entry.size):
            await self._wait_room(entry.size)
        if acc.add(entry, time.monotonic()):
            self.wake()
        if self._room:
            self._hand_room()  # there may be room for the next waiting submit too
        return entry.future

    def withdraw(self, entry: LingerEntry) -> None:
        """The caller of `entry` gave up (cancelled): drop it if its request has not left."""
        if self.acc.withdraw(entry):
            self._after_release()

    async def _wait_room(self, size: int) -> None:
        item: list[Any] = [size, self._loop.create_future()]
        self._room.append(item)
        try:
            while True:
                await item[1]
                if self._closed:
                    if self._broken is not None:
                        raise own_error(self._broken)
                    raise ClientClosedError("the producer is closed")
                if self.acc.room_for(size):
                    return
                # Woken, but another submit took the room first: wait again, at the head of the line.
                item[1] = self._loop.create_future()
                self._room.appendleft(item)
        except asyncio.CancelledError:
            if item in self._room:
                self._room.remove(item)
            else:
                self._hand_room()  # this waiter was woken: pass the wake-up on
            raise

    def _hand_room(self) -> None:
        """Wake the first waiting submit if its message fits now (it wakes the next one after its add)."""
        room = self._room
        while room:
            size, future = room[0]
            if future.done():  # cancelled waiter
                room.popleft()
                continue
            if not self._closed and not self.acc.room_for(size):
                return
            room.popleft()
            future.set_result(None)
            if not self._closed:
                return

    def _after_release(self) -> None:
        if self._room:
            self._hand_room()
        self._check_idle()

    # -- sending -----------------------------------------------------------------------------------

    def _due(self, now: float, at: float | None) -> bool:
        # A full batch, or a FIFO group's next message, is due before its linger ends.
        return self.acc.due(now)

    def _next_wakeup(self) -> float | None:
        return self.acc.next_wakeup()

    def _is_idle(self) -> bool:
        return self.acc.idle()

    async def _flush(self, now: float) -> None:
        acc = self.acc
        window = self._window
        while acc.due(now):
            await window.acquire()
            batch = acc.take_ready(time.monotonic())
            if batch is None:  # withdrawn while we waited for the slot
                window.release()
            else:
                self._spawn(self._run(batch), "thrust-producer-batch")
            now = time.monotonic()

    def _flusher_failed(self, exc: Exception) -> bool:
        # A bug: fail what waits (and what comes) rather than leave it hanging.
        _linger_logger.exception("the linger batch flusher failed")
        self._broken = errors.InternalError(f"the producer's linger batch failed: {exc!r}", retriable=False)
        self._closed = True
        self._hand_room()
        _fail([e for e in self.acc.drain() if isinstance(e, LingerEntry)], self._broken)
        return False

    async def _run(self, batch: Batch) -> None:
        # Futures cancelled by their holders (send_async) are left out; their messages are not sent.
        entries = [e for e in batch.entries if isinstance(e, LingerEntry) and not e.future.done()]
        try:
            if entries:
                outcomes = await self._send(entries)
                for entry, outcome in zip(entries, outcomes, strict=True):
                    _resolve(entry, outcome)
        except asyncio.CancelledError:
            _fail(
                entries,
                ClientClosedError(
                    "the producer was closed while this message's SendMessage was in flight; "
                    "it may or may not have been stored"
                ),
            )
            raise
        except errors.ThrustError as exc:
            _fail(entries, exc)
        except Exception as exc:  # a bug below: fail the callers rather than leave them waiting
            _linger_logger.exception("linger batch send failed unexpectedly")
            _fail(entries, exc)
        finally:
            self._window.release()
            if self.acc.on_done(batch):
                self.wake()
            self._after_release()

    # -- close -------------------------------------------------------------------------------------

    async def close(self, timeout: float) -> None:
        """Stop accepting; send everything queued now and wait until answered, at most `timeout` seconds;
        then fail what never left and cancel what is still in flight (ClientClosedError). Idempotent."""
        if self._closing:
            return
        self._closing = self._closed = True
        self._hand_room()  # every waiting submit raises ClientClosedError
        acc = self.acc
        acc.flush_all()
        self.wake()
        await self._until_idle(timeout)
        left = acc.drain()
        if left:
            _linger_logger.warning("producer closed with %d batched messages not sent", len(left))
            closed = ClientClosedError("the producer was closed before this message was sent")
            _fail([e for e in left if isinstance(e, LingerEntry)], closed)
        await self._stop_tasks()


def _resolve(entry: LingerEntry, outcome: Any) -> None:
    future = entry.future
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def _fail(entries: Sequence[LingerEntry], exc: BaseException) -> None:
    first = True
    for entry in entries:
        future = entry.future
        if future.done():
            continue
        future.set_exception(exc if first else own_error(exc))
        first = False
