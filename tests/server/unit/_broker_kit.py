"""Shared helpers for the broker core tests: message factories and a tiny local filter."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from thrust.server.core.broker import Broker
from thrust.server.core.catalog import Catalog
from thrust.server.core.model import Delivery, GroupRetryPolicy, InboundMessage, MessageType

T0 = 1_700_000_000.0


@dataclass(frozen=True)
class TagFilter:
    """Stand-in for the filter module: matches a set of tags, or everything."""

    tags: frozenset[str] | None = None
    seen: list[str | None] = field(default_factory=list, compare=False)

    def matches(self, tag: str | None, properties: Mapping[str, str]) -> bool:
        self.seen.append(tag)
        return self.tags is None or tag in self.tags


ALL = TagFilter()

_counter = [0]


def msg(
    topic: str = "t",
    body: bytes = b"x",
    *,
    message_id: str | None = None,
    tag: str | None = None,
    kind: MessageType = MessageType.NORMAL,
    group: str | None = None,
    deliver_at: float | None = None,
    properties: Mapping[str, str] | None = None,
    recovery: float | None = None,
    producer: str = "producer-1",
) -> InboundMessage:
    _counter[0] += 1
    return InboundMessage(
        topic=topic,
        body=body,
        message_id=message_id or f"ID{_counter[0]:08d}",
        tag=tag,
        keys=(),
        properties=properties or {},
        message_type=kind,
        message_group=group,
        delivery_timestamp=deliver_at,
        born_timestamp=T0,
        born_host="host",
        transaction_recovery_after=recovery,
        producer_client_id=producer,
    )


def make(
    *types: MessageType,
    queues: int = 4,
    fifo: bool = False,
    max_attempts: int | None = None,
    **broker_kwargs: Any,
) -> tuple[Catalog, Broker]:
    catalog = Catalog()
    catalog.create_topic("t", queues, types or (MessageType.NORMAL,))
    retry = GroupRetryPolicy(max_attempts=max_attempts) if max_attempts is not None else None
    catalog.create_group("g", fifo=fifo, retry=retry)
    broker = Broker("broker-a", catalog, **broker_kwargs)
    return catalog, broker


def pop(
    broker: Broker,
    now: float,
    *,
    group: str = "g",
    topic: str = "t",
    queue_id: int = -1,
    batch: int = 32,
    invisible: float = 30.0,
    auto_renew: bool = False,
    attempt_id: str | None = None,
    client: str = "c1",
    flt: TagFilter = ALL,
) -> list[Delivery]:
    return broker.pop(
        client_id=client,
        group=group,
        topic=topic,
        queue_id=queue_id,
        message_filter=flt,
        batch_size=batch,
        invisible_duration=invisible,
        auto_renew=auto_renew,
        attempt_id=attempt_id,
        now=now,
    )


def ack(broker: Broker, d: Delivery, now: float, *, group: str = "g", handle: str | None = None) -> None:
    broker.ack(
        client_id="c1",
        group=group,
        topic=d.message.topic,
        receipt_handle=handle if handle is not None else d.receipt_handle,
        message_id=d.message.message_id,
        now=now,
    )


def nack(broker: Broker, d: Delivery, now: float, duration: float, *, handle: str | None = None) -> str:
    return broker.change_invisible_duration(
        client_id="c1",
        group="g",
        topic=d.message.topic,
        receipt_handle=handle if handle is not None else d.receipt_handle,
        message_id=d.message.message_id,
        duration=duration,
        now=now,
    )


def ids(deliveries: list[Delivery]) -> list[str]:
    return [d.message.message_id for d in deliveries]
