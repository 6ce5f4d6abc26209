"""Request metadata (gRPC headers) per docs/protocol.md §2.4, built as cheaply as the protocol allows.

The static headers (client id, language, version, protocol, namespace, session token) are computed once
per client. The date-time header has one-second resolution and, with credentials, the HMAC signature
depends only on it, so both are recomputed at most once per second, not once per call (the official
Python client signs every call, even without credentials: docs/protocol.md §9.1). Only the request id
changes per call, and it is a prefix plus a counter rather than a fresh UUID.
"""

from __future__ import annotations

import itertools
import os
import secrets
import socket
import time
from importlib import metadata as _importlib_metadata

from thrust._codec.signature import format_date_time, sign
from thrust.config import ClientConfig

__all__ = ["CLIENT_VERSION", "Metadata", "new_client_id"]

Header = tuple[str, str]


def _client_version() -> str:
    try:
        return _importlib_metadata.version("thrust")
    except _importlib_metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"


# The proxy compares x-mq-client-version with "5.0.3" to pick ILLEGAL_POLLING_TIME over BAD_REQUEST
# (docs/protocol.md §2.4, §6.2); we speak the current protocol, so we announce a 5.x version, suffixed with
# ours.
CLIENT_VERSION = f"5.1.0-thrust-{_client_version()}"

_client_index = itertools.count()


def new_client_id() -> str:
    """`host@pid@index@base36(time_ns)`, the shape Java and Python use (docs/protocol.md §2.4)."""
    host = socket.gethostname() or "localhost"
    n = time.time_ns()
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while n:
        n, r = divmod(n, 36)
        out = digits[r] + out
    return f"{host}@{os.getpid()}@{next(_client_index)}@{out or '0'}"


class Metadata:
    """Builds the metadata tuple for each call of one client.

    `__call__()` returns the headers for a new call (fresh request id). `request_id_of(md)` reads the
    request id back for error reports.
    """

    __slots__ = ("_ak", "_cached", "_counter", "_rid_prefix", "_second", "_sk", "_static", "client_id")

    def __init__(self, config: ClientConfig, client_id: str) -> None:
        self.client_id = client_id
        static: list[Header] = [
            ("x-mq-client-id", client_id),
            ("x-mq-language", "PYTHON"),
            ("x-mq-client-version", CLIENT_VERSION),
            ("x-mq-protocol", "v2"),
            ("x-mq-namespace", config.namespace),
        ]
        creds = config.credentials
        if creds is not None and creds.session_token:
            static.append(("x-mq-session-token", creds.session_token))
        self._static: tuple[Header, ...] = tuple(static)
        self._ak = creds.access_key if creds is not None else None
        self._sk = creds.secret_key if creds is not None else None
        self._second = -1
        self._cached: tuple[Header, ...] = self._static
        self._rid_prefix = secrets.token_hex(6) + "-"
        self._counter = itertools.count(1)

    def _refresh(self, second: int) -> None:
        date_time = format_date_time(float(second))
        headers = [*self._static, ("x-mq-date-time", date_time)]
        if self._ak is not None and self._sk is not None:
            # Sign only when credentials exist (no HMAC without credentials, unlike Python:
            # docs/protocol.md §9.1).
            headers.append(("authorization", sign(self._ak, self._sk, date_time)))
        self._cached = tuple(headers)
        self._second = second

    def __call__(self) -> tuple[Header, ...]:
        """Headers for one new call."""
        second = int(time.time())
        if second != self._second:
            self._refresh(second)
        return (*self._cached, ("x-mq-request-id", f"{self._rid_prefix}{next(self._counter)}"))

    @staticmethod
    def request_id_of(md: tuple[Header, ...]) -> str | None:
        """The x-mq-request-id in `md` (it is always last)."""
        if md and md[-1][0] == "x-mq-request-id":
            return md[-1][1]
        return None
