"""Event-loop lag and garbage-collector pauses of one process, for `thrust perf`
(docs/benchmarks.md, "The main job's latency tails").

`LoopLag` is a task that sleeps `period` seconds over and over and records by how much each wake-up came
late: whatever held the loop (a callback that ran long, a collection, another thread holding the GIL)
shows up as lag, in the process where it happened. `GcPauses` times every collection through
`gc.callbacks`. `thrust perf` runs both in its own process and prints them beside each interval; the
embedded server it starts (`thrust serve --report-lag`) runs them too and writes its samples on stdout
as `LAG_PREFIX` lines, which `BenchServer` collects (`parse_line`), so that one line shows both
processes. Samples are kept as plain lists of seconds: 20 a second at the default period.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import time
from collections.abc import Sequence
from typing import Any, Final

__all__ = [
    "LAG_PREFIX",
    "GcPauses",
    "LagWindow",
    "LoopLag",
    "encode_samples",
    "format_line",
    "parse_line",
    "report_forever",
    "summarise",
]

LAG_PREFIX: Final = "thrust-lag "
DEFAULT_PERIOD: Final = 0.05


class LoopLag:
    """Sleeps `period` seconds again and again on the running loop and keeps each wake-up's lateness."""

    def __init__(self, period: float = DEFAULT_PERIOD) -> None:
        self.period = period
        self._samples: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="thrust-perf-loop-lag")

    async def _run(self) -> None:
        clock = time.perf_counter
        period = self.period
        samples = self._samples
        while True:
            before = clock()
            await asyncio.sleep(period)
            # asyncio may wake a timer up to its clock resolution early; early is no lag.
            samples.append(max(0.0, clock() - before - period))

    def take(self) -> list[float]:
        """The samples (seconds late) since the last call."""
        samples = self._samples[:]
        self._samples.clear()
        return samples

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


class GcPauses:
    """The duration of every garbage collection (seconds), by generation, while installed."""

    def __init__(self) -> None:
        self._started = 0.0
        self._pauses: list[tuple[int, float]] = []

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self._pauses.append((int(info.get("generation", 0)), time.perf_counter() - self._started))

    def install(self) -> None:
        gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._callback)

    def take(self) -> list[tuple[int, float]]:
        """(generation, seconds) of each collection since the last call."""
        pauses = self._pauses[:]
        self._pauses.clear()
        return pauses


class LagWindow:
    """Lag samples and GC pauses gathered over one reporting interval."""

    __slots__ = ("gc", "lag")

    def __init__(self) -> None:
        self.lag: list[float] = []
        self.gc: list[tuple[int, float]] = []

    def add(self, lag: Sequence[float], pauses: Sequence[tuple[int, float]]) -> None:
        self.lag.extend(lag)
        self.gc.extend(pauses)

    def take(self) -> LagWindow:
        out = LagWindow()
        out.lag, out.gc = self.lag, self.gc
        self.lag, self.gc = [], []
        return out


def summarise(window: LagWindow) -> dict[str, float | int]:
    """p99 and max lag, and count, max and total of the collections (milliseconds), for JSON and lines."""
    lag = sorted(window.lag)
    pauses = [s for _, s in window.gc]
    return {
        "lag_samples": len(lag),
        # nearest rank: of the 100 samples of a 5 s interval, the second largest
        "lag_p99_ms": round(lag[max(0, math.ceil(0.99 * len(lag)) - 1)] * 1e3, 3) if lag else 0.0,
        "lag_max_ms": round(lag[-1] * 1e3, 3) if lag else 0.0,
        "gc_count": len(pauses),
        "gc_gen2": sum(1 for g, _ in window.gc if g == 2),
        "gc_max_ms": round(max(pauses) * 1e3, 3) if pauses else 0.0,
        "gc_total_ms": round(sum(pauses) * 1e3, 3),
    }


def _fields(name: str, s: dict[str, float | int] | None) -> str:
    if s is None or not s["lag_samples"]:
        return f"{name}: {'-':>8} / {'-':>8}"
    gc_part = f" gc {s['gc_count']:3d}x max {s['gc_max_ms']:6.1f}" if s["gc_count"] else ""
    return f"{name}: {s['lag_p99_ms']:8.1f} / {s['lag_max_ms']:8.1f}{gc_part}"


def format_line(client: dict[str, float | int], server: dict[str, float | int] | None) -> str:
    """`Loop lag p99 / max (ms) --- client: P / M [gc Nx max G] --- server: P / M [gc ...]`."""
    parts = ["Loop lag p99 / max (ms)", _fields("client", client)]
    if server is not None:
        parts.append(_fields("server", server))
    return " --- ".join(parts)


def encode_samples(lag: Sequence[float], pauses: Sequence[tuple[int, float]]) -> str:
    """One stdout line of the server's samples: `thrust-lag 0.0012,0.0003 2:0.0310,0:0.0004`."""
    lag_text = ",".join(f"{v:.6f}" for v in lag) or "-"
    gc_text = ",".join(f"{g}:{s:.6f}" for g, s in pauses) or "-"
    return f"{LAG_PREFIX}{lag_text} {gc_text}"


def parse_line(line: str) -> tuple[list[float], list[tuple[int, float]]] | None:
    """The samples of an `encode_samples` line; None for any other line."""
    if not line.startswith(LAG_PREFIX):
        return None
    try:
        lag_text, gc_text = line[len(LAG_PREFIX) :].split()
        lag = [float(v) for v in lag_text.split(",")] if lag_text != "-" else []
        pauses = []
        if gc_text != "-":
            for item in gc_text.split(","):
                g, _, s = item.partition(":")
                pauses.append((int(g), float(s)))
    except ValueError:
        return None
    return lag, pauses


async def report_forever(interval: float, write: Any) -> None:
    """The server side: every `interval` seconds, `write(encode_samples(...))` of what came since."""
    lag = LoopLag()
    pauses = GcPauses()
    lag.start()
    pauses.install()
    try:
        while True:
            await asyncio.sleep(interval)
            write(encode_samples(lag.take(), pauses.take()))
    finally:
        pauses.uninstall()
        await lag.stop()
