"""`google.protobuf.Duration` / `Timestamp` <-> seconds, for the client codec (`convert.py`) and the
embedded server alike. Imports only the protobuf runtime, so `thrust.server` may use it too.

Nanoseconds are rounded, and a fraction that rounds up to a whole second carries into the seconds:
`nanos` stays within [0, 999 999 999], as both messages require.
"""

from __future__ import annotations

import math

from google.protobuf import duration_pb2, timestamp_pb2

from thrust._proto import Duration, Timestamp

__all__ = [
    "duration",
    "duration_seconds",
    "fill_duration",
    "fill_timestamp",
    "timestamp",
    "timestamp_seconds",
]


def _split(seconds: float) -> tuple[int, int]:
    """Whole seconds (floored) and the nanoseconds left, rounded, with the carry."""
    whole = math.floor(seconds)
    nanos = round((seconds - whole) * 1e9)
    if nanos >= 1_000_000_000:
        whole += 1
        nanos -= 1_000_000_000
    return int(whole), int(nanos)


def duration(seconds: float) -> duration_pb2.Duration:
    """A `google.protobuf.Duration` (of thrust._proto.POOL) with nanosecond precision (never truncated)."""
    whole, nanos = _split(seconds)
    return Duration(seconds=whole, nanos=nanos)


def fill_duration(out: duration_pb2.Duration, seconds: float) -> None:
    """Set `out` (a Duration field of a message being built) to `seconds`, in place."""
    out.seconds, out.nanos = _split(seconds)


def duration_seconds(d: duration_pb2.Duration) -> float:
    """Seconds in a Duration, nanos included (the official Python client drops them:
    docs/protocol.md §9.1)."""
    return d.seconds + d.nanos / 1e9


def timestamp(epoch_seconds: float) -> timestamp_pb2.Timestamp:
    """A `google.protobuf.Timestamp` for epoch seconds."""
    whole, nanos = _split(epoch_seconds)
    return Timestamp(seconds=whole, nanos=nanos)


def fill_timestamp(out: timestamp_pb2.Timestamp, epoch_seconds: float) -> None:
    """Set `out` (a Timestamp field of a message being built) to epoch seconds, without building a
    Timestamp to copy from (the server does it twice per delivered message)."""
    out.seconds, out.nanos = _split(epoch_seconds)


def timestamp_seconds(ts: timestamp_pb2.Timestamp) -> float:
    """Epoch seconds of a Timestamp."""
    return ts.seconds + ts.nanos / 1e9
