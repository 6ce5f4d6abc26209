"""`LitePushConsumer`: a push consumer bound to one LITE topic that receives the lite topics it subscribes
to at run time (RocketMQ 5.5, RIP-83; docs/lite-topics.md).

```python
import thrust

async def handle(message: thrust.ReceivedMessage) -> None:
    print(message.lite_topic, message.body)

async with thrust.LitePushConsumer(
    endpoints="127.0.0.1:8081", group="chat-service", bind_topic="chat", listener=handle
) as consumer:
    await consumer.subscribe_lite("session-42")
    ...
    await consumer.unsubscribe_lite("session-42")
```

Composition, not a copy: the receiving, the listener pool and the settling are a `PushConsumer`'s,
subscribed to the bound topic with `*`, which announces itself as a LITE_PUSH_CONSUMER and settles lite
messages under their lite topic. What it adds, as the Java client's `LitePushConsumerImpl`, is the lite
subscription (`thrust._lite.LiteSync`, the Java client's `LiteSubscriptionManager`:
apache/rocketmq-clients `java/client/.../impl/consumer/LiteSubscriptionManager.java`):
`SyncLiteSubscription` to every endpoint of the route (PARTIAL_ADD on
`subscribe_lite`, PARTIAL_REMOVE on `unsubscribe_lite`, COMPLETE_ADD of the whole set right after start
and every 30 s), the quota and name-size checks from the server's Settings before any I/O, and the
server's NotifyUnsubscribeLiteCommand, which drops a lite topic from the set.
"""

from __future__ import annotations

from types import TracebackType
from typing import Unpack

from thrust._client import client_config as _config
from thrust._lite import RESYNC_INTERVAL, LiteSync, OffsetOption
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust._push.model import ACK_RETRY_WINDOW, MiB
from thrust.config import ClientConfig, ClientConfigFields
from thrust.errors import ClientClosedError
from thrust.push_consumer import ACK_BATCH_SIZE, Listener, PushConsumer, PushConsumerStats

__all__ = ["LitePushConsumer", "OffsetOption"]


class _Hooks:
    """What the push consumer's Telemetry handler passes on: the server's unsubscribe notice."""

    def __init__(self, sync: LiteSync) -> None:
        self._sync = sync

    def on_unsubscribed(self, lite_topic: str) -> None:
        self._sync.on_unsubscribed(lite_topic)


class LitePushConsumer:
    """Consumes the lite topics it subscribes to, of one LITE topic, and pushes each message to `listener`.

    Args:
        config: a `ClientConfig`; or give its fields as keywords instead (`connection`).
        group: the consumer group. A FIFO group (`--group NAME:fifo` on `thrust serve`) hands each lite
            topic's messages to the listener one after another, in send order; otherwise a receive's
            messages of one lite topic may run concurrently (the server still delivers a lite topic's next
            messages only once the earlier ones are settled).
        bind_topic: the parent topic, of type LITE.
        listener: as `PushConsumer`'s; each message's `lite_topic` says which lite topic it came from.
        resync_interval: seconds between full resyncs of the lite topics with every broker (Java: 30).
        consumption_thread_count: and the options after it: `PushConsumer`'s, passed to the push consumer
            underneath.

    `subscribe_lite` / `unsubscribe_lite` change the lite topics at run time; `lite_topics` is the current
    set. The server may take a lite topic away (an exclusive group whose other client subscribed to it):
    it is then dropped from the set (`unsubscribe_notices` counts those). Server support: RocketMQ 5.5 and
    `thrust serve`; a 5.4 proxy answers NOT_IMPLEMENTED (`thrust.UnsupportedError`).
    """

    def __init__(
        self,
        config: ClientConfig | None = None,
        *,
        group: str,
        bind_topic: str,
        listener: Listener,
        resync_interval: float = RESYNC_INTERVAL,
        consumption_thread_count: int = 20,
        async_concurrency: int = 64,
        max_cache_message_count: int = 4096,
        max_cache_message_bytes: int = 64 * MiB,
        receives_per_queue: int = 2,
        ack_batch_size: int = ACK_BATCH_SIZE,
        ack_linger: float = 0.01,
        ack_retry_window: float = ACK_RETRY_WINDOW,
        fifo_parallel_groups: bool = False,
        shutdown_grace: float = 10.0,
        scan_interval: float = 5.0,
        **connection: Unpack[ClientConfigFields],
    ) -> None:
        config = _config("LitePushConsumer", config, connection)
        self._push = PushConsumer(
            config,
            group=group,
            subscriptions={bind_topic: "*"},
            listener=listener,
            consumption_thread_count=consumption_thread_count,
            async_concurrency=async_concurrency,
            max_cache_message_count=max_cache_message_count,
            max_cache_message_bytes=max_cache_message_bytes,
            receives_per_queue=receives_per_queue,
            ack_batch_size=ack_batch_size,
            ack_linger=ack_linger,
            ack_retry_window=ack_retry_window,
            fifo_parallel_groups=fifo_parallel_groups,
            shutdown_grace=shutdown_grace,
            scan_interval=scan_interval,
        )
        self._push._client_type = pb.LITE_PUSH_CONSUMER
        self.config = self._push.config
        self.group = group
        self.bind_topic = bind_topic
        namespace = self.config.namespace
        self._lite = LiteSync(
            bind_topic=bind_topic,
            topic_pb=pb.Resource(resource_namespace=namespace, name=bind_topic),
            group_pb=pb.Resource(resource_namespace=namespace, name=group),
            session=lambda: self._push.session,
            resync_interval=resync_interval,
        )
        self._push._lite_hooks = _Hooks(self._lite)
        self._closing = False

    @property
    def client_id(self) -> str | None:
        return self._push.client_id

    @property
    def push_consumer(self) -> PushConsumer:
        """The push consumer underneath (internal API, for tests and tools)."""
        return self._push

    @property
    def lite_topics(self) -> frozenset[str]:
        """The subscribed lite topics."""
        return frozenset(self._lite.subscription.names)

    @property
    def resync_interval(self) -> float:
        return self._lite.resync_interval

    @property
    def unsubscribe_notices(self) -> int:
        """How many lite topics the server took away (NotifyUnsubscribeLiteCommand)."""
        return self._lite.unsubscribe_notices

    @property
    def lite_subscription_quota(self) -> int | None:
        """The server's `lite_subscription_quota` (None until a server sent one)."""
        return self._lite.subscription.quota

    @property
    def max_lite_topic_size(self) -> int:
        """The longest lite topic name in UTF-8 bytes (the server's, else 64)."""
        return self._lite.subscription.max_size

    # -- lifecycle -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the push consumer, send the (empty) full set once, and start the 30 s resync; idempotent."""
        if self._closing:
            raise ClientClosedError("the consumer is closed")
        await self._push.start()
        await self._lite.start()

    async def __aenter__(self) -> LitePushConsumer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop the resync and close the push consumer (`PushConsumer.close`); the server drops this
        client's lite subscriptions when it leaves. Idempotent."""
        self._closing = True
        await self._lite.close()
        await self._push.close()

    # -- lite subscriptions ------------------------------------------------------------------------------

    async def subscribe_lite(self, lite_topic: str, offset: OffsetOption | None = None) -> None:
        """Receive `lite_topic` of the bound topic from now on; no-op when already subscribed.

        Checked before any I/O against the server's Settings: the name (`[a-zA-Z0-9_-]`, at most
        `max_lite_topic_size` UTF-8 bytes) and the quota. `offset` moves the group's position in that lite
        topic first (`OffsetOption`).

        Raises:
            ValidationError(ILLEGAL_LITE_TOPIC): a bad name.
            LiteSubscriptionQuotaExceededError: one more lite topic would exceed the quota.
            ClientClosedError: the consumer is not running.
            ThrustError: a broker refused it (the subscription is not recorded then).
        """
        await self._lite.subscribe(lite_topic, offset)

    async def unsubscribe_lite(self, lite_topic: str) -> None:
        """Stop receiving `lite_topic`; no-op when not subscribed. Messages already received are still
        consumed and settled.

        Raises:
            ClientClosedError: the consumer is not running.
            ThrustError: a broker refused it (the lite topic stays subscribed then).
        """
        await self._lite.unsubscribe(lite_topic)

    # -- statistics ---------------------------------------------------------------------------------------

    def stats(self) -> PushConsumerStats:
        """The push consumer's `stats()`."""
        return self._push.stats()

    def __repr__(self) -> str:
        return (
            f"<LitePushConsumer group={self.group!r} bind_topic={self.bind_topic!r} "
            f"lite_topics={len(self._lite.subscription)} quota={self._lite.subscription.quota}>"
        )
