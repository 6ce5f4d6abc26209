"""Client configuration: where the proxy is, who we are, how to secure the wire.

`ClientConfig` is shared by every client type. It is immutable, validates itself on construction and
never prints secrets (the `repr` of `Credentials` masks the secret key and the session token).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, TypedDict, Unpack, cast, get_args

from thrust._core.endpoints import Endpoint, parse_endpoint

if TYPE_CHECKING:
    from thrust._instrument import Instrumentation

__all__ = ["ClientConfig", "ClientConfigFields", "Credentials", "TlsConfig"]

_ENV_PREFIX = "ROCKETMQ_"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


Transport = Literal["auto", "native", "grpcio"]


class ClientConfigFields(TypedDict, total=False):
    """`ClientConfig`'s keyword fields, for `ClientConfig.replace(...)`, `ClientConfig.from_env(...)` and
    the three clients' `**connection` (so that a type checker checks their names and types there too).

    A client given them builds its config from them; given with `config=`, they replace that config's
    fields (`endpoints=` excepted: give one or the other). A keyword given to a client as None is not
    given."""

    endpoints: str | Iterable[str]
    namespace: str
    credentials: Credentials | None
    tls: TlsConfig | bool | None
    request_timeout: float
    keepalive_interval: float
    keepalive_timeout: float
    instrumentation: Instrumentation | None
    transport: Transport


@dataclass(frozen=True, slots=True, kw_only=True)
class Credentials:
    """AK/SK credentials for the `authorization` header (docs/protocol.md §2.5), plus an optional STS token.

    The `repr` never shows `secret_key` or `session_token`.
    """

    access_key: str
    secret_key: str = field(repr=False)
    session_token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("Credentials need a non-empty access_key and secret_key")

    def __repr__(self) -> str:
        token = ", session_token=***" if self.session_token else ""
        return f"Credentials(access_key={self.access_key!r}, secret_key=***{token})"


@dataclass(frozen=True, slots=True, kw_only=True)
class TlsConfig:
    """TLS for the gRPC channels.

    Attributes:
        enabled: False gives a plaintext channel (the default of `ClientConfig`).
        ca_file: PEM bundle of trusted roots; None uses the system roots.
        cert_file: a client certificate (mutual TLS); with `key_file`, or neither.
        key_file: the client certificate's private key; with `cert_file`, or neither.
        server_name: overrides the name checked against the server certificate (SNI / authority).
    """

    enabled: bool = True
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_name: str | None = None

    def __post_init__(self) -> None:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("TlsConfig: cert_file and key_file go together")

    def read_files(self) -> tuple[bytes | None, bytes | None, bytes | None]:
        """(root CA, client key, client cert chain) as bytes, read now (for the channel credentials)."""

        def read(path: str | None) -> bytes | None:
            if path is None:
                return None
            with open(path, "rb") as f:
                return f.read()

        return read(self.ca_file), read(self.key_file), read(self.cert_file)


def credentials_from(
    access_key: str | None,
    secret_key: str | None,
    session_token: str | None = None,
    *,
    access_key_source: str = "ROCKETMQ_ACCESS_KEY",
    secret_key_source: str = "ROCKETMQ_SECRET_KEY",
) -> Credentials | None:
    """`Credentials` from an access key and a secret key that may come from different places (a flag and
    an environment variable): None when both are missing, a `ValueError` naming the missing one (by its
    `..._source`) when only one is there."""
    if not access_key and not secret_key:
        return None
    if not secret_key:
        raise ValueError(f"an access key needs its secret key: set {secret_key_source}")
    if not access_key:
        raise ValueError(f"a secret key needs its access key: set {access_key_source}")
    return Credentials(access_key=access_key, secret_key=secret_key, session_token=session_token or None)


def _as_endpoints(value: str | Iterable[str]) -> str:
    if isinstance(value, str):
        parts = [p.strip() for p in value.replace(",", ";").split(";")]
    else:
        parts = [str(p).strip() for p in value]
    parts = [p for p in parts if p]
    if not parts:
        raise ValueError("endpoints: at least one host:port is required")
    return ";".join(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientConfig:
    """Everything a client needs to talk to a RocketMQ 5 proxy.

    Args:
        endpoints: one or many `host:port` (IPv4, `[IPv6]:port`, or a DNS name), as a `;`/`,`-separated
            string or a list.
        namespace: the RocketMQ namespace, sent in every `Resource` and the `x-mq-namespace` header, as the
            Java client does. Apache RocketMQ 5.2+ and `thrust serve` separate nothing by it: namespaces
            share the topics and groups of one name (docs/rocketmq.md, "Namespaces").
        credentials: AK/SK (and optional session token); None sends no `authorization` header.
        tls: a `TlsConfig`, True (TLS with system roots) or False/None (plaintext).
        request_timeout: the deadline of each unary call in seconds (sub-second values allowed).
        keepalive_interval: HTTP/2 keepalive of every channel (seconds): a ping after `keepalive_interval`
            without incoming data.
        keepalive_timeout: the connection is closed when a keepalive ping's ack takes longer than this
            (seconds). The defaults of the two (300 s, 30 s) are the Java client's, and the fastest the
            RocketMQ proxy allows: it is a grpc-java server with the default `permitKeepAliveTime` of 5 min,
            which answers a third ping between two of its own writes with GOAWAY `too_many_pings`, cutting
            every call on the connection (a 10 s keepalive got it within a minute of quiet). A dead
            connection is found by the calls instead: two consecutive transport failures on a channel
            (heartbeats every 10 s included) replace it (`ClientSession`), within ~25 s.
        instrumentation: traces and metrics of the clients built with this config, from
            `thrust.otel.instrument()` (the `otel` extra; docs/observability.md). None, the default, records
            nothing.
        transport: how the calls travel. "native": the Rust transport of the `thrust-native` package
            (`pip install 'thrust[native]'`; docs/install.md), several times less CPU per message;
            "grpcio": grpc.aio; "auto" (the default): `$THRUST_TRANSPORT` when set, else native when it is
            installed, else grpcio. Each client's `stats()` and `repr()` name the one it uses.
    """

    endpoints: str
    namespace: str = ""
    credentials: Credentials | None = None
    tls: TlsConfig | None = None
    request_timeout: float = 3.0
    keepalive_interval: float = 300.0
    keepalive_timeout: float = 30.0
    instrumentation: Instrumentation | None = None
    transport: Transport = "auto"

    def __init__(
        self,
        endpoints: str | Iterable[str],
        *,
        namespace: str = "",
        credentials: Credentials | None = None,
        tls: TlsConfig | bool | None = None,
        request_timeout: float = 3.0,
        keepalive_interval: float = 300.0,
        keepalive_timeout: float = 30.0,
        instrumentation: Instrumentation | None = None,
        transport: Transport = "auto",
    ) -> None:
        s = object.__setattr__
        s(self, "endpoints", _as_endpoints(endpoints))
        s(self, "namespace", namespace or "")
        s(self, "credentials", credentials)
        if tls is True:
            tls = TlsConfig()
        elif tls is False or (isinstance(tls, TlsConfig) and not tls.enabled):
            tls = None
        s(self, "tls", tls)
        timeout = float(request_timeout)
        if not timeout > 0:
            raise ValueError("request_timeout must be > 0 seconds")
        s(self, "request_timeout", timeout)
        # gRPC keepalive works in whole milliseconds; below 0.1 s pings would flood the server.
        if not (float(keepalive_interval) >= 0.1 and float(keepalive_timeout) >= 0.1):
            raise ValueError("keepalive_interval and keepalive_timeout must be >= 0.1 seconds")
        s(self, "keepalive_interval", float(keepalive_interval))
        s(self, "keepalive_timeout", float(keepalive_timeout))
        s(self, "instrumentation", instrumentation)
        if transport not in get_args(Transport):
            raise ValueError(f"transport must be one of {', '.join(get_args(Transport))}, not {transport!r}")
        s(self, "transport", transport)
        # Validate the endpoints now so that a typo fails at construction, not at the first send.
        parse_endpoint(self.endpoints)

    @property
    def access_point(self) -> Endpoint:
        """The parsed endpoints (the access point routes are queried from)."""
        return parse_endpoint(self.endpoints)

    def replace(self, **changes: Unpack[ClientConfigFields]) -> ClientConfig:
        """A copy with some fields changed."""
        # dataclasses.replace runs __init__, which takes the wider types (an iterable of endpoints, tls=True).
        return replace(self, **cast("dict[str, Any]", changes))

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: Unpack[ClientConfigFields]
    ) -> ClientConfig:
        """Build from `ROCKETMQ_*` environment variables; keyword arguments win over the environment.

        Variables: `ROCKETMQ_ENDPOINTS` (required unless `endpoints=` is given), `ROCKETMQ_NAMESPACE`,
        `ROCKETMQ_ACCESS_KEY` + `ROCKETMQ_SECRET_KEY` (+ `ROCKETMQ_SESSION_TOKEN`), `ROCKETMQ_TLS`
        (1/0), `ROCKETMQ_TLS_CA_FILE`, `ROCKETMQ_TLS_CERT_FILE`, `ROCKETMQ_TLS_KEY_FILE`,
        `ROCKETMQ_TLS_SERVER_NAME`, `ROCKETMQ_REQUEST_TIMEOUT` (seconds, float).

        `credentials=` (None included) replaces the `ROCKETMQ_ACCESS_KEY` / `ROCKETMQ_SECRET_KEY` pair, which
        is then not read; without it, one of the two set alone is a `ValueError` naming the other.
        """
        env = os.environ if environ is None else environ

        def get(name: str) -> str | None:
            value = env.get(_ENV_PREFIX + name)
            return value if value not in (None, "") else None

        kwargs: dict[str, Any] = {}
        if (endpoints := get("ENDPOINTS")) is not None:
            kwargs["endpoints"] = endpoints
        if (namespace := get("NAMESPACE")) is not None:
            kwargs["namespace"] = namespace
        if "credentials" not in overrides:
            # Read only when no `credentials=` is given: the keyword wins, even over a half-set
            # environment (an exported secret with the access key given in code or on a command line).
            ak, sk = get("ACCESS_KEY"), get("SECRET_KEY")
            if ak or sk:
                kwargs["credentials"] = credentials_from(ak, sk, get("SESSION_TOKEN"))
        tls_flag = (env.get(_ENV_PREFIX + "TLS") or "").strip().lower()
        if tls_flag not in _TRUE | _FALSE:
            raise ValueError(f"ROCKETMQ_TLS must be one of 1/0/true/false, not {tls_flag!r}")
        ca, cert, key, name = (
            get(n) for n in ("TLS_CA_FILE", "TLS_CERT_FILE", "TLS_KEY_FILE", "TLS_SERVER_NAME")
        )
        if tls_flag in _TRUE or (tls_flag == "" and any((ca, cert, key, name))):
            kwargs["tls"] = TlsConfig(ca_file=ca, cert_file=cert, key_file=key, server_name=name)
        if (timeout := get("REQUEST_TIMEOUT")) is not None:
            kwargs["request_timeout"] = float(timeout)
        kwargs.update(overrides)
        if "endpoints" not in kwargs:
            raise ValueError("no endpoints: set ROCKETMQ_ENDPOINTS or pass endpoints=")
        return cls(**kwargs)

    def __repr__(self) -> str:
        return (
            f"ClientConfig(endpoints={self.endpoints!r}, namespace={self.namespace!r}, "
            f"credentials={self.credentials!r}, tls={self.tls!r}, request_timeout={self.request_timeout}, "
            f"keepalive_interval={self.keepalive_interval}, keepalive_timeout={self.keepalive_timeout}"
            + (f", instrumentation={self.instrumentation!r}" if self.instrumentation is not None else "")
            + (f", transport={self.transport!r})" if self.transport != "auto" else ")")
        )
