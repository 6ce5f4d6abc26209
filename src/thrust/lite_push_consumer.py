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
messages under their lite topic. What this module adds is the Java client's `LiteSubscriptionManager`
(apache/rocketmq-clients `java/client/.../impl/consumer/LiteSubscriptionManager.java` and
`LitePushConsumerImpl.java`): `SyncLiteSubscription` to every endpoint of the route (PARTIAL_ADD on
`subscribe_lite`, PARTIAL_REMOVE on `unsubscribe_lite`, COMPLETE_ADD of the whole set right after start
and every 30 s), the quota and name-size checks from the server's Settings before any I/O, and the
server's NotifyUnsubscribeLiteCommand, which drops a lite topic from the set.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Iterable
from types import TracebackType
from typing import ClassVar, Unpack

from thrust._client import client_config as _config
from thrust._codec import validation
from thrust._codec.status import Code
from thrust._core.endpoints import Endpoint
from thrust._core.lite import LiteSubscription
from thrust._io.session import ClientSession
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
from thrust._push.model import ACK_RETRY_WINDOW, MiB
from thrust.config import ClientConfig, ClientConfigFields
from thrust.errors import ClientClosedError, error_for_status, validation_error
from thrust.push_consumer import Listener, PushConsumer, PushConsumerStats

__all__ = ["LitePushConsumer", "OffsetOption"]

logger = logging.getLogger("thrust.lite")

#: The Java client's full resync period (`LiteSubscriptionManager.startUp`: every 30 s).
RESYNC_INTERVAL = 30.0


@dataclasses.dataclass(frozen=True, slots=True)
class OffsetOption:
    """Where a group starts reading a lite topic it subscribes to (`subscribe_lite(..., offset=...)`), as the
    Java client's `OffsetOption`: `OffsetOption.MIN` (the oldest retained message), `OffsetOption.MAX`
    (only messages sent from now on), `OffsetOption.LAST` (where the group left off: the default),
    `OffsetOption.at(n)` (offset n), `OffsetOption.tail(n)` (n messages back from where the group is) or
    `OffsetOption.since(epoch_seconds)` (which upstream 5.5.0 ignores for now, and so does `thrust serve`).
    """

    kind: str
    value: int = 0

    MIN: ClassVar[OffsetOption]
    MAX: ClassVar[OffsetOption]
    LAST: ClassVar[OffsetOption]

    @staticmethod
    def at(offset: int) -> OffsetOption:
        """Start at queue offset `offset` of the lite topic."""
        return OffsetOption("offset", int(offset))

    @staticmethod
    def tail(count: int) -> OffsetOption:
        """Start `count` messages before the group's current position."""
        return OffsetOption("tail", int(count))

    @staticmethod
    def since(timestamp: float) -> OffsetOption:
        """Start at the first message stored at or after `timestamp` (epoch seconds)."""
        return OffsetOption("timestamp", int(timestamp * 1000))

    def to_pb(self) -> pb.OffsetOption:
        """The protocol's `OffsetOption`."""
        policy = pb.OffsetOption.Policy
        if self.kind == "min":
            return pb.OffsetOption(policy=policy.MIN)
        if self.kind == "max":
            return pb.OffsetOption(policy=policy.MAX)
        if self.kind == "last":
            return pb.OffsetOption(policy=policy.LAST)
        if self.kind == "offset":
            return pb.OffsetOption(offset=self.value)
        if self.kind == "tail":
            return pb.OffsetOption(tail_n=self.value)
        return pb.OffsetOption(timestamp=self.value)


OffsetOption.MIN = OffsetOption("min")
OffsetOption.MAX = OffsetOption("max")
OffsetOption.LAST = OffsetOption("last")


class _Hooks:
    """What the push consumer's Telemetry handler passes on: Settings and the unsubscribe notice."""

    def __init__(self, owner: LitePushConsumer) -> None:
        self._owner = owner

    def on_settings(self, settings: pb.Settings) -> None:
        if not settings.HasField("subscription"):
            return
        sub = settings.subscription
        self._owner._lite.apply_settings(
            sub.lite_subscription_quota if sub.HasField("lite_subscription_quota") else None,
            sub.max_lite_topic_size if sub.HasField("max_lite_topic_size") else None,
        )

    def on_unsubscribed(self, lite_topic: str) -> None:
        owner = self._owner
        if lite_topic and owner._lite.discard(lite_topic):
            owner.unsubscribe_notices += 1
            logger.info(
                "the server unsubscribed lite topic %r of %r (group %r)",
                lite_topic,
                owner.bind_topic,
                owner.group,
            )


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
        ack_batch_size: int = 32,
        ack_linger: float = 0.01,
        ack_retry_window: float = ACK_RETRY_WINDOW,
        fifo_parallel_groups: bool = False,
        shutdown_grace: float = 10.0,
        scan_interval: float = 5.0,
        **connection: Unpack[ClientConfigFields],
    ) -> None:
        if not resync_interval > 0:
            raise ValueError("resync_interval must be > 0")
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
        self._push._lite_hooks = _Hooks(self)
        self.config = self._push.config
        self.group = group
        self.bind_topic = bind_topic
        self.resync_interval = resync_interval
        self.unsubscribe_notices = 0
        self._lite = LiteSubscription()
        self._topic_pb = pb.Resource(resource_namespace=self.config.namespace, name=bind_topic)
        self._group_pb = pb.Resource(resource_namespace=self.config.namespace, name=group)
        # Subscribing, unsubscribing and the full resync one at a time: a resync's snapshot taken while a
        # PARTIAL_ADD is on its way would otherwise remove that lite topic again.
        self._lock = asyncio.Lock()
        self._resync_task: asyncio.Task[None] | None = None
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
        return frozenset(self._lite.names)

    @property
    def lite_subscription_quota(self) -> int | None:
        """The server's `lite_subscription_quota` (None until a server sent one)."""
        return self._lite.quota

    @property
    def max_lite_topic_size(self) -> int:
        """The longest lite topic name in UTF-8 bytes (the server's, else 64)."""
        return self._lite.max_size

    # -- lifecycle -----------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the push consumer, send the (empty) full set once, and start the 30 s resync; idempotent."""
        if self._closing:
            raise ClientClosedError("the consumer is closed")
        await self._push.start()
        if self._resync_task is None:
            await self._resync_once()  # Java's startUp: syncAllLiteSubscription first
            self._resync_task = asyncio.get_running_loop().create_task(
                self._resync_loop(), name="thrust-lite-resync"
            )

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
        task = self._resync_task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
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
        session = await self._running()
        async with self._lock:
            if lite_topic in self._lite:
                return
            endpoints = await self._endpoints(session)  # the Settings (quota, size) arrive with the sessions
            try:
                self._lite.check_add(lite_topic)
            except validation.Invalid as exc:
                if exc.code == Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED:
                    raise error_for_status(exc.code, exc.message) from None
                raise validation_error(exc.message, exc.code) from None
            await self._sync(session, endpoints, pb.PARTIAL_ADD, (lite_topic,), offset)
            self._lite.add(lite_topic)
        logger.info("subscribed lite topic %r of %r (group %r)", lite_topic, self.bind_topic, self.group)

    async def unsubscribe_lite(self, lite_topic: str) -> None:
        """Stop receiving `lite_topic`; no-op when not subscribed. Messages already received are still
        consumed and settled.

        Raises:
            ClientClosedError: the consumer is not running.
            ThrustError: a broker refused it (the lite topic stays subscribed then).
        """
        session = await self._running()
        async with self._lock:
            if lite_topic not in self._lite:
                return
            endpoints = await self._endpoints(session)
            await self._sync(session, endpoints, pb.PARTIAL_REMOVE, (lite_topic,), None)
            self._lite.discard(lite_topic)
        logger.info("unsubscribed lite topic %r of %r (group %r)", lite_topic, self.bind_topic, self.group)

    async def _running(self) -> ClientSession:
        if self._closing:
            raise ClientClosedError("the consumer is closed")
        if self._resync_task is None:
            raise ClientClosedError("the consumer is not started: await start() or use `async with`")
        return self._push.session

    async def _endpoints(self, session: ClientSession) -> list[Endpoint]:
        route = await session.route(self.bind_topic)
        endpoints = sorted(route.endpoints, key=str)
        # Each endpoint's session is its Settings handshake: after it, the quota and size are known.
        await asyncio.gather(*(session.session(e) for e in endpoints))
        return list(endpoints)

    async def _sync(
        self,
        session: ClientSession,
        endpoints: Iterable[Endpoint],
        action: int,
        names: Iterable[str],
        offset: OffsetOption | None,
    ) -> None:
        """One SyncLiteSubscription to every endpoint of the route (Java sends it to all of them)."""
        request = spb.SyncLiteSubscriptionRequest(
            action=action,  # type: ignore[arg-type]
            topic=self._topic_pb,
            group=self._group_pb,
            lite_topic_set=list(names),
        )
        if offset is not None:
            request.offset_option.CopyFrom(offset.to_pb())
        await asyncio.gather(*(session.call(e, "SyncLiteSubscription", request) for e in endpoints))

    async def _resync_once(self) -> None:
        """COMPLETE_ADD of the whole set (`syncAllLiteSubscription`); failures are logged, as Java does."""
        try:
            session = self._push.session
            async with self._lock:
                endpoints = await self._endpoints(session)
                self._lite.check_quota(0)
                await self._sync(session, endpoints, pb.COMPLETE_ADD, self._lite.names, None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning(
                "lite subscription resync of %r (group %r) failed: %s", self.bind_topic, self.group, exc
            )

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.resync_interval)
            await self._resync_once()

    # -- statistics ---------------------------------------------------------------------------------------

    def stats(self) -> PushConsumerStats:
        """The push consumer's `stats()`."""
        return self._push.stats()

    def __repr__(self) -> str:
        return (
            f"<LitePushConsumer group={self.group!r} bind_topic={self.bind_topic!r} "
            f"lite_topics={len(self._lite)} quota={self._lite.quota}>"
        )
