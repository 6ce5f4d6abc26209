"""What the lite consumers share (RocketMQ 5.5 lite topics, docs/lite-topics.md): the Java client's
`LiteSubscriptionManager` (apache/rocketmq-clients `java/client/.../impl/consumer/LiteSubscriptionManager
.java`) on top of a client's session.

`LiteSync` sends SyncLiteSubscription to every endpoint of the bound topic's route: PARTIAL_ADD on
`subscribe`, PARTIAL_REMOVE on `unsubscribe`, COMPLETE_ADD of the whole set right after the start and every
`resync_interval` seconds (Java: 30). Before a PARTIAL_ADD it checks the name and the quota against the
limits the server sent in Settings (`ClientSettings.lite_subscription_quota`, `max_lite_topic_size`). The
set itself is `_core/lite.py`'s `LiteSubscription`. One lock serialises the three: a resync's snapshot
taken while a PARTIAL_ADD is on its way would otherwise remove that lite topic again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterable
from typing import ClassVar

from thrust._codec import validation
from thrust._codec.status import Code
from thrust._core.endpoints import Endpoint
from thrust._core.lite import LiteSubscription
from thrust._io.session import ClientSession
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
from thrust.errors import ClientClosedError, error_for_status, validation_error

__all__ = ["RESYNC_INTERVAL", "LiteSync", "OffsetOption"]

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


class LiteSync:
    """One lite consumer's lite topics, kept in step with every broker of its bound topic.

    Args:
        bind_topic: the parent topic (LITE).
        topic_pb / group_pb: its resource and the consumer group's, as sent.
        session: the client's session (raises when the client is not started).
        resync_interval: seconds between full resyncs.
    """

    def __init__(
        self,
        *,
        bind_topic: str,
        topic_pb: pb.Resource,
        group_pb: pb.Resource,
        session: Callable[[], ClientSession],
        resync_interval: float,
    ) -> None:
        if not resync_interval > 0:
            raise ValueError("resync_interval must be > 0")
        self.bind_topic = bind_topic
        self.resync_interval = resync_interval
        self.subscription = LiteSubscription()
        self.unsubscribe_notices = 0
        self._topic_pb = topic_pb
        self._group_pb = group_pb
        self._session = session
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    @property
    def running(self) -> bool:
        return self._task is not None and not self._closing

    async def start(self) -> None:
        """Send the (empty) full set once, then resync every `resync_interval`; idempotent."""
        if self._closing:
            raise ClientClosedError("the consumer is closed")
        if self._task is None:
            await self._resync_once()  # Java's startUp: syncAllLiteSubscription first
            self._task = asyncio.get_running_loop().create_task(
                self._resync_loop(), name="thrust-lite-resync"
            )

    async def close(self) -> None:
        """Stop the resync; idempotent."""
        self._closing = True
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def subscribe(self, lite_topic: str, offset: OffsetOption | None) -> None:
        """PARTIAL_ADD, after the name and quota checks (see `LitePushConsumer.subscribe_lite`)."""
        session = self._running()
        async with self._lock:
            if lite_topic in self.subscription:
                return
            endpoints = await self._endpoints(session)  # the Settings (quota, size) arrive with the sessions
            try:
                self.subscription.check_add(lite_topic)
            except validation.Invalid as exc:
                if exc.code == Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED:
                    raise error_for_status(exc.code, exc.message) from None
                raise validation_error(exc.message, exc.code) from None
            await self._sync(session, endpoints, pb.PARTIAL_ADD, (lite_topic,), offset)
            self.subscription.add(lite_topic)
        logger.info("subscribed lite topic %r of %r", lite_topic, self.bind_topic)

    async def unsubscribe(self, lite_topic: str) -> None:
        """PARTIAL_REMOVE (see `LitePushConsumer.unsubscribe_lite`)."""
        session = self._running()
        async with self._lock:
            if lite_topic not in self.subscription:
                return
            endpoints = await self._endpoints(session)
            await self._sync(session, endpoints, pb.PARTIAL_REMOVE, (lite_topic,), None)
            self.subscription.discard(lite_topic)
        logger.info("unsubscribed lite topic %r of %r", lite_topic, self.bind_topic)

    def on_unsubscribed(self, lite_topic: str) -> None:
        """The server's NotifyUnsubscribeLiteCommand (`onNotifyUnsubscribeLiteCommand`)."""
        if lite_topic and self.subscription.discard(lite_topic):
            self.unsubscribe_notices += 1
            logger.info("the server unsubscribed lite topic %r of %r", lite_topic, self.bind_topic)

    def _running(self) -> ClientSession:
        if self._closing:
            raise ClientClosedError("the consumer is closed")
        if self._task is None:
            raise ClientClosedError("the consumer is not started: await start() or use `async with`")
        return self._session()

    async def _endpoints(self, session: ClientSession) -> list[Endpoint]:
        route = await session.route(self.bind_topic)
        endpoints = sorted(route.endpoints, key=str)
        # Each endpoint's session is its Settings handshake: after it, the quota and size are known.
        await asyncio.gather(*(session.session(e) for e in endpoints))
        settings = session.settings
        self.subscription.apply_settings(settings.lite_subscription_quota, settings.max_lite_topic_size)
        return endpoints

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
            session = self._session()
            async with self._lock:
                endpoints = await self._endpoints(session)
                self.subscription.check_quota(0)
                await self._sync(session, endpoints, pb.COMPLETE_ADD, self.subscription.names, None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning("lite subscription resync of %r failed: %s", self.bind_topic, exc)

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.resync_interval)
            await self._resync_once()
