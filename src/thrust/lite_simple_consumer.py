"""`LiteSimpleConsumer`: a simple consumer bound to one LITE topic that receives, on demand, the lite topics
it subscribes to at run time (RocketMQ lite topics, docs/lite-topics.md).

Upstream's server support for lite simple consumers is planned for RocketMQ 5.5.1 (the Java client has
`LiteSimpleConsumerImpl`); `thrust serve` serves it already. Composition, as `LitePushConsumer`: the
receiving is a `SimpleConsumer`'s, subscribed to the bound topic with `*`; the lite subscription is
`thrust._lite.LiteSync`; acks and invisibility changes name each message's lite topic, which the server
needs to find it. What it does not do yet: announce itself as LITE_SIMPLE_CONSUMER (its session is the
simple consumer's, a SIMPLE_CONSUMER) and hear the server's NotifyUnsubscribeLiteCommand (the simple
consumer's Telemetry handler ignores it; the next full resync puts the lite topic back instead).
"""

from __future__ import annotations

from types import TracebackType
from typing import Unpack

from thrust._client import check
from thrust._client import client_config as _config
from thrust._codec import convert, validation
from thrust._codec.status import Code
from thrust._io.rpc import OK_OR_MULTIPLE, status_error
from thrust._io.session import ClientSession
from thrust._lite import RESYNC_INTERVAL, LiteSync, OffsetOption
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
from thrust.config import ClientConfig, ClientConfigFields
from thrust.errors import ClientClosedError
from thrust.message import ReceivedMessage
from thrust.simple_consumer import MAX_BATCH, SimpleConsumer

__all__ = ["LiteSimpleConsumer"]


class LiteSimpleConsumer:
    """Receives the lite topics it subscribes to, of one LITE topic, on demand.

    ```
    async with thrust.LiteSimpleConsumer(endpoints=..., group="g", bind_topic="chat") as consumer:
        await consumer.subscribe_lite("session-42")
        for message in await consumer.receive(16):
            await consumer.ack(message)   # or await message.ack()
    ```

    Args:
        config: a `ClientConfig`; or give its fields as keywords instead (`connection`).
        group: the consumer group.
        bind_topic: the parent topic, of type LITE.
        await_duration: as `SimpleConsumer`'s.
        invisible_duration: as `SimpleConsumer`'s.
        resync_interval: seconds between full resyncs of the lite topics with every broker (Java: 30).

    Server support: `thrust serve`; upstream plans it for RocketMQ 5.5.1.
    """

    def __init__(
        self,
        config: ClientConfig | None = None,
        *,
        group: str,
        bind_topic: str,
        await_duration: float = 20.0,
        invisible_duration: float = 30.0,
        resync_interval: float = RESYNC_INTERVAL,
        **connection: Unpack[ClientConfigFields],
    ) -> None:
        config = _config("LiteSimpleConsumer", config, connection)
        self._simple = SimpleConsumer(
            config,
            group=group,
            subscriptions={bind_topic: "*"},
            await_duration=await_duration,
            invisible_duration=invisible_duration,
        )
        self.config = config
        self.group = group
        self.bind_topic = bind_topic
        namespace = config.namespace
        self._group_pb = pb.Resource(resource_namespace=namespace, name=group)
        self._topic_pb = pb.Resource(resource_namespace=namespace, name=bind_topic)
        self._lite = LiteSync(
            bind_topic=bind_topic,
            topic_pb=self._topic_pb,
            group_pb=self._group_pb,
            session=lambda: self._simple.session,
            resync_interval=resync_interval,
        )
        self._closing = False

    @property
    def client_id(self) -> str | None:
        return self._simple.client_id

    @property
    def lite_topics(self) -> frozenset[str]:
        """The subscribed lite topics."""
        return frozenset(self._lite.subscription.names)

    # -- lifecycle -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the simple consumer, send the (empty) full set once, start the resync; idempotent."""
        if self._closing:
            raise ClientClosedError("the consumer is closed")
        await self._simple.start()
        await self._lite.start()

    async def __aenter__(self) -> LiteSimpleConsumer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop the resync and close the simple consumer; idempotent."""
        self._closing = True
        await self._lite.close()
        await self._simple.close()

    # -- lite subscriptions ------------------------------------------------------------------------------

    async def subscribe_lite(self, lite_topic: str, offset: OffsetOption | None = None) -> None:
        """As `LitePushConsumer.subscribe_lite`."""
        await self._lite.subscribe(lite_topic, offset)

    async def unsubscribe_lite(self, lite_topic: str) -> None:
        """As `LitePushConsumer.unsubscribe_lite`."""
        await self._lite.unsubscribe(lite_topic)

    # -- receive and settle ------------------------------------------------------------------------------

    async def receive(
        self, max_messages: int = MAX_BATCH, invisible_duration: float | None = None
    ) -> list[ReceivedMessage]:
        """As `SimpleConsumer.receive`: messages of the subscribed lite topics (each in order: a lite
        topic's next message comes once the earlier ones are acked), or [] after the long poll."""
        messages = await self._simple.receive(max_messages, invisible_duration)
        for m in messages:
            m._bind(self)  # `message.ack()` comes here, where the lite topic is named
        return messages

    async def ack(self, message: ReceivedMessage) -> None:
        """Acknowledge `message` (its AckMessageEntry names its lite topic).

        Raises `InvalidReceiptHandleError` when its invisible duration already ran out, or another typed
        error."""
        session = self._session()
        entry = spb.AckMessageEntry(message_id=message.message_id, receipt_handle=message.receipt_handle)
        if message.lite_topic is not None:
            entry.lite_topic = message.lite_topic
        request = spb.AckMessageRequest(
            group=self._group_pb, topic=session.resource(message.topic), entries=[entry]
        )
        response, request_id = await session.call(
            message.endpoint or session.access_point,
            "AckMessage",
            request,
            ok=_ANY_STATUS,
            with_request_id=True,
        )
        for result in response.entries:
            error = status_error(result.status, request_id)
            if error is not None:
                raise error
        error = status_error(response.status, request_id, OK_OR_MULTIPLE)
        if error is not None:
            raise error

    async def change_invisible_duration(self, message: ReceivedMessage, seconds: float) -> None:
        """As `SimpleConsumer.change_invisible_duration`, naming the message's lite topic."""
        check(validation.check_change_invisible_duration, float(seconds))
        session = self._session()
        request = spb.ChangeInvisibleDurationRequest(
            group=self._group_pb,
            topic=session.resource(message.topic),
            receipt_handle=message.receipt_handle,
            invisible_duration=convert.duration(float(seconds)),
            message_id=message.message_id,
        )
        if message.lite_topic is not None:
            request.lite_topic = message.lite_topic
        response = await session.call(
            message.endpoint or session.access_point, "ChangeInvisibleDuration", request
        )
        if response.receipt_handle:
            message._replace_receipt_handle(response.receipt_handle)

    def _session(self) -> ClientSession:
        if self._closing:
            raise ClientClosedError("the consumer is closed")
        return self._simple.session

    def __repr__(self) -> str:
        return (
            f"<LiteSimpleConsumer group={self.group!r} bind_topic={self.bind_topic!r} "
            f"lite_topics={len(self._lite.subscription)}>"
        )


_ANY_STATUS: frozenset[int] = frozenset(int(c) for c in Code)
