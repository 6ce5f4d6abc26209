"""Unit tests for protobuf <-> domain conversion: durations, digests, gzip, settings, ids on send."""

from __future__ import annotations

import hashlib
import zlib

import pytest

from thrust._codec import convert
from thrust._codec.digest import gzip_encode
from thrust._core.backoff import RetryPolicy
from thrust._core.endpoints import parse_endpoint
from thrust._core.settings import ClientSettings, merge
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
from thrust.message import FilterExpression, Message, MessageType


def _delivered(body: bytes, **sp: object) -> pb.Message:
    m = pb.Message(topic=pb.Resource(name="t"), body=body)
    m.system_properties.message_id = "01" + "0" * 32
    m.system_properties.receipt_handle = "h"
    for k, v in sp.items():
        if k == "digest":
            kind, checksum = v  # type: ignore[misc]
            m.system_properties.body_digest.type = kind
            m.system_properties.body_digest.checksum = checksum
        else:
            setattr(m.system_properties, k, v)
    return m


@pytest.mark.parametrize(
    "kind,checksum",
    [
        (pb.CRC32, format(zlib.crc32(b"payload"), "X")),
        (pb.MD5, hashlib.md5(b"payload").hexdigest().upper()),
        (pb.SHA1, hashlib.sha1(b"payload").hexdigest().upper()),
    ],
)
def test_digest_verified(kind: int, checksum: str) -> None:
    m = convert.received_from_pb(_delivered(b"payload", digest=(kind, checksum)))
    assert m.body == b"payload"
    with pytest.raises(convert.Corrupted):
        convert.received_from_pb(_delivered(b"tampered", digest=(kind, checksum)))


def test_gzip_decoded_after_digest_of_wire_bytes() -> None:
    wire = gzip_encode(b"big body " * 100)
    md5 = hashlib.md5(wire).hexdigest().upper()
    m = convert.received_from_pb(_delivered(wire, digest=(pb.MD5, md5), body_encoding=pb.GZIP))
    assert m.body == b"big body " * 100
    with pytest.raises(convert.Corrupted):
        convert.received_from_pb(_delivered(b"not gzip", body_encoding=pb.GZIP))


def test_batch_parse_separates_corrupted() -> None:
    good = _delivered(b"ok", digest=(pb.MD5, hashlib.md5(b"ok").hexdigest()))
    bad = _delivered(b"ok", digest=(pb.MD5, "00"))
    ok, corrupted = convert.received_from_pbs([good, bad, good])
    assert len(ok) == 2 and len(corrupted) == 1 and corrupted[0].receipt_handle == "h"


def test_received_fields() -> None:
    raw = _delivered(
        b"x", tag="a", delivery_attempt=3, message_group="g", message_type=pb.FIFO, queue_offset=7
    )
    raw.system_properties.keys.extend(["k"])
    raw.system_properties.born_timestamp.seconds = 100
    raw.system_properties.born_timestamp.nanos = 500_000_000
    raw.user_properties["p"] = "v"
    ep = parse_endpoint("127.0.0.1:8081")
    m = convert.received_from_pb(raw, ep)
    assert (m.tag, m.keys, m.delivery_attempt, m.message_group) == ("a", ("k",), 3, "g")
    assert m.message_type is MessageType.FIFO and m.queue_offset == 7 and m.endpoint == ep
    assert m.born_timestamp == 100.5 and m.store_timestamp is None
    assert dict(m.properties) == {"p": "v"}
    with pytest.raises(AttributeError):
        m.body = b"y"  # type: ignore[misc]


def test_trace_context_is_read_when_present() -> None:
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    m = convert.received_from_pb(_delivered(b"x", trace_context=tp))
    assert m.trace_context == tp
    assert m._redelivered().trace_context == tp  # a FIFO local retry keeps it
    assert convert.received_from_pb(_delivered(b"x")).trace_context is None


def test_durations_keep_nanos() -> None:
    d = convert.duration(1.25)
    assert (d.seconds, d.nanos) == (1, 250_000_000)
    assert convert.duration_seconds(d) == 1.25
    assert convert.duration(0.999999999999).seconds == 1


def test_message_to_pb_types_and_id() -> None:
    base = {"message_id": "ID", "namespace": "ns", "born_host": "h", "born_timestamp": 1.5}
    fifo = convert.message_to_pb(Message(topic="t", body=b"x", message_group="g"), **base)  # type: ignore[arg-type]
    assert fifo.system_properties.message_type == pb.FIFO and fifo.topic.resource_namespace == "ns"
    delay = convert.message_to_pb(Message(topic="t", body=b"x", delivery_time=10.0), **base)  # type: ignore[arg-type]
    assert delay.system_properties.message_type == pb.DELAY
    assert delay.system_properties.delivery_timestamp.seconds == 10
    tx = convert.message_to_pb(Message(topic="t", body=b"x"), transactional=True, **base)  # type: ignore[arg-type]
    assert tx.system_properties.message_type == pb.TRANSACTION
    prio = convert.message_to_pb(Message(topic="t", body=b"x", priority=3), **base)  # type: ignore[arg-type]
    assert prio.system_properties.message_type == pb.PRIORITY and prio.system_properties.priority == 3
    assert prio.system_properties.message_id == "ID"


def test_server_settings_every_field_and_merge() -> None:
    s = pb.Settings()
    s.request_timeout.seconds, s.request_timeout.nanos = 2, 500_000_000
    s.backoff_policy.max_attempts = 17
    s.backoff_policy.customized_backoff.next.add(seconds=1)
    s.backoff_policy.customized_backoff.next.add(nanos=250_000_000)
    s.subscription.fifo = True
    s.subscription.receive_batch_size = 16
    s.subscription.long_polling_timeout.seconds = 15
    s.metric.on = False
    server = convert.server_settings_from_pb(s)
    eff = merge(ClientSettings.for_consumer(), server)
    assert eff.request_timeout == 2.5 and eff.fifo and eff.receive_batch_size == 16
    assert eff.long_polling_timeout == 15 and eff.metric_on is False
    assert eff.retry_policy == RetryPolicy.customized(17, [1.0, 0.25])


def test_retry_policy_round_trip() -> None:
    policy = RetryPolicy.exponential(3, 0.01, 1.0, 2.0)
    assert convert.retry_policy_from_pb(convert.retry_policy_to_pb(policy)) == policy
    custom = RetryPolicy.customized(5, [1.5, 2.0])
    assert convert.retry_policy_from_pb(convert.retry_policy_to_pb(custom)) == custom
    assert convert.retry_policy_from_pb(pb.RetryPolicy()) is None


def test_endpoints_and_filters() -> None:
    for text in ("127.0.0.1:8081;127.0.0.2:8082", "[::1]:8081", "broker.local:9876"):
        ep = parse_endpoint(text)
        assert convert.endpoint_from_pb(convert.endpoint_to_pb(ep)) == ep
    f = convert.filter_expression(FilterExpression.sql("a > 1"))
    assert (f.type, f.expression) == (pb.SQL, "a > 1")
    assert convert.filter_expression("a||b").type == pb.TAG


def _route_answer(*brokers: str, permission: int = pb.READ_WRITE) -> object:
    """A QueryRoute answer's `message_queues`, one queue per broker."""
    response = spb.QueryRouteResponse()
    for name in brokers:
        mq = response.message_queues.add(id=0, permission=permission)
        mq.topic.name = "t"
        mq.broker.name = name
        mq.broker.endpoints.scheme = pb.IPv4
        mq.broker.endpoints.addresses.add(host="127.0.0.1", port=8081)
    # Parsed from the wire, as every answer is: equal answers are different objects.
    return spb.QueryRouteResponse.FromString(response.SerializeToString()).message_queues


def test_queues_memo_converts_an_answer_only_when_it_differs_from_the_topics_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conversions: list[str] = []
    convert_queues = convert.route_queues_from_pb

    def counting(topic: str, message_queues: object) -> list[object]:
        conversions.append(topic)
        return convert_queues(topic, message_queues)  # type: ignore[arg-type]

    monkeypatch.setattr(convert, "route_queues_from_pb", counting)
    memo = convert.QueuesMemo()
    first = memo.queues("t", _route_answer("a", "b"))
    assert [q.broker_name for q in first] == ["a", "b"]
    assert memo.queues("t", _route_answer("a", "b")) is first  # equal: not converted again
    assert conversions == ["t"]
    # Another topic with an equal answer is its own entry; a changed answer (a broker gone, a permission
    # changed) is converted and replaces the last one.
    assert [q.topic for q in memo.queues("u", _route_answer("a", "b"))] == ["t", "t"]
    fewer = memo.queues("t", _route_answer("a"))
    assert [q.broker_name for q in fewer] == ["a"]
    read_only = memo.queues("t", _route_answer("a", permission=pb.READ))
    assert [q.readable and not q.writable for q in read_only] == [True]
    assert memo.queues("t", _route_answer("a", permission=pb.READ)) is read_only
    assert conversions == ["t", "u", "t", "t"]
