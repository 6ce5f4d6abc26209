"""`thrust bench`: named scenarios (docs/benchmarks.md#scenarios) on the embedded server with fault and
latency injection, or on a real RocketMQ; thrust beside the official Python client, the Java client and
raw gRPC stubs, with client and server CPU per message; a markdown table and `--json`.

Each cell is the median of `--repeat` runs. Runs are interleaved (run 1 of every scenario and client,
then run 2, ...) so that a drift of the shared machine hits every cell alike.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import statistics
import sys
import time
from typing import Any

from thrust.cli.loops import add_loop_argument
from thrust.cli.loops import run as run_on_loop

__all__ = ["format_table", "register", "run"]


_SERVER_HELP = """\
servers:
  --server embedded (default): a fresh embedded server (thrust serve) in a child process per run, with
      the fault hooks the scenario needs and a backlog stored directly.
  --server real: a real Apache RocketMQ started from the Maven Central jars for the whole bench (local
      mode: a namesrv and a proxy with its broker inside; Java 17+ and Maven needed) and stopped at the
      end. Each run gets a topic and a group of its own; the backlog is sent before the window. Under
      `thrust cluster --exec` it uses that cluster's local-mode RocketMQ instead ($THRUST_ROCKETMQ).
  --endpoints HOST:PORT: an existing cluster. Nothing is created: the topics and the group the selected
      scenarios use must exist (--list-resources prints them). Scenario 1's latency needs the proxy's
      useEndpointPortFromRequest (the harness sets it), or clients leave the FaultProxy after QueryRoute.
Scenarios 3, 4 and 5a need the embedded server's fault hooks, and ceiling/server are its own ceilings:
with --server real or --endpoints, "all" leaves them out and naming one is refused.

sizes: --size sets the message size of the sized scenarios (1, drain, produce; default 64 B); ID@SIZE
(e.g. drain@1k, produce@4096) runs one at another size. The default selection adds 1@1k, drain@1k and
produce@1k.

clients: thrust, official (rocketmq-python-client 5.1.2 in its own venv), java (rocketmq-client-java,
built by Maven into ~/.cache/thrust/java-driver), raw (bare grpc.aio stubs); "both" is thrust,official
and "all" is all four. thrust-native and thrust-grpcio are thrust on one transport each (thrust alone
takes what transport="auto" takes: native when thrust-native is installed); the ratio columns divide the
first thrust column by each other one. Client and server CPU per message: each client's process CPU
time (user + sys) over the window divided by the messages it consumed or produced; the server's
likewise (the embedded server's process, or the real proxy's and brokers' JVMs).
"""


def register(subparsers: Any) -> None:
    """Add `thrust bench` to the `thrust` parser."""
    p = subparsers.add_parser(
        "bench",
        help="named benchmark scenarios on the embedded or a real server (markdown table, --json)",
        description=__doc__,
        epilog=_SERVER_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--scenarios",
        default="all",
        help="comma-separated ids (ceiling,server,1,2,2',3,4,5a,5b,6,7a,7b,drain,produce; '7' means 7a,7b;"
        " ID@SIZE for another message size), default all",
    )
    p.add_argument("--repeat", type=int, default=3, help="runs per cell; the median is shown (default 3)")
    p.add_argument(
        "--client",
        default="thrust",
        help="thrust, thrust-native, thrust-grpcio, official, java, raw, both (thrust,official), all, or a "
        "comma-separated list",
    )
    p.add_argument("--duration", type=float, default=10.0, help="seconds of each measurement window")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds before each window")
    p.add_argument(
        "--java-warmup",
        type=float,
        default=15.0,
        help="seconds before the Java client's window (its JIT; default 15, never less than --warmup)",
    )
    p.add_argument(
        "--size",
        "--message-size",
        dest="size",
        type=_size,
        default=64,
        metavar="BYTES",
        help="message size of the sized scenarios (1, drain, produce), e.g. 1024 or 1k (default 64)",
    )
    p.add_argument(
        "--server",
        choices=("embedded", "real"),
        default=None,
        help="embedded (default) or real: a real RocketMQ in local mode, started and stopped by the bench",
    )
    p.add_argument(
        "--endpoints",
        default=None,
        metavar="HOST:PORT",
        help="an existing cluster's proxy; its topics and group must exist (see --list-resources)",
    )
    p.add_argument(
        "--server-pids",
        default=None,
        metavar="PID,...",
        help="with --endpoints: the server's processes on this machine, for the server CPU per message",
    )
    p.add_argument(
        "--list-resources",
        action="store_true",
        help="print the topics and the group an --endpoints run of this selection needs, and exit",
    )
    add_loop_argument(p)  # the loop of the in-process runs (thrust, raw); the official and Java are their own
    p.add_argument("--json", default=None, metavar="PATH", help="write every run and the medians as JSON")
    p.set_defaults(func=run)


def _size(text: str) -> int:
    t = text.strip().lower()
    try:
        value = int(t[:-1]) * 1024 if t.endswith("k") else int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a size in bytes (e.g. 1024 or 1k), got {text!r}"
        ) from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"the size must be >= 1, got {text!r}")
    return value


def _size_label(size: int) -> str:
    return f"{size // 1024}k" if size % 1024 == 0 else str(size)


def _label(sid: str, size: int) -> str:
    return sid if size == 64 else f"{sid}@{_size_label(size)}"


def _select(text: str, size: int = 64, *, embedded: bool = True) -> list[tuple[str, str, int]]:
    """(label, scenario id, message size) of each selected run, in table order. `ValueError` for an
    unknown id, a size on a scenario without one, or (not `embedded`) an embedded-only scenario."""
    from thrust.bench.scenarios import DEFAULT, SCENARIOS

    parts = list(DEFAULT) if text == "all" else [p.strip() for p in text.split(",") if p.strip()]
    wanted: list[tuple[str, str, int]] = []
    for part in parts:
        name, at, size_text = part.partition("@")
        for sid in ["7a", "7b"] if name == "7" else [name]:
            if sid not in SCENARIOS:
                raise ValueError(f"unknown scenario {sid!r}; one of {', '.join(SCENARIOS)}")
            scenario = SCENARIOS[sid]
            if not embedded and scenario.embedded_only:
                if text == "all":
                    continue
                raise ValueError(f"scenario {sid} runs only on the embedded server: {scenario.embedded_only}")
            if at and not scenario.sized:
                raise ValueError(f"scenario {sid} has no message size parameter (sized: 1, drain, produce)")
            run_size = (_size(size_text) if at else size) if scenario.sized else 64
            label = _label(sid, run_size)
            if all(w[0] != label for w in wanted):
                wanted.append((label, sid, run_size))
    return wanted


def _clients(text: str) -> list[str]:
    from thrust.bench.scenarios import CLIENTS

    named = {
        "both": ["thrust", "official"],
        "all": [c for c in CLIENTS if c not in ("thrust-native", "thrust-grpcio")],
    }
    out: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        for client in named.get(part, [part]):
            if client not in CLIENTS:
                raise ValueError(f"unknown client {client!r}; one of {', '.join(CLIENTS)}, both, all")
            if client not in out:
                out.append(client)
    return sorted(out, key=CLIENTS.index)


def _fmt(value: float | None, digits: int) -> str:
    if value is None:
        return "-"
    if math.isinf(value):
        return "never"
    if math.isnan(value):
        return "n/a"
    return f"{value:,.{digits}f}"


def format_table(
    results: dict[str, Any], clients: list[str], scenario_ids: dict[str, str] | None = None
) -> str:
    """The markdown table: one row per metric, a column per client, then thrust / each other client
    (ratios of values measured in the same run). `results` is keyed by run label (`1`, `drain@1k`);
    `scenario_ids` maps a label to its scenario id (default: the label itself)."""
    from thrust.bench.scenarios import SCENARIOS

    # The ratios are of the first thrust column (`thrust`, or `thrust-native` beside `thrust-grpcio`) to each
    # other column.
    lead = next((c for c in clients if c.startswith("thrust")), None)
    others = [c for c in clients if c != lead] if lead is not None else []
    head = ["Scenario", "Metric", *clients, *(f"{lead} / {c}" for c in others)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label, per_client in results.items():
        scenario = SCENARIOS[(scenario_ids or {}).get(label, label)]
        title = scenario.title if label == scenario.id else f"{scenario.title} ({_size_title(label)})"
        for n, row in enumerate(scenario.rows):
            cells = [f"{label}. {title}" if n == 0 else "", row.label]
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
                    if row.key == "consumed_per_s" and any(r.get("backlog_exhausted") for r in entry["runs"]):
                        text += " (backlog ran out: a lower bound)"
                    if "error" in entry and n == 0:
                        text += f" ({len(entry['runs'])} run(s); then error: {entry['error']})"
                    cells.append(text)
            for other in others:
                a, b = values.get(lead) if lead is not None else None, values.get(other)
                if a is not None and b is not None and math.isfinite(a) and math.isfinite(b) and b > 0:
                    cells.append(f"{a / b:.2f}x")
                else:
                    cells.append("")
            lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def _size_title(label: str) -> str:
    size = label.partition("@")[2]
    return f"{size[:-1]} KiB messages" if size.endswith("k") else f"{size} B messages"


def _target(args: argparse.Namespace) -> Any:
    from thrust.bench.targets import EmbeddedTarget, ExternalTarget, RealTarget

    if args.endpoints:
        pids = [int(p) for p in args.server_pids.split(",") if p.strip()] if args.server_pids else []
        return ExternalTarget(args.endpoints, pids)
    if args.server == "real":
        return RealTarget()
    return EmbeddedTarget()


def run(args: argparse.Namespace) -> int:
    from thrust.bench import scenarios
    from thrust.bench.scenarios import SCENARIOS, Context, official_python
    from thrust.bench.targets import resource_names

    def fail(text: str) -> int:
        print(f"thrust bench: error: {text}", file=sys.stderr)
        return 2

    if args.endpoints and args.server == "embedded":
        return fail("--endpoints names an existing cluster; --server embedded starts one (choose one)")
    if args.server_pids and not args.endpoints:
        return fail("--server-pids goes with --endpoints (the bench knows the pids of the servers it starts)")
    embedded = not args.endpoints and args.server != "real"
    try:
        selected = _select(args.scenarios, args.size, embedded=embedded)
        clients = _clients(args.client)
        if args.server_pids:
            for pid in args.server_pids.split(","):
                int(pid)
    except ValueError as exc:
        return fail(str(exc))
    if args.list_resources:
        topics = [(t, size) for _label_, sid, size in selected for t in SCENARIOS[sid].topics]
        names, groups = resource_names(topics)
        print("topics (NORMAL): " + " ".join(names))
        print("groups: " + " ".join(groups))
        return 0
    if args.repeat < 1 or args.duration <= 0:
        return fail("--repeat must be >= 1 and --duration > 0")
    if not selected:
        return fail("no scenario selected runs on this server")
    if args.loop != "asyncio":
        from thrust.cli.loops import loop_factory

        loop_factory(args.loop)  # a missing extra is named now, before any server starts
    target = _target(args)
    ctx = Context(duration=args.duration, warmup=args.warmup, target=target, java_warmup=args.java_warmup)
    if "official" in clients:
        print("preparing the official client's venv ...", file=sys.stderr)
        ctx.official_python = official_python()
    if "java" in clients:
        from thrust.bench.java_driver import JavaDriverError, build_java_driver

        print("building the Java client's driver (Maven; cached) ...", file=sys.stderr)
        try:
            ctx.java = build_java_driver()
        except JavaDriverError as exc:
            return fail(str(exc))
    if not embedded:
        left_out = [sid for sid in SCENARIOS if SCENARIOS[sid].embedded_only and args.scenarios == "all"]
        if left_out:
            print(f"embedded server only, left out: {', '.join(left_out)}", file=sys.stderr)
    labels = [label for label, _sid, _size_ in selected]
    ids = {label: sid for label, sid, _size_ in selected}
    runs: dict[str, dict[str, list[dict[str, float]]]] = {label: {c: [] for c in clients} for label in labels}
    errors: dict[tuple[str, str], str] = {}
    started = time.time()
    load_before = _loadavg()
    # SIGTERM stops the bench like Ctrl-C: through the `finally` below, which stops a real server's JVMs
    # (the default action would leave them running)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        target.start(lambda text: print(text, file=sys.stderr, flush=True))
    except Exception as exc:
        target.stop()
        print(f"thrust bench: the server did not start: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    try:
        for r in range(args.repeat):
            for label, sid, size in selected:
                scenario = SCENARIOS[sid]
                ctx.size = size
                for client in clients:
                    runner = scenario.runner(client)
                    if isinstance(runner, str) or (label, client) in errors:
                        continue
                    if sid in ("ceiling", "server") and client == "official":
                        continue
                    print(
                        f"run {r + 1}/{args.repeat}: scenario {label} ({client}) ...",
                        file=sys.stderr,
                        flush=True,
                    )
                    try:
                        with scenarios.transport_for(client):
                            result = run_on_loop(runner(ctx), args.loop)
                    except Exception as exc:
                        errors[(label, client)] = f"{type(exc).__name__}: {exc}"[:300]
                        print(f"  failed: {errors[(label, client)]}", file=sys.stderr)
                        continue
                    runs[label][client].append(result)
                    summary = ", ".join(f"{k}={v:.4g}" for k, v in result.items() if k in _shown(sid))
                    print(f"  {summary}", file=sys.stderr, flush=True)
    finally:
        target.stop()
    results: dict[str, Any] = {}
    for label, sid in ids.items():
        scenario = SCENARIOS[sid]
        results[label] = {}
        for client in clients:
            runner = scenario.runner(client)
            if isinstance(runner, str):
                results[label][client] = {"skipped": runner}
            elif (label, client) in errors and not runs[label][client]:
                results[label][client] = {"error": errors[(label, client)], "runs": []}
            else:
                results[label][client] = _aggregate(runs[label][client])
                if (label, client) in errors:  # later runs skipped after a failure: say so in the cell
                    results[label][client]["error"] = errors[(label, client)]
    table = format_table(results, clients, ids)
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
            "server": {"kind": target.kind, "title": target.title},
            "duration": args.duration,
            "warmup": args.warmup,
            "loop": args.loop,
            "java_warmup": args.java_warmup,
            "repeat": args.repeat,
            "size": args.size,
            "clients": clients,
            "scenarios": {
                label: {
                    "id": ids[label],
                    "title": SCENARIOS[ids[label]].title,
                    "rows": [{"key": r.key, "label": r.label} for r in SCENARIOS[ids[label]].rows],
                    "results": results[label],
                }
                for label in labels
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
