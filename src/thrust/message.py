"""Public domain types: what users build (`Message`) and what the client hands back.

All of them are immutable from the outside and use `__slots__` so that the per-message cost stays at a
handful of attribute stores: on the receive path a Python object is built for every message. Times are float
seconds since the Unix epoch.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Awaitable, Iterable, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from thrust._codec import validation
from thrust._codec.message_type import MessageType
from thrust.errors import validation_error

if TYPE_CHECKING:
    from thrust._core.endpoints import Endpoint

__all__ = [
    "ConsumeResult",
    "ConsumeSuspend",
    "FilterExpression",
    "FilterType",
    "Message",
    "MessageType",
    "ReceivedMessage",
    "SendReceipt",
    "TransactionResolution",
]

_EMPTY: Mapping[str, str] = MappingProxyType({})


class ConsumeResult(enum.Enum):
    """What a push-consumer listener returns: SUCCESS acks the message, FAILURE asks for redelivery."""

    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"


class ConsumeSuspend:
    """What a `LitePushConsumer` listener returns to put a lite topic aside for `seconds`: the message (and,
    in a FIFO group, the messages of its lite topic received behind it) comes back after that time, without
    the retry backoff and without local retries. The Java client's `ConsumeResultSuspend` (at least 50 ms);
    any other consumer takes it as a FAILURE.
    """

    __slots__ = ("seconds",)

    seconds: float

    def __init__(self, seconds: float) -> None:
        if not seconds >= 0.05:
            raise ValueError(f"suspend time cannot be less than 0.05 s, got {seconds!r}")
        object.__setattr__(self, "seconds", float(seconds))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("ConsumeSuspend is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConsumeSuspend) and other.seconds == self.seconds

    def __hash__(self) -> int:
        return hash(("ConsumeSuspend", self.seconds))

    def __repr__(self) -> str:
        return f"ConsumeSuspend({self.seconds:g})"


class TransactionResolution(enum.Enum):
    """The answer of a transaction checker: commit, roll back, or not known yet (ask again later)."""

    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    UNKNOWN = "UNKNOWN"


class FilterType(enum.IntEnum):
    """`apache.rocketmq.v2.FilterType`."""

    TAG = 1
    SQL = 2


class FilterExpression:
    """A server-side subscription filter: a tag expression (`"a||b"`, `"*"`) or a SQL92 expression.

    Build one with `FilterExpression.tag("a||b")`, `FilterExpression.sql("price > 10")` or
    `FilterExpression.all()`. Where a subscription accepts a plain `str`, it is a tag expression.
    """

    __slots__ = ("expression", "type")

    expression: str
    type: FilterType

    def __init__(self, expression: str = "*", type: FilterType = FilterType.TAG) -> None:
        object.__setattr__(self, "expression", expression)
        object.__setattr__(self, "type", FilterType(type))

    @classmethod
    def tag(cls, expression: str = "*") -> FilterExpression:
        """A tag filter: `"*"` for everything, or tags joined by `||`."""
        return cls(expression, FilterType.TAG)

    @classmethod
    def sql(cls, expression: str) -> FilterExpression:
        """A SQL92 filter over user properties (and `TAGS`)."""
        return cls(expression, FilterType.SQL)

    @classmethod
    def all(cls) -> FilterExpression:
        """Every message of the topic (`"*"` tag filter)."""
        return cls("*", FilterType.TAG)

    @classmethod
    def of(cls, value: str | FilterExpression) -> FilterExpression:
        """`value` itself, or a tag filter when it is a plain string."""
        if isinstance(value, FilterExpression):
            return value
        if not isinstance(value, str):
            raise TypeError(f"a filter is a str (tag expression) or a FilterExpression, not {type(value)!r}")
        return cls(value, FilterType.TAG)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("FilterExpression is immutable")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FilterExpression):
            return NotImplemented
        return self.expression == other.expression and self.type == other.type

    def __hash__(self) -> int:
        return hash((self.expression, self.type))

    def __repr__(self) -> str:
        return f"FilterExpression.{self.type.name.lower()}({self.expression!r})"


def _epoch(value: datetime | float | int) -> float:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError("delivery_time must be timezone-aware (or epoch seconds)")
        return value.timestamp()
    return float(value)


class Message:
    """A message to send. Immutable; build a new one to change a field.

    Args:
        topic: the topic name (without namespace).
        body: the payload, non-empty bytes (a `str` is refused: encode it).
        tag: optional tag the consumers filter on; not blank, no `|` (None: no tag).
        keys: optional business keys (indexed by the broker); none blank.
        properties: optional user properties (`str -> str`); no key or value blank.
        message_group: FIFO group; messages of one group are delivered in send order.
        delivery_time: deliver no earlier than this time (timezone-aware datetime or epoch seconds).
        delay: deliver after this many seconds from now (a shortcut for `delivery_time`).
        priority: an int >= 0, for topics created as PRIORITY (others refuse it with
            MESSAGE_PROPERTY_CONFLICT_WITH_TYPE). See "Priority" below.
        lite_topic: the lite topic (RocketMQ 5.5) of `topic`, which must be a LITE topic: a lightweight
            ordered sub-channel created by its first message and received by the `LitePushConsumer`s
            that subscribed to it (docs/lite-topics.md). At most 64 UTF-8 bytes of `[a-zA-Z0-9_-]`.

    A message with `message_group` is FIFO; with a delivery time it is DELAY; with a priority PRIORITY;
    with a lite topic LITE. Those are mutually exclusive (the server answers
    MESSAGE_PROPERTY_CONFLICT_WITH_TYPE), as are transactions and any of them.

    The fields are checked here, as the Java client's `MessageBuilder` does, and against the limits the
    server applies that depend on nothing else (topic name, tag, keys, properties and their 16 KiB, message
    group, priority): an invalid one raises `thrust.ValidationError` (a `PayloadTooLargeValidationError`
    for properties over the limits) with the status code the server would answer. What depends on the
    server or the clock (body size, the topic's type, a delivery time more than a day ahead) is checked by
    `Producer.send`, still before any I/O.

    Priority (RocketMQ 5.4+, and the embedded server): the broker that takes the message stores it in
    queue `min(priority, queues - 1)` of the topic, and a receive from that broker takes the highest
    queue first. So, on one broker, waiting messages of a higher priority are received before those of a
    lower one, and those of one priority in send order. No more than that: priorities at or above
    `queues - 1` are equal; messages waiting on different brokers are not ordered against each other
    (a receive reads one broker); a redelivered message comes after every new one; and `send_batch`
    stores a whole batch in one queue, so priorities within a batch order nothing.
    """

    __slots__ = (
        "body",
        "delivery_timestamp",
        "keys",
        "lite_topic",
        "message_group",
        "priority",
        "properties",
        "tag",
        "topic",
    )

    topic: str
    body: bytes
    tag: str | None
    keys: tuple[str, ...]
    properties: Mapping[str, str]
    message_group: str | None
    delivery_timestamp: float | None
    priority: int | None
    lite_topic: str | None

    def __init__(
        self,
        *,
        topic: str,
        body: bytes,
        tag: str | None = None,
        keys: Iterable[str] | str = (),
        properties: Mapping[str, str] | None = None,
        message_group: str | None = None,
        delivery_time: datetime | float | None = None,
        delay: float | None = None,
        priority: int | None = None,
        lite_topic: str | None = None,
    ) -> None:
        if delay is not None and delivery_time is not None:
            raise ValueError("give either delivery_time or delay, not both")
        if isinstance(body, (bytearray, memoryview)):
            body = bytes(body)
        key_tuple = (keys,) if isinstance(keys, str) else tuple(keys)
        props = MappingProxyType(dict(properties)) if properties else _EMPTY
        if delay is not None:
            timestamp: float | None = time.time() + float(delay)
        elif delivery_time is not None:
            timestamp = _epoch(delivery_time)
        else:
            timestamp = None
        try:
            validation.check_new_message(
                topic=topic,
                body=body,
                tag=tag,
                keys=key_tuple,
                properties=props,
                message_group=message_group,
                delivery_timestamp=timestamp,
                priority=priority,
                lite_topic=lite_topic,
            )
        except validation.Invalid as exc:
            raise validation_error(exc.message, exc.code) from None
        s = object.__setattr__
        s(self, "topic", topic)
        s(self, "body", body)
        s(self, "tag", tag)
        s(self, "keys", key_tuple)
        s(self, "properties", props)
        s(self, "message_group", message_group)
        s(self, "delivery_timestamp", timestamp)
        s(self, "priority", priority)
        s(self, "lite_topic", lite_topic)

    @property
    def message_type(self) -> MessageType:
        """The type implied by the fields (transactions are chosen by `Producer.transaction()`)."""
        if self.lite_topic is not None:
            return MessageType.LITE
        if self.message_group is not None:
            return MessageType.FIFO
        if self.delivery_timestamp is not None:
            return MessageType.DELAY
        if self.priority is not None:
            return MessageType.PRIORITY
        return MessageType.NORMAL

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Message is immutable")

    def __repr__(self) -> str:
        extra = "".join(
            f", {k}={getattr(self, k)!r}"
            for k in ("tag", "keys", "message_group", "delivery_timestamp", "priority", "lite_topic")
            if getattr(self, k)
        )
        return f"Message(topic={self.topic!r}, body=<{len(self.body)} bytes>{extra})"


class SendReceipt:
    """The broker's answer for one sent message.

    Attributes:
        message_id: the id the client assigned (34 uppercase hex chars), kept across retries.
        topic: the topic the message went to.
        offset: the queue offset the broker stored it at, in the message's own topic queue for a normal
            or FIFO message. For a delay message whose delivery time is still ahead, RocketMQ answers the
            offset in the broker's timer queue (`rmq_sys_wheel_timer`, queue 0, shared by every topic's
            delayed messages on that broker), and for a transactional message the offset in the half
            queue (`RMQ_SYS_TRANS_HALF_TOPIC`, queue 0): the message gets its own topic's offset only when
            it is delivered or committed (`ReceivedMessage.queue_offset`). The embedded server reports the
            same (upstream: `HookUtils.transformTimerMessage`, `TransactionalMessageBridge`,
            `SendMessageProcessor.handlePutMessageResult`, the proxy's `SendMessageActivity`).
        transaction_id: set for transactional messages.
        recall_handle: for delay messages, the handle `Producer.recall` takes.
    """

    __slots__ = ("message_id", "offset", "recall_handle", "topic", "transaction_id")

    message_id: str
    topic: str
    offset: int
    transaction_id: str
    recall_handle: str

    def __init__(
        self, *, message_id: str, topic: str, offset: int, transaction_id: str = "", recall_handle: str = ""
    ) -> None:
        s = object.__setattr__
        s(self, "message_id", message_id)
        s(self, "topic", topic)
        s(self, "offset", offset)
        s(self, "transaction_id", transaction_id)
        s(self, "recall_handle", recall_handle)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("SendReceipt is immutable")

    def __repr__(self) -> str:
        return f"SendReceipt(message_id={self.message_id!r}, topic={self.topic!r}, offset={self.offset})"


class _Settler(Protocol):
    def ack(self, message: ReceivedMessage) -> Awaitable[None]: ...

    def change_invisible_duration(self, message: ReceivedMessage, seconds: float) -> Awaitable[None]: ...


class ReceivedMessage:
    """A message delivered to a consumer. Read-only; parsed once, digest verified, body decompressed.

    Attributes:
        topic, body, tag, keys, properties, message_group: as sent.
        message_id: the producer-assigned id.
        delivery_attempt: 1 on first delivery, +1 on each redelivery (a FIFO push consumer's local retries
            included).
        born_timestamp / store_timestamp / delivery_timestamp: epoch seconds (None when unknown).
        born_host, queue_id, queue_offset: where it came from.
        receipt_handle: the current handle; `change_invisible_duration` replaces it with the server's new one.
        message_type: NORMAL, FIFO, DELAY, TRANSACTION, PRIORITY or LITE.
        priority: for PRIORITY messages, as sent (see `Message` for what it orders).
        lite_topic: for LITE messages, the lite topic of `topic` it was sent to, else None.
        trace_context: the `trace_context` system property as the producer set it (a W3C `traceparent`
            when the producer was instrumented: docs/observability.md), or None.

    `await msg.ack()` and `await msg.change_invisible_duration(seconds)` settle it through the consumer
    that received it. Messages from a `thrust.sync.SimpleConsumer` settle through it: there `msg.ack()`
    blocks until the ack is done (no `await`).
    """

    __slots__ = (
        "_endpoint",
        "_receipt_handle",
        "_settler",
        "body",
        "born_host",
        "born_timestamp",
        "delivery_attempt",
        "delivery_timestamp",
        "keys",
        "lite_topic",
        "message_group",
        "message_id",
        "message_type",
        "priority",
        "properties",
        "queue_id",
        "queue_offset",
        "store_timestamp",
        "tag",
        "topic",
        "trace_context",
    )

    topic: str
    body: bytes
    tag: str | None
    keys: tuple[str, ...]
    properties: Mapping[str, str]
    message_group: str | None
    message_id: str
    delivery_attempt: int
    born_timestamp: float | None
    store_timestamp: float | None
    delivery_timestamp: float | None
    born_host: str
    queue_id: int
    queue_offset: int | None
    message_type: MessageType
    priority: int | None
    trace_context: str | None
    lite_topic: str | None
    _receipt_handle: str
    _endpoint: Endpoint | None
    _settler: _Settler | None

    def __init__(
        self,
        *,
        topic: str,
        body: bytes,
        message_id: str,
        receipt_handle: str = "",
        tag: str | None = None,
        keys: tuple[str, ...] = (),
        properties: Mapping[str, str] = _EMPTY,
        message_group: str | None = None,
        delivery_attempt: int = 1,
        born_timestamp: float | None = None,
        store_timestamp: float | None = None,
        delivery_timestamp: float | None = None,
        born_host: str = "",
        queue_id: int = 0,
        queue_offset: int | None = None,
        message_type: MessageType = MessageType.NORMAL,
        priority: int | None = None,
        endpoint: Endpoint | None = None,
        trace_context: str | None = None,
        lite_topic: str | None = None,
    ) -> None:
        s = object.__setattr__
        s(self, "topic", topic)
        s(self, "body", body)
        s(self, "message_id", message_id)
        s(self, "lite_topic", lite_topic)
        s(self, "_receipt_handle", receipt_handle)
        s(self, "tag", tag)
        s(self, "keys", keys)
        s(self, "properties", properties)
        s(self, "message_group", message_group)
        s(self, "delivery_attempt", delivery_attempt)
        s(self, "born_timestamp", born_timestamp)
        s(self, "store_timestamp", store_timestamp)
        s(self, "delivery_timestamp", delivery_timestamp)
        s(self, "born_host", born_host)
        s(self, "queue_id", queue_id)
        s(self, "queue_offset", queue_offset)
        s(self, "message_type", message_type)
        s(self, "priority", priority)
        s(self, "trace_context", trace_context)
        s(self, "_endpoint", endpoint)
        s(self, "_settler", None)

    @property
    def receipt_handle(self) -> str:
        """The handle for ack / change-invisible-duration; replaced by `change_invisible_duration`."""
        return self._receipt_handle

    @property
    def endpoint(self) -> Endpoint | None:
        """The broker endpoint this message came from; settling goes to the same one."""
        return self._endpoint

    def _bind(self, settler: Any) -> None:
        """Internal: the consumer that settles this message (for `ack()` and friends)."""
        object.__setattr__(self, "_settler", settler)

    def _replace_receipt_handle(self, handle: str) -> None:
        """Internal: keep the handle the server returned from ChangeInvisibleDuration
        (docs/protocol.md §7.4)."""
        object.__setattr__(self, "_receipt_handle", handle)

    def _redelivered(self) -> ReceivedMessage:
        """Internal: this message as handed to the listener again by a local FIFO retry, one attempt later.

        The proxy keeps a FIFO message invisible while the client retries it locally, so the server's
        `delivery_attempt` never moves; Java counts the local attempts itself
        (`MessageViewImpl.incrementAndGetDeliveryAttempt`, called by `ProcessQueueImpl.eraseFifoMessage`
        before each redelivery), so a listener sees 1, 2, 3, ... as it does for server redeliveries. A copy
        rather than a mutation: a message the listener kept from an earlier attempt still says which
        attempt it was."""
        copy = object.__new__(ReceivedMessage)
        s = object.__setattr__
        for name in ReceivedMessage.__slots__:
            s(copy, name, getattr(self, name))
        s(copy, "delivery_attempt", self.delivery_attempt + 1)
        return copy

    def ack(self) -> Awaitable[None]:
        """Acknowledge through the consumer that received this message (same as `consumer.ack(msg)`)."""
        if self._settler is None:
            raise RuntimeError("this message is not bound to a consumer")
        return self._settler.ack(self)

    def change_invisible_duration(self, seconds: float) -> Awaitable[None]:
        """Hide the message for `seconds` more (as `consumer.change_invisible_duration(msg, seconds)`)."""
        if self._settler is None:
            raise RuntimeError("this message is not bound to a consumer")
        return self._settler.change_invisible_duration(self, seconds)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("ReceivedMessage is immutable")

    def __repr__(self) -> str:
        return (
            f"ReceivedMessage(topic={self.topic!r}, message_id={self.message_id!r}, tag={self.tag!r}, "
            f"delivery_attempt={self.delivery_attempt}, body=<{len(self.body)} bytes>)"
        )
