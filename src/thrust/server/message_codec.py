"""Protobuf messages <-> the broker core's message types, for the embedded server.

The client codec (`thrust._codec.convert`) builds client domain types and depends on client modules,
which `thrust.server` may not import, so the server converts messages itself, straight between
`apache.rocketmq.v2` messages and `thrust.server.core.model` values; Duration and Timestamp come from
`thrust._codec.scalars`, shared with the client. Hot paths: `inbound_message` (once per sent message)
and `delivery_pb` (once per delivered message).
"""

from __future__ import annotations

import hashlib
from typing import Any, Final, cast

from thrust._codec.scalars import duration, duration_seconds, fill_timestamp, timestamp_seconds
from thrust._codec.status import Code
from thrust._codec.validation import (
    Invalid,
    check_body_digest,
    check_lite_topic,
    check_priority,
    check_send_message,
    check_transaction_recovery,
)
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust.server.core.model import Delivery, InboundMessage, MessageType, StoredMessage, inbound

__all__ = ["delivery_pb", "inbound_message", "stored_message_pb"]

_MESSAGE_TYPES: Final = {int(t): t for t in MessageType}
_GZIP: Final = d.Encoding.GZIP
_IDENTITY: Final = d.Encoding.IDENTITY
_MD5: Final = d.DigestType.MD5


def inbound_message(
    message: d.Message, client_id: str, now: float, *, max_lite_topic_size: int = 64
) -> InboundMessage:
    """Validate one message of a SendMessage request (docs/protocol.md §5.4, the proxy's order) and convert
    it.

    The message type, when unspecified, is inferred as the proxy's `buildMessage` does from the system
    properties: a delivery timestamp makes it DELAY, a message group FIFO, else NORMAL. A priority makes a
    NORMAL message PRIORITY (and a PRIORITY message without one is NORMAL); other types lose their
    priority, as upstream's broker clears it. A lite topic (checked as the 5.5.0 proxy's
    `GrpcValidator.validateLiteTopic`, at most `max_lite_topic_size` bytes) makes an unspecified type LITE;
    a LITE message needs one, and no other type may carry one.

    Raises:
        Invalid: the first problem found, with the proxy's status code.
    """
    sp = message.system_properties
    tag = sp.tag if sp.HasField("tag") else None
    keys = tuple(sp.keys)
    properties = dict(message.user_properties)
    message_group = sp.message_group if sp.HasField("message_group") and sp.message_group else None
    delivery_ts = timestamp_seconds(sp.delivery_timestamp) if sp.HasField("delivery_timestamp") else None
    check_send_message(
        body=message.body,
        message_id=sp.message_id,
        properties=properties,
        tag=tag,
        keys=keys,
        message_group=message_group,
        delivery_timestamp=delivery_ts,
        now=now,
    )
    if sp.HasField("body_digest"):
        # B15 (docs/reliability.md §4): a digest that does not match the body is refused (BAD_REQUEST);
        # no digest, no check (thrust's producer sends none).
        check_body_digest(sp.body_digest.type, sp.body_digest.checksum, message.body)
    recovery: float | None = None
    if sp.HasField("orphaned_transaction_recovery_duration"):
        recovery = duration_seconds(sp.orphaned_transaction_recovery_duration)
        check_transaction_recovery(recovery)
    priority = sp.priority if sp.HasField("priority") else None
    check_priority(priority)
    kind = _MESSAGE_TYPES.get(sp.message_type)
    lite_topic = sp.lite_topic if sp.HasField("lite_topic") else None
    if lite_topic is not None or kind is MessageType.LITE:
        check_lite_topic(lite_topic or "", max_size=max_lite_topic_size)
        if kind is None:
            kind = MessageType.LITE
        elif kind is not MessageType.LITE:
            raise Invalid(
                Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, f"a {kind.name} message cannot carry a lite topic"
            )
        if message_group is not None or delivery_ts is not None:
            # The clients refuse these together (the Java MessageBuilderImpl.setLiteTopic checks).
            raise Invalid(
                Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                "a lite message cannot carry a message group or a delivery time",
            )
    if kind is None:
        if delivery_ts is not None:
            kind = MessageType.DELAY
        elif message_group is not None:
            kind = MessageType.FIFO
        else:
            kind = MessageType.NORMAL
    if kind is MessageType.NORMAL and priority is not None:
        # Upstream types a message by its properties, not by the declared type
        # (`TopicMessageType.parseFromMessageProperty`: a priority makes a plain message PRIORITY), so a
        # priority sent as NORMAL is checked against the topic as a PRIORITY message.
        kind = MessageType.PRIORITY
    elif kind is MessageType.PRIORITY and priority is None:
        kind = MessageType.NORMAL
    elif kind is not MessageType.PRIORITY:
        priority = None  # the broker drops the priority of other types (`SendMessageProcessor.sendMessage`)
    return inbound(
        message.topic.name,
        message.body,
        sp.message_id,
        tag or None,
        keys,
        properties,
        kind,
        message_group,
        delivery_ts,
        timestamp_seconds(sp.born_timestamp),
        sp.born_host,
        sp.body_encoding == _GZIP,
        sp.trace_context if sp.HasField("trace_context") else None,
        recovery,
        priority,
        client_id,
        lite_topic,
    )


def _fill(out: d.Message, m: StoredMessage) -> d.SystemProperties:
    out.topic.name = m.topic
    body = m.body
    out.body = body
    if m.properties:
        out.user_properties.update(m.properties)
    sp = out.system_properties
    if m.tag is not None:
        sp.tag = m.tag
    if m.keys:
        sp.keys.extend(m.keys)
    sp.message_id = m.message_id
    # The proxy's digest: MD5 of the body as stored (compressed if GZIP), uppercase hex
    # (docs/protocol.md §6.6).
    digest = sp.body_digest
    digest.type = _MD5
    digest.checksum = hashlib.md5(body).hexdigest().upper()
    sp.body_encoding = _GZIP if m.body_encoding_gzip else _IDENTITY
    sp.message_type = cast(Any, m.message_type)
    fill_timestamp(sp.born_timestamp, m.born_timestamp)
    sp.born_host = m.born_host
    fill_timestamp(sp.store_timestamp, m.store_timestamp)
    sp.store_host = m.broker
    if m.delivery_timestamp is not None:
        fill_timestamp(sp.delivery_timestamp, m.delivery_timestamp)
    sp.queue_id = m.queue_id
    sp.queue_offset = m.offset
    if m.message_group is not None:
        sp.message_group = m.message_group
    if m.trace_context is not None:
        sp.trace_context = m.trace_context
    if m.priority is not None:
        sp.priority = m.priority
    if m.lite_topic is not None:
        sp.lite_topic = m.lite_topic
    return sp


def stored_message_pb(message: StoredMessage) -> d.Message:
    """A stored message as sent in RecoverOrphanedTransactionCommand / VerifyMessageCommand."""
    out = d.Message()
    _fill(out, message)
    if message.transaction_recovery_after is not None:
        out.system_properties.orphaned_transaction_recovery_duration.CopyFrom(
            duration(message.transaction_recovery_after)
        )
    return out


def delivery_pb(delivery: Delivery, out: d.Message) -> None:
    """Fill `out` (an empty Message, usually `ReceiveMessageResponse.message`) with a delivered
    message and every SystemProperties field clients read (docs/protocol.md §5.1)."""
    sp = _fill(out, delivery.message)
    sp.receipt_handle = delivery.receipt_handle
    sp.delivery_attempt = delivery.delivery_attempt
    dead = delivery.dead_letter_of
    if dead is not None:
        sp.dead_letter_queue.topic = dead[0]
        sp.dead_letter_queue.message_id = dead[1]
