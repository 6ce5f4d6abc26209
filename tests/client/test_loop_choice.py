"""The event loop the tests and the CLI tools run on is the one asked for.

Under `THRUST_TEST_LOOP=uvloop` (tests/conftest.py; `make pytest` runs the client suites so) every loop is
uvloop's: `asyncio.run` in the tests, the sync client's loop thread, the embedded server's. Without it,
asyncio's own. `--loop uvloop` of `thrust perf`, `thrust bench` and `thrust serve` goes through
`thrust.cli.loops.run`, which makes uvloop's loop without touching the policy.
"""

from __future__ import annotations

import asyncio
import os

import uvloop

import thrust.sync
from tests.client._util import run
from thrust.cli.loops import loop_factory
from thrust.cli.loops import run as run_on_loop
from thrust.testing import ServerThread

WANTED = os.environ.get("THRUST_TEST_LOOP", "asyncio")


def _is_uvloop(loop: asyncio.AbstractEventLoop) -> bool:
    return isinstance(loop, uvloop.Loop)


async def _running() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


def test_the_tests_run_on_the_loop_thrust_test_loop_names() -> None:
    assert _is_uvloop(run(_running)) == (WANTED == "uvloop")


def test_a_client_round_trip_runs_on_that_loop_in_both_processes_halves() -> None:
    # the embedded server's loop thread and the sync client's loop thread are made by the policy too
    with ServerThread(topics=["loop-t"], groups=["loop-g"]) as server:
        assert _is_uvloop(server._loop) == (WANTED == "uvloop")
        with thrust.sync.Producer(endpoints=server.endpoints[0], topics=["loop-t"]) as producer:
            assert producer.send(thrust.Message(topic="loop-t", body=b"x")).message_id
            assert _is_uvloop(producer._runner._loop) == (WANTED == "uvloop")


def test_the_cli_loop_option_makes_the_loop_it_names() -> None:
    assert loop_factory("asyncio") is None
    assert _is_uvloop(run_on_loop(_running(), "uvloop"))
    # `--loop asyncio` leaves the choice to the policy: asyncio's own loop in the CLI's process
    assert _is_uvloop(run_on_loop(_running(), "asyncio")) == (WANTED == "uvloop")
