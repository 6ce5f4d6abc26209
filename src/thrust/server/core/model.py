"""Value types of the embedded broker core: messages in and out, topic and group metadata, errors.

`MessageType` is the codec's (`thrust._codec.message_type`, also `thrust.MessageType`), re-exported
here with the rest of the core's vocabulary.

Everything here is immutable and free of protobuf: the service layer (`thrust.server.service`)
translates between these and `apache.rocketmq.v2` messages. Times are epoch seconds as floats.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, cast

from thrust._codec.message_type import MessageType
from thrust._codec.status import StatusFailure

__all__ = [
    "DEFAULT_CUSTOMIZED_BACKOFF",
    "BrokerError",
    "Delivery",
    "GroupInfo",
    "GroupRetryPolicy",
    "InboundMessage",
    "MessageMatcher",
    "MessageType",
    "SendResult",
    "StoredMessage",
    "TopicInfo",
    "TransactionCheck",
    "inbound",
]


class BrokerError(StatusFailure):
    """A request-level failure; the service answers it as `Status{code, message}` (docs/protocol.md §2.2).

    The core raises only this for bad input (unknown topic, expired receipt handle, wrong transaction
    id...), never KeyError/ValueError, so the service can map every failure without a catch-all.
    """


class MessageMatcher(Protocol):
    """What `Broker.pop` needs from a subscription filter.

    Structurally identical to `thrust._codec.filter.MessageFilter` (TAG / SQL92 filters), so
    any compiled filter can be passed; declared here so the broker does not depend on the filter
    module's implementation.
    """

    def matches(self, tag: str | None, properties: Mapping[str, str]) -> bool:
        """True when a message with this tag and these user properties is selected."""
        ...


# Upstream's default consumer backoff (docs/protocol.md §4.3, Settings.backoff_policy): 1s 5s 10s 30s 1m..10m
# 20m 30m 1h 2h.
DEFAULT_CUSTOMIZED_BACKOFF: tuple[float, ...] = (
    1,
    5,
    10,
    30,
    60,
    120,
    180,
    240,
    300,
    360,
    420,
    480,
    540,
    600,
    1200,
    1800,
    3600,
    7200,
)


@dataclass(frozen=True, slots=True)
class GroupRetryPolicy:
    """A consumer group's retry backoff, sent to consumers in `Settings.backoff_policy`
    (docs/protocol.md §4.3).

    Attributes:
        max_attempts: deliveries before a message goes to the DLQ (`retryMaxTimes + 1`, default 17).
        customized: the customized backoff `next` list, in seconds (used unless `exponential` is set).
        exponential: `(initial, max, multiplier)` in seconds, replacing `customized` when set.
    """

    max_attempts: int = 17
    customized: tuple[float, ...] = DEFAULT_CUSTOMIZED_BACKOFF
    exponential: tuple[float, float, float] | None = None

    def delay(self, attempt: int) -> float:
        """Backoff before redelivery after delivery number `attempt` failed (Java formula,
        docs/protocol.md §4.3).

        Exponential: `min(initial * multiplier**(attempt-1), max)`; customized:
        `next[min(attempt, len) - 1]`. Attempts below 1 count as 1.
        """
        attempt = max(attempt, 1)
        if self.exponential is not None:
            initial, maximum, multiplier = self.exponential
            try:
                value = initial * multiplier ** (attempt - 1)
            except OverflowError:
                return maximum
            return min(value, maximum)
        if not self.customized:
            return 1.0
        return self.customized[min(attempt, len(self.customized)) - 1]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic: queue ids 0..queues-1 on each broker that hosts it, accepting `types` (route
    `accept_message_types`). `brokers`: the names of the brokers hosting it (None: every broker); like a
    topic created on only some brokers of a cluster (upstream `updateTopic -b`), the others answer
    TOPIC_NOT_FOUND and QueryRoute lists only the hosts."""

    name: str
    queues: int
    types: frozenset[MessageType]
    brokers: frozenset[str] | None = None

    def hosted_on(self, broker: str) -> bool:
        """True when broker `broker` (by name) hosts this topic."""
        return self.brokers is None or broker in self.brokers

    @property
    def priority(self) -> bool:
        """True for a topic accepting PRIORITY messages: they are stored by priority and non-FIFO pops
        take the highest queue first (upstream `TopicMessageType.PRIORITY`, see `Broker.pop`)."""
        return MessageType.PRIORITY in self.types


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """A consumer group. `fifo` is upstream's `consumeMessageOrderly` (docs/protocol.md §3.3); `retry` its
    backoff; `lite_exclusive` upstream's `liteSubExclusive`: a lite topic is consumed by one client of the
    group at a time (core/lite.py); `lite_quota` upstream's `lite.sub.client.quota`: the lite topics one
    client of the group may subscribe to (None: the server's `lite_subscription_quota`); `lite_bind_topic`
    upstream's `lite.bind.topic`: the LITE topic the group's lite consumers must consume (None: any)."""

    name: str
    fifo: bool = False
    retry: GroupRetryPolicy = field(default_factory=GroupRetryPolicy)
    lite_exclusive: bool = False
    lite_quota: int | None = None
    lite_bind_topic: str | None = None


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """One message of a SendMessage request, already validated by the service (docs/protocol.md §5.4).

    Attributes:
        topic: target topic name.
        body: the payload as sent (possibly gzip-compressed, see `body_encoding_gzip`).
        message_id: the producer-assigned id (SystemProperties.message_id, docs/protocol.md §5.2).
        tag: SystemProperties.tag, used by TAG filters.
        keys: SystemProperties.keys.
        properties: user properties.
        message_type: SystemProperties.message_type.
        message_group: FIFO sharding key, or None.
        delivery_timestamp: epoch seconds for DELAY messages, or None.
        born_timestamp: epoch seconds, set by the producer.
        born_host: the producer's host.
        body_encoding_gzip: True when `body` is GZIP-encoded (Encoding.GZIP).
        trace_context: SystemProperties.trace_context.
        transaction_recovery_after: orphaned_transaction_recovery_duration in seconds (TRANSACTION only).
        priority: SystemProperties.priority (PRIORITY only): the queue it is stored in (`Broker.send`).
        producer_client_id: the sender's client id; transaction checks go back to it.
        lite_topic: SystemProperties.lite_topic (LITE only): the lite topic of the parent `topic`.
    """

    topic: str
    body: bytes
    message_id: str
    tag: str | None
    keys: tuple[str, ...]
    properties: Mapping[str, str]
    message_type: MessageType
    message_group: str | None
    delivery_timestamp: float | None
    born_timestamp: float
    born_host: str
    body_encoding_gzip: bool = False
    trace_context: str | None = None
    transaction_recovery_after: float | None = None
    priority: int | None = None
    producer_client_id: str = ""
    lite_topic: str | None = None


class _InboundMessageBuilder:
    """Mutable twin of `InboundMessage` (same slots, same order) used by `inbound()`."""

    __slots__ = InboundMessage.__slots__
    topic: str
    body: bytes
    message_id: str
    tag: str | None
    keys: tuple[str, ...]
    properties: Mapping[str, str]
    message_type: MessageType
    message_group: str | None
    delivery_timestamp: float | None
    born_timestamp: float
    born_host: str
    body_encoding_gzip: bool
    trace_context: str | None
    transaction_recovery_after: float | None
    priority: int | None
    producer_client_id: str
    lite_topic: str | None


def inbound(
    topic: str,
    body: bytes,
    message_id: str,
    tag: str | None,
    keys: tuple[str, ...],
    properties: Mapping[str, str],
    message_type: MessageType,
    message_group: str | None,
    delivery_timestamp: float | None,
    born_timestamp: float,
    born_host: str,
    body_encoding_gzip: bool,
    trace_context: str | None,
    transaction_recovery_after: float | None,
    priority: int | None,
    producer_client_id: str,
    lite_topic: str | None = None,
) -> InboundMessage:
    """`InboundMessage(...)` with every field given, for the send hot path (once per sent message):
    like `StoredMessage.of`, it fills a mutable twin and turns it into a frozen `InboundMessage`, which
    avoids the frozen `__init__`'s `object.__setattr__` per field."""
    new = _InboundMessageBuilder()
    new.topic = topic
    new.body = body
    new.message_id = message_id
    new.tag = tag
    new.keys = keys
    new.properties = properties
    new.message_type = message_type
    new.message_group = message_group
    new.delivery_timestamp = delivery_timestamp
    new.born_timestamp = born_timestamp
    new.born_host = born_host
    new.body_encoding_gzip = body_encoding_gzip
    new.trace_context = trace_context
    new.transaction_recovery_after = transaction_recovery_after
    new.priority = priority
    new.producer_client_id = producer_client_id
    new.lite_topic = lite_topic
    object.__setattr__(new, "__class__", InboundMessage)
    return cast(InboundMessage, new)


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredMessage:
    """A message as the broker stores and delivers it: every `InboundMessage` field plus placement.

    Attributes (beyond InboundMessage's):
        queue_id: the queue it sits in.
        offset: its monotonic offset in that queue (for delayed or transactional messages not yet
            visible: the offset in the broker's timer or half queue, like upstream's rmq_sys_wheel_timer
            and RMQ_SYS_TRANS_HALF_TOPIC).
        store_timestamp: when it was appended to the queue.
        broker: the name of the broker holding it (`store_host` on the wire).
        transaction_id: set for TRANSACTION messages, else "".
        dead_letter_of: `(original topic, original message id)` for messages in a `%DLQ%` topic.
    """

    topic: str
    body: bytes
    message_id: str
    tag: str | None
    keys: tuple[str, ...]
    properties: Mapping[str, str]
    message_type: MessageType
    message_group: str | None
    delivery_timestamp: float | None
    born_timestamp: float
    born_host: str
    body_encoding_gzip: bool = False
    trace_context: str | None = None
    transaction_recovery_after: float | None = None
    priority: int | None = None
    producer_client_id: str = ""
    lite_topic: str | None = None
    queue_id: int
    offset: int
    store_timestamp: float
    broker: str
    transaction_id: str = ""
    dead_letter_of: tuple[str, str] | None = None

    @classmethod
    def of(
        cls,
        message: InboundMessage,
        *,
        queue_id: int,
        offset: int,
        store_timestamp: float,
        broker: str,
        transaction_id: str = "",
    ) -> StoredMessage:
        """Place `message` at `queue_id`/`offset` of `broker`.

        Hot path (once per stored message): a frozen dataclass's `__init__` pays for
        `object.__setattr__` on each of the 22 fields (about 10x a plain assignment), so the fields
        are assigned on a mutable twin with the identical slot layout, which then becomes a
        `StoredMessage`. The result is an ordinary, frozen, fully initialised instance.
        """
        new = _StoredMessageBuilder()
        new.topic = message.topic
        new.body = message.body
        new.message_id = message.message_id
        new.tag = message.tag
        new.keys = message.keys
        new.properties = message.properties
        new.message_type = message.message_type
        new.message_group = message.message_group
        new.delivery_timestamp = message.delivery_timestamp
        new.born_timestamp = message.born_timestamp
        new.born_host = message.born_host
        new.body_encoding_gzip = message.body_encoding_gzip
        new.trace_context = message.trace_context
        new.transaction_recovery_after = message.transaction_recovery_after
        new.priority = message.priority
        new.producer_client_id = message.producer_client_id
        new.lite_topic = message.lite_topic
        new.queue_id = queue_id
        new.offset = offset
        new.store_timestamp = store_timestamp
        new.broker = broker
        new.transaction_id = transaction_id
        new.dead_letter_of = None
        object.__setattr__(new, "__class__", cls)
        return cast(StoredMessage, new)


class _StoredMessageBuilder:
    """Mutable twin of `StoredMessage` (same slots, same order) used by `StoredMessage.of`."""

    __slots__ = StoredMessage.__slots__
    topic: str
    body: bytes
    message_id: str
    tag: str | None
    keys: tuple[str, ...]
    properties: Mapping[str, str]
    message_type: MessageType
    message_group: str | None
    delivery_timestamp: float | None
    born_timestamp: float
    born_host: str
    body_encoding_gzip: bool
    trace_context: str | None
    transaction_recovery_after: float | None
    priority: int | None
    producer_client_id: str
    lite_topic: str | None
    queue_id: int
    offset: int
    store_timestamp: float
    broker: str
    transaction_id: str
    dead_letter_of: tuple[str, str] | None


@dataclass(frozen=True, slots=True)
class SendResult:
    """One `SendResultEntry` (docs/protocol.md §5.5): the producer's id, placement, and handles.

    `transaction_id` is "" unless the message is transactional; `recall_handle` is "" unless it is a
    delayed message (then `Broker.recall` accepts it until the message is delivered). `offset` is the
    queue offset in topic `queue_id`, except for a message held at send time: a delayed one has its
    offset in the broker's timer queue (upstream `rmq_sys_wheel_timer`), a transactional one in the half
    queue (`RMQ_SYS_TRANS_HALF_TOPIC`), as upstream reports them.
    """

    message_id: str
    queue_id: int
    offset: int
    transaction_id: str
    recall_handle: str


@dataclass(frozen=True, slots=True)
class Delivery:
    """One popped message: what ReceiveMessage streams to the consumer (docs/protocol.md §6.3).

    Attributes:
        message: the stored message.
        receipt_handle: opaque handle for Ack / ChangeInvisibleDuration / ForwardToDLQ
            (docs/protocol.md §7.1).
        delivery_attempt: 1 on first delivery, +1 per redelivery (SystemProperties.delivery_attempt).
        invisible_until: when the message becomes visible again unless acked (or renewed).
        dead_letter_of: `(original topic, original message id)` when popped from a `%DLQ%` topic
            (SystemProperties.dead_letter_queue).
    """

    message: StoredMessage
    receipt_handle: str
    delivery_attempt: int
    invisible_until: float
    dead_letter_of: tuple[str, str] | None


@dataclass(frozen=True, slots=True)
class TransactionCheck:
    """A due RecoverOrphanedTransactionCommand for the producer `producer_client_id`
    (docs/protocol.md §5.8)."""

    producer_client_id: str
    message: StoredMessage
    transaction_id: str
