"""`thrust._io.tasks.TaskSet`: a failing child is logged and leaves its siblings running (unlike
`asyncio.TaskGroup`); `aclose` cancels and awaits what is left, bounded; nothing spawned after it runs on;
`limit` and `wait` (the producer's send tasks)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from thrust._io.tasks import TaskSet


def test_a_failing_child_is_logged_and_its_siblings_go_on(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        tasks = TaskSet(logging.getLogger("thrust.test"))
        sibling_running = asyncio.Event()
        release = asyncio.Event()

        async def sibling() -> None:
            sibling_running.set()
            await release.wait()

        async def failing() -> None:
            raise RuntimeError("a bug")

        ok = tasks.spawn(sibling(), "sibling")
        bad = tasks.spawn(failing(), "failing")
        await sibling_running.wait()
        await asyncio.wait([bad])
        assert not ok.done() and len(tasks) == 1
        release.set()
        await ok
        assert len(tasks) == 0
        assert await tasks.aclose(1.0) == 0

    with caplog.at_level(logging.ERROR, logger="thrust.test"):
        asyncio.run(main())
    assert [r.getMessage() for r in caplog.records] == ["task failing failed"]


def test_aclose_cancels_and_awaits_the_rest_and_later_spawns_are_cancelled() -> None:
    async def main() -> None:
        tasks = TaskSet(logging.getLogger("thrust.test"))
        started = asyncio.Event()
        cleaned: list[str] = []

        async def forever(name: str) -> None:
            try:
                started.set()
                await asyncio.Event().wait()
            finally:
                cleaned.append(name)

        first = tasks.spawn(forever("first"), None)
        await started.wait()
        assert await tasks.aclose(1.0) == 0
        assert first.cancelled() and cleaned == ["first"]
        late = tasks.spawn(forever("late"), None)
        await asyncio.wait([late])
        assert late.cancelled() and len(tasks) == 0

    asyncio.run(main())


def test_a_finished_task_leaves_the_owner() -> None:
    async def scenario() -> None:
        owner = TaskSet()
        done = asyncio.Event()

        async def work() -> int:
            await done.wait()
            return 7

        task = owner.spawn(work(), "thrust-test")
        assert task.get_name() == "thrust-test" and len(owner) == 1
        done.set()
        assert await task == 7
        await asyncio.sleep(0)  # the done callback
        assert len(owner) == 0
        assert await owner.wait(0.0)

    asyncio.run(scenario())


def test_the_limit_refuses_one_task_too_many_and_closes_its_coroutine() -> None:
    async def scenario() -> None:
        owner = TaskSet(limit=1)
        never = asyncio.Event()
        owner.spawn(never.wait(), "first")
        extra = never.wait()
        with pytest.raises(RuntimeError, match="more than 1"):
            owner.spawn(extra, "second")
        assert extra.cr_frame is None  # closed: no "never awaited" warning
        await owner.aclose()

    asyncio.run(scenario())


def test_wait_lets_tasks_finish_and_aclose_cancels_and_awaits_the_rest() -> None:
    async def scenario() -> None:
        owner = TaskSet()
        release = asyncio.Event()
        cancelled: list[str] = []

        async def stuck(name: str) -> None:
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled.append(name)
                raise

        quick = owner.spawn(release.wait(), "quick")
        slow = owner.spawn(stuck("slow"), "slow")
        release.set()
        assert not await owner.wait(0.05)  # `slow` never ends by itself
        assert quick.done() and not quick.cancelled() and not slow.done()
        await owner.aclose(5.0)
        assert slow.cancelled() and cancelled == ["slow"]
        assert owner.closed and len(owner) == 0
        await owner.aclose()  # idempotent

    asyncio.run(scenario())
