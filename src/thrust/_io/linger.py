"""The loop-side driver of the producer's linger batch (`thrust._core.linger.LingerAccumulator`).

The accumulator decides what shares a request and when it leaves; this driver only turns its answers into
one owned flusher task, one task per request, and futures:

    submit(entry)   -> waits while the accumulator has no room (backpressure, first come first served),
                       then `acc.add`; returns the entry's future (its receipt or its own error)
    flusher task    -> while `acc.due(now)`: a window slot, `acc.take_ready`, a task sending the request;
                       otherwise sleeps until `acc.next_wakeup()` or a wake-up from `submit` / a done request
    request task    -> `send(entries)`, each future resolved from its own outcome, `acc.on_done`,
                       the slot released, room handed to the next waiting `submit`
    close(timeout)  -> no new messages; everything due now; waits (bounded) until idle; then fails what
                       never left and cancels what is still in flight, with `ClientClosedError`

A cancelled waiting `send()` withdraws its message if the request has not left yet (`acc.withdraw`); a
future cancelled by its holder (`send_async`) is left out when its request is built. Either way the other
messages of the batch are untouched.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from thrust import errors
from thrust._core.linger import Batch, LaneKey, LingerAccumulator, LingerConfig, Pending
from thrust.errors import ClientClosedError

__all__ = ["LingerDriver", "LingerEntry", "own_error"]

logger = logging.getLogger("thrust.producer")


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


class LingerDriver:
    """Drives one `LingerAccumulator` on the running loop (module docstring)."""

    def __init__(self, config: LingerConfig, send: SendEntries, window: asyncio.Semaphore) -> None:
        self.acc = LingerAccumulator(config)
        self._send = send
        self._window = window
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._room: deque[list[Any]] = deque()  # waiting submits: [size, future], first come first served
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False  # no new messages
        self._closing = False  # close() ran
        self._broken: errors.ThrustError | None = None  # the flusher died of a bug: every send fails
        self._flusher = self._loop.create_task(self._flush_loop(), name="thrust-producer-linger")

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
            self._wake.set()
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
        if self.acc.idle():
            self._idle.set()

    # -- sending -----------------------------------------------------------------------------------

    async def _flush_loop(self) -> None:
        try:
            await self._flush()
        except Exception as exc:  # a bug: fail what waits (and what comes) rather than leave it hanging
            logger.exception("the linger batch flusher failed")
            self._broken = errors.InternalError(
                f"the producer's linger batch failed: {exc!r}", retriable=False
            )
            self._closed = True
            self._hand_room()
            _fail([e for e in self.acc.drain() if isinstance(e, LingerEntry)], self._broken)

    async def _flush(self) -> None:
        acc = self.acc
        wake = self._wake
        window = self._window
        loop = self._loop
        while True:
            now = time.monotonic()
            if not acc.due(now):
                wake.clear()
                at = acc.next_wakeup()
                if at is None:
                    await wake.wait()
                else:
                    try:
                        async with asyncio.timeout_at(loop.time() + max(0.0, at - now)):
                            await wake.wait()
                    except TimeoutError:
                        pass
                continue
            await window.acquire()
            batch = acc.take_ready(time.monotonic())
            if batch is None:  # withdrawn while we waited for the slot
                window.release()
                continue
            task = loop.create_task(self._run(batch), name="thrust-producer-batch")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

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
            logger.exception("linger batch send failed unexpectedly")
            _fail(entries, exc)
        finally:
            self._window.release()
            if self.acc.on_done(batch):
                self._wake.set()
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
        self._wake.set()
        if not acc.idle():
            self._idle.clear()
            try:
                async with asyncio.timeout(max(0.0, timeout)):
                    await self._idle.wait()
            except TimeoutError:
                pass
        left = acc.drain()
        if left:
            logger.warning("producer closed with %d batched messages not sent", len(left))
            closed = ClientClosedError("the producer was closed before this message was sent")
            _fail([e for e in left if isinstance(e, LingerEntry)], closed)
        self._flusher.cancel()
        tasks = [*self._tasks, self._flusher]
        for task in self._tasks:
            task.cancel()
        await asyncio.wait(tasks, timeout=1.0)


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
