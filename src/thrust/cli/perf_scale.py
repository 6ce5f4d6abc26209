"""`thrust perf scale`: one PushConsumer subscribed to 10, 100, 1,000 topics (NORMAL and FIFO groups) and a
LitePushConsumer of 10,000 lite topics, each against a 2-broker embedded server of its own (or a real
RocketMQ with `--server real`): idle CPU,
RSS, tasks, threads, the server's calls per second, first-message latency on a quiet topic, and a hot
topic's throughput among quiet ones against the same consumer of it alone (`thrust.bench.scale`)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any

__all__ = ["add_scale", "run_scale_cli"]

_DESCRIPTION = (
    "What one PushConsumer of many topics costs while idle, and whether a hot topic among quiet ones keeps"
    " its throughput (docs/benchmarks.md, 'A consumer of a thousand topics')."
)


def _counts(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if any(v < 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: counts must be >= 0")
    return tuple(v for v in values if v > 0)


def _kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(k.strip().lower() for k in text.split(",") if k.strip())
    bad = [k for k in kinds if k not in ("normal", "fifo")]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown group kind(s) {bad}: normal, fifo")
    return kinds


def add_scale(modes: Any) -> None:
    p = modes.add_parser("scale", help=_DESCRIPTION, description=_DESCRIPTION)
    p.add_argument(
        "--topics", type=_counts, default=(10, 100, 1000), help="topic counts (default 10,100,1000)"
    )
    p.add_argument(
        "--kinds", type=_kinds, default=("normal", "fifo"), help="group kinds (default normal,fifo)"
    )
    p.add_argument(
        "--lite-topics", type=_counts, default=(10_000,), help="lite topic counts, 0 for none (default 10000)"
    )
    p.add_argument(
        "--server",
        choices=("embedded", "real"),
        default="embedded",
        help="embedded: a fresh `thrust serve` per row (default); real: Apache RocketMQ, the cluster"
        " `thrust cluster --exec` started ($THRUST_ROCKETMQ), else one started here (Java 17;"
        " the lite row on a 5.5 lite cluster)",
    )
    p.add_argument(
        "--brokers", type=int, default=2, help="brokers of the server perf scale starts (default 2)"
    )
    p.add_argument("--queues", type=int, default=1, help="queues per topic and broker (default 1)")
    p.add_argument(
        "--idle",
        type=float,
        default=330.0,
        help="seconds of the idle window (default 330: an idle queue's renewal window and a long poll)",
    )
    p.add_argument(
        "--settle",
        type=float,
        default=None,
        help="seconds before the idle window (default: one assignment-scan period, max(5, topics / 20))",
    )
    p.add_argument("--hot-messages", type=int, default=20_000, help="backlog drained (default 20000)")
    p.add_argument("--paced-rate", type=float, default=500.0, help="paced phase msg/s (default 500)")
    p.add_argument("--paced-seconds", type=float, default=4.0, help="paced phase seconds (default 4)")
    p.add_argument("--fifo-hot-messages", type=int, default=4000, help="FIFO backlog drained (default 4000)")
    p.add_argument("--fifo-paced-rate", type=float, default=100.0, help="FIFO paced msg/s (default 100)")
    p.add_argument("--quiet-probes", type=int, default=5, help="quiet topics probed (default 5)")
    p.add_argument(
        "--repeat", type=int, default=1, help="runs of the whole set; medians reported (default 1)"
    )
    p.add_argument(
        "--transport", choices=("auto", "grpcio", "native"), default="auto", help="the clients' transport"
    )
    p.add_argument("--json", metavar="FILE", help="write every run and the medians as JSON")
    p.set_defaults(func=run_scale_cli)


def run_scale_cli(args: argparse.Namespace) -> int:
    import asyncio

    from thrust.bench.scale import ScaleOptions, median_rows, run_scale

    if args.repeat < 1 or args.brokers < 1 or args.queues < 1:
        print("thrust perf scale: error: --repeat, --brokers and --queues must be >= 1", file=sys.stderr)
        return 2
    options = ScaleOptions(
        topics=args.topics,
        kinds=args.kinds,
        lite_topics=args.lite_topics,
        brokers=args.brokers,
        queues=args.queues,
        idle_seconds=args.idle,
        settle_seconds=args.settle,
        hot_messages=args.hot_messages,
        paced_rate=args.paced_rate,
        paced_seconds=args.paced_seconds,
        fifo_hot_messages=args.fifo_hot_messages,
        fifo_paced_rate=args.fifo_paced_rate,
        quiet_probes=args.quiet_probes,
        transport=args.transport,
        server=args.server,
    )
    runs = []
    with contextlib.ExitStack() as stack:
        target = None
        if args.server == "real":
            from thrust.bench.scale import RealScaleClusters

            target = stack.enter_context(RealScaleClusters(options))
        for i in range(args.repeat):
            print(f"run {i + 1} of {args.repeat}", flush=True)
            runs.append(asyncio.run(run_scale(options, target=target)))
    medians = median_rows(runs)
    print("medians:")
    for row in medians:
        print(json.dumps(row))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"runs": [[r.to_json() for r in rows] for rows in runs], "medians": medians}, f, indent=1
            )
    return 0
