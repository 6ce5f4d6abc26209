"""Wire helpers every module of the gRPC layer uses: `Status` values, the multi-entry status rule, the
marker for undecodable requests, and the logger. Imports nothing else of the package."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final, TypeVar, cast

from thrust._codec.status import Code
from thrust._codec.validation import Invalid
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust.server.core.model import BrokerError

logger = logging.getLogger("thrust.server")

_OK: Final = int(Code.OK)
_R = TypeVar("_R")


def _status(code: int, message: str | None = None) -> d.Status:
    text = message if message is not None else Code(code).name
    return d.Status(code=cast(Any, code), message=text)


_STATUS_OK: Final = _status(Code.OK)


def _error_status(exc: Invalid | BrokerError) -> d.Status:
    return d.Status(code=cast(Any, exc.code), message=exc.message)


def _combined(codes: Sequence[int]) -> d.Status:
    """The top-level status of a multi-entry answer: the shared code, or MULTIPLE_RESULTS
    (docs/protocol.md §7.3)."""
    if len(codes) == 1 and codes[0] == _OK:
        return _STATUS_OK
    first: int | None = None
    for code in codes:
        if first is None:
            first = code
        elif code != first:
            return _status(Code.MULTIPLE_RESULTS)
    return _STATUS_OK if first is None or first == _OK else _status(first)


class _Undecodable:
    """A request the deserializer could not parse."""


_UNDECODABLE: Final = _Undecodable()


def _undecodable(request: object) -> bool:
    return request is _UNDECODABLE
