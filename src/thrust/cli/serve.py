"""`thrust serve`: run the embedded RocketMQ 5 server (gRPC MessagingService) until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
import stat
import sys
from pathlib import Path
from typing import Any, Literal

from thrust.cli.loops import add_loop_argument
from thrust.cli.loops import run as run_on_loop
from thrust.server.config import MAX_INBOUND_MESSAGE_SIZE, ServerConfig, parse_group, parse_topic
from thrust.server.faults import Faults, apply_fault_flag
from thrust.server.service import EmbeddedServer

__all__ = ["register", "run"]

_DESCRIPTION = """\
Run an embedded Apache RocketMQ 5 server speaking the gRPC protocol (apache.rocketmq.v2.MessagingService),
a stand-in for a proxy plus brokers for tests and benchmarks.

State is kept in memory only: there is NO persistence; every message, topic and group is lost when the
server stops.

Each broker listens on its own port (--brokers N: N consecutive ports) and owns its own queues of every
topic; QueryRoute on any port lists all of them. Once a port accepts connections the server prints
exactly one line "listening on HOST:PORT" per broker on stdout. Logs go to stderr.

Like a real cluster, the server knows only the topics and consumer groups given with --topic and --group:
a client naming another topic gets TOPIC_NOT_FOUND, a consumer of another group CONSUMER_GROUP_NOT_FOUND
at its first receive. --auto-create creates both on first use instead.

With --tls-cert/--tls-key every port serves TLS instead of plaintext (grpc Python cannot serve both on one
port, unlike the Java proxy); a --tls-key file that other users can access is refused. The secret key may
also come from the THRUST_SECRET_KEY environment variable (better than --secret-key, which other local
users can read in the process list).

Security defaults: only 127.0.0.1 is bound. A non-loopback --host needs authentication AND TLS, or
--insecure-allow-remote. With authentication and without TLS, a request whose x-mq-date-time is more than
15 minutes from the server's clock is refused (the signature covers only that header, so a captured one
could otherwise be replayed for ever).

Not supported: offset-mode consumption (PullMessage, UpdateOffset, GetOffset, QueryOffset) and lite
topics (SyncLiteSubscription) answer NOT_IMPLEMENTED.
"""

_FAULTS_HELP = """\
fault flags (repeatable; RPC is a method name such as SendMessage, CODE a status name or number):
  --fault-latency RPC:SECONDS[:BROKER]      add latency to every call of RPC
  --fault-delay-fraction RPC:FRACTION:LOW:HIGH[:BROKER]
                                            delay a fraction of the calls of RPC by LOW..HIGH s
  --fault-fail RPC:CODE[:COUNT]             answer the next COUNT calls of RPC with CODE
  --fault-fail-fraction RPC:CODE:FRACTION   answer a fraction of the calls of RPC with CODE
  --fault-drop RPC[:COUNT]                  handle but never answer the next COUNT calls
  --fault-settings-delay SECONDS[:BROKER]   delay Telemetry settings replies (on one broker)
  --fault-ack-entry CODE[:FIRST[:FRACTION]] fail the first FIRST ack attempts of each message
                                            (and a fraction of all ack entries) with CODE
  --fault-assignment TOPIC:GROUP:B.Q[+B.Q]  QueryAssignment answers these (broker index.queue id)
  --fault-seed N                            seed of the random fractions (default 0)
"""

_FAULT_KINDS = (
    "latency",
    "delay-fraction",
    "fail",
    "fail-fraction",
    "drop",
    "settings-delay",
    "ack-entry",
    "assignment",
)

logger = logging.getLogger("thrust.server")


def register(subparsers: Any) -> None:
    """Add the `serve` subcommand to the `thrust` parser."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "serve",
        help="run the embedded RocketMQ 5 server (in memory, no persistence)",
        description=_DESCRIPTION,
        epilog=_FAULTS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=8081, help="first broker's port; 0 picks free ports (default 8081)"
    )
    parser.add_argument("--ports", default=None, help="explicit comma-separated ports, one per broker")
    parser.add_argument(
        "--brokers", type=int, default=1, help="number of brokers, on consecutive ports (default 1)"
    )
    parser.add_argument(
        "--auto-create",
        action="store_true",
        help="create unknown topics on first use, accepting every message type but PRIORITY, and unknown "
        "consumer groups on their first receive (else TOPIC_NOT_FOUND and CONSUMER_GROUP_NOT_FOUND, as a "
        "proxy in front of brokers with autoCreateSubscriptionGroup=false)",
    )
    parser.add_argument(
        "--default-queues", type=int, default=4, help="queues of auto-created topics (default 4)"
    )
    parser.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="NAME[:QUEUES][:TYPE][@B1+B2]",
        help="create a topic; TYPE is NORMAL (default), FIFO, DELAY, TRANSACTION, PRIORITY, LITE, MIXED or "
        "a+b; NAME:TYPE (as thrust cluster --topic) has 4 queues; @0+2 places it on brokers 0 and 2 only "
        "(default: every broker). A PRIORITY message goes to queue min(priority, QUEUES-1) of its broker "
        "and each receive takes the highest queue first, so QUEUES is the number of priority levels",
    )
    parser.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="NAME[:fifo][:max-attempts=N][:lite-exclusive][:lite-quota=N][:lite=PARENT]",
        help="create a consumer group; fifo: ordered consumption; max-attempts=N: deliveries before a "
        "message goes to %%DLQ%%NAME (default 17, hours of backoff; e.g. 2 to reach the DLQ in seconds); "
        "lite-exclusive: one client of the group per lite topic, the previous one is told to unsubscribe; "
        "lite-quota=N: lite topics one client of the group may subscribe to (default "
        "--lite-subscription-quota); lite=PARENT: its lite consumers must consume LITE topic PARENT",
    )
    parser.add_argument(
        "--access-key", default=None, help="enable MQv2-HMAC-SHA1 authentication with this key"
    )
    parser.add_argument(
        "--secret-key",
        default=os.environ.get("THRUST_SECRET_KEY"),
        help="secret key for --access-key (default: $THRUST_SECRET_KEY)",
    )
    parser.add_argument("--tls-cert", type=Path, default=None, help="PEM certificate chain: serve TLS")
    parser.add_argument("--tls-key", type=Path, default=None, help="PEM private key for --tls-cert")
    parser.add_argument(
        "--tls-client-ca",
        type=Path,
        default=None,
        help="PEM roots: every client must present a certificate signed by one of them (mutual TLS; "
        "needs --tls-cert)",
    )
    parser.add_argument(
        "--insecure-allow-remote",
        action="store_true",
        help="allow a non-loopback --host without authentication, or with authentication but without TLS "
        "(signatures can then be captured and replayed)",
    )
    parser.add_argument(
        "--date-time-window",
        default="auto",
        metavar="SECONDS|auto",
        help="with authentication: refuse requests whose x-mq-date-time is further than this from the "
        "server's clock; auto (default) is 900 without TLS and off with TLS; 0 turns the check off",
    )
    parser.add_argument(
        "--advertise-host", default=None, help="host put in routes when the client sends none"
    )
    parser.add_argument(
        "--transaction-check-after",
        type=float,
        default=6.0,
        help="seconds before the first orphaned-transaction check",
    )
    parser.add_argument(
        "--client-expiry",
        type=float,
        default=120.0,
        help="seconds after a client's telemetry closed before its in-flight messages are released",
    )
    lite = parser.add_argument_group("lite topics (of LITE topics, RocketMQ 5.5)")
    lite.add_argument(
        "--lite-ttl",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="a lite topic without a new message for this long is deleted (default 600; 0: never)",
    )
    lite.add_argument(
        "--lite-subscription-quota",
        type=int,
        default=2000,
        metavar="N",
        help="lite topics one consumer may subscribe to, sent in Settings (default 2000, as the 5.5.0 proxy)",
    )
    limits = parser.add_argument_group("connection limits (0 turns a limit off where noted)")
    limits.add_argument(
        "--max-inbound-message-size",
        type=int,
        default=MAX_INBOUND_MESSAGE_SIZE,
        metavar="BYTES",
        help=f"largest gRPC message accepted (default {MAX_INBOUND_MESSAGE_SIZE}, the proxy's 130 MiB)",
    )
    limits.add_argument(
        "--max-pending-polls",
        type=int,
        default=1024,
        metavar="N",
        help="ReceiveMessage calls that may wait at once per consumer group and topic on one broker; more "
        "answer TOO_MANY_REQUESTS (default 1024; 0: no limit)",
    )
    limits.add_argument(
        "--max-concurrent-streams",
        type=int,
        default=4096,
        metavar="N",
        help="calls one connection may have open at once; a client's further calls wait until one ends "
        "(default 4096)",
    )
    limits.add_argument(
        "--min-ping-interval",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="clients pinging more often get GOAWAY too_many_pings (default 300, as the proxy; 0: any rate)",
    )
    limits.add_argument(
        "--keepalive-time",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="ping a connection silent for this long (default 60; 0: never)",
    )
    limits.add_argument(
        "--keepalive-timeout",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="close a connection whose ping is not acknowledged within this (default 20)",
    )
    limits.add_argument(
        "--idle-timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="close a connection without any call for this long (default 120, like the proxy; 0: never)",
    )
    limits.add_argument(
        "--handshake-timeout",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="close a connection that has not completed its TLS/HTTP/2 handshake within this (default 20)",
    )
    limits.add_argument(
        "--channel-expiry",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="forget a client that sent no call or telemetry for this long: end its streams and long "
        "polls, release its messages (default 120, like the proxy; 0: never)",
    )
    parser.add_argument("--log-level", default="INFO", help="log level (default INFO)")
    add_loop_argument(parser)
    parser.add_argument(
        "--gc-freeze",
        choices=("on", "off"),
        default="on",
        help="move everything alive once the server listens (modules, grpc, protobuf) out of the "
        "collector's reach (gc.freeze), so that a full collection walks only what came later (default on)",
    )
    parser.add_argument(
        "--report-lag",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="every SECONDS, write this process's event-loop lag and GC pauses on stdout as one "
        "`thrust-lag` line (`thrust perf` shows them beside each interval; default 0: off)",
    )
    for kind in _FAULT_KINDS:
        parser.add_argument(f"--fault-{kind}", action="append", default=[], help=argparse.SUPPRESS)
    parser.add_argument("--fault-seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.set_defaults(func=run)


def _read_private(path: Path, flag: str) -> bytes:
    """A secret file's bytes; refused when other users may access it (S10, docs/reliability.md §5, as ssh and
    PostgreSQL refuse such private keys; group access stays allowed, e.g. Debian's ssl-cert group)."""
    mode = path.stat().st_mode
    if mode & stat.S_IRWXO:
        raise ValueError(
            f"{flag} {path} is accessible to other users (mode {stat.S_IMODE(mode):04o}); "
            f"run: chmod o-rwx {path}"
        )
    return path.read_bytes()


def _date_time_window(text: str) -> float | Literal["auto"] | None:
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"--date-time-window {text!r} is neither a number of seconds nor auto") from None
    return value or None


def _config(args: argparse.Namespace) -> ServerConfig:
    if bool(args.access_key) != bool(args.secret_key):
        raise ValueError("--access-key and --secret-key go together")
    if bool(args.tls_cert) != bool(args.tls_key):
        raise ValueError("--tls-cert and --tls-key go together")
    ports: tuple[int, ...] = ()
    if args.ports:
        ports = tuple(int(p) for p in args.ports.split(",") if p.strip())
    window = _date_time_window(args.date_time_window)
    return ServerConfig(
        host=args.host,
        port=args.port,
        ports=ports,
        brokers=args.brokers,
        auto_create_topics=args.auto_create,
        auto_create_groups=args.auto_create,
        default_queues=args.default_queues,
        topics=tuple(parse_topic(t) for t in args.topic),
        groups=tuple(parse_group(g) for g in args.group),
        credentials={args.access_key: args.secret_key} if args.access_key else {},
        tls_cert=args.tls_cert.read_bytes() if args.tls_cert else None,
        tls_key=_read_private(args.tls_key, "--tls-key") if args.tls_key else None,
        tls_client_ca=args.tls_client_ca.read_bytes() if args.tls_client_ca else None,
        insecure_allow_remote=args.insecure_allow_remote,
        advertise_host=args.advertise_host,
        transaction_check_after=args.transaction_check_after,
        client_expiry=args.client_expiry,
        date_time_window=window,
        max_inbound_message_size=args.max_inbound_message_size,
        max_pending_polls=args.max_pending_polls,
        max_concurrent_streams=args.max_concurrent_streams,
        min_ping_interval=args.min_ping_interval,
        keepalive_time=args.keepalive_time,
        keepalive_timeout=args.keepalive_timeout,
        idle_timeout=args.idle_timeout,
        handshake_timeout=args.handshake_timeout,
        channel_expiry=args.channel_expiry,
        lite_ttl=args.lite_ttl,
        lite_subscription_quota=args.lite_subscription_quota,
    )


def _faults(args: argparse.Namespace) -> Faults:
    faults = Faults(seed=args.fault_seed)
    for kind in _FAULT_KINDS:
        for spec in getattr(args, f"fault_{kind.replace('-', '_')}"):
            apply_fault_flag(faults, kind, spec)
    return faults


async def _serve(
    config: ServerConfig, faults: Faults, report_lag: float = 0.0, gc_freeze: bool = False
) -> None:
    server = EmbeddedServer(config, faults=faults)
    await server.start()
    lag_task: asyncio.Task[None] | None = None
    if report_lag > 0:
        from thrust.bench.lag import report_forever

        lag_task = asyncio.create_task(report_forever(report_lag, lambda line: print(line, flush=True)))
    if gc_freeze:
        # A full collection walks every tracked object; after start-up most are the modules of grpc,
        # protobuf and asyncio, which never die. Frozen, they are skipped, and the full collections of
        # a server holding many stored messages pause for the messages only (docs/benchmarks.md, "The
        # main job's latency tails").
        gc.collect()
        gc.freeze()
    for endpoint in server.endpoints:
        print(f"listening on {endpoint}", flush=True)
    logger.info(
        "embedded server up: %d broker(s) %s, auth %s, TLS %s, in memory only",
        len(server.brokers),
        ", ".join(b.name for b in server.brokers),
        "on" if config.credentials else "off",
        "on" if config.tls_cert else "off",
    )
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    try:
        await stopping.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        logger.info("stopping")
        if lag_task is not None:
            lag_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await lag_task
        await server.stop(grace=1.0)


def run(args: argparse.Namespace) -> int:
    """Run `thrust serve` with parsed arguments; the exit code."""
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        config = _config(args)
        faults = _faults(args)
        # Validate (e.g. the non-loopback rule) before binding anything.
        EmbeddedServer(config, faults=faults)
    except (ValueError, OSError) as exc:
        print(f"thrust serve: error: {exc}", file=sys.stderr)
        return 2
    try:
        run_on_loop(_serve(config, faults, args.report_lag, args.gc_freeze == "on"), args.loop)
    except OSError as exc:
        print(f"thrust serve: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    return 0
