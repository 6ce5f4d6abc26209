"""`thrust._io.tasks.TaskOwner`: spawn, bound, wait, cancel-and-await on close, idempotent."""

from __future__ import annotations

import asyncio

import pytest

from thrust._io.tasks import TaskOwner


def test_a_finished_task_leaves_the_owner() -> None:
    async def scenario() -> None:
        owner = TaskOwner()
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
        owner = TaskOwner(limit=1)
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
        owner = TaskOwner()
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
        late = release.wait()
        with pytest.raises(RuntimeError, match="closed"):
            owner.spawn(late, "late")
        assert late.cr_frame is None

    asyncio.run(scenario())
