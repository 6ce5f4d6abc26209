"""`MessageType`, the one enumeration of message kinds, for the client's public API (`thrust.MessageType`)
and the embedded server's broker core alike."""

from __future__ import annotations

import enum

__all__ = ["MessageType"]


class MessageType(enum.IntEnum):
    """`apache.rocketmq.v2.MessageType`: how the broker treats a message (values identical;
    UNSPECIFIED = 0 has no member)."""

    NORMAL = 1
    FIFO = 2
    DELAY = 3
    TRANSACTION = 4
    LITE = 5
    PRIORITY = 6
