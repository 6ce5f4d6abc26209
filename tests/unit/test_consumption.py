"""The listener executor: real threads, a real loop, no timing thresholds."""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support import run, until, wait_until
from thrust._consumption import ListenerExecutor


class Result(enum.Enum):
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"


# The executor only logs results whose type is not named ConsumeResult; mirror the public enum's name.
Result.__name__ = "ConsumeResult"


@dataclass(frozen=True)
class Item:
    message: int


class Collector:
    def __init__(self) -> None:
        self.calls: list[list[tuple[Item, bool]]] = []
        self.event = asyncio.Event()
        self.expected = 0

    def __call__(self, batch: list[tuple[Item, bool]]) -> None:
        self.calls.append(batch)
        if self.total() >= self.expected:
            self.event.set()

    def total(self) -> int:
        return sum(len(b) for b in self.calls)

    def results(self) -> dict[int, bool]:
        return {item.message: ok for batch in self.calls for item, ok in batch}

    async def wait(self, n: int) -> None:
        self.expected = n
        if self.total() >= n:
            return
        self.event.clear()
        await asyncio.wait_for(self.event.wait(), 10)


def test_every_result_is_delivered_and_classified() -> None:
    def listener(n: int) -> Any:
        if n % 4 == 0:
            return Result.SUCCESS
        if n % 4 == 1:
            return Result.FAILURE
        if n % 4 == 2:
            raise ValueError("boom")
        return "done"  # neither a ConsumeResult nor None: a failure

    async def main() -> None:
        col = Collector()
        ex: ListenerExecutor[Item] = ListenerExecutor(
            listener, success=Result.SUCCESS, on_results=col, thread_count=3
        )
        assert ex.submit(Item(i) for i in range(200)) == 200
        await col.wait(200)
        res = col.results()
        assert len(res) == 200
        assert all(res[i] == (i % 4 == 0) for i in range(200))
        assert ex.stats.completed == 200 and ex.stats.failed == 150
        assert ex.listener_failures == 100  # 50 raised + 50 returned "done"; FAILURE itself is not logged
        assert await ex.close(grace=5) == 0
        assert all(not t.is_alive() for t in ex._threads)

    run(main())


def test_one_wakeup_per_burst_while_loop_is_busy() -> None:
    """Results of a whole burst cross to the loop with one call_soon_threadsafe (bench scenario 6)."""
    gate = threading.Event()

    def listener(n: int) -> Result:
        gate.wait()
        return Result.SUCCESS

    async def main() -> None:
        col = Collector()
        ex: ListenerExecutor[Item] = ListenerExecutor(
            listener, success=Result.SUCCESS, on_results=col, thread_count=4
        )
        bursts = 3
        for b in range(bursts):
            gate.clear()
            ex.submit(Item(b * 100 + i) for i in range(100))
            gate.set()
            # Keep the loop busy (synchronously) until the whole burst has been posted back.
            wait_until(lambda b=b: len(ex._results) == 100)  # type: ignore[misc]
            await col.wait((b + 1) * 100)
        assert col.total() == 300
        assert ex.stats.wakeups == bursts
        assert ex.stats.drains == bursts
        assert len(col.calls) == bursts
        await ex.close(grace=5)

    run(main())


def test_wakeups_never_exceed_results_and_stay_below_under_load() -> None:
    def listener(n: int) -> Result:
        return Result.SUCCESS

    async def main() -> None:
        col = Collector()
        ex: ListenerExecutor[Item] = ListenerExecutor(
            listener, success=Result.SUCCESS, on_results=col, thread_count=4
        )
        ex.submit(Item(i) for i in range(5000))
        await col.wait(5000)
        assert ex.stats.wakeups == ex.stats.drains
        assert ex.stats.wakeups <= len(col.calls) <= 5000
        # Every drain saw at least one result: no empty wake-ups.
        assert all(col.calls)
        await ex.close(grace=5)

    run(main())


def test_peak_concurrency_equals_thread_count() -> None:
    threads = 5
    barrier = threading.Barrier(threads, timeout=10)
    lock = threading.Lock()
    state = {"now": 0, "peak": 0}
    names: set[str] = set()

    def listener(n: int) -> Result:
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
            names.add(threading.current_thread().name)
        barrier.wait()  # all `threads` workers must be inside the listener together
        with lock:
            state["now"] -= 1
        return Result.SUCCESS

    async def main() -> None:
        col = Collector()
        ex: ListenerExecutor[Item] = ListenerExecutor(
            listener, success=Result.SUCCESS, on_results=col, thread_count=threads
        )
        loop_thread = threading.current_thread().name
        ex.submit(Item(i) for i in range(threads * 8))
        await col.wait(threads * 8)
        assert state["peak"] == threads
        assert ex.stats.peak_in_flight == threads
        assert loop_thread not in names
        assert len(names) == threads
        await ex.close(grace=5)

    run(main())


def test_a_slow_listener_does_not_hold_back_other_messages() -> None:
    stuck = threading.Event()

    def listener(n: int) -> Result:
        if n == 0:
            stuck.wait(10)
        return Result.SUCCESS

    async def main() -> None:
        col = Collector()
        ex: ListenerExecutor[Item] = ListenerExecutor(
            listener, success=Result.SUCCESS, on_results=col, thread_count=2
        )
        ex.submit(Item(i) for i in range(50))
        await col.wait(49)
        assert 0 not in col.results()
        assert ex.in_flight == 1
        stuck.set()
        await col.wait(50)
        await ex.close(grace=5)

    run(main())


def test_async_listener_runs_on_the_loop_with_a_bound() -> None:
    async def main() -> None:
        release = asyncio.Event()
        state = {"now": 0, "peak": 0}
        loop_thread = threading.get_ident()
        seen_threads: set[int] = set()

        async def listener(n: int) -> Result:
            seen_threads.add(threading.get_ident())
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
            await release.wait()
            state["now"] -= 1
            if n == 7:
                raise RuntimeError("async boom")
            return Result.SUCCESS

        col = Collector()
        ex: ListenerExecutor[Item] = ListenerExecutor(
            listener, success=Result.SUCCESS, on_results=col, async_concurrency=3
        )
        assert ex.is_async and ex.thread_count == 0
        ex.submit(Item(i) for i in range(20))
        await until(lambda: state["peak"] >= 3, what="three listeners running")
        assert state["peak"] == 3 and ex.in_flight == 3
        assert len(ex._tasks) == 3  # one runner per slot, not one task per message
        release.set()
        await col.wait(20)
        res = col.results()
        assert len(res) == 20 and res[7] is False and sum(res.values()) == 19
        assert seen_threads == {loop_thread}
        assert state["peak"] == 3
        # A second burst after the runners exited starts new runners.
        ex.submit(Item(100 + i) for i in range(5))
        await col.wait(25)
        await ex.close(grace=5)

    run(main())


def test_close_drops_queued_waits_for_running_and_is_bounded() -> None:
    release = threading.Event()
    started = threading.Semaphore(0)

    def listener(n: int) -> Result:
        started.release()
        release.wait(10)
        return Result.SUCCESS

    async def main() -> None:
        col = Collector()
        ex: ListenerExecutor[Item] = ListenerExecutor(
            listener, success=Result.SUCCESS, on_results=col, thread_count=2
        )
        ex.submit(Item(i) for i in range(10))
        for _ in range(2):
            assert started.acquire(timeout=10)
        # Bounded: two listeners are stuck; close returns after the grace period anyway.
        dropped = await ex.close(grace=0.05)
        assert dropped == 8
        assert ex.submit([Item(99)]) == 0
        assert await ex.close(grace=0.05) == 0  # idempotent
        release.set()
        for t in ex._threads:
            t.join(10)
            assert not t.is_alive()

    run(main())


def test_close_lets_in_flight_listeners_finish_within_the_bound() -> None:
    release = threading.Event()
    started = threading.Semaphore(0)

    def listener(n: int) -> Result:
        started.release()
        release.wait(10)
        return Result.SUCCESS

    async def main() -> None:
        col = Collector()
        ex: ListenerExecutor[Item] = ListenerExecutor(
            listener, success=Result.SUCCESS, on_results=col, thread_count=3
        )
        ex.submit(Item(i) for i in range(3))
        for _ in range(3):
            assert started.acquire(timeout=10)
        closing = asyncio.ensure_future(ex.close(grace=10))
        await asyncio.sleep(0)
        release.set()
        assert await closing == 0
        assert sorted(col.results()) == [0, 1, 2]
        assert all(not t.is_alive() for t in ex._threads)

    run(main())


def test_listener_failures_are_logged_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    def listener(n: int) -> Result:
        raise KeyError(n)

    async def main() -> None:
        col = Collector()
        ex: ListenerExecutor[Item] = ListenerExecutor(
            listener, success=Result.SUCCESS, on_results=col, thread_count=4, failure_log_interval=60
        )
        ex.submit(Item(i) for i in range(300))
        await col.wait(300)
        assert ex.listener_failures == 300
        await ex.close(grace=5)

    with caplog.at_level(logging.INFO, logger="thrust.consumer"):
        run(main())
    warnings = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(warnings) == 1
    assert warnings[0].exc_info is not None


def test_async_close_cancels_listeners_stuck_past_the_bound() -> None:
    async def main() -> None:
        async def listener(n: int) -> Result:
            await asyncio.sleep(3600)
            return Result.SUCCESS

        col = Collector()
        ex: ListenerExecutor[Item] = ListenerExecutor(
            listener, success=Result.SUCCESS, on_results=col, async_concurrency=4
        )
        ex.submit(Item(i) for i in range(10))
        await asyncio.sleep(0)
        assert await ex.close(grace=0.05) == 6
        await asyncio.sleep(0)
        assert not ex._tasks and ex.in_flight == 0
        assert col.total() == 0

    run(main())


def test_stop_hands_back_the_unstarted_items_and_close_then_drops_nothing() -> None:
    """The consumer settles what never started itself (it nacks those messages at close)."""
    release = threading.Event()
    started = threading.Semaphore(0)

    def listener(n: int) -> Result:
        started.release()
        release.wait(10)
        return Result.SUCCESS

    async def main() -> None:
        col = Collector()
        ex: ListenerExecutor[Item] = ListenerExecutor(
            listener, success=Result.SUCCESS, on_results=col, thread_count=2
        )
        items = [Item(i) for i in range(10)]
        ex.submit(items)
        for _ in range(2):
            assert started.acquire(timeout=10)
        unstarted = ex.stop()
        assert len(unstarted) == 8 and set(unstarted) <= set(items)
        assert ex.stop() == []
        assert ex.submit([Item(99)]) == 0
        release.set()
        assert await ex.close(grace=5) == 0
        await col.wait(2)

    run(main())
