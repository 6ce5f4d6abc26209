"""thrust: a fast, correct, asyncio-native client for Apache RocketMQ 5 (gRPC).

```
async with thrust.Producer(endpoints="127.0.0.1:8081", topics=["t"]) as producer:
    receipt = await producer.send(thrust.Message(topic="t", body=b"...", tag="a"))

async with thrust.SimpleConsumer(endpoints="127.0.0.1:8081", group="g", subscriptions={"t": "*"}) as c:
    for msg in await c.receive(max_messages=32, invisible_duration=30):
        await msg.ack()
```

Plain threaded code uses the same classes from `thrust.sync`. Every error is a `thrust.ThrustError`.
Logging goes to `logging.getLogger("thrust.*")`; the library never adds handlers.
"""

from __future__ import annotations

# Imported under private names: `dir(thrust)` and completion show the public API only (`__dir__` below).
import logging as _logging
import os as _os
from typing import TYPE_CHECKING
from typing import Any as _Any

# gRPC's fork handlers serve only its synchronous stack; with grpc.aio threads running they can crash a
# forked child (seen as SIGSEGV in tests/client/test_client_sync.py). thrust uses grpc.aio only and turns
# fork use of a client into a clear error itself (thrust.sync), so it asks gRPC to stay out of fork()
# unless the application chose otherwise. This must happen before grpc is first imported.
_os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")


# First: gRPC core's own log lines in the `thrust` command, off unless asked for (before grpc is imported).
from thrust import _grpc_logs  # noqa: F401
from thrust.config import ClientConfig, Credentials, TlsConfig
from thrust.errors import (
    BadRequestError,
    ClientClosedError,
    ConnectionError,
    ForbiddenError,
    InternalError,
    InvalidReceiptHandleError,
    LiteSubscriptionQuotaExceededError,
    LiteTopicQuotaExceededError,
    MessageCorruptedError,
    NotFoundError,
    PayloadTooLargeError,
    ThrustError,
    TimeoutError,
    TooManyRequestsError,
    UnauthorizedError,
    UnsupportedError,
    ValidationError,
)
from thrust.message import (
    ConsumeResult,
    ConsumeSuspend,
    FilterExpression,
    FilterType,
    Message,
    MessageType,
    ReceivedMessage,
    SendReceipt,
    TransactionResolution,
)
from thrust.producer import Producer, Transaction

if TYPE_CHECKING:
    # What `__getattr__` below returns, spelled out for type checkers: without these, `thrust.PushConsumer`
    # would be typed by `__getattr__`'s return type, Any, and nothing a user passes to it would be checked
    # (tests/typing runs mypy --strict on a user program to hold this).
    from thrust import sync as sync
    from thrust.lite_push_consumer import LitePushConsumer, OffsetOption
    from thrust.lite_simple_consumer import LiteSimpleConsumer
    from thrust.push_consumer import PushConsumer
    from thrust.simple_consumer import SimpleConsumer

    __version__: str

_logging.getLogger("thrust").addHandler(_logging.NullHandler())

__all__ = [
    "BadRequestError",
    "ClientClosedError",
    "ClientConfig",
    "ConnectionError",
    "ConsumeResult",
    "ConsumeSuspend",
    "Credentials",
    "FilterExpression",
    "FilterType",
    "ForbiddenError",
    "InternalError",
    "InvalidReceiptHandleError",
    "LitePushConsumer",
    "LiteSimpleConsumer",
    "LiteSubscriptionQuotaExceededError",
    "LiteTopicQuotaExceededError",
    "Message",
    "MessageCorruptedError",
    "MessageType",
    "NotFoundError",
    "OffsetOption",
    "PayloadTooLargeError",
    "Producer",
    "PushConsumer",
    "ReceivedMessage",
    "SendReceipt",
    "SimpleConsumer",
    "ThrustError",
    "TimeoutError",
    "TlsConfig",
    "TooManyRequestsError",
    "Transaction",
    "TransactionResolution",
    "UnauthorizedError",
    "UnsupportedError",
    "ValidationError",
]


def __getattr__(name: str) -> _Any:
    # SimpleConsumer and PushConsumer are imported on first use: PushConsumer lives in its own module
    # (written separately) and importing `thrust` should not pay for clients that are not used.
    # `thrust.sync` likewise: `import thrust` then `thrust.sync.Producer(...)` works, and only code that
    # touches `thrust.sync` pays for its import (and its fork handler).
    if name == "__version__":
        # From the installed distribution's metadata (pyproject.toml's version), read on first use:
        # importlib.metadata is not free and most programs never ask.
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("thrust")
        except PackageNotFoundError:  # run from a source tree that was never installed
            found = "0+unknown"
        globals()["__version__"] = found
        return found
    if name == "sync":
        import importlib

        return importlib.import_module("thrust.sync")
    if name == "SimpleConsumer":
        from thrust.simple_consumer import SimpleConsumer

        return SimpleConsumer
    if name == "PushConsumer":
        from thrust.push_consumer import PushConsumer

        return PushConsumer
    if name == "LitePushConsumer":
        from thrust.lite_push_consumer import LitePushConsumer

        return LitePushConsumer
    if name == "LiteSimpleConsumer":
        from thrust.lite_simple_consumer import LiteSimpleConsumer

        return LiteSimpleConsumer
    if name == "OffsetOption":
        from thrust.lite_push_consumer import OffsetOption

        return OffsetOption
    raise AttributeError(f"module 'thrust' has no attribute {name!r}")


def __dir__() -> list[str]:
    # The public names, and the lazily imported ones (`__getattr__`): not the modules and helpers the
    # package imports for itself (PEP 562).
    return sorted({*__all__, "__version__", "sync"})
