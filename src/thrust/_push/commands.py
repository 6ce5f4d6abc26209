"""The push consumer's answers to the server's Telemetry commands: the Settings it announces, a
VerifyMessageCommand run through the listener, and the server's Settings applied."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from thrust._codec import convert
from thrust._codec.status import Code
from thrust._core.endpoints import Endpoint
from thrust._io.telemetry import TelemetryHandler
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
from thrust.message import ConsumeResult, ReceivedMessage


class LiteHooks(Protocol):
    """What a `LitePushConsumer` hears from the Telemetry stream beside its push consumer's commands (the
    lite limits of the server's Settings are in `ClientSettings`)."""

    def on_unsubscribed(self, lite_topic: str) -> None:
        """NotifyUnsubscribeLiteCommand: the server took this lite topic away."""


class PushCommands(TelemetryHandler):
    """Given only what the commands need: the subscription's resources, the listener, and a callback for
    when the session's Settings changed (the consumer applies them to its parts)."""

    def __init__(
        self,
        *,
        group_pb: pb.Resource,
        topic_pb: dict[str, pb.Resource],
        filter_pb: dict[str, pb.FilterExpression],
        listener: Callable[[ReceivedMessage], Any],
        listener_is_async: bool,
        settings_changed: Callable[[], None],
        lite: LiteHooks | None = None,
    ) -> None:
        self._group_pb = group_pb
        self._topic_pb = topic_pb
        self._filter_pb = filter_pb
        self._listener = listener
        self._listener_is_async = listener_is_async
        self._settings_changed = settings_changed
        self._lite = lite

    def settings_command(self) -> pb.Settings:
        s = pb.Settings()
        sub = s.subscription
        sub.group.CopyFrom(self._group_pb)
        for topic, expr in self._filter_pb.items():
            sub.subscriptions.add(topic=self._topic_pb[topic], expression=expr)
        return s

    async def on_verify_message(
        self, endpoint: Endpoint, command: spb.VerifyMessageCommand
    ) -> tuple[int, str]:
        """Consume the message once with the listener, never ack it; OK when the listener returns SUCCESS
        (or None), else FAILED_TO_CONSUME_MESSAGE (Java PushConsumerImpl via its consume service:
        docs/protocol.md §4.4).

        Off the hot path (an operator's console command), so it runs alone: a plain-function listener on a
        worker thread of the loop's default executor, never on the loop itself."""
        try:
            message = convert.received_from_pb(command.message, endpoint)
        except convert.Corrupted as exc:
            return Code.MESSAGE_CORRUPTED, f"corrupted message: {exc.reason}"
        listener = self._listener
        try:
            if self._listener_is_async:
                result = await listener(message)
            else:
                result = await asyncio.to_thread(listener, message)
        except Exception as exc:  # the listener's failure is the verification's answer
            return Code.FAILED_TO_CONSUME_MESSAGE, f"listener raised {type(exc).__name__}: {exc}"
        if result is ConsumeResult.SUCCESS or result is None:  # None is SUCCESS, as for consumption
            return Code.OK, "OK"
        return Code.FAILED_TO_CONSUME_MESSAGE, f"listener returned {result!r}"

    def on_settings(self, endpoint: Endpoint, settings: pb.Settings) -> None:
        # The session has merged them already (fifo, backoff: read where used).
        self._settings_changed()

    def on_notify_unsubscribe_lite(
        self, endpoint: Endpoint, command: spb.NotifyUnsubscribeLiteCommand
    ) -> None:
        if self._lite is not None:
            self._lite.on_unsubscribed(command.lite_topic)
