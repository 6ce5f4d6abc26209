"""Per-call request headers: the client id and optional AK/SK authentication (docs/protocol.md §2.4, §2.5).

The proxy's `ContextInitPipeline` reads `x-mq-client-id` (blank → CLIENT_ID_REQUIRED), the language,
the client version and the namespace; with authentication on, `DefaultAuthenticationContextBuilder`
parses `authorization` and checks the HMAC-SHA1 of `x-mq-date-time`. Without authentication the
`authorization` header is ignored entirely (the Python client always sends one, with an empty
Credential). Request id, namespace and protocol headers are never required.

Unlike the proxy, a freshness window on `x-mq-date-time` can be enforced (S5, docs/reliability.md §5): the
signature covers only that header, so without a window a captured header is a credential for ever.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from thrust._codec.signature import date_time_instants, parse_authorization, verify
from thrust._codec.status import Code
from thrust._codec.validation import Invalid, is_blank

__all__ = ["Authenticator", "Caller", "is_loopback"]

_CALLER_CACHE = 4096
_DATE_CACHE = 64
_CLIENT_ID = "x-mq-client-id"
_CLIENT_VERSION = "x-mq-client-version"
_AUTHORIZATION = "authorization"
_DATE_TIME = "x-mq-date-time"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who made a call: `client_id` (`x-mq-client-id`) and `version` (`x-mq-client-version`, or None)."""

    client_id: str
    version: str | None


class Authenticator:
    """Checks the headers of each call.

    Args:
        credentials: access key → secret key; None or empty disables authentication.
        date_time_window: with authentication, how many seconds `x-mq-date-time` may be from `clock()`
            (either way); None or 0: not checked.
        clock: the server's clock (epoch seconds); tests move it to replay a header "later".
    """

    __slots__ = ("_callers", "_credentials", "_dates", "clock", "date_time_window")

    def __init__(
        self,
        credentials: Mapping[str, str] | None = None,
        *,
        date_time_window: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._credentials = dict(credentials or {})
        # One Caller per (client id, version), reused on every call of that client (bounded).
        self._callers: dict[tuple[str, str | None], Caller] = {}
        self.date_time_window = date_time_window or None
        self.clock = clock
        # Clients send the same date-time string for a whole second: parse each once (bounded).
        self._dates: dict[str, tuple[float, ...]] = {}

    @property
    def enabled(self) -> bool:
        """True when calls must be signed."""
        return bool(self._credentials)

    def check(self, metadata: Iterable[tuple[str, str | bytes]]) -> Caller:
        """The caller of a call with these headers.

        Raises:
            Invalid(CLIENT_ID_REQUIRED): `x-mq-client-id` is missing or blank.
            Invalid(UNAUTHORIZED): authentication is on and the call is not correctly signed.
        """
        client_id = version = authorization = date_time = None
        for key, value in metadata:
            if key == _CLIENT_ID:
                client_id = value
            elif key == _CLIENT_VERSION:
                version = value
            elif key == _AUTHORIZATION:
                authorization = value
            elif key == _DATE_TIME:
                date_time = value
        if not isinstance(client_id, str) or is_blank(client_id):
            raise Invalid(Code.CLIENT_ID_REQUIRED, "client id cannot be empty")
        if self._credentials:
            self._authenticate(authorization, date_time)
        if not isinstance(version, str):
            version = None
        caller = self._callers.get((client_id, version))
        if caller is None:
            callers = self._callers
            if len(callers) >= _CALLER_CACHE:
                callers.clear()
            caller = callers[(client_id, version)] = Caller(client_id, version)
        return caller

    def _authenticate(self, authorization: str | bytes | None, date_time: str | bytes | None) -> None:
        if not isinstance(authorization, str) or not authorization:
            raise Invalid(Code.UNAUTHORIZED, "authorization header is missing")
        auth = parse_authorization(authorization)
        secret = self._credentials.get(auth.access_key)
        if secret is None:
            raise Invalid(Code.UNAUTHORIZED, "access key is not recognised")
        if not isinstance(date_time, str) or not verify(auth, secret, date_time):
            # `verify` compares in constant time (hmac.compare_digest).
            raise Invalid(Code.UNAUTHORIZED, "signature does not match")
        if self.date_time_window is not None:
            # Checked after the signature, so only a holder of the secret learns about the clock.
            self._check_fresh(date_time, self.date_time_window)

    def _check_fresh(self, date_time: str, window: float) -> None:
        instants = self._dates.get(date_time)
        if instants is None:
            instants = date_time_instants(date_time)
            if len(self._dates) >= _DATE_CACHE:
                self._dates.clear()
            self._dates[date_time] = instants
        if not instants:
            raise Invalid(
                Code.UNAUTHORIZED,
                "x-mq-date-time is not a time this server understands "
                "(expected yyyyMMdd'T'HHmmss'Z' or RFC 3339)",
            )
        now = self.clock()
        skew = min(abs(t - now) for t in instants)
        if skew > window:
            # Neither the header nor the signature is echoed: the skew is all a caller needs to act on.
            raise Invalid(
                Code.UNAUTHORIZED,
                f"x-mq-date-time is {skew:.0f} s away from the server's clock, outside the allowed "
                f"+-{window:.0f} s (clock skew, or a replayed request)",
            )


def is_loopback(host: str) -> bool:
    """True for `localhost` and loopback addresses (127.0.0.0/8, ::1)."""
    text = host.strip("[]")
    if text.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False
