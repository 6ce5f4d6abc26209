"""The loop-lag column of `thrust perf` (thrust.bench.lag): what it measures, how it is printed, and the
server's half, which `thrust serve --report-lag` writes and `BenchServer` gathers."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import time

from thrust.bench.lag import (
    GcPauses,
    LagWindow,
    LoopLag,
    encode_samples,
    format_line,
    parse_line,
    summarise,
)
from thrust.bench.server import BenchServer


def test_a_blocked_loop_shows_as_lag() -> None:
    async def scenario() -> list[float]:
        lag = LoopLag(period=0.01)
        lag.start()
        await asyncio.sleep(0.05)
        lag.take()
        time.sleep(0.2)  # noqa: ASYNC251 - holding the loop is the point: the next wake-up is this late
        await asyncio.sleep(0.05)
        samples = lag.take()
        await lag.stop()
        return samples

    samples = asyncio.run(scenario())
    assert max(samples) >= 0.15
    assert all(s >= 0 for s in samples)


def test_gc_pauses_are_recorded_by_generation_while_installed() -> None:
    pauses = GcPauses()
    pauses.install()
    try:
        gc.collect()
    finally:
        pauses.uninstall()
    taken = pauses.take()
    assert any(generation == 2 for generation, _ in taken)
    assert all(seconds >= 0 for _, seconds in taken)
    gc.collect()
    assert pauses.take() == []  # uninstalled: nothing more


def test_summary_and_line() -> None:
    window = LagWindow()
    window.add([0.001] * 98 + [0.050, 0.300], [(0, 0.0005), (2, 0.120)])
    s = summarise(window.take())
    assert s["lag_samples"] == 100 and s["lag_p99_ms"] == 50.0 and s["lag_max_ms"] == 300.0
    assert s["gc_count"] == 2 and s["gc_gen2"] == 1 and s["gc_max_ms"] == 120.0
    assert window.take().lag == []  # taken
    line = format_line(s, None)
    assert line == "Loop lag p99 / max (ms) --- client:     50.0 /    300.0 gc   2x max  120.0"
    empty = summarise(LagWindow())
    both = format_line(s, empty)
    assert both.endswith(" --- server:        - /        -")


def test_the_servers_samples_survive_their_line() -> None:
    line = encode_samples([0.0012, 0.25], [(2, 0.031)])
    assert line.startswith("thrust-lag ")
    assert parse_line(line) == ([0.0012, 0.25], [(2, 0.031)])
    assert parse_line(encode_samples([], [])) == ([], [])
    assert parse_line("listening on 127.0.0.1:1") is None
    assert parse_line("thrust-lag garbage") is None


def test_bench_server_gathers_the_lag_thrust_serve_reports() -> None:
    with BenchServer(["--report-lag", "0.1"]) as server:
        deadline = time.monotonic() + 30
        window = server.take_lag()
        while (window is None or not window.lag) and time.monotonic() < deadline:
            time.sleep(0.1)
            window = server.take_lag()
        assert window is not None and window.lag
        assert all(s >= 0 for s in window.lag)


def test_bench_server_without_report_lag_has_none() -> None:
    with BenchServer([]) as server:
        time.sleep(0.3)  # a negative check, so a fixed span: a lag line would arrive within it
        assert server.take_lag() is None


def test_perf_freezes_what_lives_at_start_up_when_asked() -> None:
    from thrust.bench.perf import PerfOptions, _Run

    gc.unfreeze()
    try:

        async def scenario(freeze: bool) -> int:
            _Run(PerfOptions(gc_freeze=freeze), out=io.StringIO())._freeze()
            return gc.get_freeze_count()

        assert asyncio.run(scenario(False)) == 0
        assert asyncio.run(scenario(True)) > 0
    finally:
        gc.unfreeze()


def test_thrust_serve_freezes_after_start_up_unless_told_not_to() -> None:
    from thrust.cli.serve import _serve
    from thrust.server.config import ServerConfig
    from thrust.server.faults import Faults

    async def frozen_once_listening(freeze: bool) -> int:
        gc.unfreeze()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            task = asyncio.create_task(_serve(ServerConfig(port=0), Faults(), 0.0, freeze))
            for _ in range(3000):  # up to 30 s on a loaded machine
                if "listening on" in out.getvalue():
                    break
                await asyncio.sleep(0.01)
            count = gc.get_freeze_count()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        return count

    try:
        assert asyncio.run(frozen_once_listening(False)) == 0
        assert asyncio.run(frozen_once_listening(True)) > 0
    finally:
        gc.unfreeze()
