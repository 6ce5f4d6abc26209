"""Message ids, version 1 (docs/protocol.md §5.2; apache/rocketmq-clients docs/message_id.md, Java
`MessageIdCodec`).

A v1 id is 17 bytes rendered as 34 uppercase hex characters, big endian:

    01 | MAC (lower 6 bytes) | pid (lower 2) | seconds since 2021-01-01T00:00:00Z (lower 4) | sequence (4)

e.g. `01 56F7E71C361B 21BC 024CCDBE 00000000`. The seconds field is the wall-clock offset taken once
when the generator is created plus the monotonic clock's progress since then, as Java does, so a wall
clock step does not move it. The sequence is one process-wide counter starting at 0 and wrapping at 2**32.

Servers never parse ids; `decode_message_id` exists for diagnostics and tests. Ids that are not 34
characters long are "v0": opaque strings (for instance the 32-hex-character ids of the 4.x
`MessageClientIDSetter`).
"""

from __future__ import annotations

import math
import os
import secrets
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = [
    "CUSTOM_EPOCH",
    "MESSAGE_ID_LENGTH",
    "MessageIdGenerator",
    "MessageIdInfo",
    "decode_message_id",
    "is_valid_message_id",
    "new_message_id",
]

CUSTOM_EPOCH: Final = 1_609_459_200
"""2021-01-01T00:00:00Z in epoch seconds. (Java builds this date with a local-time `Calendar`, so its
ids are off by the host's UTC offset; the spec and the Python client say UTC, which we follow.)"""

MESSAGE_ID_LENGTH: Final = 34
"""`MessageIdCodec.MESSAGE_ID_LENGTH_FOR_V1_OR_LATER`."""

_LEGACY_LENGTH: Final = 32
_VERSION_V1: Final = 1
_U32: Final = 0xFFFFFFFF
_HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")


def _is_hex(value: str) -> bool:
    return bool(value) and all(c in _HEX_DIGITS for c in value)


# --------------------------------------------------------------------------------------------------
# Decoding


@dataclass(frozen=True, slots=True)
class MessageIdInfo:
    """The parts of a message id. Only v1 ids have `mac`, `pid`, `seconds` and `sequence`; for v0
    (opaque) ids and unknown versions those are None."""

    raw: str
    version: int
    mac: bytes | None = None
    pid: int | None = None
    seconds: int | None = None
    sequence: int | None = None

    @property
    def timestamp(self) -> float | None:
        """Epoch seconds encoded in a v1 id (modulo 2**32 seconds after 2021-01-01Z)."""
        return None if self.seconds is None else float(CUSTOM_EPOCH + self.seconds)


def decode_message_id(message_id: str) -> MessageIdInfo | None:
    """Split an id into its parts (`MessageIdCodec.decode`, plus field parsing for v1).

    Returns None for an empty or blank id and for a 34-character id that is not hexadecimal; any other
    length is a v0 (opaque) id. Hex digits may be either case."""
    if not message_id.strip():
        return None
    if len(message_id) != MESSAGE_ID_LENGTH:
        return MessageIdInfo(raw=message_id, version=0)
    if not _is_hex(message_id):
        return None
    data = bytes.fromhex(message_id)
    version = data[0]
    if version != _VERSION_V1:
        return MessageIdInfo(raw=message_id, version=version)
    return MessageIdInfo(
        raw=message_id,
        version=version,
        mac=data[1:7],
        pid=int.from_bytes(data[7:9], "big"),
        seconds=int.from_bytes(data[9:13], "big"),
        sequence=int.from_bytes(data[13:17], "big"),
    )


def is_valid_message_id(message_id: str, *, allow_legacy: bool = True) -> bool:
    """Whether `message_id` is a well-formed id: 34 hex characters whose version byte is not 0 (v1 or
    later), or, with `allow_legacy`, the 32 hex characters of a 4.x `MessageClientIDSetter` id."""
    if not _is_hex(message_id):
        return False
    if len(message_id) == MESSAGE_ID_LENGTH:
        return message_id[:2] != "00"
    return allow_legacy and len(message_id) == _LEGACY_LENGTH


# --------------------------------------------------------------------------------------------------
# Generation

_SYS_NET: Final = Path("/sys/class/net")


def _read_mac() -> bytes:
    """A hardware address of this host: the first non-zero interface address in sysfs (Linux), else
    `uuid.getnode()` (which itself falls back to a random multicast address, like Java's random one)."""
    try:
        interfaces = sorted(_SYS_NET.iterdir())
    except OSError:
        interfaces = []
    for interface in interfaces:
        if interface.name == "lo":
            continue
        try:
            text = (interface / "address").read_text().strip()
        except OSError:
            continue
        parts = text.split(":")
        if len(parts) != 6 or not all(len(p) == 2 and _is_hex(p) for p in parts):
            continue
        mac = bytes.fromhex("".join(parts))
        if any(mac):
            return mac
    try:
        return uuid.getnode().to_bytes(6, "big")
    except Exception:  # pragma: no cover - uuid.getnode does its own fallback; belt and braces
        return bytes([secrets.randbits(8) | 0x01]) + secrets.token_bytes(5)


_mac_cache: bytes | None = None


def _host_mac() -> bytes:
    # The MAC does not change across fork, so it is looked up once per interpreter.
    global _mac_cache
    if _mac_cache is None:
        _mac_cache = _read_mac()
    return _mac_cache


class MessageIdGenerator:
    """Generates v1 message ids. Thread-safe; `next()` takes a short lock.

    `mac` (6 bytes or an int; lower 6 bytes used), `pid` (lower 2 bytes used), `clock` (epoch seconds)
    and `monotonic` (seconds) can be injected for tests; they default to the host's MAC address,
    `os.getpid()`, `time.time` and `time.monotonic`."""

    __slots__ = ("_lock", "_mono_start", "_monotonic", "_prefix", "_seconds_start", "_sequence")

    def __init__(
        self,
        *,
        mac: bytes | int | None = None,
        pid: int | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sequence: int = 0,
    ) -> None:
        if mac is None:
            mac_bytes = _host_mac()
        elif isinstance(mac, int):
            mac_bytes = (mac & 0xFFFF_FFFF_FFFF).to_bytes(6, "big")
        else:
            if len(mac) < 6:
                raise ValueError("mac needs at least 6 bytes")
            mac_bytes = bytes(mac[-6:])
        pid_low = (os.getpid() if pid is None else pid) & 0xFFFF
        self._prefix = f"{_VERSION_V1:02X}{mac_bytes.hex().upper()}{pid_low:04X}"
        # Like Java: whole seconds since the custom epoch at start, then whole monotonic seconds since.
        self._seconds_start = math.floor(clock() - CUSTOM_EPOCH)
        self._monotonic = monotonic
        self._mono_start = math.floor(monotonic())
        self._sequence = sequence & _U32
        self._lock = threading.Lock()

    @property
    def prefix(self) -> str:
        """The fixed part of every id from this generator: version, MAC and pid (14 hex characters)."""
        return self._prefix

    def seconds(self) -> int:
        """Seconds since 2021-01-01Z as encoded in the next id (before truncation to 32 bits)."""
        return math.floor(self._monotonic()) - self._mono_start + self._seconds_start

    def next(self) -> str:
        """A new id: 34 uppercase hex characters."""
        with self._lock:
            sequence = self._sequence
            self._sequence = (sequence + 1) & _U32
            seconds = self.seconds()
        return f"{self._prefix}{seconds & _U32:08X}{sequence:08X}"

    __next__ = next

    def __iter__(self) -> MessageIdGenerator:
        return self


_generator: MessageIdGenerator | None = None
_generator_lock = threading.Lock()


def _process_generator() -> MessageIdGenerator:
    global _generator
    generator = _generator
    if generator is None:
        with _generator_lock:
            generator = _generator
            if generator is None:
                generator = _generator = MessageIdGenerator()
    return generator


def new_message_id() -> str:
    """A new v1 id from the process-wide generator (created on first use, recreated after fork)."""
    return _process_generator().next()


def _after_fork_in_child() -> None:
    # The child has its own pid (part of every id) and must not share the parent's sequence; the lock
    # may have been held by another parent thread at fork time, so it is replaced as well.
    global _generator, _generator_lock
    _generator = None
    _generator_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
