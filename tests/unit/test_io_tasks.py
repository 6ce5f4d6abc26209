"""`thrust._io.tasks.TaskSet`: a failing child is logged and leaves its siblings running (unlike
`asyncio.TaskGroup`); `aclose` cancels and awaits what is left, bounded; nothing spawned after it runs on."""

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
