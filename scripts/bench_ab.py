"""Two versions of thrust side by side: the same `thrust bench` selection from two installs, interleaved.

`thrust bench` compares thrust with other clients in one run; this compares thrust with itself, for a
change that must leave behaviour and performance unchanged (a restructuring) or that claims a speed-up.
Each install is a venv holding a checkout of thrust (`pip install -e '.[cli]'` in a `git worktree` of
the other commit); its own `thrust bench` runs, so its own embedded server too. Rounds alternate A, B,
B, A, A, B, ... (each round one `thrust bench --repeat 1` per install) so that a drift of the shared
machine hits both alike, and the table gives each metric's median over the rounds, its range, and B / A.
`raw` (bare grpc.aio stubs, the same code in both installs when the bench module did not change) is
worth selecting beside `thrust`: if its column moves between A and B, the machine moved, not thrust.

    .venv/bin/python scripts/bench_ab.py --a ../before/.venv --b .venv --rounds 6 \\
        -- --scenarios 1,drain --client thrust,raw --duration 5 --warmup 2

Everything after `--` goes to `thrust bench`. `--json PATH` writes every round's cells.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any


def _bench(venv: Path, bench_args: list[str], out: Path) -> dict[str, Any]:
    cmd = [str(venv / "bin" / "thrust"), "bench", *bench_args, "--repeat", "1", "--json", str(out)]
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False)
    if done.returncode != 0 or not out.exists():
        raise SystemExit(f"thrust bench failed in {venv} (exit {done.returncode})")
    data: dict[str, Any] = json.loads(out.read_text())
    return data


def _cells(data: dict[str, Any]) -> dict[tuple[str, str, str], float]:
    """(scenario, client, metric) -> the round's value."""
    out: dict[tuple[str, str, str], float] = {}
    for label, scenario in data["scenarios"].items():
        rows = [r["key"] for r in scenario["rows"]]
        for client, result in scenario["results"].items():
            for key in rows:
                value = result.get("median", {}).get(key)
                if isinstance(value, (int, float)):
                    out[(label, client, key)] = float(value)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    bench_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, bench_args = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--a", type=Path, required=True, help="venv of version A (the baseline)")
    parser.add_argument("--b", type=Path, required=True, help="venv of version B")
    parser.add_argument("--rounds", type=int, default=6, help="rounds per version (default 6)")
    parser.add_argument("--json", type=Path, help="write every round's cells")
    args = parser.parse_args(argv)

    order = []
    for i in range(args.rounds):
        order += [("A", args.a), ("B", args.b)] if i % 2 == 0 else [("B", args.b), ("A", args.a)]
    rounds: dict[str, list[dict[tuple[str, str, str], float]]] = {"A": [], "B": []}
    with tempfile.TemporaryDirectory() as tmp:
        for n, (name, venv) in enumerate(order):
            rounds[name].append(_cells(_bench(venv, bench_args, Path(tmp) / f"{n}.json")))

    keys = sorted({k for r in rounds["A"] + rounds["B"] for k in r})
    print(f"A = {args.a}, B = {args.b}; {args.rounds} interleaved rounds each; median [min-max]\n")
    print("| scenario | client | metric | A | B | B / A |")
    print("|---|---|---|---|---|---|")
    table: dict[str, Any] = {}
    for key in keys:
        values = {name: [r[key] for r in rounds[name] if key in r] for name in ("A", "B")}
        if not values["A"] or not values["B"]:
            continue
        med = {name: statistics.median(v) for name, v in values.items()}
        cell = {name: f"{med[name]:.4g} [{min(v):.4g}-{max(v):.4g}]" for name, v in values.items()}
        ratio = f"{med['B'] / med['A']:.3f}" if med["A"] else "-"
        print(f"| {key[0]} | {key[1]} | {key[2]} | {cell['A']} | {cell['B']} | {ratio} |")
        table["/".join(key)] = values
    if args.json:
        args.json.write_text(json.dumps({"a": str(args.a), "b": str(args.b), "cells": table}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
