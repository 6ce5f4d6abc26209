"""The hooks a client calls when it is instrumented (`ClientConfig.instrumentation`).

A client holds `config.instrumentation`, None by default: every hook site is one `is not None` check, so
an uninstrumented client does nothing per message for it. `thrust.otel.instrument()` returns the one
implementation (OpenTelemetry traces and metrics, docs/observability.md); this module imports nothing
of OpenTelemetry, so `import thrust` never does.

Spans and scopes are the implementation's objects; the client only calls the methods below on them.
Every hook runs on the client's event loop, except `Instrumentation.process`, whose scope is entered and
left on the thread that runs the listener (so that the listener's own spans nest under it).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from thrust._core.endpoints import Endpoint
from thrust.message import Message, MessageType, ReceivedMessage

__all__ = ["Instrumentation", "ProcessScope", "SendSpan", "Span"]


class Span(Protocol):
    """One operation that the client times and reports."""

    def end(self, endpoint: Endpoint | None, error: BaseException | None) -> None:
        """The operation finished: at `endpoint` (None if no server answered), failed with `error`."""


class SendSpan(Span, Protocol):
    @property
    def traceparent(self) -> str | None:
        """The W3C `traceparent` to put in each sent message's `trace_context` (None: leave it unset)."""


class ReceiveSpan(Protocol):
    def end(
        self, endpoint: Endpoint | None, messages: Sequence[ReceivedMessage], error: BaseException | None
    ) -> None:
        """The receive returned `messages` (possibly none), or failed with `error`."""


class ProcessScope(AbstractContextManager["ProcessScope"], Protocol):
    """The listener's call for one message; current (in the listener's thread or task) while entered."""

    def result(self, ok: bool, error: BaseException | None) -> None:
        """What the listener answered: success, or failure (with the exception it raised, if any)."""


class Instrumentation(Protocol):
    """What a client calls when `config.instrumentation` is set. `client` is the `Producer`,
    `SimpleConsumer` or `PushConsumer` (its `config`, `client_id`, `group` and `stats()`)."""

    def attach(self, client: Any) -> None:
        """The client started: observe its `stats()` from now on (metrics read from its counters)."""

    def detach(self, client: Any) -> None:
        """The client closed."""

    def send(
        self,
        client: Any,
        topic: str,
        message_type: MessageType,
        messages: Sequence[Message],
        message_ids: Sequence[str],
    ) -> SendSpan:
        """One SendMessage request (with its retries) is about to go out."""

    def receive(self, client: Any, topic: str, start: float | None = None) -> ReceiveSpan:
        """A receive begins (or began at `start`, epoch seconds, for a push consumer's receive that is
        reported once it returned messages)."""

    def process(self, client: Any, message: ReceivedMessage, waited: float) -> ProcessScope:
        """The listener is about to be called for `message`, `waited` seconds after it arrived."""

    def settle(self, client: Any, operation: str, topic: str, messages: Sequence[ReceivedMessage]) -> Span:
        """An ack (`operation` "ack"), a "change_invisible_duration" or a "forward_to_dead_letter_queue"
        of `messages` (all of `topic`) begins."""
