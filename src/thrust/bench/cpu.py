"""CPU time of the processes a bench run involves: this one (`self_cpu_seconds`, where the raw rows and
the client run), a server child (`proc_cpu_seconds`), and one process's threads apart
(`thread_cpu_seconds` and `thread_wakeups`, for the split by thread of the profiling scripts and of
`thrust perf scale`). A module of its own because `raw` and `targets` both read it and `targets` imports
`raw` (a real target warms its JVM with `raw_consume`); pyproject.toml's import-linter contract keeps `raw`
from importing `targets` back."""

from __future__ import annotations

import os

__all__ = [
    "NATIVE_THREAD",
    "proc_cpu_seconds",
    "self_cpu_seconds",
    "thread_cpu_seconds",
    "thread_wakeups",
]

#: The name of the native transport's tokio thread (`native/src/lib.rs`, the runtime's `thread_name`).
NATIVE_THREAD = "thrust-native"


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (every thread), from `/proc/<pid>/stat`."""
    with open(f"/proc/{pid}/stat") as fh:
        data = fh.read()
    # fields after "(comm)": state is field 3, utime 14, stime 15 (proc(5)); comm may hold spaces
    fields = data[data.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def thread_cpu_seconds(pid: int | str = "self") -> dict[int, tuple[str, float]]:
    """User + system CPU seconds of each live thread of process `pid` (this one by default), by thread id,
    with the thread's name (`comm`: "thrust-native" for the native transport's tokio thread), from
    `/proc/<pid>/task/*/stat`. A thread that exits meanwhile is left out."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[str, float]] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                data = fh.read()
        except FileNotFoundError:
            continue
        name = data[data.index("(") + 1 : data.rindex(")")]
        fields = data[data.rindex(")") + 2 :].split()
        out[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / ticks)
    return out


def thread_wakeups(pid: int | str = "self") -> dict[int, int]:
    """How many times each live thread of process `pid` gave up the CPU of its own accord (went to sleep
    and was woken later: `voluntary_ctxt_switches` of `/proc/<pid>/task/*/status`), by thread id. On a
    virtual machine a wake-up costs tens of µs of CPU (docs/benchmarks.md), so an idle client's CPU follows
    its wake-ups more than its calls."""
    out: dict[int, int] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as fh:
                for line in fh:
                    if line.startswith("voluntary_ctxt_switches:"):
                        out[int(tid)] = int(line.split()[1])
                        break
        except FileNotFoundError:
            continue
    return out


def self_cpu_seconds() -> float:
    """This process's user + system CPU seconds, every thread (`resource.getrusage(RUSAGE_SELF)`)."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
