"""Configuration of an embedded server: topics, groups, ports, security. Shared by `thrust serve`
and `thrust.testing` so both accept the same `NAME[:QUEUES][:TYPE]` / `NAME[:fifo][:max-attempts=N]`
specs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from thrust.server.core.model import GroupRetryPolicy, MessageType

__all__ = [
    "DEFAULT_DATE_TIME_WINDOW",
    "MAX_INBOUND_MESSAGE_SIZE",
    "GroupSpec",
    "ServerConfig",
    "TopicSpec",
    "parse_group",
    "parse_topic",
]

MAX_INBOUND_MESSAGE_SIZE: Final = 130 * 1024 * 1024
"""The proxy's `grpcMaxInboundMessageSize` (130 MiB, docs/protocol.md §2.6): a 4 MiB body plus overhead
fits."""

DEFAULT_DATE_TIME_WINDOW: Final = 15 * 60.0
"""S5 (docs/reliability.md §5): +-15 min on `x-mq-date-time` when auth is on and TLS is off."""

_GROUP_SYNTAX: Final = "NAME[:fifo][:max-attempts=N][:lite-exclusive][:lite-quota=N][:lite=PARENT]"

_MIXED = (MessageType.NORMAL, MessageType.FIFO, MessageType.DELAY, MessageType.TRANSACTION)


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic to create at start: `queues` queues accepting `types` on each broker of `brokers`
    (broker indexes; empty: every broker)."""

    name: str
    queues: int = 4
    types: tuple[MessageType, ...] = (MessageType.NORMAL,)
    brokers: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupSpec:
    """A consumer group to create at start (`fifo` = upstream's consumeMessageOrderly; `retry`: its max
    delivery attempts and backoff, None for upstream's defaults, 17 attempts; `lite_exclusive` =
    upstream's liteSubExclusive: one client of the group per lite topic, docs/lite-topics.md;
    `lite_quota`: upstream's `lite.sub.client.quota`, lite topics per client of the group, None for the
    server's `lite_subscription_quota`; `lite_bind_topic`: upstream's `lite.bind.topic`, the LITE topic
    the group's lite consumers must consume, None for any)."""

    name: str
    fifo: bool = False
    retry: GroupRetryPolicy | None = None
    lite_exclusive: bool = False
    lite_quota: int | None = None
    lite_bind_topic: str | None = None


def parse_topic(spec: str | TopicSpec) -> TopicSpec:
    """`NAME[:QUEUES][:TYPE][@B1+B2...]`; TYPE is NORMAL, FIFO, DELAY, TRANSACTION, LITE, PRIORITY, MIXED
    (the first four, like upstream's MIXED attribute), or several joined by `+` (`NORMAL+DELAY`);
    `@B1+B2` places the topic on those broker indexes only (default: every broker). `NAME:TYPE` is
    `thrust cluster --topic`'s form: 4 queues."""
    if isinstance(spec, TopicSpec):
        return spec
    body, at, placement = spec.partition("@")
    brokers: tuple[int, ...] = ()
    if at:
        try:
            brokers = tuple(dict.fromkeys(int(b) for b in placement.split("+")))
        except ValueError:
            raise ValueError(f"topic spec {spec!r}: @BROKERS must be broker indexes joined by +") from None
        if any(b < 0 for b in brokers):
            raise ValueError(f"topic spec {spec!r}: broker indexes start at 0")
    parts = body.split(":")
    if len(parts) == 2 and parts[1] and not _is_int(parts[1]):
        parts = [parts[0], "", parts[1]]  # NAME:TYPE
    if not parts[0] or len(parts) > 3:
        raise ValueError(f"topic spec {spec!r} is not NAME[:QUEUES][:TYPE]")
    queues = 4
    if len(parts) >= 2 and parts[1]:
        try:
            queues = int(parts[1])
        except ValueError:
            raise ValueError(f"topic spec {spec!r}: QUEUES must be an integer") from None
        if queues < 1:
            raise ValueError(f"topic spec {spec!r}: QUEUES must be at least 1")
    types: tuple[MessageType, ...] = (MessageType.NORMAL,)
    if len(parts) == 3 and parts[2]:
        kinds: list[MessageType] = []
        for word in parts[2].upper().split("+"):
            if word == "MIXED":
                kinds.extend(_MIXED)
            else:
                try:
                    kinds.append(MessageType[word])
                except KeyError:
                    raise ValueError(f"topic spec {spec!r}: unknown message type {word!r}") from None
        types = tuple(dict.fromkeys(kinds))
    return TopicSpec(parts[0], queues, types, brokers)


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def parse_group(spec: str | GroupSpec) -> GroupSpec:
    """`NAME[:fifo][:max-attempts=N][:lite-exclusive][:lite-quota=N][:lite=PARENT]`: options after the
    name, each at most once, in any order. `lite-quota=N` (N >= 0): lite topics one client of the group may
    subscribe to; `lite=PARENT`: the group's lite consumers must consume LITE topic PARENT.

    `max-attempts=N` (N >= 1) is the group's deliveries before a message goes to `%DLQ%NAME` (upstream's
    subscription group `retryMaxTimes` + 1); without it the group keeps upstream's default of 17, whose
    backoff (1 s, 5 s, 10 s, 30 s, ... 2 h) puts the dead-letter queue hours away. The retry backoff
    itself stays the default one.

    Raises:
        ValueError: an empty name, an unknown or repeated option, or an N that is not an integer >= 1;
            the message names the spec and what was expected.
    """
    if isinstance(spec, GroupSpec):
        return spec
    name, *options = spec.split(":")
    if not name:
        raise ValueError(f"group spec {spec!r}: the group name is empty (expected {_GROUP_SYNTAX})")
    fifo = False
    lite_exclusive = False
    max_attempts: int | None = None
    lite_quota: int | None = None
    lite_bind_topic: str | None = None
    seen: set[str] = set()
    for option in options:
        key, eq, value = option.partition("=")
        key = key.strip().lower()
        if key in seen:
            raise ValueError(f"group spec {spec!r}: option {key!r} given twice")
        seen.add(key)
        if key == "fifo" and not eq:
            fifo = True
        elif key == "lite-exclusive" and not eq:
            lite_exclusive = True
        elif key == "lite" and eq and value.strip():
            lite_bind_topic = value.strip()
        elif key == "lite-quota" and eq:
            if not value.strip().isdigit():
                raise ValueError(f"group spec {spec!r}: lite-quota must be an integer >= 0, got {value!r}")
            lite_quota = int(value)
        elif key == "max-attempts" and eq:
            try:
                max_attempts = int(value)
            except ValueError:
                max_attempts = 0  # reported below with the same message as 0 or a negative N
            if max_attempts < 1:
                raise ValueError(f"group spec {spec!r}: max-attempts must be an integer >= 1, got {value!r}")
        else:
            raise ValueError(
                f"group spec {spec!r}: unknown option {option!r} "
                "(expected fifo, max-attempts=N, lite-exclusive, lite-quota=N or lite=PARENT)"
            )
    retry = None if max_attempts is None else GroupRetryPolicy(max_attempts=max_attempts)
    return GroupSpec(
        name,
        fifo=fifo,
        retry=retry,
        lite_exclusive=lite_exclusive,
        lite_quota=lite_quota,
        lite_bind_topic=lite_bind_topic,
    )


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Everything `EmbeddedServer` needs.

    Attributes:
        host: the address to bind. Non-loopback addresses need `credentials` or `insecure_allow_remote`.
        port: the first broker's port (0: pick free ports); broker i listens on `port + i`.
        ports: explicit ports, one per broker (overrides `port` and `brokers`).
        brokers: number of brokers, each on its own port with its own queues of every topic.
        auto_create_topics: unknown topics are created on first use (else TOPIC_NOT_FOUND).
        auto_create_groups: unknown consumer groups are created on their first receive, as a broker with
            `autoCreateSubscriptionGroup=true` does; else that receive answers CONSUMER_GROUP_NOT_FOUND,
            as a proxy in front of a broker without it does (Settings and QueryAssignment of an unknown
            group are answered with the defaults either way, as the proxy's are).
        default_queues: queue count of auto-created topics.
        topics / groups: created at start.
        credentials: access key → secret key; enables MQv2-HMAC-SHA1 authentication.
        tls_cert / tls_key: PEM certificate chain and private key; enables TLS on every port.
        tls_client_ca: PEM roots; with them every client must present a certificate chaining to one of
            them (mutual TLS, as a client's `TlsConfig(cert_file=..., key_file=...)`), or the handshake
            fails. Needs `tls_cert`. None: clients are not asked for a certificate.
        insecure_allow_remote: allow a non-loopback bind without authentication.
        advertise_host: host put in routes when the request carries no endpoints.
        transaction_check_after / transaction_check_interval: first / repeated orphaned-transaction check.
        client_expiry: seconds after a client's last Telemetry stream closed before its auto-renewed
            in-flight messages are released (the proxy's channel expiry is 120 s).
        broker_prefix: brokers are named `<prefix>-0`, `<prefix>-1`, ...

    Security and resource limits (S5, S7, S8, S12 of docs/reliability.md §5); every duration in
    seconds:
        date_time_window: how far `x-mq-date-time` may be from the server's clock when authentication is
            on (S5: the signature covers only that header, so a captured one replays for as long as the
            server accepts its date). "auto": `DEFAULT_DATE_TIME_WINDOW` without TLS, no check with TLS;
            0 or None: no check.
        max_inbound_message_size: gRPC max inbound message in bytes (S8; the proxy's 130 MiB).
        max_pending_polls: ReceiveMessage calls that may wait at once per consumer group and topic on
            one broker; the next one answers TOO_MANY_REQUESTS (S8; upstream's pop hold queue per topic and
            group, `popPollingSize` 1024, answers POLLING_FULL). Per topic, so that a consumer's idle
            polls on many topics never refuse the receives of another topic. 0: no limit.
        max_concurrent_streams: calls (HTTP/2 streams) one connection may have open at once, advertised as
            SETTINGS_MAX_CONCURRENT_STREAMS (S8). A client over it is not failed: its extra calls wait on
            the client side until one of its open calls ends. Default 4096 (see the field).
        min_ping_interval: the shortest interval between client pings the server tolerates; a client
            pinging faster gets GOAWAY `too_many_pings` after 2 strikes (S8). 300 s = the proxy's
            (grpc-java's default `permitKeepAliveTime`; thrust and Java ping every 300 s). 0: any rate.
        keepalive_time / keepalive_timeout: the server pings a connection it has not heard from for
            `keepalive_time` and closes it when the ack takes longer than `keepalive_timeout` (S12: a
            half-open peer's fd is freed). 0: no server pings (gRPC's default, 2 h).
        idle_timeout: a connection without any call for this long is closed with GOAWAY (S8; upstream
            `maxConnectionIdle` 120 s). A client's open Telemetry stream is a call. 0: never.
        handshake_timeout: a connection must complete its TLS and HTTP/2 handshake (send its SETTINGS)
            within this, else it is closed (S12, slow-loris; gRPC's default is 120 s).
        lite_ttl: seconds without a new message after which a lite topic (of a LITE topic) is deleted with
            its messages and consumption state (0: never). Upstream sets it per parent topic, in minutes.
        lite_subscription_quota: lite topics one consumer may subscribe to (Settings
            `lite_subscription_quota`; 5.5.0's proxy sends 2000).
        max_lite_topic_size: longest lite topic name in UTF-8 bytes (Settings `max_lite_topic_size`; the
            proxy's `maxLiteTopicSize`, 64).
        max_lite_topics: lite topics one parent topic may have per broker (LITE_TOPIC_QUOTA_EXCEEDED).
        channel_expiry: a client heard from neither by a call nor by a Telemetry command for this long is
            expired, even when its streams still look open: its Telemetry streams are ended, its parked
            long polls answered, its settings forgotten and its auto-renewed messages released (S12;
            upstream `channelExpiredTimeout` 120 s; clients heartbeat every 10-30 s). 0: never.
    """

    host: str = "127.0.0.1"
    port: int = 0
    ports: tuple[int, ...] = ()
    brokers: int = 1
    auto_create_topics: bool = True
    auto_create_groups: bool = True
    default_queues: int = 4
    topics: tuple[TopicSpec, ...] = ()
    groups: tuple[GroupSpec, ...] = ()
    credentials: Mapping[str, str] = field(default_factory=dict)
    tls_cert: bytes | None = None
    tls_key: bytes | None = None
    tls_client_ca: bytes | None = None
    insecure_allow_remote: bool = False
    advertise_host: str | None = None
    transaction_check_after: float = 6.0
    transaction_check_interval: float = 6.0
    client_expiry: float = 120.0
    broker_prefix: str = "broker"
    date_time_window: float | Literal["auto"] | None = "auto"
    max_inbound_message_size: int = MAX_INBOUND_MESSAGE_SIZE
    max_pending_polls: int = 1024
    # HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS makes a client's calls past the bound wait on the client side
    # (queued by its transport) rather than fail, so the bound only has to be generous: a push consumer
    # holds one long-poll stream per assigned queue, plus Telemetry and its acks, across many topics, all
    # on one connection per endpoint, and an ack queued behind long polls would wait for one to end. The
    # Java proxy (grpc-netty) leaves it unlimited by default; a bound protects the single-node server
    # from one connection opening streams without end. Right at the bound a call can still fail: a stream
    # the client already counts as ended (it has the answer) may not be released by the server yet, so
    # the client's next stream is refused (RST_STREAM REFUSED_STREAM), which a client with gRPC retries
    # off, as thrust's and the proxy's clients are, gets as UNAVAILABLE. So the default sits well above
    # what one default client opens: 4 x a producer's 1024-send window (at 1024, a full window plus the
    # Telemetry stream had ~30 of 5000 pipelined sends refused).
    max_concurrent_streams: int = 4096
    min_ping_interval: float = 300.0
    keepalive_time: float = 60.0
    keepalive_timeout: float = 20.0
    idle_timeout: float = 120.0
    handshake_timeout: float = 20.0
    channel_expiry: float = 120.0
    lite_ttl: float = 600.0
    lite_subscription_quota: int = 2000
    max_lite_topic_size: int = 64
    max_lite_topics: int = 1_000_000

    def effective_date_time_window(self) -> float | None:
        """The `x-mq-date-time` window in force (None: not checked)."""
        if not self.credentials:
            return None
        window = self.date_time_window
        if window == "auto":
            return None if self.tls_cert else DEFAULT_DATE_TIME_WINDOW
        return float(window) if window else None

    def check_limits(self) -> None:
        """Raise ValueError for a limit that makes no sense (negative, or a zero that cannot mean "off")."""
        window = self.date_time_window
        if window != "auto" and window is not None and not float(window) >= 0:
            raise ValueError("date_time_window must be >= 0, None or 'auto'")
        if self.max_inbound_message_size < 1024:
            raise ValueError("max_inbound_message_size must be at least 1024 bytes")
        for name in (
            "max_pending_polls",
            "min_ping_interval",
            "keepalive_time",
            "idle_timeout",
            "channel_expiry",
        ):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0 (0 turns it off)")
        if not self.lite_ttl >= 0:
            raise ValueError("lite_ttl must be >= 0 (0 turns it off)")
        for name in (
            "max_concurrent_streams",
            "keepalive_timeout",
            "handshake_timeout",
            "lite_subscription_quota",
            "max_lite_topic_size",
            "max_lite_topics",
        ):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")

    @classmethod
    def build(
        cls,
        *,
        topics: Iterable[str | TopicSpec] = (),
        groups: Iterable[str | GroupSpec] = (),
        **kwargs: object,
    ) -> ServerConfig:
        """A config with topic and group specs given as strings or specs."""
        return cls(
            topics=tuple(parse_topic(t) for t in topics),
            groups=tuple(parse_group(g) for g in groups),
            **kwargs,  # type: ignore[arg-type]
        )
