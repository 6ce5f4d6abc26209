"""Protobuf <-> public domain types. Pure functions, no I/O; the one class with state, `QueuesMemo`, only
remembers each topic's last route or assignment answer for the one object that owns it.

Received messages are parsed once: the fields user code reads are copied into a slotted
`ReceivedMessage`, the body digest is verified on the bytes as they arrived, and a GZIP body is
decompressed after that (the Java client's `MessageViewImpl.fromProtobuf` order, docs/protocol.md §6.6).
A message whose digest does not match raises `Corrupted`, so it can never reach user code as valid.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from thrust._codec.digest import gzip_decode, verify_digest
from thrust._codec.scalars import duration, duration_seconds, timestamp, timestamp_seconds
from thrust._core.backoff import RetryPolicy
from thrust._core.endpoints import Endpoint, Scheme
from thrust._core.routes import Permission, RouteQueue
from thrust._core.settings import ServerSettings
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust.message import FilterExpression, Message, MessageType, ReceivedMessage, SendReceipt

__all__ = [
    "Corrupted",
    "duration",
    "duration_seconds",
    "filter_expression",
    "message_to_pb",
    "received_from_pb",
    "resource",
    "send_receipt",
    "timestamp",
    "timestamp_seconds",
]

_EMPTY: Mapping[str, str] = MappingProxyType({})
# The proxy accepts up to 130 MiB inbound (docs/protocol.md §2.6); a GZIP body inflating beyond that is
# refused.
MAX_DECOMPRESSED_SIZE = 130 * 1024 * 1024
_GZIP = pb.GZIP
_MESSAGE_TYPES = {int(t): t for t in MessageType}
_NORMAL = MessageType.NORMAL
_PERMISSIONS = frozenset(int(p) for p in Permission)


class Corrupted(ValueError):
    """A received message whose body failed its digest check (or could not be decompressed)."""

    def __init__(self, message_id: str, topic: str, receipt_handle: str, reason: str) -> None:
        super().__init__(f"message {message_id} of topic {topic!r} is corrupted: {reason}")
        self.message_id = message_id
        self.topic = topic
        self.receipt_handle = receipt_handle
        self.reason = reason


# --------------------------------------------------------------------------------------------------
# Scalars: `duration`, `duration_seconds`, `timestamp`, `timestamp_seconds` come from scalars.py (shared
# with the embedded server) and are re-exported here.


def resource(name: str, namespace: str = "") -> pb.Resource:
    """A `Resource{resource_namespace, name}` (the namespace travels in every Resource:
    docs/protocol.md §2.7)."""
    return pb.Resource(resource_namespace=namespace, name=name)


def endpoint_from_pb(endpoints: pb.Endpoints) -> Endpoint:
    """The `Endpoint` for a route's `Broker.endpoints` (raises ValueError when malformed)."""
    return _endpoint(endpoints.scheme, tuple((a.host, a.port) for a in endpoints.addresses))


@functools.lru_cache(maxsize=1024)
def _endpoint(scheme: int, addresses: tuple[tuple[str, int], ...]) -> Endpoint:
    # Every route names the same few brokers again (a consumer of 1,000 topics re-reads 2,000 broker
    # entries each refresh period); an Endpoint checks its hosts (`ipaddress`) once, here. A malformed one
    # raises, and exceptions are not cached.
    return Endpoint(Scheme(scheme), addresses)


def endpoint_to_pb(endpoint: Endpoint) -> pb.Endpoints:
    """The protobuf `Endpoints` (for `QueryRouteRequest.endpoints` and `Settings.access_point`)."""
    return pb.Endpoints(
        scheme=int(endpoint.scheme),  # type: ignore[arg-type]
        addresses=[pb.Address(host=h, port=p) for h, p in endpoint.addresses],
    )


def filter_expression(expr: str | FilterExpression) -> pb.FilterExpression:
    """The protobuf filter for a tag string or a `FilterExpression`."""
    f = FilterExpression.of(expr)
    return pb.FilterExpression(type=int(f.type), expression=f.expression)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------------
# Send


def message_to_pb(
    message: Message,
    *,
    message_id: str,
    namespace: str,
    born_host: str,
    born_timestamp: float,
    transactional: bool = False,
    transaction_recovery: float | None = None,
    into: pb.Message | None = None,
) -> pb.Message:
    """The wire message for `message`. The id is assigned by the caller and reused on every retry.

    `into`: an empty message to fill (`request.messages.add()`), so that it is not copied into the
    request afterwards; it is returned."""
    # Built in place: a SystemProperties built apart and passed to pb.Message(...) would be copied.
    out = pb.Message() if into is None else into
    out.body = message.body
    out.topic.name = message.topic
    if namespace:
        out.topic.resource_namespace = namespace
    sp = out.system_properties
    sp.message_id = message_id
    sp.born_host = born_host
    whole = math.floor(born_timestamp)
    nanos = round((born_timestamp - whole) * 1e9)
    if nanos >= 1_000_000_000:
        whole += 1
        nanos -= 1_000_000_000
    sp.born_timestamp.seconds = int(whole)
    sp.born_timestamp.nanos = int(nanos)
    sp.body_encoding = pb.IDENTITY
    if message.tag:
        sp.tag = message.tag
    if message.keys:
        sp.keys.extend(message.keys)
    if transactional:
        sp.message_type = pb.TRANSACTION
        if transaction_recovery is not None:
            sp.orphaned_transaction_recovery_duration.CopyFrom(duration(transaction_recovery))
    elif message.lite_topic is not None:
        sp.message_type = pb.LITE
    elif message.message_group is not None:
        sp.message_type = pb.FIFO
    elif message.delivery_timestamp is not None:
        sp.message_type = pb.DELAY
    elif message.priority is not None:
        sp.message_type = pb.PRIORITY
    else:
        sp.message_type = pb.NORMAL
    if message.message_group is not None:
        sp.message_group = message.message_group
    if message.delivery_timestamp is not None:
        sp.delivery_timestamp.CopyFrom(timestamp(message.delivery_timestamp))
    if message.priority is not None:
        sp.priority = message.priority
    if message.lite_topic is not None:
        sp.lite_topic = message.lite_topic
    if message.properties:
        out.user_properties.update(message.properties)
    return out


def send_receipt(entry: Any, topic: str, message_id: str) -> SendReceipt:
    """A `SendReceipt` from a `SendResultEntry` (the entry echoes our id; fall back to ours if empty)."""
    return SendReceipt(
        message_id=entry.message_id or message_id,
        topic=topic,
        offset=entry.offset,
        transaction_id=entry.transaction_id,
        recall_handle=entry.recall_handle,
    )


# --------------------------------------------------------------------------------------------------
# Receive


def received_from_pb(message: pb.Message, endpoint: Endpoint | None = None) -> ReceivedMessage:
    """Parse one delivered message: verify its digest, gunzip if needed, copy the fields once.

    Raises `Corrupted` when the digest does not match or the body does not decompress.
    """
    # Runs once per received message: every field is read once, HasField is bound once, and the
    # timestamps are converted inline (a push consumer decodes thousands of these per second).
    sp = message.system_properties
    has = sp.HasField
    body = message.body
    message_id = sp.message_id
    if has("body_digest"):
        digest = sp.body_digest
        kind = digest.type
        if kind:
            try:
                ok = verify_digest(kind, body, digest.checksum)
            except ValueError:  # a digest type this client does not know: cannot vouch for the body
                ok = False
            if not ok:
                raise Corrupted(message_id, message.topic.name, sp.receipt_handle, "body digest mismatch")
    if sp.body_encoding == _GZIP:
        try:
            body = gzip_decode(body, MAX_DECOMPRESSED_SIZE)
        except ValueError as exc:
            raise Corrupted(message_id, message.topic.name, sp.receipt_handle, f"gzip: {exc}") from None
    props = message.user_properties
    keys = sp.keys
    if has("born_timestamp"):
        ts = sp.born_timestamp
        born: float | None = ts.seconds + ts.nanos / 1e9
    else:
        born = None
    if has("store_timestamp"):
        ts = sp.store_timestamp
        stored: float | None = ts.seconds + ts.nanos / 1e9
    else:
        stored = None
    return ReceivedMessage(
        topic=message.topic.name,
        body=body,
        message_id=message_id,
        receipt_handle=sp.receipt_handle,
        tag=sp.tag if has("tag") else None,
        keys=tuple(keys) if keys else (),
        properties=MappingProxyType(dict(props)) if props else _EMPTY,
        message_group=sp.message_group if has("message_group") else None,
        delivery_attempt=sp.delivery_attempt if has("delivery_attempt") else 1,
        born_timestamp=born,
        store_timestamp=stored,
        delivery_timestamp=timestamp_seconds(sp.delivery_timestamp) if has("delivery_timestamp") else None,
        born_host=sp.born_host,
        queue_id=sp.queue_id,
        queue_offset=sp.queue_offset if has("queue_offset") else None,
        message_type=_MESSAGE_TYPES.get(sp.message_type, _NORMAL),
        priority=sp.priority if has("priority") else None,
        endpoint=endpoint,
        trace_context=sp.trace_context if has("trace_context") else None,
        lite_topic=sp.lite_topic if has("lite_topic") else None,
    )


def received_from_pbs(
    messages: Iterable[pb.Message], endpoint: Endpoint | None = None
) -> tuple[list[ReceivedMessage], list[Corrupted]]:
    """Parse a batch: the good messages in order, and the corrupted ones (never mixed in)."""
    good: list[ReceivedMessage] = []
    bad: list[Corrupted] = []
    for m in messages:
        try:
            good.append(received_from_pb(m, endpoint))
        except Corrupted as exc:
            bad.append(exc)
    return good, bad


# --------------------------------------------------------------------------------------------------
# Settings


def retry_policy_to_pb(policy: RetryPolicy) -> pb.RetryPolicy:
    """The protobuf `RetryPolicy` for a core `RetryPolicy` (durations with nanos)."""
    out = pb.RetryPolicy(max_attempts=policy.max_attempts)
    if policy.customized_delays is not None:
        out.customized_backoff.next.extend(duration(d) for d in policy.customized_delays)
    else:
        eb = out.exponential_backoff
        eb.initial.CopyFrom(duration(policy.initial_backoff))
        eb.max.CopyFrom(duration(policy.max_backoff))
        eb.multiplier = policy.multiplier
    return out


def retry_policy_from_pb(policy: pb.RetryPolicy) -> RetryPolicy | None:
    """The core `RetryPolicy` of a server answer; None when it carries no usable strategy."""
    max_attempts = policy.max_attempts
    if max_attempts < 1:
        return None
    strategy = policy.WhichOneof("strategy")
    try:
        if strategy == "customized_backoff":
            delays = [duration_seconds(d) for d in policy.customized_backoff.next]
            return RetryPolicy.customized(max_attempts, delays) if delays else None
        if strategy == "exponential_backoff":
            eb = policy.exponential_backoff
            initial = duration_seconds(eb.initial)
            maximum = max(duration_seconds(eb.max), initial)
            multiplier = eb.multiplier if eb.multiplier >= 1 else 1.0
            return RetryPolicy.exponential(max_attempts, initial, maximum, multiplier)
    except ValueError:
        return None
    return None


def server_settings_from_pb(settings: pb.Settings) -> ServerSettings:
    """Every field of a server Settings answer the client acts on (None where the server set nothing).

    proto3 zero values of non-optional fields mean "not set" (see `thrust._core.settings`)."""
    request_timeout = (
        duration_seconds(settings.request_timeout) if settings.HasField("request_timeout") else None
    )
    retry = retry_policy_from_pb(settings.backoff_policy) if settings.HasField("backoff_policy") else None
    fifo: bool | None = None
    batch: int | None = None
    polling: float | None = None
    max_body: int | None = None
    validate: bool | None = None
    lite_quota: int | None = None
    lite_size: int | None = None
    kind = settings.WhichOneof("pub_sub")
    if kind == "subscription":
        sub = settings.subscription
        fifo = sub.fifo if sub.HasField("fifo") else None
        batch = sub.receive_batch_size if sub.HasField("receive_batch_size") else None
        if sub.HasField("long_polling_timeout"):
            polling = duration_seconds(sub.long_polling_timeout)
        if sub.HasField("lite_subscription_quota"):
            lite_quota = sub.lite_subscription_quota
        if sub.HasField("max_lite_topic_size"):
            lite_size = sub.max_lite_topic_size
    elif kind == "publishing":
        pub = settings.publishing
        max_body = pub.max_body_size or None
        validate = pub.validate_message_type
    metric = settings.metric.on if settings.HasField("metric") else None
    return ServerSettings(
        request_timeout=request_timeout,
        retry_policy=retry,
        fifo=fifo,
        receive_batch_size=batch,
        long_polling_timeout=polling,
        max_body_size=max_body,
        validate_message_type=validate,
        metric_on=metric,
        lite_subscription_quota=lite_quota,
        max_lite_topic_size=lite_size,
    )


# --------------------------------------------------------------------------------------------------
# Routes


def route_queues_from_pb(topic: str, message_queues: Iterable[Any]) -> list[RouteQueue]:
    """`RouteQueue`s of a QueryRoute answer (queues with malformed endpoints are skipped)."""
    out: list[RouteQueue] = []
    for mq in message_queues:
        broker = mq.broker
        try:
            endpoint = endpoint_from_pb(broker.endpoints)
        except ValueError:
            continue
        out.append(
            RouteQueue(
                topic=mq.topic.name or topic,
                broker_name=broker.name,
                queue_id=mq.id,
                permission=Permission(mq.permission) if mq.permission in _PERMISSIONS else Permission.NONE,
                endpoint=endpoint,
                broker_id=broker.id,
                accept_types=frozenset(int(t) for t in mq.accept_message_types),
            )
        )
    return out


class QueuesMemo:
    """`route_queues_from_pb` for one owner's repeated answers, per topic: an answer whose protobuf equals
    the topic's last one (a comparison in protobuf's C code) gets the queues converted from that one, the
    same tuple, instead of a new conversion. A consumer of 1,000 topics gets 20-30 QueryAssignment and
    QueryRoute answers a second while idle, nearly all unchanged, and converting them was about a quarter
    of its event loop's work (docs/benchmarks.md, "Unchanged answers"). The memory is the last answer per
    topic, as the route cache keeps the last route."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict[str, tuple[Any, tuple[RouteQueue, ...]]] = {}

    def queues(
        self, topic: str, answer: Any, message_queues: Iterable[Any] | None = None
    ) -> tuple[RouteQueue, ...]:
        """The `RouteQueue`s of `answer` (a repeated protobuf field), converted from `message_queues` (by
        default `answer` itself) unless `answer` equals the last one given for `topic`."""
        last = self._last.get(topic)
        if last is not None and last[0] == answer:
            return last[1]
        queues = tuple(route_queues_from_pb(topic, answer if message_queues is None else message_queues))
        self._last[topic] = (answer, queues)
        return queues


def message_queue_to_pb(queue: RouteQueue, namespace: str) -> pb.MessageQueue:
    """The `MessageQueue` for a ReceiveMessage / QueryAssignment request."""
    return pb.MessageQueue(
        topic=pb.Resource(resource_namespace=namespace, name=queue.topic),
        id=queue.queue_id,
        permission=int(queue.permission),  # type: ignore[arg-type]
        broker=pb.Broker(
            name=queue.broker_name, id=queue.broker_id, endpoints=endpoint_to_pb(queue.endpoint)
        ),
        accept_message_types=sorted(queue.accept_types),  # type: ignore[arg-type]
    )
