"""Which stacks hold memory allocated after a warm-up and still alive later? (docs/reliability.md, bug 8)

Reads a `memray run --native` capture and groups, by stack, the allocations made after `FROM` seconds
that are still alive at `TO` seconds: in a steady process those are what grows. How bug 8 was found:

    .venv/bin/pip install memray        # a diagnostic tool, not a dependency of thrust
    .venv/bin/memray run --native -o soak.bin -m thrust.reliability.soak --duration 330 --fault-interval 60 -q
    .venv/bin/python scripts/memray_alive_after.py soak.bin 90 330 [--top 15]

Each group prints its bytes, its allocation count and its stack (Python and native frames, innermost
first). grpc.aio's `_send_unary_request` group counts the op arrays grpc/grpc#43360 leaks.
"""

from __future__ import annotations

import argparse
import collections
from typing import Any


def _seconds(delta: Any) -> float:
    return float(delta.total_seconds()) if hasattr(delta, "total_seconds") else float(delta) / 1000.0


def _stack(record: Any) -> tuple[tuple[str, str, int], ...]:
    try:
        frames = record.hybrid_stack_trace(max_stacks=14)
    except AssertionError:  # memray cannot merge the Python and native stacks of some records
        frames = record.stack_trace(max_stacks=14)
    return tuple((fn, path.rsplit("/", 1)[-1], line) for fn, path, line in frames)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("capture", help="a memray capture (.bin) made with --native")
    p.add_argument("start", type=float, help="FROM: only allocations made after this many seconds")
    p.add_argument("end", type=float, help="TO: still alive at this many seconds")
    p.add_argument("--top", type=int, default=15, help="groups to print (default 15)")
    args = p.parse_args()

    import memray  # imported here: only this script needs it

    reader = memray.FileReader(args.capture)
    snapshots = list(reader.get_memory_snapshots())
    t0 = snapshots[0].time
    times = [_seconds(s.time - t0) for s in snapshots]
    first = next(i for i, t in enumerate(times) if t >= args.start)
    last = next((i for i, t in enumerate(times) if t >= args.end), len(times) - 1)

    size: collections.Counter[tuple[tuple[str, str, int], ...]] = collections.Counter()
    count: collections.Counter[tuple[tuple[str, str, int], ...]] = collections.Counter()
    for record in reader.get_temporal_allocation_records(merge_threads=True):
        for interval in record.intervals:
            born, freed = interval.allocated_before_snapshot, interval.deallocated_before_snapshot
            if first < born <= last and (freed is None or freed > last):
                stack = _stack(record)
                size[stack] += interval.n_bytes
                count[stack] += interval.n_allocations
    total = sum(size.values())
    print(
        f"alive at {args.end:g} s, allocated after {args.start:g} s: {total / 2**20:.2f} MiB "
        f"in {sum(count.values())} allocations"
    )
    for stack, n_bytes in size.most_common(args.top):
        print(f"\n== {n_bytes / 1024:.0f} KiB in {count[stack]} allocations")
        for frame in stack:
            print("   ", frame)


if __name__ == "__main__":
    main()
