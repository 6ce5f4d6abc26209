"""Request validation shared by the client (before any I/O) and the embedded server (on receipt).

Why one module of ~710 lines (docs/CONVENTIONS.md): it is the one list of the proxy's request limits,
shared by client and server; one check per field, kept together so that both sides apply the same (and
`check_new_message`, the client's stricter checks of a message as it is built, next to the checks it
adds to).

Every check returns None or raises `Invalid` carrying the `apache.rocketmq.v2.Code` the upstream proxy
answers with for the same input (docs/protocol.md §2.3, §5.4). The rules and limits follow
apache/rocketmq: `proxy/.../grpc/v2/common/GrpcValidator.java`, `SendMessageActivity.java`,
`ReceiveMessageActivity.java`, `client/.../Validators.java`, `common/.../topic/TopicValidator.java`,
`common/.../message/MessageConst.java` and the `ProxyConfig` defaults. Where the server must accept what
the proxy accepts, the checks are no stricter than the proxy; the few additions are marked "thrust:".

A limit given as 0 or a negative number disables that limit, as in `ProxyConfig`.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Final

from thrust._codec.digest import DigestType, verify_digest
from thrust._codec.status import Code, StatusFailure

__all__ = [
    "DEFAULT_INVISIBLE_SECONDS",
    "GROUP_MAX_LENGTH",
    "INT32_MAX",
    "LITE_TOPIC_MAX_SIZE",
    "MAX_BODY_SIZE",
    "MAX_DELAY_SECONDS",
    "MAX_INVISIBLE_SECONDS",
    "MAX_POLLING_SECONDS",
    "MAX_TRANSACTION_RECOVERY_SECONDS",
    "MAX_USER_PROPERTIES",
    "MAX_USER_PROPERTY_SIZE",
    "MESSAGE_GROUP_MAX_SIZE",
    "MESSAGE_ID_MAX_LENGTH",
    "MIN_POLLING_SECONDS",
    "MIN_RECEIVE_INVISIBLE_SECONDS",
    "RESERVED_PROPERTY_KEYS",
    "SYSTEM_GROUPS",
    "SYSTEM_GROUP_PREFIX",
    "SYSTEM_GROUP_PREFIXES",
    "SYSTEM_TOPICS",
    "SYSTEM_TOPIC_PREFIX",
    "TOPIC_MAX_LENGTH",
    "Invalid",
    "check_body",
    "check_body_digest",
    "check_change_invisible_duration",
    "check_delivery_timestamp",
    "check_group",
    "check_invisible_duration",
    "check_keys",
    "check_lite_topic",
    "check_message_group",
    "check_message_id",
    "check_new_message",
    "check_polling_time",
    "check_priority",
    "check_properties",
    "check_receive_invisible_duration",
    "check_send_message",
    "check_tag",
    "check_topic",
    "check_transaction_recovery",
    "contains_control_character",
    "is_blank",
    "is_system_group",
    "is_system_topic",
]


class Invalid(StatusFailure, ValueError):
    """A value the protocol rejects; `code` is the status the server answers with."""


# --------------------------------------------------------------------------------------------------
# Limits

TOPIC_MAX_LENGTH: Final = 127
"""`Validators.TOPIC_MAX_LENGTH` (characters)."""

GROUP_MAX_LENGTH: Final = 120
"""Consumer group names are at most 120 characters (docs/protocol.md §5.4; B5 in docs/reliability.md §4).
apache/rocketmq PR #9563 ("Limit group max length to 120", 2025) lowered it from
`Validators.CHARACTER_MAX_LENGTH` (255) because a group becomes part of a topic name (`%RETRY%<group>`), and
topics are at most 127 characters. Proxies older than that change accept up to 255."""

SYSTEM_TOPIC_PREFIX: Final = "rmq_sys_"
"""`TopicValidator.SYSTEM_TOPIC_PREFIX`: every topic starting with it is a system topic."""

SYSTEM_TOPICS: Final = frozenset(
    {
        # TopicValidator.SYSTEM_TOPIC_SET
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "CHECKPOINT_TOPIC",
        "RMQ_SYS_TOPIC_CONFIG_SYNC",
        "RMQ_SYS_CONSUMER_OFFSET_SYNC",
        "RMQ_SYS_DELAY_OFFSET_SYNC",
        "RMQ_SYS_SUBSCRIPTION_GROUP_SYNC",
        "RMQ_SYS_MESSAGE_MODE_SYNC",
        "RMQ_SYS_TIMER_METRICS_SYNC",
    }
)

SYSTEM_GROUP_PREFIX: Final = "CID_RMQ_SYS_"
"""`MixAll.CID_RMQ_SYS_PREFIX`: `MixAll.isSysConsumerGroup`, the one the proxy's
`GrpcValidator.validateConsumerGroup` refuses."""

SYSTEM_GROUP_PREFIXES: Final = (SYSTEM_GROUP_PREFIX, "CID_HOUSEKEEPING")
"""Prefixes reserved for system consumer groups: `CID_RMQ_SYS_`, plus `CID_HOUSEKEEPING` from the
RocketMQ documentation's parameter limits (rocketmq.apache.org "Parameter Constraints and Suggestions")."""

SYSTEM_GROUPS: Final = frozenset(
    {
        # The reserved ConsumerGroup names of the RocketMQ documentation's parameter limits
        # ("Parameter Constraints and Suggestions"), which are `MixAll.PREDEFINE_GROUP_SET`: the broker's
        # own consumer groups, and the producer group names, which may not name a consumer group either.
        "DEFAULT_CONSUMER",
        "DEFAULT_PRODUCER",
        "TOOLS_CONSUMER",
        "SCHEDULE_CONSUMER",
        "FILTERSRV_CONSUMER",
        "__MONITOR_CONSUMER",
        "CLIENT_INNER_PRODUCER",
        "SELF_TEST_P_GROUP",
        "SELF_TEST_C_GROUP",
        "CID_ONS-HTTP-PROXY",
        "CID_ONSAPI_PERMISSION",
        "CID_ONSAPI_OWNER",
        "CID_ONSAPI_PULL",
        "CID_SYS_RMQ_TRANS",
    }
)
"""thrust: system consumer group names refused with ILLEGAL_CONSUMER_GROUP (B5 in docs/reliability.md §4;
the apache/rocketmq-e2e suite expects consumption with
`DEFAULT_CONSUMER` to fail). The proxy itself refuses only the `CID_RMQ_SYS_` prefix."""

MAX_BODY_SIZE: Final = 4 * 1024 * 1024
"""`ProxyConfig.maxMessageSize`: the body as sent (compressed, if GZIP-encoded)."""

MAX_USER_PROPERTIES: Final = 128
"""`ProxyConfig.userPropertyMaxNum`."""

MAX_USER_PROPERTY_SIZE: Final = 16 * 1024
"""`ProxyConfig.maxUserPropertySize`: UTF-8 bytes of property keys + values + tag + message keys."""

MESSAGE_GROUP_MAX_SIZE: Final = 64
LITE_TOPIC_MAX_SIZE: Final = 64
"""The proxy's `maxLiteTopicSize` (5.5.0 `ProxyConfig`, UTF-8 bytes); Settings carry the server's value as
`Subscription.max_lite_topic_size`."""
"""`ProxyConfig.maxMessageGroupSize`. The proxy rejects a group whose UTF-8 encoding is *at least* this
long, so the longest accepted message group is 63 bytes."""

MAX_DELAY_SECONDS: Final = 24 * 3600.0
"""`ProxyConfig.maxDelayTimeMills` (1 day): how far in the future a delivery timestamp may be."""

MIN_RECEIVE_INVISIBLE_SECONDS: Final = 10.0
"""`ProxyConfig.minInvisibleTimeMillsForRecv`."""

MAX_INVISIBLE_SECONDS: Final = 12 * 3600.0
"""`ProxyConfig.maxInvisibleTimeMills`."""

DEFAULT_INVISIBLE_SECONDS: Final = 60.0
"""`ProxyConfig.defaultInvisibleTimeMills`: used instead of the request's value for auto-renew receives."""

MIN_POLLING_SECONDS: Final = 5.0
"""`ProxyConfig.grpcClientConsumerMinLongPollingTimeoutMillis`."""

MAX_POLLING_SECONDS: Final = 20.0
"""`ProxyConfig.grpcClientConsumerMaxLongPollingTimeoutMillis`."""

MAX_TRANSACTION_RECOVERY_SECONDS: Final = 3600.0
"""`ProxyConfig.maxTransactionRecoverySecond`."""

INT32_MAX: Final = 2**31 - 1
"""The largest value of a protobuf `int32` field (`SystemProperties.priority`)."""

MESSAGE_ID_MAX_LENGTH: Final = 128
"""thrust: a bound on message ids (v1 ids are 34 characters, legacy ids 32); the proxy has none."""

RESERVED_PROPERTY_KEYS: Final = frozenset(
    {
        # MessageConst.STRING_HASH_SET: user properties may not use these keys.
        "TRACE_ON",
        "MSG_REGION",
        "KEYS",
        "TAGS",
        "WAIT",
        "DELAY",
        "RETRY_TOPIC",
        "REAL_TOPIC",
        "REAL_QID",
        "TRAN_MSG",
        "PGROUP",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "BUYER_ID",
        "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        "UNIQ_KEY",
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "POP_CK",
        "POP_CK_OFFSET",
        "1ST_POP_TIME",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "DUP_INFO",
        "EXTEND_UNIQ_INFO",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "ARRIVE_TIME",
        "PUSH_REPLY_TIME",
        "CLUSTER",
        "MSG_TYPE",
        "INNER_MULTI_QUEUE_OFFSET",
        "TIMER_DELAY_MS",
        "TIMER_DELAY_SEC",
        "TIMER_DELIVER_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_OUT_MS",
        "TIMER_DEL_UNIQKEY",
        "TIMER_DELAY_LEVEL",
        "__BORNHOST",
        "BORN_TIMESTAMP",
        "DLQ_ORIGIN_TOPIC",
        "DLQ_ORIGIN_MESSAGE_ID",
        "__CRC32#",
    }
)

# TopicValidator.VALID_CHAR_BIT_MAP, i.e. ^[%|a-zA-Z0-9_-]+$ (the proxy accepts '|' in names; the Java
# 5.x client's own pattern does not, which only makes that client stricter).
_NAME_RE: Final = re.compile(r"[%|a-zA-Z0-9_-]+")
_LITE_TOPIC_RE: Final = re.compile(r"[a-zA-Z0-9_-]+")

# Character.isWhitespace: separators other than the no-break spaces, plus these ASCII controls.
_JAVA_WHITESPACE_CONTROLS: Final = frozenset("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f")
_NO_BREAK_SPACES: Final = frozenset("\u00a0\u2007\u202f")


# --------------------------------------------------------------------------------------------------
# Helpers


def is_blank(value: str) -> bool:
    """Java `StringUtils.isBlank`: empty, or only `Character.isWhitespace` characters."""
    if value[:1].isalnum():  # the common case (a name, an id) without a per-character loop
        return False
    return all(_is_java_whitespace(c) for c in value)


def _is_java_whitespace(c: str) -> bool:
    if c in _JAVA_WHITESPACE_CONTROLS:
        return True
    return unicodedata.category(c) in ("Zs", "Zl", "Zp") and c not in _NO_BREAK_SPACES


_ISO_CONTROL_RE: Final = re.compile("[\x00-\x1f\x7f-\x9f]")


def contains_control_character(value: str) -> bool:
    """Guava `CharMatcher.javaIsoControl()` (U+0000..U+001F, U+007F..U+009F), as `GrpcValidator`."""
    return _ISO_CONTROL_RE.search(value) is not None


def _utf8_size(value: str) -> int:
    # Java's String.getBytes(UTF_8) turns an unpaired surrogate into one '?' byte; "replace" does too.
    return len(value.encode("utf-8", "replace"))


def is_system_topic(topic: str) -> bool:
    """`TopicValidator.isSystemTopic`."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def is_system_group(group: str) -> bool:
    """`MixAll.isSysConsumerGroup` (the `CID_RMQ_SYS_` prefix), plus the reserved names and prefixes of
    `SYSTEM_GROUPS` / `SYSTEM_GROUP_PREFIXES`."""
    return group in SYSTEM_GROUPS or group.startswith(SYSTEM_GROUP_PREFIXES)


# --------------------------------------------------------------------------------------------------
# Resources


def check_topic(topic: str, *, allow_system: bool = False) -> None:
    """`GrpcValidator.validateTopic`: `Validators.checkTopic` (not blank, at most 127 characters of
    `[%|a-zA-Z0-9_-]`), then no system topic (`TopicValidator.isSystemTopic`) unless `allow_system`.

    Retry (`%RETRY%group`) and dead-letter (`%DLQ%group`) topics are not system topics. With a namespace,
    pass the name as the proxy sees it."""
    if is_blank(topic):
        raise Invalid(Code.ILLEGAL_TOPIC, "topic name cannot be blank")
    if len(topic) > TOPIC_MAX_LENGTH:
        raise Invalid(Code.ILLEGAL_TOPIC, f"topic name is longer than {TOPIC_MAX_LENGTH} characters")
    if not _NAME_RE.fullmatch(topic):
        raise Invalid(
            Code.ILLEGAL_TOPIC,
            f"topic name {topic!r} contains illegal characters, allowing only [%|a-zA-Z0-9_-]",
        )
    if not allow_system and is_system_topic(topic):
        raise Invalid(Code.ILLEGAL_TOPIC, f"cannot access system topic {topic!r}")


def check_group(group: str, *, allow_system: bool = False) -> None:
    """`GrpcValidator.validateConsumerGroup`: `Validators.checkGroup` (not blank, at most
    `GROUP_MAX_LENGTH` = 120 characters of `[%|a-zA-Z0-9_-]`), then no system group (`is_system_group`)
    unless `allow_system`. B5 (docs/reliability.md §4): every refusal is ILLEGAL_CONSUMER_GROUP (40003)."""
    if is_blank(group):
        raise Invalid(Code.ILLEGAL_CONSUMER_GROUP, "consumer group name cannot be blank")
    if len(group) > GROUP_MAX_LENGTH:
        raise Invalid(
            Code.ILLEGAL_CONSUMER_GROUP, f"consumer group name is longer than {GROUP_MAX_LENGTH} characters"
        )
    if not _NAME_RE.fullmatch(group):
        raise Invalid(
            Code.ILLEGAL_CONSUMER_GROUP,
            f"consumer group name {group!r} contains illegal characters, allowing only [%|a-zA-Z0-9_-]",
        )
    if not allow_system and is_system_group(group):
        raise Invalid(Code.ILLEGAL_CONSUMER_GROUP, f"cannot use system consumer group {group!r}")


# --------------------------------------------------------------------------------------------------
# Message parts


def check_tag(tag: str | None) -> None:
    """`GrpcValidator.validateTag`. None or "" means "no tag" (the proxy treats them alike); otherwise
    the tag may not be whitespace only, contain '|' (the TAG filter separator) or control characters."""
    if not tag:
        return
    if is_blank(tag):
        raise Invalid(Code.ILLEGAL_MESSAGE_TAG, "tag cannot be the char sequence of whitespace")
    if "|" in tag:
        raise Invalid(Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain '|'")
    if contains_control_character(tag):
        raise Invalid(Code.ILLEGAL_MESSAGE_TAG, "tag cannot contain control character")


def check_keys(keys: str | Iterable[str]) -> None:
    """`SendMessageActivity.validateMessageKey` for each key: an empty key is ignored by the proxy; a
    whitespace-only key or one with control characters is rejected. A bare string is one key."""
    for key in (keys,) if isinstance(keys, str) else keys:
        if not key:
            continue
        if is_blank(key):
            raise Invalid(Code.ILLEGAL_MESSAGE_KEY, "key cannot be the char sequence of whitespace")
        if contains_control_character(key):
            raise Invalid(Code.ILLEGAL_MESSAGE_KEY, "key cannot contain control character")


def check_message_group(message_group: str | None, *, max_size: int = MESSAGE_GROUP_MAX_SIZE) -> None:
    """`SendMessageActivity.validateMessageGroup`. None or "" means "no group"; otherwise not whitespace
    only, UTF-8 size strictly below `max_size` (63 bytes by default), no control characters."""
    if not message_group:
        return
    if is_blank(message_group):
        raise Invalid(Code.ILLEGAL_MESSAGE_GROUP, "message group cannot be the char sequence of whitespace")
    if max_size > 0 and _utf8_size(message_group) >= max_size:
        raise Invalid(Code.ILLEGAL_MESSAGE_GROUP, f"message group exceed the max size {max_size}")
    if contains_control_character(message_group):
        raise Invalid(Code.ILLEGAL_MESSAGE_GROUP, "message group cannot contain control character")


def check_lite_topic(lite_topic: str, *, max_size: int = LITE_TOPIC_MAX_SIZE) -> None:
    """A lite topic name, as the 5.5.0 proxy's `GrpcValidator.validateLiteTopic`: not blank, at most
    `max_size` UTF-8 bytes (64 by default), only `[a-zA-Z0-9_-]`; else ILLEGAL_LITE_TOPIC."""
    if not lite_topic or is_blank(lite_topic):
        raise Invalid(Code.ILLEGAL_LITE_TOPIC, "lite topic cannot be the char sequence of whitespace")
    if max_size > 0 and _utf8_size(lite_topic) > max_size:
        raise Invalid(Code.ILLEGAL_LITE_TOPIC, f"lite topic exceed the max size {max_size}")
    if not _LITE_TOPIC_RE.fullmatch(lite_topic):
        raise Invalid(
            Code.ILLEGAL_LITE_TOPIC,
            "lite topic can only contain alphanumeric characters, hyphens(-), and underscores(_)",
        )


def check_properties(
    properties: Mapping[str, str],
    *,
    tag: str | None = None,
    keys: str | Iterable[str] = (),
    max_count: int = MAX_USER_PROPERTIES,
    max_size: int = MAX_USER_PROPERTY_SIZE,
) -> None:
    """User properties, as `SendMessageActivity.buildMessageProperty`:

    - more than `max_count` entries → MESSAGE_PROPERTIES_TOO_LARGE;
    - a key from `MessageConst.STRING_HASH_SET`, or a control character in a key or a value →
      ILLEGAL_MESSAGE_PROPERTY_KEY (the proxy uses that code for values too);
    - UTF-8 size of all keys and values plus the tag and the message keys above `max_size` →
      MESSAGE_PROPERTIES_TOO_LARGE.

    Empty keys and values are accepted, as by the proxy. The tag and message keys only count towards the
    size here; validate them with `check_tag` / `check_keys`."""
    _check_property_entries(properties, max_count)
    _check_property_size(properties, tag, keys, max_size)


def _check_property_entries(properties: Mapping[str, str], max_count: int) -> None:
    if max_count > 0 and len(properties) > max_count:
        raise Invalid(Code.MESSAGE_PROPERTIES_TOO_LARGE, f"too many user properties, max is {max_count}")
    for key, value in properties.items():
        if key in RESERVED_PROPERTY_KEYS:
            raise Invalid(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {key}")
        if contains_control_character(key):
            raise Invalid(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "the key of property cannot contain control character"
            )
        if contains_control_character(value):
            raise Invalid(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "the value of property cannot contain control character"
            )


def _check_property_size(
    properties: Mapping[str, str], tag: str | None, keys: str | Iterable[str], max_size: int
) -> None:
    if max_size <= 0:
        return
    size = sum(_utf8_size(key) + _utf8_size(value) for key, value in properties.items())
    if tag:
        size += _utf8_size(tag)
    size += sum(_utf8_size(key) for key in ((keys,) if isinstance(keys, str) else keys))
    if size > max_size:
        raise Invalid(
            Code.MESSAGE_PROPERTIES_TOO_LARGE,
            f"the total size of user property is too large, max is {max_size}",
        )


def check_body(body: bytes | bytearray | memoryview, max_size: int = MAX_BODY_SIZE) -> None:
    """`SendMessageActivity.validateMessageBodySize`: empty → MESSAGE_BODY_EMPTY; more than `max_size`
    bytes → MESSAGE_BODY_TOO_LARGE. The size is that of the body as sent (after compression)."""
    size = memoryview(body).nbytes
    if size == 0:
        raise Invalid(Code.MESSAGE_BODY_EMPTY, "message body cannot be empty")
    if max_size > 0 and size > max_size:
        raise Invalid(Code.MESSAGE_BODY_TOO_LARGE, f"message body cannot exceed the max {max_size}")


def check_body_digest(kind: int, checksum: str, body: bytes | bytearray | memoryview) -> None:
    """thrust (B15 in docs/reliability.md §4, "on send: BAD_REQUEST 40000"): a producer's
    `SystemProperties.body_digest` must match the body as sent (compressed, if GZIP-encoded), as a consumer
    verifies the digest it receives (docs/protocol.md §6.6, `MessageViewImpl.fromProtobuf`). The upstream
    proxy never reads the producer's digest; checking it keeps a body corrupted between the producer and the
    server out of the store.

    `kind` is the `DigestType` number, `checksum` its string: uppercase hex in the protocol, compared
    without regard to case (a CRC32 may carry leading zeros, see `digest.verify_digest`). No digest
    (type UNSPECIFIED with an empty checksum, i.e. the field left unset) is not checked. A checksum with
    an unspecified or unknown type cannot be verified and is refused too."""
    if kind == 0 and not checksum:
        return
    try:
        matches = verify_digest(DigestType(kind), body, checksum)
    except ValueError:
        raise Invalid(Code.BAD_REQUEST, f"unsupported body digest type {kind}") from None
    if not matches:
        raise Invalid(Code.BAD_REQUEST, f"body digest mismatch ({DigestType(kind).name})")


def check_message_id(message_id: str) -> None:
    """The proxy only requires a non-blank id (`SendMessageActivity`, ILLEGAL_MESSAGE_ID) and never parses
    it (docs/protocol.md §5.2). thrust: control characters (which would corrupt the broker's property
    encoding) and ids longer than `MESSAGE_ID_MAX_LENGTH` are rejected too; the format is not checked, so
    legacy and foreign ids pass."""
    if is_blank(message_id):
        raise Invalid(Code.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
    if len(message_id) > MESSAGE_ID_MAX_LENGTH:
        raise Invalid(
            Code.ILLEGAL_MESSAGE_ID, f"message id is longer than {MESSAGE_ID_MAX_LENGTH} characters"
        )
    if contains_control_character(message_id):
        raise Invalid(Code.ILLEGAL_MESSAGE_ID, "message id cannot contain control character")


# --------------------------------------------------------------------------------------------------
# Times (all in seconds; `now` is epoch seconds where it is compared with an epoch timestamp)


def check_delivery_timestamp(
    delivery_timestamp: float, now: float, max_delay: float = MAX_DELAY_SECONDS
) -> None:
    """`SendMessageActivity.validateDelayTime`: `delivery_timestamp` (epoch seconds) may be at most
    `max_delay` seconds after `now` (epoch seconds). Past timestamps are accepted (delivered at once), as
    by the proxy; B10 in docs/reliability.md §4 asked to refuse them, but real clusters decide
    (tests/reliability/test_bad_input.py::test_b10_past_delivery_time_is_delivered_at_once_...)."""
    if not math.isfinite(delivery_timestamp):
        raise Invalid(Code.ILLEGAL_DELIVERY_TIME, "delivery timestamp is not a finite number")
    if max_delay > 0 and delivery_timestamp - now > max_delay:
        raise Invalid(
            Code.ILLEGAL_DELIVERY_TIME,
            f"the max delay time of message is too large, max is {max_delay:g} seconds",
        )


def check_invisible_duration(
    seconds: float, *, minimum: float = 0.0, maximum: float = MAX_INVISIBLE_SECONDS
) -> None:
    """`GrpcValidator.validateInvisibleTime`: `minimum <= seconds <= maximum` (no maximum when it is
    0 or negative), else ILLEGAL_INVISIBLE_TIME."""
    if math.isnan(seconds) or seconds < minimum:
        raise Invalid(
            Code.ILLEGAL_INVISIBLE_TIME, f"the invisibleTime is too small. min is {minimum:g} seconds"
        )
    if maximum > 0 and seconds > maximum:
        raise Invalid(
            Code.ILLEGAL_INVISIBLE_TIME, f"the invisibleTime is too large. max is {maximum:g} seconds"
        )


def check_receive_invisible_duration(seconds: float) -> None:
    """ReceiveMessage without auto-renew: 10 s to 12 h (`ReceiveMessageActivity`). With auto-renew the
    proxy ignores the request's value and uses `DEFAULT_INVISIBLE_SECONDS`, so callers skip this check."""
    check_invisible_duration(seconds, minimum=MIN_RECEIVE_INVISIBLE_SECONDS)


def check_change_invisible_duration(seconds: float) -> None:
    """ChangeInvisibleDuration: 0 to 12 h (`ChangeInvisibleDurationActivity`)."""
    check_invisible_duration(seconds, minimum=0.0)


def check_polling_time(
    long_polling_timeout: float | None,
    remaining: float | None,
    request_timeout: float,
    *,
    client_version: str | None = None,
    minimum: float = MIN_POLLING_SECONDS,
    maximum: float = MAX_POLLING_SECONDS,
) -> float:
    """The long-polling time for a ReceiveMessage, as `ReceiveMessageActivity` computes it; returns it
    in seconds or raises ILLEGAL_POLLING_TIME.

    `long_polling_timeout` is the request's value (None when unset: then `remaining - request_timeout/2`),
    `remaining` the seconds left before the call's deadline (None: no deadline) and `request_timeout` the
    client's `Settings.request_timeout`. The result is clamped to `[minimum, maximum]`; if that exceeds
    the remaining time, the remaining time is used when it is at least `minimum`, otherwise the request
    is refused. The proxy answers BAD_REQUEST instead to clients older than 5.0.3 (it compares the
    `x-mq-client-version` strings lexicographically, as Java's `String.compareTo`), or with no version."""
    if long_polling_timeout is not None:
        polling = long_polling_timeout
    elif remaining is not None:
        polling = remaining - request_timeout / 2
    else:
        polling = maximum
    polling = min(max(polling, minimum), maximum)
    if remaining is not None and polling > remaining:
        if remaining >= minimum:
            return remaining
        code = (
            Code.BAD_REQUEST
            if client_version is None or client_version < "5.0.3"
            else Code.ILLEGAL_POLLING_TIME
        )
        raise Invalid(
            code, "The deadline time remaining is not enough for polling, please check network condition"
        )
    return polling


def check_priority(priority: int | None) -> None:
    """`SystemProperties.priority`: at least 0 and at most `INT32_MAX` (the field is an `int32`) when set.

    thrust: BAD_REQUEST. Upstream refuses a negative priority too, but by accident: the proxy's
    `SendMessageActivity.buildMessageProperty` calls `Message.setPriority`, whose IllegalArgumentException
    reaches the client as INTERNAL_SERVER_ERROR, a code that invites retrying a request that cannot
    succeed. Above `INT32_MAX` the request cannot be encoded at all."""
    if priority is None:
        return
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise Invalid(Code.BAD_REQUEST, f"the priority must be an int, not {type(priority).__name__}")
    if priority < 0:
        raise Invalid(Code.BAD_REQUEST, f"the priority must be greater than or equal to 0, got {priority}")
    if priority > INT32_MAX:
        raise Invalid(
            Code.BAD_REQUEST, f"the priority must be at most {INT32_MAX} (an int32), got {priority}"
        )


def check_transaction_recovery(seconds: float, maximum: float = MAX_TRANSACTION_RECOVERY_SECONDS) -> None:
    """`SendMessageActivity.validateTransactionRecoverySecond`: the orphaned-transaction recovery
    duration may be at most `maximum` seconds, else BAD_REQUEST."""
    if maximum > 0 and seconds > maximum:
        raise Invalid(
            Code.BAD_REQUEST,
            f"the max transaction recovery time of message is too large, max is {maximum:g} seconds",
        )


# --------------------------------------------------------------------------------------------------
# A whole message


def check_send_message(
    *,
    body: bytes | bytearray | memoryview,
    message_id: str,
    properties: Mapping[str, str] | None = None,
    tag: str | None = None,
    keys: str | Iterable[str] = (),
    message_group: str | None = None,
    delivery_timestamp: float | None = None,
    now: float = 0.0,
    max_body_size: int = MAX_BODY_SIZE,
) -> None:
    """Every per-message SendMessage check, in the proxy's order (`SendMessageActivity.buildMessage`),
    so that a message with several problems reports the same first one. The topic is checked separately
    (once per request). `delivery_timestamp` and `now` are epoch seconds."""
    check_body(body, max_body_size)
    props = properties or {}
    key_list = [keys] if isinstance(keys, str) else list(keys)
    # Property entries first, then the tag and keys, then the combined size, as upstream.
    _check_property_entries(props, MAX_USER_PROPERTIES)
    check_tag(tag)
    check_keys(key_list)
    _check_property_size(props, tag, key_list, MAX_USER_PROPERTY_SIZE)
    check_message_id(message_id)
    if delivery_timestamp is not None:
        check_delivery_timestamp(delivery_timestamp, now)
    check_message_group(message_group)


# --------------------------------------------------------------------------------------------------
# A message as the user builds it (client only)


def check_new_message(
    *,
    topic: str,
    body: bytes | bytearray | memoryview,
    tag: str | None,
    keys: tuple[str, ...],
    properties: Mapping[str, str],
    message_group: str | None,
    delivery_timestamp: float | None,
    priority: int | None,
    lite_topic: str | None = None,
) -> None:
    """The checks a message passes when it is built (`thrust.Message`), before any producer sees it: what
    does not depend on the server's settings or the clock. The client only; the server never calls it.

    The rules are the Java client's `MessageBuilderImpl` (apache/rocketmq-clients
    `java/client/.../message/MessageBuilderImpl.java`), which are stricter than the proxy: a tag, a key, a
    message group, a property key and a property value may not be blank (empty or whitespace only; the
    proxy ignores an empty key and accepts empty property keys and values), a message group excludes a
    delivery time. On top of those, the proxy's own checks of the same fields (`check_topic`, `check_tag`,
    `check_keys`, the property entries and their size, `check_message_group`, `check_priority`), so that
    a message that can be built is refused by the server only for what the server decides (body size, its
    settings, the topic's type, the delivery time against its clock). The types are checked too (Java's are
    static, the annotations here are what a caller should pass): a `str` body or a non-string key or
    property is refused here rather than by protobuf at send. A priority excludes a message group and a
    delivery time (the proxy's MESSAGE_PROPERTY_CONFLICT_WITH_TYPE); Java's builder predates priorities.
    A lite topic (`check_lite_topic`) excludes the three (Java's `MessageBuilderImpl.setLiteTopic`)."""
    if not isinstance(topic, str):
        raise Invalid(Code.ILLEGAL_TOPIC, f"topic must be a str, not {type(topic).__name__}")
    check_topic(topic)
    if not isinstance(body, bytes | bytearray | memoryview):
        hint = " (encode it: body=text.encode())" if isinstance(body, str) else ""
        raise Invalid(Code.BAD_REQUEST, f"body must be bytes, not {type(body).__name__}{hint}")
    if tag is not None:
        if not isinstance(tag, str):
            raise Invalid(Code.ILLEGAL_MESSAGE_TAG, f"tag must be a str, not {type(tag).__name__}")
        if not tag or is_blank(tag):
            raise Invalid(Code.ILLEGAL_MESSAGE_TAG, "tag should not be blank (None means no tag)")
        check_tag(tag)
    for key in keys:
        if not isinstance(key, str):
            raise Invalid(Code.ILLEGAL_MESSAGE_KEY, f"a key must be a str, not {type(key).__name__}")
        if not key or is_blank(key):
            raise Invalid(Code.ILLEGAL_MESSAGE_KEY, "key should not be blank")
    check_keys(keys)
    for name, value in properties.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise Invalid(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "property keys and values must be str")
        if not name or is_blank(name):
            raise Invalid(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, "the key of property should not be blank")
        if not value or is_blank(value):
            raise Invalid(
                Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"the value of property {name!r} should not be blank"
            )
    _check_property_entries(properties, MAX_USER_PROPERTIES)
    _check_property_size(properties, tag, keys, MAX_USER_PROPERTY_SIZE)
    if message_group is not None:
        if not isinstance(message_group, str):
            raise Invalid(
                Code.ILLEGAL_MESSAGE_GROUP, f"message group must be a str, not {type(message_group).__name__}"
            )
        if not message_group or is_blank(message_group):
            raise Invalid(Code.ILLEGAL_MESSAGE_GROUP, "message group should not be blank")
        check_message_group(message_group)
    check_priority(priority)
    if lite_topic is not None:
        if not isinstance(lite_topic, str):
            raise Invalid(
                Code.ILLEGAL_LITE_TOPIC, f"lite topic must be a str, not {type(lite_topic).__name__}"
            )
        check_lite_topic(lite_topic)
    kinds = (
        message_group is not None,
        delivery_timestamp is not None,
        priority is not None,
        lite_topic is not None,
    )
    if sum(kinds) > 1:
        raise Invalid(
            Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            "message group (FIFO), delivery time (DELAY), priority and lite topic (LITE) are exclusive",
        )
