"""Request signing: the `x-mq-date-time` and `authorization` headers (docs/protocol.md §2.4, §2.5).

    authorization: MQv2-HMAC-SHA1 Credential=<AK>, SignedHeaders=x-mq-date-time, Signature=<hex>

where the signature is HMAC-SHA1 keyed with the secret key (UTF-8) over the `x-mq-date-time` value
(UTF-8). Upstream: Java `rpc/Signature.java` (uppercase hex), Python 5.1.2 `util/signature.py` and Rust
(lowercase hex); the server side is `DefaultAuthenticationContextBuilder` in apache/rocketmq's auth
module, whose parsing `parse_authorization` mirrors.
"""

from __future__ import annotations

import calendar
import datetime
import hashlib
import hmac
import re
import time
from dataclasses import dataclass
from typing import Final

from thrust._codec.status import Code
from thrust._codec.validation import Invalid

__all__ = [
    "ALGORITHM",
    "AUTHORIZATION_HEADER",
    "DATE_TIME_HEADER",
    "SIGNED_HEADERS",
    "Authorization",
    "date_time_instants",
    "format_date_time",
    "parse_authorization",
    "sign",
    "signed_metadata",
    "verify",
]

ALGORITHM: Final = "MQv2-HMAC-SHA1"
DATE_TIME_HEADER: Final = "x-mq-date-time"
AUTHORIZATION_HEADER: Final = "authorization"
SIGNED_HEADERS: Final = DATE_TIME_HEADER

_DATE_TIME_FORMAT: Final = "%Y%m%dT%H%M%SZ"
# Java's String.trim(): strips every character up to U+0020.
_JAVA_TRIM: Final = "".join(chr(code) for code in range(0x21))


def format_date_time(epoch_seconds: float) -> str:
    """The `x-mq-date-time` value, `yyyyMMdd'T'HHmmss'Z'`.

    Java and the Python 5.1.2 client format the *local* time with a literal `Z`, so their value is
    not really UTC. We use UTC, which makes the `Z` true (C2, docs/reliability.md §6). The upstream proxy only
    uses the string as HMAC input; the embedded server may also check its freshness (`date_time_instants`)."""
    return time.strftime(_DATE_TIME_FORMAT, time.gmtime(int(epoch_seconds)))


_COMPACT = re.compile(r"(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z", re.ASCII)
_MAX_DATE_TIME_LENGTH: Final = 64


def date_time_instants(value: str) -> tuple[float, ...]:
    """The instants (epoch seconds) an `x-mq-date-time` value may stand for; () when it is not a time.

    `yyyyMMdd'T'HHmmss'Z'` gives two readings: UTC (thrust, and every client whose local zone is UTC)
    and this host's local time, because Java and the Python 5.1.2 client format their *local* time with
    a literal `Z` (docs/protocol.md §2.4): a client in the server's zone is then recognised too. RFC 3339 with
    an offset (the Rust client's local time) is one absolute instant; without an offset it gets both readings
    as well."""
    if len(value) > _MAX_DATE_TIME_LENGTH:
        return ()
    match = _COMPACT.fullmatch(value)
    try:
        if match is not None:
            y, mo, d, h, mi, sec = (int(g) for g in match.groups())
            naive = datetime.datetime(y, mo, d, h, mi, sec)  # range check (month 13, second 61...)
        else:
            parsed = datetime.datetime.fromisoformat(value)
            if parsed.tzinfo is not None:
                return (parsed.timestamp(),)
            naive = parsed.replace(microsecond=0)
        as_tuple = naive.timetuple()
        utc = float(calendar.timegm(as_tuple))
        local = time.mktime((*as_tuple[:8], -1))
    except (ValueError, OverflowError):
        return ()
    return (utc,) if local == utc else (utc, local)


def _hmac_sha1(secret_key: str, date_time: str) -> bytes:
    return hmac.new(secret_key.encode("utf-8"), date_time.encode("utf-8"), hashlib.sha1).digest()


def sign(access_key: str, secret_key: str, date_time: str) -> str:
    """The complete `authorization` value for a request carrying `x-mq-date-time: date_time`.
    The signature is uppercase hex, like the Java client."""
    signature = _hmac_sha1(secret_key, date_time).hex().upper()
    return f"{ALGORITHM} Credential={access_key}, SignedHeaders={SIGNED_HEADERS}, Signature={signature}"


def signed_metadata(access_key: str, secret_key: str, epoch_seconds: float) -> dict[str, str]:
    """Both headers for a request sent at `epoch_seconds`."""
    date_time = format_date_time(epoch_seconds)
    return {DATE_TIME_HEADER: date_time, AUTHORIZATION_HEADER: sign(access_key, secret_key, date_time)}


@dataclass(frozen=True, slots=True)
class Authorization:
    """A parsed `authorization` header. `access_key` is the first `/`-separated part of Credential
    (possibly empty: the Python client always sends `Credential=,` when no keys are set)."""

    access_key: str
    signed_headers: str
    signature_hex: str
    algorithm: str = ALGORITHM


def _unauthorized(message: str) -> Invalid:
    return Invalid(Code.UNAUTHORIZED, message)


def _java_split(value: str, separator: str) -> list[str]:
    # String.split with a literal separator: no match gives the whole string (even ""), and trailing
    # empty strings are dropped ("/".split("/") is empty).
    if separator not in value:
        return [value]
    parts = value.split(separator)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


def parse_authorization(value: str) -> Authorization:
    """Parse an `authorization` value the way the proxy does: split on the first space (the algorithm
    is not checked), then the rest on `,`, each item trimmed and split on its first `=`; `Credential`
    is split on `/` and its first part is the access key; `Signature` must be hex (either case).
    Unknown items are ignored. Raises `Invalid(UNAUTHORIZED)` for anything the proxy would reject, and
    when Credential or Signature is missing (the proxy then fails authentication)."""
    algorithm, sep, rest = value.partition(" ")
    if not sep:
        raise _unauthorized("authentication header is incorrect")
    access_key: str | None = None
    signed_headers = ""
    signature: str | None = None
    for item in _java_split(rest, ","):
        key, eq, item_value = item.strip(_JAVA_TRIM).partition("=")
        if not eq:
            raise _unauthorized("authentication keyValues length is incorrect")
        if key == "Credential":
            credential = _java_split(item_value, "/")
            if not credential:
                raise _unauthorized("authentication credential length is incorrect")
            access_key = credential[0]
        elif key == "Signature":
            try:
                bytes.fromhex(item_value)
            except ValueError:
                raise _unauthorized("authentication signature is not hexadecimal") from None
            if not item_value or any(c.isspace() for c in item_value):
                raise _unauthorized("authentication signature is not hexadecimal")
            signature = item_value
        elif key == "SignedHeaders":
            signed_headers = item_value
    if access_key is None:
        raise _unauthorized("authentication credential is missing")
    if signature is None:
        raise _unauthorized("authentication signature is missing")
    return Authorization(
        access_key=access_key, signed_headers=signed_headers, signature_hex=signature, algorithm=algorithm
    )


def verify(auth: Authorization, secret_key: str, date_time: str) -> bool:
    """Whether `auth` carries the HMAC-SHA1 of `date_time` under `secret_key` (constant-time compare).
    An empty date-time never verifies (the proxy rejects a request without one)."""
    if not date_time:
        return False
    try:
        claimed = bytes.fromhex(auth.signature_hex)
    except ValueError:
        return False
    return hmac.compare_digest(claimed, _hmac_sha1(secret_key, date_time))
