"""The server's Duration/Timestamp conversions: nanoseconds stay in range when a fraction rounds up to a
whole second (the carry), on every path that writes one."""

from __future__ import annotations

import pytest

import thrust
from thrust._codec.scalars import duration, duration_seconds, fill_timestamp, timestamp, timestamp_seconds
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust.server.core.model import Delivery, GroupRetryPolicy, MessageType, StoredMessage
from thrust.server.message_codec import delivery_pb, stored_message_pb
from thrust.server.settings import retry_policy_pb

_NEAR_WHOLE = (0.9999999999, 1.9999999999, 41.9999999999)


@pytest.mark.parametrize("seconds", _NEAR_WHOLE)
def test_duration_carries_a_rounded_up_fraction(seconds: float) -> None:
    pb = duration(seconds)
    assert 0 <= pb.nanos < 1_000_000_000
    assert pb.seconds == round(seconds)
    assert pb.nanos == 0


def test_timestamp_carries_a_rounded_up_fraction() -> None:
    pb = timestamp(1_764_000_000.9999999999)
    assert (pb.seconds, pb.nanos) == (1_764_000_001, 0)
    out = d.SystemProperties()
    fill_timestamp(out.born_timestamp, 41.9999999999)
    assert (out.born_timestamp.seconds, out.born_timestamp.nanos) == (42, 0)
    assert timestamp_seconds(timestamp(12.25)) == 12.25
    assert duration_seconds(duration(1.5)) == 1.5


def _stored(**fields: object) -> StoredMessage:
    values: dict[str, object] = dict(
        topic="t",
        body=b"x",
        message_id="m1",
        tag=None,
        keys=(),
        properties={},
        message_type=MessageType.TRANSACTION,
        message_group=None,
        delivery_timestamp=None,
        born_timestamp=10.9999999999,
        born_host="h",
        body_encoding_gzip=False,
        trace_context=None,
        transaction_recovery_after=None,
        priority=None,
        producer_client_id="p",
        queue_id=0,
        offset=0,
        store_timestamp=20.9999999999,
        broker="b-0",
    )
    values.update(fields)
    return StoredMessage(**values)  # type: ignore[arg-type]


def test_messages_sent_to_clients_carry_nanos_in_range() -> None:
    # A recovery duration of 0.9999999999 s went out as nanos 1e9 (out of Duration's range).
    pb = stored_message_pb(_stored(transaction_recovery_after=0.9999999999, delivery_timestamp=30.9999999999))
    sp = pb.system_properties
    recovery = sp.orphaned_transaction_recovery_duration
    assert (recovery.seconds, recovery.nanos) == (1, 0)
    for field, whole in ((sp.born_timestamp, 11), (sp.store_timestamp, 21), (sp.delivery_timestamp, 31)):
        assert (field.seconds, field.nanos) == (whole, 0)
    out = d.Message()
    delivery_pb(Delivery(_stored(), "handle", 1, 40.0, None), out)
    assert (out.system_properties.born_timestamp.seconds, out.system_properties.born_timestamp.nanos) == (
        11,
        0,
    )


def test_group_backoff_in_settings_carries_too() -> None:
    # settings.py had its own in-place Duration setter without the carry.
    pb = retry_policy_pb(GroupRetryPolicy(max_attempts=3, customized=(0.9999999999, 2.0)))
    first = pb.customized_backoff.next[0]
    assert (first.seconds, first.nanos) == (1, 0)
    exp = retry_policy_pb(GroupRetryPolicy(exponential=(0.9999999999, 10.0, 2.0)))
    assert (exp.exponential_backoff.initial.seconds, exp.exponential_backoff.initial.nanos) == (1, 0)


def test_the_server_and_the_client_share_one_message_type() -> None:
    assert MessageType is thrust.MessageType
