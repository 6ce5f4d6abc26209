"""Server side of the Telemetry settings handshake: validate the client's `Settings`, merge in the
authoritative values and remember them per client id.

Follows the proxy's `GrpcClientSettingsManager` (docs/protocol.md §4.2): whatever the client reports
is echoed, and the server adds the values clients depend on:

- consumers: `subscription.fifo` from the group, `receive_batch_size=32`, `long_polling_timeout=20s`,
  `backoff_policy` from the group's retry policy (default 17 attempts, customized 1 s..2 h);
- producers: `backoff_policy{max_attempts=3, exponential{10 ms, 1 s, x2}}`,
  `publishing{max_body_size=4 MiB, validate_message_type=true}`;
- everyone: `metric{on=false}`, `request_timeout` echoed.

Only protobuf is used here; no grpc, no asyncio.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from thrust._codec.scalars import fill_duration
from thrust._codec.status import Code
from thrust._codec.validation import MAX_BODY_SIZE, Invalid, check_group
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust.server.core.model import GroupInfo, GroupRetryPolicy

__all__ = [
    "CONSUMER_TYPES",
    "DEFAULT_REQUEST_TIMEOUT",
    "LONG_POLLING_TIMEOUT",
    "PRODUCER_BACKOFF",
    "RECEIVE_BATCH_SIZE",
    "HandshakeSettings",
    "check_client_properties",
    "merge_settings",
    "retry_policy_pb",
]

RECEIVE_BATCH_SIZE: Final = 32
"""The proxy's `Subscription.receive_batch_size` (and the broker's hard cap on one pop)."""

LONG_POLLING_TIMEOUT: Final = 20.0
"""The proxy's `Subscription.long_polling_timeout` (`grpcClientConsumerMaxLongPollingTimeoutMillis`)."""

DEFAULT_REQUEST_TIMEOUT: Final = 3.0
"""The clients' default request timeout, used when Settings did not carry one."""

PRODUCER_BACKOFF: Final = GroupRetryPolicy(max_attempts=3, customized=(), exponential=(0.01, 1.0, 2.0))
"""The proxy's producer backoff: 3 attempts, exponential 10 ms .. 1 s, x2 (docs/protocol.md §4.3)."""

CONSUMER_TYPES: Final = frozenset(
    {
        d.ClientType.PUSH_CONSUMER,
        d.ClientType.SIMPLE_CONSUMER,
        d.ClientType.PULL_CONSUMER,
        d.ClientType.LITE_PUSH_CONSUMER,
        d.ClientType.LITE_SIMPLE_CONSUMER,
    }
)

# Settings.client_properties limits (docs/protocol.md §4.2).
_MAX_CLIENT_PROPERTIES: Final = 32
_MAX_CLIENT_PROPERTY_KEY: Final = 64
_MAX_CLIENT_PROPERTY_VALUE: Final = 256
_MAX_CLIENT_PROPERTIES_BYTES: Final = 4096
_CLIENT_PROPERTY_KEY_RE: Final = re.compile(r"[a-zA-Z][a-zA-Z0-9_.-]*")
_RESERVED_CLIENT_PROPERTY_PREFIX: Final = "rocketmq."


@dataclass(frozen=True, slots=True)
class HandshakeSettings:
    """What the server remembers about a client after its Settings (the proxy's `CLIENT_SETTINGS_MAP`).

    Attributes:
        client_type: `Settings.client_type`.
        group: the consumer group (consumers only), else None.
        fifo: the group's FIFO flag sent back to a consumer.
        request_timeout: the client's request timeout in seconds (long-polling math, docs/protocol.md §6.2).
        merged: the authoritative `Settings` sent back to the client.
    """

    client_type: int
    group: str | None
    fifo: bool
    request_timeout: float
    merged: d.Settings


def check_client_properties(properties: dict[str, str]) -> None:
    """`Settings.client_properties`: at most 32 entries, keys `[a-zA-Z][a-zA-Z0-9_.-]*` of at most 64
    characters and not starting with the reserved `rocketmq.`, values of at most 256 characters, at most
    4 KB in total (UTF-8 keys + values); else INVALID_CLIENT_PROPERTIES (docs/protocol.md §4.2)."""
    if len(properties) > _MAX_CLIENT_PROPERTIES:
        raise Invalid(
            Code.INVALID_CLIENT_PROPERTIES, f"too many client properties, max is {_MAX_CLIENT_PROPERTIES}"
        )
    total = 0
    for key, value in properties.items():
        if len(key) > _MAX_CLIENT_PROPERTY_KEY or not _CLIENT_PROPERTY_KEY_RE.fullmatch(key):
            raise Invalid(Code.INVALID_CLIENT_PROPERTIES, f"illegal client property key {key!r}")
        if key.startswith(_RESERVED_CLIENT_PROPERTY_PREFIX):
            raise Invalid(Code.INVALID_CLIENT_PROPERTIES, f"client property key {key!r} is reserved")
        if len(value) > _MAX_CLIENT_PROPERTY_VALUE:
            raise Invalid(
                Code.INVALID_CLIENT_PROPERTIES,
                f"client property {key!r} is longer than {_MAX_CLIENT_PROPERTY_VALUE} characters",
            )
        total += len(key.encode("utf-8", "replace")) + len(value.encode("utf-8", "replace"))
    if total > _MAX_CLIENT_PROPERTIES_BYTES:
        raise Invalid(
            Code.INVALID_CLIENT_PROPERTIES,
            f"client properties exceed {_MAX_CLIENT_PROPERTIES_BYTES} bytes in total",
        )


def retry_policy_pb(policy: GroupRetryPolicy) -> d.RetryPolicy:
    """A `GroupRetryPolicy` as sent in `Settings.backoff_policy`: exponential when configured, else
    customized."""
    out = d.RetryPolicy(max_attempts=policy.max_attempts)
    if policy.exponential is not None:
        initial, maximum, multiplier = policy.exponential
        fill_duration(out.exponential_backoff.initial, initial)
        fill_duration(out.exponential_backoff.max, maximum)
        out.exponential_backoff.multiplier = multiplier
    else:
        for step in policy.customized:
            fill_duration(out.customized_backoff.next.add(), step)
        # An empty customized list must still select the customized strategy.
        out.customized_backoff.SetInParent()
    return out


def merge_settings(
    reported: d.Settings,
    group_info: GroupInfo | None,
    *,
    lite_subscription_quota: int = 2000,
    max_lite_topic_size: int = 64,
) -> HandshakeSettings:
    """Validate the client's `reported` Settings and build the authoritative reply.

    `group_info` is the consumer group's info (looked up by the caller from
    `reported.subscription.group`), None for producers. Consumers get the lite-topic limits too
    (`lite_subscription_quota`, `max_lite_topic_size`), as 5.5.0's GrpcClientSettingsManager sends them
    to every consumer.

    Raises:
        Invalid: INVALID_CLIENT_PROPERTIES, ILLEGAL_CONSUMER_GROUP, or BAD_REQUEST when neither
            publishing nor subscription is set (the service turns that one into gRPC INVALID_ARGUMENT,
            as the proxy's PUBSUB_NOT_SET).
    """
    pub_sub = reported.WhichOneof("pub_sub")
    if pub_sub is None:
        raise Invalid(Code.BAD_REQUEST, "PUBSUB_NOT_SET: settings carry neither publishing nor subscription")
    if reported.client_properties:
        check_client_properties(dict(reported.client_properties))
    merged = d.Settings()
    merged.CopyFrom(reported)
    request_timeout = DEFAULT_REQUEST_TIMEOUT
    if reported.HasField("request_timeout"):
        request_timeout = reported.request_timeout.seconds + reported.request_timeout.nanos / 1e9
    merged.metric.Clear()
    merged.metric.on = False
    group: str | None = None
    fifo = False
    if pub_sub == "publishing":
        merged.backoff_policy.CopyFrom(retry_policy_pb(PRODUCER_BACKOFF))
        merged.publishing.max_body_size = MAX_BODY_SIZE
        merged.publishing.validate_message_type = True
    else:
        group = reported.subscription.group.name
        check_group(group)
        info = group_info if group_info is not None else GroupInfo(name=group)
        fifo = info.fifo
        merged.backoff_policy.CopyFrom(retry_policy_pb(info.retry))
        sub = merged.subscription
        sub.fifo = fifo
        sub.receive_batch_size = RECEIVE_BATCH_SIZE
        fill_duration(sub.long_polling_timeout, LONG_POLLING_TIMEOUT)
        # 5.5.0's GrpcClientSettingsManager sends lite_subscription_quota (2000) and max_lite_topic_size
        # (64) to every consumer (the 5.4.0 that `thrust cluster` pins sends neither).
        sub.lite_subscription_quota = lite_subscription_quota
        sub.max_lite_topic_size = max_lite_topic_size
    client_type = (
        reported.client_type if reported.HasField("client_type") else d.ClientType.CLIENT_TYPE_UNSPECIFIED
    )
    return HandshakeSettings(
        client_type=client_type,
        group=group,
        fifo=fifo,
        request_timeout=request_timeout,
        merged=merged,
    )
