"""The push consumer's Telemetry handler: its Settings, VerifyMessageCommand, the server's Settings."""

from __future__ import annotations

import asyncio

from thrust._codec import convert
from thrust._codec.status import Code
from thrust._core.endpoints import Endpoint
from thrust._core.fifo import fifo_settle_config
from thrust._io.telemetry import TelemetryHandler
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
from thrust._push.state import PushState
from thrust.message import ConsumeResult


class _PushTelemetry(TelemetryHandler):
    def __init__(self, consumer: PushState) -> None:
        self._consumer = consumer

    def settings_command(self) -> pb.Settings:
        c = self._consumer
        s = pb.Settings()
        sub = s.subscription
        sub.group.CopyFrom(c._group_pb)
        for topic, expr in c._filter_pb.items():
            sub.subscriptions.add(topic=c._topic_pb[topic], expression=expr)
        return s

    async def on_verify_message(
        self, endpoint: Endpoint, command: spb.VerifyMessageCommand
    ) -> tuple[int, str]:
        """Consume the message once with the listener, never ack it; OK when the listener returns SUCCESS
        (or None), else FAILED_TO_CONSUME_MESSAGE (Java PushConsumerImpl via its consume service:
        docs/protocol.md §4.4).

        Off the hot path (an operator's console command), so it runs alone: a plain-function listener on a
        worker thread of the loop's default executor, never on the loop itself."""
        c = self._consumer
        try:
            message = convert.received_from_pb(command.message, endpoint)
        except convert.Corrupted as exc:
            return Code.MESSAGE_CORRUPTED, f"corrupted message: {exc.reason}"
        listener = c.listener
        try:
            if c._executor is not None and c._executor.is_async:
                result = await listener(message)
            else:
                result = await asyncio.to_thread(listener, message)
        except Exception as exc:  # the listener's failure is the verification's answer
            return Code.FAILED_TO_CONSUME_MESSAGE, f"listener raised {type(exc).__name__}: {exc}"
        if result is ConsumeResult.SUCCESS or result is None:  # None is SUCCESS, as for consumption
            return Code.OK, "OK"
        return Code.FAILED_TO_CONSUME_MESSAGE, f"listener returned {result!r}"

    def on_settings(self, endpoint: Endpoint, settings: pb.Settings) -> None:
        c = self._consumer
        if c._session is None:
            return
        # Server Settings win: batch size, long polling, request timeout (fifo, backoff: read where used).
        c._budget.apply_settings(c._session.settings)
        # FIFO queues keep one receive at a time: a second receive could only come back out of order.
        fifo = c._session.settings.fifo
        c._budget.max_receives_in_flight = 1 if fifo else c._receives_per_queue
        if c._acks is not None:
            # A FIFO group's next message waits for each ack (docs/protocol.md §7.6): no linger, FIFO retry
            # schedule.
            c._acks.batcher.config = fifo_settle_config(c._ack_config) if fifo else c._ack_config
        for q in c._queues.values():
            q.event.set()
