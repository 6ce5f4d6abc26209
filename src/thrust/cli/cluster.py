"""`thrust cluster`: run a real Apache RocketMQ 5 (from the Maven Central jars) on loopback."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
from typing import Any

from thrust.cluster import (
    LITE_VERSION,
    ROCKETMQ_VERSION,
    STANDARD_GROUPS,
    STANDARD_TOPICS,
    ClusterError,
    JarsError,
    RocketMQCluster,
)
from thrust.cluster.process import ENV_VAR

__all__ = ["register", "run"]

LITE_TOPICS = ("lite:LITE",)
LITE_GROUPS = ("lite-group:lite=lite",)

_DESCRIPTION = f"""\
Start a real Apache RocketMQ ({ROCKETMQ_VERSION} unless --version says otherwise) on 127.0.0.1 from its
published jars (no Docker) and print the gRPC endpoint that thrust (or any RocketMQ 5 client) connects to.
Needs Java 17+ and Maven; the first run downloads ~100 MB of jars into ~/.cache/thrust/rocketmq (or
$THRUST_ROCKETMQ_CACHE).

--mode local: a namesrv and a local-mode proxy with the broker inside it (two JVMs, ~0.5 GB).
--mode cluster: a namesrv, two brokers and a cluster-mode proxy (four JVMs, ~1 GB).
--mode both: one of each (the test suite's setting).
--brokers 1: cluster mode with broker-a alone (three JVMs).
--lite: lite topics (RocketMQ 5.5+, cluster mode; default version {LITE_VERSION}): the brokers run with
  enableLmq and enableMultiDispatch. Without --topic and --group it creates the LITE topic lite and the
  lite group lite-group bound to it.

gRPC clients never create topics, and the proxy refuses consumers of unknown groups: give each topic with
--topic NAME[:TYPE] (TYPE NORMAL, FIFO, DELAY, TRANSACTION, PRIORITY, MIXED or LITE) and each group with
--group NAME[:fifo][:lite=PARENT] (lite=: a lite consumer group of LITE topic PARENT); mqadmin creates
them. Without --topic and --group it creates {", ".join(STANDARD_TOPICS)} and the groups
{", ".join(STANDARD_GROUPS)}.

Without --exec it runs until Ctrl-C. With --exec CMD ARGS..., it runs CMD with the cluster(s) described
in ${ENV_VAR} (JSON), stops them when CMD ends and exits with CMD's exit code.

The proxy serves TLS (beside plaintext) with the printed certificate, for clients that trust it. Another
process can kill, terminate and restart the JVMs through the printed control socket
(thrust.cluster.ClusterControl), e.g. for fault tests.
"""


def register(subparsers: Any) -> None:
    """Add the `cluster` subcommand to the `thrust` parser."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "cluster",
        help="run a real Apache RocketMQ 5 (namesrv, broker, proxy) from the Maven Central jars",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--mode",
        choices=("local", "cluster", "both"),
        default=None,
        help="default local (cluster with --lite)",
    )
    parser.add_argument(
        "--version",
        default=None,
        help=f"the RocketMQ release (default {ROCKETMQ_VERSION}, {LITE_VERSION} with --lite)",
    )
    parser.add_argument("--brokers", type=int, choices=(1, 2), default=2, help="brokers in cluster mode")
    parser.add_argument("--lite", action="store_true", help="serve lite topics (5.5+, cluster mode)")
    parser.add_argument("--topic", action="append", default=[], metavar="NAME[:TYPE]")
    parser.add_argument("--group", action="append", default=[], metavar="NAME[:fifo][:lite=PARENT]")
    parser.add_argument("--keep", action="store_true", help="keep the state folder (logs, store) on exit")
    parser.add_argument(
        "--exec",
        nargs=argparse.REMAINDER,
        default=None,
        metavar="CMD",
        help="run CMD with the cluster, then stop",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    mode = args.mode or ("cluster" if args.lite else "local")
    modes = ["local", "cluster"] if mode == "both" else [mode]
    version = args.version or (LITE_VERSION if args.lite else ROCKETMQ_VERSION)
    topics, groups = (LITE_TOPICS, LITE_GROUPS) if args.lite else (STANDARD_TOPICS, STANDARD_GROUPS)
    try:
        clusters = [
            RocketMQCluster(
                m,  # type: ignore[arg-type]
                topics=args.topic or (() if args.group else topics),
                groups=args.group or (() if args.topic else groups),
                version=version,
                brokers=args.brokers if m == "cluster" else 2,
                lite=args.lite,
                keep=args.keep,
            )
            for m in modes
        ]
    except ValueError as exc:
        print(f"thrust cluster: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    # SIGTERM ends the wait like Ctrl-C, so that the JVMs are stopped and the state removed.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        try:
            _start_all(clusters)
        except (ClusterError, JarsError) as exc:
            print(f"thrust cluster: {exc}", file=sys.stderr)
            return 1
        for c in clusters:
            c.serve_control()
            rss = sum(c.rss_bytes().values()) / 2**20
            print(
                f"rocketmq {c.version} {c.mode}{' lite' if c.lite else ''}: endpoint {c.endpoint} "
                f"namesrv {c.info.namesrv} "
                f"brokers {','.join(c.info.brokers)} "
                f"(started in {c.startup_seconds:.1f} s, RSS {rss:.0f} MiB)\n"
                f"  control {c.info.control} (thrust.cluster.ClusterControl: kill, terminate, restart)"
                + (f"\n  TLS certificate {c.info.tls_cert}" if c.info.tls_cert else ""),
                flush=True,
            )
        if args.exec:
            env = dict(os.environ)
            env[ENV_VAR] = json.dumps([json.loads(c.info.to_json()) for c in clusters])
            child = subprocess.Popen(args.exec, env=env)
            signal.signal(signal.SIGTERM, lambda *_: child.terminate())
            try:
                return child.wait()
            except KeyboardInterrupt:
                child.wait()
                return 130
        print("Ctrl-C stops it.", flush=True)
        try:
            while not stop.wait(3600):
                pass
        except KeyboardInterrupt:
            pass
        return 0
    finally:
        for c in clusters:
            c.stop()


def _start_all(clusters: list[RocketMQCluster]) -> None:
    """Start every cluster at once (each is mostly waiting on its JVMs); the first error is raised."""
    errors: list[BaseException] = []

    def start(c: RocketMQCluster) -> None:
        try:
            c.start()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(c,), name=f"start-{c.mode}") for c in clusters]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
