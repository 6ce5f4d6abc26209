"""`thrust perf produce|consume|e2e`: load generator and latency meter, in the spirit of pulsar-perf
(`thrust perf scale`, a consumer of many topics: thrust.cli.perf_scale).

It connects as `thrust send` and `thrust consume` do, with `ClientConfig.from_env`: `--endpoints` (else
`$ROCKETMQ_ENDPOINTS`) names an existing cluster, whose topics and group must exist, and the connection
flags win over the `ROCKETMQ_*` variables. Without either, or with `--server`, it starts the embedded
server (`thrust serve`) in a subprocess with the topics and groups the run needs, or with `--server real` a
real Apache RocketMQ in local mode (the harness of `thrust cluster`), and stops it at the end.
Every `--interval` seconds it prints one line per side in the pulsar-perf shape; at exit (Ctrl-C
included) the aggregated HdrHistogram summary; `--json` and `--plot` save the results.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from thrust.cli.loops import LOOPS, add_loop_argument
from thrust.cli.loops import run as run_on_loop

if TYPE_CHECKING:
    from thrust.config import Transport

__all__ = ["options_from_args", "register", "run"]

_DESCRIPTION = {
    "produce": "Send messages as fast as allowed (or at --rate) and measure send -> receipt latency.",
    "consume": "Consume messages and measure born time -> listener latency.",
    "e2e": "Produce and consume at once in one process: both measurements, and every message accounted for.",
}


def _positive_float(text: str) -> float:
    # argparse words a ValueError as "invalid _positive_float value": say it in words
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _on_off(text: str) -> bool:
    if text.lower() in ("on", "true", "yes", "1"):
        return True
    if text.lower() in ("off", "false", "no", "0"):
        return False
    raise argparse.ArgumentTypeError("expected on or off")


def _add_common(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("connection (flags win over ROCKETMQ_* environment variables)")
    g.add_argument(
        "--endpoints",
        default=None,
        help="an existing cluster's proxy (its topics and group must exist); default $ROCKETMQ_ENDPOINTS,"
        " and without it perf starts a server (--server)",
    )
    g.add_argument(
        "--server",
        choices=("embedded", "real"),
        default=None,
        help="start a server for the run (and stop it at the end), even with $ROCKETMQ_ENDPOINTS set: the"
        " embedded server (the default without endpoints) or a real RocketMQ in local mode (Java 17 and"
        " Maven; its topics and group are created)",
    )
    g.add_argument("--namespace", default=None, help="namespace (default $ROCKETMQ_NAMESPACE, else none)")
    g.add_argument(
        "--access-key",
        default=None,
        help="credentials (MQv2-HMAC-SHA1): access key, with the secret in $ROCKETMQ_SECRET_KEY or"
        " --secret-key; for a server perf starts, the credentials it requires",
    )
    g.add_argument(
        "--secret-key", default=None, help="prefer $ROCKETMQ_SECRET_KEY: argv is visible to others"
    )
    g.add_argument("--tls", action="store_true", help="connect with TLS (an existing cluster only)")
    g.add_argument("--tls-ca", default=None, help="PEM CA bundle for --tls")
    g.add_argument("--tls-server-name", default=None, help="server name to verify for --tls")
    g.add_argument(
        "--transport",
        choices=("auto", "native", "grpcio"),
        default="auto",
        help="the clients' transport (ClientConfig.transport): native (thrust-native, the Rust transport),"
        " grpcio, or auto (the default: $THRUST_TRANSPORT when set, else native when it is installed);"
        " the one each side used is printed and written in --json",
    )
    g = p.add_argument_group("topics")
    g.add_argument("-t", "--topic", default="perf", help="topic name (default perf)")
    g.add_argument("--num-topics", type=int, default=1, help="topics; with N > 1 they are TOPIC-0..N-1")
    g.add_argument(
        "-q", "--queues", type=int, default=None, help="queues per topic (embedded server only; default 8)"
    )
    g.add_argument("--fifo", type=int, default=0, metavar="GROUPS", help="FIFO messages over GROUPS groups")
    g.add_argument("--delay", type=_positive_float, default=0.0, help="delay messages by SECONDS")
    g.add_argument("--tag", default=None, help="tag on every message (and the consumer's filter)")
    g = p.add_argument_group("run")
    g.add_argument("-m", "--count", type=int, default=0, help="messages in total (0 = unlimited)")
    g.add_argument("--duration", type=_positive_float, default=0.0, help="seconds to run (0 = unlimited)")
    g.add_argument("--warmup", type=_positive_float, default=1.0, help="seconds without latency samples")
    g.add_argument(
        "-i",
        "--interval",
        type=float,
        default=None,
        help="seconds between stats lines and plot points (default 10; with --duration D, D/10 within 1..10)",
    )
    add_loop_argument(g)
    g.add_argument(
        "--server-loop",
        choices=LOOPS,
        default="asyncio",
        help="the event loop of the embedded server perf starts (thrust serve --loop; default asyncio)",
    )
    g.add_argument(
        "--gc-freeze",
        choices=("on", "off"),
        default="on",
        help="gc.freeze() once the clients have started, in perf's process and in the server it starts"
        " (thrust serve --gc-freeze): full collections then skip the start-up objects (default on)",
    )
    g.add_argument("--json", default=None, metavar="PATH", help="write the results as JSON")
    g.add_argument("--plot", default=None, metavar="PATH", help="write a PNG of msg/s and latency")
    g.add_argument(
        "--live",
        choices=("auto", "on", "off"),
        default="auto",
        help="status line rewritten every second (auto: when stdout is a terminal)",
    )


def _add_producer(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("producer")
    g.add_argument("-r", "--rate", type=_positive_float, default=0.0, help="msg/s in total (0 = max)")
    g.add_argument("-n", "--producers", type=int, default=1, help="producer clients (default 1)")
    g.add_argument("-o", "--max-in-flight", type=int, default=128, help="sends in flight per producer")
    g.add_argument(
        "-s", "--size", "--message-size", type=int, default=1024, help="payload bytes (default 1024)"
    )
    g.add_argument(
        "--batch-max-messages",
        type=int,
        default=1,
        metavar="N",
        help="producer batching: up to N messages of one topic per SendMessage (default 1: no batching);"
        " --max-in-flight then counts batches",
    )
    g.add_argument(
        "--batch-max-delay-ms",
        type=_positive_float,
        default=1.0,
        metavar="MS",
        help="producer batching: a batch goes out MS after its first message if not full (default 1)",
    )
    g.add_argument(
        "--linger-batch",
        type=int,
        default=1,
        metavar="N",
        help="the producer's own linger batch (Producer(batch_max_messages=N)): plain sends, up to N"
        " NORMAL messages of one topic per SendMessage (default 1: off); --max-in-flight then counts"
        " requests, and at most 2 x max-in-flight x N messages are pending",
    )
    g.add_argument(
        "--linger-batch-ms",
        type=_positive_float,
        default=5.0,
        metavar="MS",
        help="the linger batch's batch_linger: a batch leaves MS after its first message if not full"
        " (default 5)",
    )


def _add_consumer(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("consumer")
    g.add_argument("-g", "--group", default="perf-group", help="consumer group (default perf-group)")
    g.add_argument("--consumer", choices=("push", "simple"), default="push", help="consumer kind")
    g.add_argument("--threads", type=int, default=20, help="push: consumption threads (default 20)")
    g.add_argument(
        "--listener-delay", type=_positive_float, default=0.0, help="push: ms the listener blocks per message"
    )
    g.add_argument("--ack-batch", type=_on_off, default=True, help="batched acks on|off (default on)")
    g.add_argument("--receivers", type=int, default=4, help="simple: concurrent receive loops (default 4)")
    g.add_argument(
        "--drain-timeout", type=float, default=30.0, help="e2e: seconds to wait for the last messages"
    )


def register(subparsers: Any) -> None:
    """Add `thrust perf produce|consume|e2e` to the `thrust` parser."""
    perf = subparsers.add_parser("perf", help="load generator and latency meter (pulsar-perf style)")
    modes = perf.add_subparsers(dest="perf_mode", metavar="<mode>", required=True)
    for mode in ("produce", "consume", "e2e"):
        p = modes.add_parser(mode, help=_DESCRIPTION[mode], description=_DESCRIPTION[mode])
        _add_common(p)
        if mode in ("produce", "e2e"):
            _add_producer(p)
        if mode in ("consume", "e2e"):
            _add_consumer(p)
        p.set_defaults(func=run)
    from thrust.cli.perf_scale import add_scale

    add_scale(modes)


class UsageError(Exception):
    pass


def default_interval(duration: float) -> float:
    """pulsar-perf's 10 s between stats lines, but about 10 lines (and plot points) for a run of a known
    `--duration` under 100 s, at most one a second: a 20 s run plotted one point per 10 s is no curve."""
    if duration <= 0:
        return 10.0
    return min(10.0, max(1.0, duration / 10.0))


_CREDENTIAL_VARIABLES = ("ROCKETMQ_ACCESS_KEY", "ROCKETMQ_SECRET_KEY", "ROCKETMQ_SESSION_TOKEN")


def target(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> str:
    """What the run measures: "endpoints", an existing cluster (`--endpoints`, else `$ROCKETMQ_ENDPOINTS`
    unless `--server` asks for a server of perf's own), or a server perf starts, "embedded" or "real"."""
    env = os.environ if environ is None else environ
    if args.endpoints:
        return "endpoints"
    if args.server is not None:
        return str(args.server)
    return "endpoints" if env.get("ROCKETMQ_ENDPOINTS") else "embedded"


def _secret(args: argparse.Namespace, env: Mapping[str, str]) -> str | None:
    """The secret key of `--access-key`: `--secret-key`, else `$ROCKETMQ_SECRET_KEY` (as send/consume)."""
    if args.secret_key is not None or args.access_key is None:
        return args.secret_key  # type: ignore[no-any-return]
    return env.get("ROCKETMQ_SECRET_KEY") or None


def _cluster_config(args: argparse.Namespace, env: Mapping[str, str]) -> Any:
    """The `ClientConfig` of an existing cluster: `ClientConfig.from_env` with the flags as overrides, as
    `thrust send` and `thrust consume` build theirs."""
    from thrust.config import ClientConfig, Credentials, TlsConfig

    overrides: dict[str, Any] = {}
    if args.endpoints:
        overrides["endpoints"] = args.endpoints
    if args.namespace is not None:
        overrides["namespace"] = args.namespace
    if args.access_key is not None:
        overrides["credentials"] = Credentials(
            access_key=args.access_key, secret_key=_secret(args, env) or ""
        )
        # the flag's credentials replace the environment's whole (its secret was taken above)
        env = {k: v for k, v in env.items() if k not in _CREDENTIAL_VARIABLES}
    if args.tls or args.tls_ca or args.tls_server_name:
        overrides["tls"] = TlsConfig(ca_file=args.tls_ca, server_name=args.tls_server_name)
    overrides["transport"] = args.transport
    try:
        return ClientConfig.from_env(env, **overrides)
    except ValueError as exc:  # a bad ROCKETMQ_* variable or flag
        raise UsageError(str(exc)) from exc


def _transport_problem(transport: Transport) -> str | None:
    """Why the clients could not be built on `--transport` here (thrust-native not installed for
    native, a bad `$THRUST_TRANSPORT` for auto), in the words of `resolve_transport`; None if they can."""
    from thrust._io.native import resolve_transport
    from thrust.config import ClientConfig
    from thrust.errors import ThrustError

    try:
        resolve_transport(ClientConfig("127.0.0.1:8081", transport=transport))
    except ThrustError as exc:
        return f"--transport {transport}: {exc}"
    return None


def options_from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Any:
    """`PerfOptions` from the parsed arguments and the environment (default `os.environ`); `UsageError`
    for combinations not supported."""
    from thrust.bench.perf import PerfOptions

    env = os.environ if environ is None else environ
    mode = args.perf_mode
    o = PerfOptions(mode=mode)
    o.server = target(args, env)
    secret = _secret(args, env)
    o.endpoints = args.endpoints or ""
    o.namespace = args.namespace or ""
    o.topic = args.topic
    o.num_topics = args.num_topics
    o.access_key = args.access_key
    o.secret_key = secret
    o.tls = args.tls
    o.tls_ca = args.tls_ca
    o.tls_server_name = args.tls_server_name
    o.transport = args.transport
    o.interval = default_interval(args.duration) if args.interval is None else args.interval
    o.duration = args.duration
    o.count = args.count
    o.warmup = args.warmup
    o.fifo_groups = args.fifo
    o.delay = args.delay
    o.tag = args.tag
    if args.live == "auto":
        o.live = sys.stdout.isatty()
    else:
        o.live = args.live == "on"
    o.loop = args.loop
    o.gc_freeze = args.gc_freeze == "on"
    if mode in ("produce", "e2e"):
        o.rate = args.rate
        o.producers = args.producers
        o.max_in_flight = args.max_in_flight
        o.size = args.size
        o.batch_max_messages = args.batch_max_messages
        o.batch_max_delay = args.batch_max_delay_ms / 1000.0
        o.linger_batch = args.linger_batch
        o.linger = args.linger_batch_ms / 1000.0
    if mode in ("consume", "e2e"):
        o.group = args.group
        o.consumer = args.consumer
        o.threads = args.threads
        o.listener_delay = args.listener_delay / 1000.0
        o.ack_batch = args.ack_batch
        o.receivers = args.receivers
        o.drain_timeout = args.drain_timeout
        # bounded memory: message ids are kept (to count duplicates) only for a bounded --count
        o.track_ids = args.count > 0
    problems = []
    if (transport_problem := _transport_problem(args.transport)) is not None:
        problems.append(transport_problem)
    if args.secret_key is not None and args.access_key is None:
        problems.append("--secret-key needs --access-key")
    if args.access_key is not None and secret is None:
        problems.append("--access-key needs a secret: $ROCKETMQ_SECRET_KEY or --secret-key")
    existing = o.server == "endpoints"
    if (args.tls or args.tls_ca or args.tls_server_name) and not existing:
        problems.append(
            "--tls needs an existing cluster, --endpoints or $ROCKETMQ_ENDPOINTS (the server perf starts"
            " serves plaintext)"
        )
    if args.endpoints and args.server is not None:
        problems.append(
            f"--server {args.server} starts a server; --endpoints names an existing one (choose one)"
        )
    if o.server == "real" and args.access_key is not None:
        problems.append(
            "--access-key needs the embedded server or an existing cluster (the harness runs without ACL)"
        )
    if args.queues is not None and existing:
        problems.append(
            "--queues configures the server perf starts; on an existing cluster create the topic there"
        )
    if existing and not problems:
        config = _cluster_config(args, env)
        o.config = config
        o.endpoints = config.endpoints
        o.namespace = config.namespace
        o.access_key = config.credentials.access_key if config.credentials is not None else None
        o.secret_key = None  # in o.config only
        o.tls = config.tls is not None
    if args.fifo and args.delay:
        problems.append("--fifo and --delay are exclusive (a message has one type)")
    if o.interval <= 0:
        problems.append("--interval must be > 0")
    if mode in ("consume", "e2e"):
        if args.consumer == "simple" and args.listener_delay:
            problems.append("--listener-delay applies to --consumer push")
        if args.consumer == "simple" and args.threads != 20:
            problems.append("--threads applies to --consumer push")
        if args.consumer == "simple" and args.fifo:
            problems.append("FIFO consumption with --consumer simple is not supported by perf yet")
    if mode in ("produce", "e2e") and (args.producers < 1 or args.max_in_flight < 1 or args.size < 1):
        problems.append("--producers, --max-in-flight and --size must be >= 1")
    if mode in ("produce", "e2e") and args.batch_max_messages < 1:
        problems.append("--batch-max-messages must be >= 1")
    if mode in ("produce", "e2e") and args.linger_batch < 1:
        problems.append("--linger-batch must be >= 1")
    if mode in ("produce", "e2e") and args.linger_batch > 1 and args.batch_max_messages > 1:
        problems.append(
            "--linger-batch (the producer batches) and --batch-max-messages (perf batches) are exclusive"
        )
    if mode == "consume" and not args.endpoints and not args.count and not args.duration:
        pass  # an embedded server with nobody producing: runs until Ctrl-C, which is allowed
    if problems:
        raise UsageError("; ".join(problems))
    return o


def server_args(args: argparse.Namespace, topics: list[str]) -> list[str]:
    """`thrust serve` arguments for the embedded server of this run."""
    queues = args.queues if args.queues is not None else 8
    kind = "FIFO" if args.fifo else ("DELAY" if args.delay else "NORMAL")
    # --report-lag: the server writes its loop lag and GC pauses on stdout every half second, which
    # BenchServer gathers for the lag column of each interval (thrust.bench.lag).
    out = ["--log-level", "WARNING", "--report-lag", "0.5", "--loop", getattr(args, "server_loop", "asyncio")]
    out += ["--gc-freeze", getattr(args, "gc_freeze", "on")]
    for t in topics:
        out += ["--topic", f"{t}:{queues}:{kind}"]
    group = getattr(args, "group", "perf-group")
    out += ["--group", f"{group}:fifo" if args.fifo else group]
    if args.access_key is not None:
        # The secret key goes to the child in $THRUST_SECRET_KEY (`server_env`), not on its command line,
        # where `ps` and any log of the command would show it.
        out += ["--access-key", args.access_key]
    return out


def server_env(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Extra environment of the embedded server's process: the secret key, if any (`--secret-key` or
    `$ROCKETMQ_SECRET_KEY`)."""
    secret = _secret(args, os.environ if environ is None else environ)
    return {"THRUST_SECRET_KEY": secret} if secret is not None and args.access_key is not None else {}


def run(args: argparse.Namespace) -> int:
    from thrust.bench.perf import run_perf, topic_names
    from thrust.bench.stats import plot, shown_intervals

    if args.loop != "asyncio" or args.server_loop != "asyncio":
        # the uvloop extra missing: say so now (thrust.cli.main names the extra), before any server starts
        from thrust.cli.loops import loop_factory

        loop_factory("uvloop")
    if args.plot:
        # `plot` imports matplotlib only when it draws, after the whole run; without the [plot] extra, say
        # so now (thrust.cli.main names the extra) rather than after the run.
        import matplotlib  # noqa: F401

    try:
        options = options_from_args(args)
    except UsageError as exc:
        print(f"thrust perf: error: {exc}", file=sys.stderr)
        return 2
    if options.server == "endpoints":
        source = "--endpoints" if args.endpoints else "$ROCKETMQ_ENDPOINTS"
        hint = "" if args.endpoints else " (--server embedded starts a server of perf's own instead)"
        print(f"existing cluster at {options.endpoints} ({source}){hint}", file=sys.stderr)
    elif os.environ.get("ROCKETMQ_ENDPOINTS"):
        print(f"--server {options.server}: $ROCKETMQ_ENDPOINTS is not used", file=sys.stderr)
    with contextlib.ExitStack() as servers:
        if options.server == "real":
            from thrust.bench.targets import real_cluster

            kind = "FIFO" if args.fifo else ("DELAY" if args.delay else "NORMAL")
            group = getattr(args, "group", "perf-group")
            print("starting a real RocketMQ (local mode) ...", file=sys.stderr, flush=True)
            cluster = servers.enter_context(
                real_cluster(topic_names(options), kind, args.queues or 8, group, bool(args.fifo))
            )
            options.endpoints = cluster.endpoint
            print(f"real RocketMQ (local mode) on {options.endpoints}", file=sys.stderr)
        elif options.server == "embedded":
            from thrust.bench.server import BenchServer

            server = BenchServer(server_args(args, topic_names(options)), env=server_env(args))
            servers.callback(server.close)
            options.endpoints = server.endpoints[0]
            options.server_lag = server.take_lag
            print(f"embedded server (subprocess) on {options.endpoints}", file=sys.stderr)
        try:
            result = run_on_loop(run_perf(options), args.loop)
        except KeyboardInterrupt:  # a second Ctrl-C
            print("interrupted", file=sys.stderr)
            return 130
    if args.json:
        # What the run measured, whatever the flags said: the server perf started, or the existing cluster
        # (from --endpoints or $ROCKETMQ_ENDPOINTS), and the endpoints it connected to.
        measured = {"server": options.server, "endpoints": options.endpoints}
        data = {"mode": options.mode, **measured, "options": _jsonable(vars(args)) | measured}
        data |= result.to_json()
        with open(args.json, "w") as fh:
            json.dump(data, fh, indent=2)
    if args.plot:
        summaries = [s for s in (result.produce, result.consume) if s is not None]
        plot(summaries, args.plot)
        points = min((len(shown_intervals(s.intervals)) for s in summaries), default=0)
        if points < 3:
            print(
                f"thrust perf: the plot has {points} point(s) per curve, one per interval of"
                f" {options.interval:g} s: a shorter --interval draws more",
                file=sys.stderr,
            )
    if options.mode == "e2e" and not result.interrupted:
        missing = result.sent_ok - result.received_unique
        if missing > 0:
            print(f"thrust perf: {missing} sent messages were not received", file=sys.stderr)
            return 1
    return 130 if result.interrupted else 0


# Options never written to an output file or a log line: what the run used is kept, the secret is not.
_SECRET_OPTIONS = frozenset({"secret_key"})
REDACTED = "<redacted>"


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (REDACTED if k in _SECRET_OPTIONS and v is not None else v)
        for k, v in values.items()
        if isinstance(v, (str, int, float, bool, type(None)))
    }
