"""The embedded server's subscription filters (TAG and SQL92, docs/protocol.md §6.5).

The parser lives in `thrust._codec.filter`, shared with the client: a consumer compiles its SQL92
subscriptions with it when it is built, so that a malformed one fails before any I/O, with the same
ILLEGAL_FILTER_EXPRESSION the server answers here.
"""

from __future__ import annotations

from thrust._codec.filter import (
    MATCH_ALL,
    MAX_NESTING,
    TAG_PROPERTY,
    FilterKind,
    InvalidFilter,
    MessageFilter,
    compile_filter,
)

__all__ = [
    "MATCH_ALL",
    "MAX_NESTING",
    "TAG_PROPERTY",
    "FilterKind",
    "InvalidFilter",
    "MessageFilter",
    "compile_filter",
]
