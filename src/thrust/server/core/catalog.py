"""Topics and consumer groups of one embedded server, shared by all of its brokers.

Upstream keeps topic config in the NameServer/broker (`TopicConfig`) and group config in the broker's
`SubscriptionGroupConfig`; a test server only needs the parts clients observe: the queue count and
accepted message types (QueryRoute, docs/protocol.md §3.2), and per group the FIFO flag and retry policy sent
in Settings (docs/protocol.md §4.2, §4.3).
"""

from __future__ import annotations

from collections.abc import Iterable

from thrust._codec.status import Code
from thrust.server.core.model import BrokerError, GroupInfo, GroupRetryPolicy, MessageType, TopicInfo

__all__ = ["DLQ_PREFIX", "Catalog", "dead_letter_topic"]

#: Upstream's dead-letter topic prefix (`MixAll.DLQ_GROUP_TOPIC_PREFIX`, docs/protocol.md §7.5).
DLQ_PREFIX = "%DLQ%"

# Every type but PRIORITY: a topic accepting PRIORITY messages is served highest queue first (see
# `Broker.pop`), which would starve the low queues of an auto-created topic's NORMAL messages. Upstream
# creates topics as NORMAL, and a priority needs a topic created as PRIORITY there too.
_AUTO_TYPES = frozenset(MessageType) - {MessageType.PRIORITY}


def dead_letter_topic(group: str) -> str:
    """The name of `group`'s dead-letter topic: `%DLQ%<group>`."""
    return DLQ_PREFIX + group


class Catalog:
    """Topics and groups. Not thread-safe (the server runs it on one event loop).

    Args:
        auto_create_topics: `topic()` creates unknown topics (default queue count, every message
            type but PRIORITY) instead of raising TOPIC_NOT_FOUND, for tests.
        default_queues: queue count of auto-created topics.
        auto_create_groups: `group()` creates unknown groups (non-FIFO, default retry policy) instead
            of raising CONSUMER_GROUP_NOT_FOUND, as a broker with `autoCreateSubscriptionGroup=true`
            (upstream's default) does on its first pop
            (`SubscriptionGroupManager.findSubscriptionGroupConfig`).
    """

    __slots__ = ("_auto_create_groups", "_auto_create_topics", "_default_queues", "_groups", "_topics")

    def __init__(
        self, *, auto_create_topics: bool = False, default_queues: int = 4, auto_create_groups: bool = True
    ) -> None:
        if default_queues < 1:
            raise BrokerError(Code.BAD_REQUEST, f"default_queues must be >= 1, got {default_queues}")
        self._auto_create_topics = auto_create_topics
        self._default_queues = default_queues
        self._auto_create_groups = auto_create_groups
        self._topics: dict[str, TopicInfo] = {}
        self._groups: dict[str, GroupInfo] = {}

    def create_topic(
        self,
        name: str,
        queues: int = 4,
        types: Iterable[MessageType] = (MessageType.NORMAL,),
        brokers: Iterable[str] | None = None,
    ) -> TopicInfo:
        """Create (or reconfigure) a topic with `queues` queues accepting `types`, hosted on the brokers
        named in `brokers` (None: every broker); returns its info.

        Re-creating an existing topic replaces its info. Brokers add queues when the count grows;
        when it shrinks the extra queues keep their messages but receive no new ones.

        Raises:
            BrokerError(BAD_REQUEST): empty name, `queues < 1`, no message type, or an empty `brokers`.
        """
        try:
            kinds = frozenset(MessageType(t) for t in types)
        except ValueError as exc:
            raise BrokerError(Code.BAD_REQUEST, f"unknown message type: {exc}") from None
        if not name:
            raise BrokerError(Code.BAD_REQUEST, "topic name is empty")
        if queues < 1:
            raise BrokerError(Code.BAD_REQUEST, f"a topic needs at least one queue, got {queues}")
        if not kinds:
            raise BrokerError(Code.BAD_REQUEST, "a topic must accept at least one message type")
        hosts = None if brokers is None else frozenset(brokers)
        if hosts is not None and not hosts:
            raise BrokerError(Code.BAD_REQUEST, f"topic {name!r} must live on at least one broker")
        info = TopicInfo(name=name, queues=queues, types=kinds, brokers=hosts)
        self._topics[name] = info
        return info

    def topic(self, name: str) -> TopicInfo:
        """The topic `name`.

        Unknown topics are created when `auto_create_topics` is set (`default_queues` queues, every
        message type but PRIORITY; a `%DLQ%` name gets the dead-letter shape: 1 queue, NORMAL).

        Raises:
            BrokerError(TOPIC_NOT_FOUND): unknown and auto-creation is off.
        """
        info = self._topics.get(name)
        if info is not None:
            return info
        if not self._auto_create_topics or not name:
            raise BrokerError(Code.TOPIC_NOT_FOUND, f"topic {name!r} does not exist")
        if name.startswith(DLQ_PREFIX):
            return self.create_topic(name, 1, (MessageType.NORMAL,))
        return self.create_topic(name, self._default_queues, _AUTO_TYPES)

    def dead_letter_topic(self, group: str) -> TopicInfo:
        """The DLQ topic `%DLQ%<group>`, created (1 queue, NORMAL) on first use.

        Upstream creates it when the first message is sent back to the DLQ; consumers can then
        subscribe to it like any topic.
        """
        name = dead_letter_topic(group)
        info = self._topics.get(name)
        if info is None:
            info = self.create_topic(name, 1, (MessageType.NORMAL,))
        return info

    def create_group(
        self,
        name: str,
        *,
        fifo: bool = False,
        retry: GroupRetryPolicy | None = None,
        lite_exclusive: bool = False,
        lite_quota: int | None = None,
        lite_bind_topic: str | None = None,
    ) -> GroupInfo:
        """Create (or reconfigure) a consumer group; returns its info.

        Raises:
            BrokerError(BAD_REQUEST): empty name, `retry.max_attempts < 1` or `lite_quota < 0`.
        """
        if not name:
            raise BrokerError(Code.BAD_REQUEST, "group name is empty")
        policy = retry if retry is not None else GroupRetryPolicy()
        if policy.max_attempts < 1:
            raise BrokerError(Code.BAD_REQUEST, f"max_attempts must be >= 1, got {policy.max_attempts}")
        if lite_quota is not None and lite_quota < 0:
            # SubscriptionGroupAttributes.LITE_SUB_CLIENT_QUOTA_ATTRIBUTE's range starts at -1, which the
            # proxy would then send as a negative quota; 0 (no lite topic at all) is the least useful.
            raise BrokerError(Code.BAD_REQUEST, f"lite_quota must be >= 0, got {lite_quota}")
        info = GroupInfo(
            name=name,
            fifo=fifo,
            retry=policy,
            lite_exclusive=lite_exclusive,
            lite_quota=lite_quota,
            lite_bind_topic=lite_bind_topic or None,
        )
        self._groups[name] = info
        return info

    def group(self, name: str) -> GroupInfo:
        """The group `name`; unknown groups are auto-created (non-FIFO) when `auto_create_groups`.

        What a broker's pop asks (apache/rocketmq broker/.../processor/PopMessageProcessor.java): without
        auto-creation an unknown group is SUBSCRIPTION_GROUP_NOT_EXIST, which the proxy answers as
        CONSUMER_GROUP_NOT_FOUND (proxy/.../grpc/v2/common/ResponseBuilder.java).

        Raises:
            BrokerError(CONSUMER_GROUP_NOT_FOUND): unknown and auto-creation is off.
        """
        info = self._groups.get(name)
        if info is not None:
            return info
        if not self._auto_create_groups or not name:
            # PopMessageProcessor's remark (without its FAQ link).
            raise BrokerError(Code.CONSUMER_GROUP_NOT_FOUND, f"subscription group [{name}] does not exist")
        return self.create_group(name)

    def find_group(self, name: str) -> GroupInfo | None:
        """The group `name` if it exists, else None; never creates one.

        For the calls where the proxy only reads a group's config and falls back to defaults when there
        is none (Telemetry settings, `GrpcClientSettingsManager.mergeSubscriptionData`; QueryAssignment's
        FIFO flag, `RouteActivity.queryAssignment`): they neither refuse nor create an unknown group.
        """
        return self._groups.get(name)

    def has_topic(self, name: str) -> bool:
        """True when `name` exists (without auto-creating it)."""
        return name in self._topics

    def topics(self) -> list[TopicInfo]:
        """Every topic, in creation order."""
        return list(self._topics.values())

    def groups(self) -> list[GroupInfo]:
        """Every group, in creation order."""
        return list(self._groups.values())
