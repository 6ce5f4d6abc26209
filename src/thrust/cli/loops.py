"""`--loop {asyncio,uvloop}` for `thrust perf`, `thrust bench` and `thrust serve`
(docs/benchmarks.md, "uvloop").

uvloop is an optional extra (`pip install 'thrust[uvloop]'`): without it, `--loop uvloop` ends in
`thrust.cli.main`'s one-line message naming the extra (`OPTIONAL_MODULES`). The loop is made through
`asyncio.Runner(loop_factory=...)`, so nothing process-wide (the event loop policy) changes.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["LOOPS", "add_loop_argument", "loop_factory", "run"]

T = TypeVar("T")
LOOPS = ("asyncio", "uvloop")


def add_loop_argument(parser: argparse.ArgumentParser | Any) -> None:
    parser.add_argument(
        "--loop",
        choices=LOOPS,
        default="asyncio",
        help="event loop: asyncio's own (default) or uvloop (the thrust[uvloop] extra)",
    )


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory of the loop called `name`; None for asyncio's default. Imports uvloop now, so that a
    missing extra is reported before anything starts."""
    if name == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    if name != "asyncio":
        raise ValueError(f"unknown event loop {name!r}")
    return None


def run(main: Coroutine[Any, Any, T], name: str = "asyncio") -> T:
    """`asyncio.run(main)` on the loop called `name`."""
    try:
        factory = loop_factory(name)
    except BaseException:
        main.close()  # never awaited: close it, or Python warns about it
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
