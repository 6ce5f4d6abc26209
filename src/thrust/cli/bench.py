"""`thrust bench`: named scenarios (docs/benchmarks.md#scenarios) on the embedded server with fault and
latency injection; thrust and/or the official Python client; a markdown table and `--json`.

Each cell is the median of `--repeat` runs. Runs are interleaved (run 1 of every scenario and client,
then run 2, ...) so that a drift of the shared machine hits every cell alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import statistics
import sys
import time
from typing import Any

__all__ = ["format_table", "register", "run"]


def register(subparsers: Any) -> None:
    """Add `thrust bench` to the `thrust` parser."""
    p = subparsers.add_parser(
        "bench",
        help="named benchmark scenarios on the embedded server (markdown table, --json)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--scenarios",
        default="all",
        help="comma-separated ids (ceiling,server,1,2,2',3,4,5a,5b,6,7a,7b; '7' means 7a,7b), default all",
    )
    p.add_argument("--repeat", type=int, default=3, help="runs per cell; the median is shown (default 3)")
    p.add_argument("--client", choices=("thrust", "official", "both"), default="thrust")
    p.add_argument("--duration", type=float, default=10.0, help="seconds of each measurement window")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds before each window")
    p.add_argument("--json", default=None, metavar="PATH", help="write every run and the medians as JSON")
    p.set_defaults(func=run)


def _select(text: str) -> list[str]:
    from thrust.bench.scenarios import SCENARIOS

    if text == "all":
        return list(SCENARIOS)
    wanted: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        ids = ["7a", "7b"] if part == "7" else [part]
        for i in ids:
            if i not in SCENARIOS:
                raise ValueError(f"unknown scenario {i!r}; one of {', '.join(SCENARIOS)}")
            if i not in wanted:
                wanted.append(i)
    return wanted


def _fmt(value: float | None, digits: int) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "never"
    if math.isnan(value):
        return "n/a"
    return f"{value:,.{digits}f}"


def format_table(results: dict[str, Any], clients: list[str]) -> str:
    """The markdown table: one row per metric, a column per client, and thrust/official."""
    from thrust.bench.scenarios import SCENARIOS

    head = ["Scenario", "Metric", *clients]
    if len(clients) == 2:
        head.append("thrust / official")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for sid, per_client in results.items():
        scenario = SCENARIOS[sid]
        for n, row in enumerate(scenario.rows):
            cells = [f"{sid}. {scenario.title}" if n == 0 else "", row.label]
            values: dict[str, float | None] = {}
            for client in clients:
                entry = per_client.get(client)
                if entry is None:
                    cells.append("-")
                elif "skipped" in entry:
                    cells.append(entry["skipped"] if n == 0 else "")
                    values[client] = None
                elif "error" in entry and not entry["runs"]:
                    cells.append(f"error: {entry['error']}" if n == 0 else "")
                    values[client] = None
                else:
                    value = entry["median"].get(row.key)
                    values[client] = value
                    spread = entry["range"].get(row.key)
                    text = _fmt(value, row.digits)
                    if spread and len(entry["runs"]) > 1 and value is not None and math.isfinite(value):
                        text += f" ({_fmt(spread[0], row.digits)}-{_fmt(spread[1], row.digits)})"
                    if "error" in entry and n == 0:
                        text += f" ({len(entry['runs'])} run(s); then error: {entry['error']})"
                    cells.append(text)
            if len(clients) == 2:
                a, b = values.get("thrust"), values.get("official")
                if a is not None and b is not None and math.isfinite(a) and math.isfinite(b) and b > 0:
                    cells.append(f"{a / b:.2f}x")
                else:
                    cells.append("")
            lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from thrust.bench.scenarios import SCENARIOS, Context, official_python

    try:
        ids = _select(args.scenarios)
    except ValueError as exc:
        print(f"thrust bench: error: {exc}", file=sys.stderr)
        return 2
    if args.repeat < 1 or args.duration <= 0:
        print("thrust bench: error: --repeat must be >= 1 and --duration > 0", file=sys.stderr)
        return 2
    clients = ["thrust", "official"] if args.client == "both" else [args.client]
    ctx = Context(duration=args.duration, warmup=args.warmup)
    if "official" in clients:
        print("preparing the official client's venv ...", file=sys.stderr)
        ctx.official_python = official_python()
    runs: dict[str, dict[str, list[dict[str, float]]]] = {i: {c: [] for c in clients} for i in ids}
    errors: dict[tuple[str, str], str] = {}
    started = time.time()
    load_before = _loadavg()
    for r in range(args.repeat):
        for sid in ids:
            scenario = SCENARIOS[sid]
            for client in clients:
                runner = scenario.thrust if client == "thrust" else scenario.official
                if isinstance(runner, str) or (sid, client) in errors:
                    continue
                if sid == "ceiling" and client == "official":
                    continue
                print(
                    f"run {r + 1}/{args.repeat}: scenario {sid} ({client}) ...", file=sys.stderr, flush=True
                )
                try:
                    result = asyncio.run(runner(ctx))
                except Exception as exc:
                    errors[(sid, client)] = f"{type(exc).__name__}: {exc}"[:200]
                    print(f"  failed: {errors[(sid, client)]}", file=sys.stderr)
                    continue
                runs[sid][client].append(result)
                summary = ", ".join(f"{k}={v:.4g}" for k, v in result.items() if k in _shown(sid))
                print(f"  {summary}", file=sys.stderr, flush=True)
    results: dict[str, Any] = {}
    for sid in ids:
        scenario = SCENARIOS[sid]
        results[sid] = {}
        for client in clients:
            runner = scenario.thrust if client == "thrust" else scenario.official
            if sid == "ceiling" and client == "official":
                runner = scenario.official
            if isinstance(runner, str):
                results[sid][client] = {"skipped": runner}
            elif (sid, client) in errors and not runs[sid][client]:
                results[sid][client] = {"error": errors[(sid, client)], "runs": []}
            else:
                results[sid][client] = _aggregate(runs[sid][client])
                if (sid, client) in errors:  # later runs skipped after a failure: say so in the cell
                    results[sid][client]["error"] = errors[(sid, client)]
    table = format_table(results, clients)
    print(table)
    if args.json:
        data = {
            "command": " ".join(["thrust", *sys.argv[1:]]) if sys.argv else "thrust bench",
            "started": started,
            "machine": {
                "python": platform.python_version(),
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                # other work on the machine skews every number: the 1/5/15-minute load averages
                "loadavg_before": load_before,
                "loadavg_after": _loadavg(),
            },
            "duration": args.duration,
            "warmup": args.warmup,
            "repeat": args.repeat,
            "clients": clients,
            "scenarios": {
                sid: {
                    "title": SCENARIOS[sid].title,
                    "rows": [{"key": r.key, "label": r.label} for r in SCENARIOS[sid].rows],
                    "results": results[sid],
                }
                for sid in ids
            },
            "table": table,
        }
        with open(args.json, "w") as fh:
            json.dump(data, fh, indent=2, default=_json_default)
    return 1 if errors else 0


def _loadavg() -> list[float] | None:
    try:
        with open("/proc/loadavg") as fh:
            return [float(x) for x in fh.read().split()[:3]]
    except OSError:
        return None


def _shown(sid: str) -> set[str]:
    from thrust.bench.scenarios import SCENARIOS

    return {r.key for r in SCENARIOS[sid].rows}


def _aggregate(runs: list[dict[str, float]]) -> dict[str, Any]:
    keys = sorted({k for r in runs for k in r})
    median = {k: statistics.median(r[k] for r in runs if k in r) for k in keys}
    spread = {k: (min(r[k] for r in runs if k in r), max(r[k] for r in runs if k in r)) for k in keys}
    return {"median": median, "range": spread, "runs": runs}


def _json_default(value: Any) -> Any:
    return str(value)
