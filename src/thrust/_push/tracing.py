"""The listener's call in a process span, for an instrumented `PushConsumer` (docs/observability.md).

`ListenerExecutor(invoke=...)` calls the function built here instead of `listener(message)`, on the
thread (or, for an `async def` listener, in the task) that runs the listener, so the process span is the
current span there and the listener's own spans nest under it. Built only when the consumer has an
instrumentation: an uninstrumented consumer never reaches this module.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from thrust._instrument import Instrumentation
from thrust._push.model import _Delivery
from thrust.message import ConsumeResult, ReceivedMessage


def _ok(result: object) -> bool:
    # What `ListenerExecutor` counts as success: SUCCESS, or None (a listener that just returns).
    return result is None or result is ConsumeResult.SUCCESS or result == ConsumeResult.SUCCESS


def traced_invoke(
    instrumentation: Instrumentation,
    consumer: object,
    listener: Callable[[ReceivedMessage], Any],
    is_async: bool,
) -> Callable[[_Delivery], Any]:
    """`invoke(delivery)`: the listener's call for one delivery, inside its process span."""
    if is_async:
        alistener: Callable[[ReceivedMessage], Awaitable[Any]] = listener

        async def ainvoke(d: _Delivery) -> Any:
            m = d.message
            scope = instrumentation.process(consumer, m, time.monotonic() - d.arrived)
            with scope:
                try:
                    result = await alistener(m)
                except BaseException as exc:
                    scope.result(False, exc)
                    raise
                scope.result(_ok(result), None)
                return result

        return ainvoke

    def invoke(d: _Delivery) -> Any:
        m = d.message
        scope = instrumentation.process(consumer, m, time.monotonic() - d.arrived)
        with scope:
            try:
                result = listener(m)
            except BaseException as exc:
                scope.result(False, exc)
                raise
            scope.result(_ok(result), None)
            return result

    return invoke
