"""The embedded server's clock: where the brokers' `now` comes from.

The broker core takes `now` on every call and the service reads it from one `Clock`, so a test can
give the server a `ManualClock` and move time on with `advance` instead of waiting: invisibility
expiring, delayed messages landing, redelivery after a nack, transaction checks. What stays on real
time is the waiting of the wire itself: a long poll's hold, a client's deadline, client expiry
(`client_expiry`, `channel_expiry`), fault latencies.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    """Epoch seconds for the brokers."""

    def time(self) -> float:
        """Now, in seconds since the Unix epoch."""
        ...


class SystemClock:
    """The wall clock (`time.time`): the default."""

    __slots__ = ()

    # The builtin itself, not a method calling it: the service reads the time on every request.
    time = staticmethod(time.time)


class ManualClock:
    """A clock that moves only when told to, for tests of protocol timers.

    An `EmbeddedServer` given one subscribes while it runs: each `advance` makes it apply every broker
    timer now due (and wake the long polls waiting for them) before `advance` returns.

    Args:
        start: the initial time, epoch seconds (default: the wall clock's now, so that timestamps the
            server writes look ordinary).
    """

    __slots__ = ("_listeners", "_now")

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else start
        self._listeners: list[Callable[[], None]] = []

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move time on by `seconds` (>= 0) and notify the subscribers."""
        if seconds < 0:
            raise ValueError(f"a clock does not go back: {seconds}")
        self._now += seconds
        for listener in list(self._listeners):
            listener()

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call `listener` after every `advance`; returns the function that unsubscribes it."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe
