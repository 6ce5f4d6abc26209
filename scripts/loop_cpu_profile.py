"""Where does the event loop's thread spend its CPU while a client is (nearly) idle?

py-spy samples by wall-clock time, and a thread waiting in `epoll_wait` or for the GIL is sampled like one
that computes: at 1-3 % of a core of work, its profile says more about waiting than about work. This runs
a thrust command (`thrust perf scale ...`) in this process with a CPU-time sampler on the main thread
(where the command's event loop runs): `ITIMER_PROF` ticks with the process's CPU time, and each tick
records the main thread's Python stack. Ticks that find it waiting in the selector are counted apart, so
the rest is the loop's own work, in proportion to where its CPU went (ticks earned by other threads'
CPU land on the selector too, and are among those counted apart). Python runs the handler between the main
thread's bytecodes, and ticks that come while one is pending are merged: the counts are shares, not CPU
seconds.

    .venv/bin/python scripts/loop_cpu_profile.py --start 120 --duration 90 --out loop.txt -- \\
        perf scale --transport native --topics 1000 --kinds normal --lite-topics 0 --idle 200 \\
        --hot-messages 2000 --paced-seconds 1 --quiet-probes 2

samples only from 120 s to 210 s after the start (inside that run's idle window), writes the folded
stacks to `loop.txt` and prints the functions with the largest inclusive share of the busy samples.
`--summary loop.txt` prints that summary of an earlier run again.
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import sys
import time
from types import FrameType


def _stack(frame: FrameType | None) -> str:
    names = []
    while frame is not None:
        code = frame.f_code
        names.append(f"{code.co_name} ({os.path.basename(code.co_filename)}:{frame.f_lineno})")
        frame = frame.f_back
    return ";".join(reversed(names))


def summary(path: str, top: int = 40) -> None:
    """Print the inclusive share of each function in the samples of `path` that were not in the selector."""
    inclusive: collections.Counter[str] = collections.Counter()
    total = waiting = 0
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            n = int(count)
            total += n
            frames = stack.split(";")
            if frames[-1].startswith("select (selectors.py"):
                waiting += n
                continue
            for name in {frame.rsplit(":", 1)[0] + ")" for frame in frames}:
                inclusive[name] += n
    busy = total - waiting
    print(f"{total} samples, {waiting} in the selector, {busy} busy")
    for name, n in inclusive.most_common(top):
        print(f"{100 * n / max(1, busy):5.1f} %  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--start", type=float, default=60.0, help="seconds before sampling starts (default 60)"
    )
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of sampling (default 60)")
    parser.add_argument(
        "--interval", type=float, default=0.001, help="CPU seconds per sample (default 0.001)"
    )
    parser.add_argument("--out", default="loop.txt", help="folded stacks (default loop.txt)")
    parser.add_argument("--summary", metavar="FILE", help="only print the summary of FILE")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- and the thrust command's arguments")
    args = parser.parse_args()
    if args.summary:
        summary(args.summary)
        return
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the thrust command after --")

    began = time.monotonic()
    stacks: collections.Counter[str] = collections.Counter()

    def tick(signum: int, frame: FrameType | None) -> None:
        if args.start <= time.monotonic() - began <= args.start + args.duration:
            stacks[_stack(frame)] += 1

    def stop() -> None:
        # Before the handler goes with the interpreter: SIGPROF's default action ends the process.
        signal.setitimer(signal.ITIMER_PROF, 0)
        with open(args.out, "w") as f:
            for stack, n in stacks.items():
                f.write(f"{stack} {n}\n")
        print(f"\n{sum(stacks.values())} samples written to {args.out}", file=sys.stderr)

    signal.signal(signal.SIGPROF, tick)
    signal.setitimer(signal.ITIMER_PROF, args.interval, args.interval)
    from thrust.cli.main import main as thrust_main

    try:
        code = thrust_main(command)
    finally:  # SystemExit and KeyboardInterrupt included
        stop()
    summary(args.out)
    sys.exit(code)


if __name__ == "__main__":
    main()
