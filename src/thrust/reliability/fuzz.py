"""Protobuf fuzzer for a running RocketMQ 5 gRPC server (B11, S9 in docs/reliability.md §4, §5).

Why one module of ~1000 lines (docs/CONVENTIONS.md): the wire-level helpers, the mutations and the
`Fuzzer` that picks them per case are one generator whose cases must be regenerable from the seed;
keeping the draw order of every mutation in one place is what makes `Fuzzer(...).case(i)` reproducible.

    report = await fuzz("127.0.0.1:8081", cases=10_000, seed=1)
    assert report.ok, report.summary

Every RPC of `apache.rocketmq.v2.MessagingService` is called through raw `grpc.aio` generic calls
(bytes in, bytes out) with, per case, one of:

- structure-aware mutations of a valid request: edge values in fields (empty/huge/control-char
  strings, system topic names, extreme integers, unknown enum values, out-of-range durations, many
  repeated entries), invalid UTF-8 in a string, truncation, bit flips, a field re-keyed with another
  wire type, a length prefix far beyond the data, deeply nested groups, unknown and duplicated
  fields, another RPC's request;
- pure random bytes, or nothing at all;
- now and then broken metadata (missing client id, garbage headers).

The contract checked: each answer is a response that parses and carries a `Status`, or a gRPC
INVALID_ARGUMENT / INTERNAL (the split is reported). Streams may also end at our deadline (a long
poll that was valid). Anything else (UNKNOWN means an unhandled exception in the server,
UNAVAILABLE a dead server, a unary DEADLINE_EXCEEDED a hang) is a violation. After each batch a
valid QueryRoute must still answer. Case `i` depends only on the seed, the endpoint (valid requests
name it) and, for ack-like RPCs, the receipt handle harvested at start, so `Fuzzer(endpoint,
seed=seed).case(i)` regenerates it; each reported violation also carries its full request.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

import grpc
from google.protobuf import message as pb_message
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message_factory import GetMessageClass

from thrust._codec.digest import DigestType, compute_digest
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s

__all__ = ["Case", "FuzzReport", "Fuzzer", "Rpc", "Violation", "fuzz", "rpcs"]

SERVICE = "apache.rocketmq.v2.MessagingService"
Metadata = tuple[tuple[str, str], ...]

# Descriptor objects come from upb at run time; the stubs' types do not match them, so stay loose.
_Field = Any

_ALLOWED_CODES = frozenset({grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.INTERNAL})


_BORN_TIMESTAMP = 1_717_200_000  # 2024-06-01T00:00:00Z


class Rpc(NamedTuple):
    name: str
    path: str
    request: type[pb_message.Message]
    response: type[pb_message.Message]
    client_streaming: bool
    server_streaming: bool


def rpcs() -> tuple[Rpc, ...]:
    """Every method of MessagingService, from the compiled descriptor (new RPCs are fuzzed too)."""
    service = s.DESCRIPTOR.services_by_name["MessagingService"]
    return tuple(
        Rpc(
            m.name,
            f"/{service.full_name}/{m.name}",
            GetMessageClass(m.input_type),
            GetMessageClass(m.output_type),
            m.client_streaming,
            m.server_streaming,
        )
        for m in service.methods
    )


@dataclass(frozen=True)
class Case:
    index: int
    rpc: Rpc
    mutation: str
    payload: bytes
    metadata: Metadata
    deadline: float  # seconds


@dataclass(frozen=True)
class Violation:
    index: int
    rpc: str
    mutation: str
    outcome: str
    detail: str
    payload_len: int
    payload_head: str  # hex of the first 48 bytes
    payload: bytes  # the whole request, to replay it
    metadata: Metadata


@dataclass(frozen=True)
class FuzzReport:
    endpoint: str
    seed: int
    cases: int
    elapsed: float
    outcomes: Mapping[str, Mapping[str, int]]  # rpc -> outcome ("status:40002", "grpc:INTERNAL", ...) -> n
    mutations: Mapping[str, int]
    violations: int
    violations_by_outcome: Mapping[str, int]
    violation_examples: tuple[Violation, ...]
    liveness_checks: int
    liveness_failures: int
    unimplemented: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.violations == 0 and self.liveness_failures == 0

    def total(self, outcome: str) -> int:
        """How many cases, over all RPCs, ended with `outcome` (e.g. "grpc:INVALID_ARGUMENT")."""
        return sum(per.get(outcome, 0) for per in self.outcomes.values())

    @property
    def summary(self) -> str:
        totals: Counter[str] = Counter()
        for per in self.outcomes.values():
            totals.update(per)
        kinds: Counter[str] = Counter()
        for outcome, n in totals.items():
            kinds[outcome.split(":", 1)[0] if not outcome.startswith("grpc:") else outcome] += n
        lines = [
            f"fuzz seed={self.seed}: {self.cases} cases in {self.elapsed:.1f}s "
            f"over {len(self.outcomes)} RPCs; "
            f"liveness {self.liveness_checks - self.liveness_failures}/{self.liveness_checks}",
            "  answers: " + ", ".join(f"{k}={n}" for k, n in sorted(kinds.items())),
        ]
        if self.unimplemented:
            lines.append("  unimplemented: " + ", ".join(self.unimplemented))
        if self.violations:
            lines.append(
                f"  VIOLATIONS {self.violations}: "
                + ", ".join(f"{k}={n}" for k, n in sorted(self.violations_by_outcome.items()))
            )
            for v in self.violation_examples:
                lines.append(
                    f"    case {v.index} {v.rpc}/{v.mutation} -> {v.outcome}: {v.detail[:160]} "
                    f"({v.payload_len} B: {v.payload_head[:48]})"
                )
        lines.append("verdict: " + ("OK" if self.ok else "FAILED"))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary


# Wire-format helpers ------------------------------------------------------------------------------


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(field: int, wire_type: int) -> bytes:
    return _varint((field << 3) | wire_type)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("bad varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


class _Span(NamedTuple):
    start: int
    value_start: int
    end: int
    field: int
    wire_type: int


def _top_level_fields(buf: bytes) -> list[_Span]:
    """Best-effort split of a serialized message into its top-level fields."""
    spans: list[_Span] = []
    pos = 0
    try:
        while pos < len(buf):
            start = pos
            key, pos = _read_varint(buf, pos)
            field, wt = key >> 3, key & 7
            value_start = pos
            if wt == 0:
                _, pos = _read_varint(buf, pos)
            elif wt == 1:
                pos += 8
            elif wt == 2:
                n, pos = _read_varint(buf, pos)
                value_start = pos
                pos += n
            elif wt == 5:
                pos += 4
            else:
                break
            if pos > len(buf):
                break
            spans.append(_Span(start, value_start, pos, field, wt))
    except ValueError:
        pass
    return spans


# Edge values for field mutations ----------------------------------------------------------------

_EDGE_STRINGS: tuple[str, ...] = (
    "",
    " ",
    "\x00",
    "\t\n\r",
    "a" * 127,
    "a" * 128,
    "b" * 16_385,
    "%DLQ%fuzz",
    "%RETRY%fuzz",
    "rmq_sys_fuzz",
    "TBW102",
    "DEFAULT_CONSUMER",
    "in/valid",
    "|",
    "a||b",
    "*",
    "中文主题",
    "\U0001f642",
    "\u202e",
    "\ufeff",
    "UNIQ_KEY",
    "../../etc/passwd",
    "${jndi:ldap://127.0.0.1/x}",
    "' OR 1=1 --",
    "(" * 500 + "a = 1" + ")" * 500,
    "a BETWEEN 1 AND",
    "a IN (" + ",".join(f"'{i}'" for i in range(2000)) + ")",
    "NOT NOT NOT NOT a IS NULL",
    "1.2.3.4:99999",
    "-1",
    "9" * 40,
    "AQID",
    "01" * 40,
)
_I32 = (0, 1, -1, 2**31 - 1, -(2**31), 17, 32, 33, 1000)
_U32 = (0, 1, 2**32 - 1, 2**31, 32, 33)
_I64 = (0, 1, -1, 2**63 - 1, -(2**63), 10**12, -(10**12), 86_400_001)
_U64 = (0, 1, 2**64 - 1, 2**63)
_FLOATS = (0.0, -0.0, float("nan"), float("inf"), float("-inf"), 1e308, -1.0)
_HUGE_LENGTHS = (2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**64 - 1, 1 << 40)

_MUTATIONS: tuple[tuple[str, int], ...] = (
    ("valid", 3),
    ("fields", 30),
    ("invalid_utf8", 5),
    ("truncate", 8),
    ("bitflip", 10),
    ("wire_type", 8),
    ("huge_length", 6),
    ("deep_nesting", 5),
    ("unknown_fields", 6),
    ("duplicate_field", 4),
    ("wrong_message", 5),
    ("random_bytes", 8),
    ("empty", 2),
)


def _scalar_edge(f: _Field, rng: random.Random) -> Any:
    ct = f.cpp_type
    if ct == FieldDescriptor.CPPTYPE_STRING:
        if f.type == FieldDescriptor.TYPE_BYTES:
            return rng.choice((b"", b"\x00", rng.randbytes(rng.randint(1, 64)), b"\xff" * 70_000))
        return rng.choice(_EDGE_STRINGS)
    if ct == FieldDescriptor.CPPTYPE_INT32:
        return rng.choice(_I32)
    if ct == FieldDescriptor.CPPTYPE_UINT32:
        return rng.choice(_U32)
    if ct == FieldDescriptor.CPPTYPE_INT64:
        return rng.choice(_I64)
    if ct == FieldDescriptor.CPPTYPE_UINT64:
        return rng.choice(_U64)
    if ct in (FieldDescriptor.CPPTYPE_DOUBLE, FieldDescriptor.CPPTYPE_FLOAT):
        return rng.choice(_FLOATS)
    if ct == FieldDescriptor.CPPTYPE_BOOL:
        return rng.random() < 0.5
    if ct == FieldDescriptor.CPPTYPE_ENUM:
        known = [v.number for v in f.enum_type.values]
        return rng.choice([*known, -1, 99, 2**31 - 1, -(2**31)])
    raise TypeError(f"not a scalar: {f.full_name}")


def _mutate_message(msg: pb_message.Message, rng: random.Random, depth: int = 0) -> None:
    """Set one field somewhere under `msg` to an edge value (recursing into sub-messages)."""
    fields: Sequence[_Field] = msg.DESCRIPTOR.fields
    if not fields:
        return
    f = rng.choice(fields)
    is_message = f.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE
    value: Any = getattr(msg, f.name)
    if f.is_repeated:
        if is_message and f.message_type.GetOptions().map_entry:
            key_f, val_f = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
            if rng.random() < 0.3:
                for i in range(rng.choice((129, 500))):
                    value[f"k{i}"] = "v"
            elif key_f.cpp_type == FieldDescriptor.CPPTYPE_STRING:
                v = _scalar_edge(val_f, rng) if val_f.cpp_type != FieldDescriptor.CPPTYPE_MESSAGE else None
                k = _scalar_edge(key_f, rng)
                if v is None:
                    value[k].SetInParent()
                else:
                    value[k] = v
        elif rng.random() < 0.25:
            msg.ClearField(f.name)
        elif is_message:
            n = rng.choice((1, 2, 33, 200))
            for i in range(n):
                item = value.add()
                # Only the first few items are mutated further: sizes stay linear, not n ** depth.
                if i < 3 and rng.random() < 0.5 and depth < 8:
                    _mutate_message(item, rng, depth + 1)
        else:
            for _ in range(rng.choice((1, 2, 129, 1000))):
                value.append(_scalar_edge(f, rng))
        return
    if is_message:
        r = rng.random()
        if r < 0.15:
            msg.ClearField(f.name)
        elif r < 0.3:
            value.Clear()
            value.SetInParent()
        elif depth < 8:
            _mutate_message(value, rng, depth + 1)
        return
    setattr(msg, f.name, _scalar_edge(f, rng))


def _string_fields(msg: pb_message.Message, path: list[tuple[pb_message.Message, _Field]]) -> None:
    for f in msg.DESCRIPTOR.fields:
        if f.is_repeated:
            continue
        if f.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE:
            if msg.HasField(f.name):
                _string_fields(getattr(msg, f.name), path)
        elif f.type == FieldDescriptor.TYPE_STRING:
            path.append((msg, f))


_INVALID_UTF8 = (b"\xff", b"\xc3\x28", b"\xe2\x28\xa1", b"\xf0\x28\x8c\x28", b"\xed\xa0\x80", b"\xc0\xaf")


# Fuzzer -----------------------------------------------------------------------------------------


class Fuzzer:
    """Generates reproducible cases against one endpoint and checks each answer.

    `topic`/`group` name the resources valid requests use (the server should auto-create them or
    have them configured). `timeout` bounds unary calls; `stream_timeout` bounds streaming ones
    (a valid long poll may legitimately run into it). Half of the long polls get `long_poll_timeout`
    instead and run in the background, at most `background` at a time, so that they do not stall
    the `concurrency` workers.
    """

    def __init__(
        self,
        endpoint: str,
        *,
        seed: int = 0,
        topic: str = "fuzz-topic",
        group: str = "fuzz-group",
        concurrency: int = 64,
        batch: int = 500,
        timeout: float = 5.0,
        stream_timeout: float = 0.5,
        long_poll_timeout: float = 6.0,
        background: int = 256,
        metadata_rate: float = 0.08,
        examples: int = 10,
        only: Sequence[str] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.seed = seed
        self.topic = topic
        self.group = group
        self.concurrency = concurrency
        self.batch = batch
        self.timeout = timeout
        self.stream_timeout = stream_timeout
        self.long_poll_timeout = long_poll_timeout
        self.background = background
        self.metadata_rate = metadata_rate
        self.examples = examples
        self.rpcs = tuple(r for r in rpcs() if only is None or r.name in only)
        if not self.rpcs:
            raise ValueError("no RPC selected")
        self.client_id = f"fuzz@{os.getpid()}@{seed}@0"
        self.metadata: Metadata = (
            ("x-mq-client-id", self.client_id),
            ("x-mq-language", "PYTHON"),
            ("x-mq-client-version", "5.1.0-fuzz"),
            ("x-mq-protocol", "v2"),
        )
        self.receipt_handle = "fuzz-receipt-handle"
        self.message_id = "0100000000000000000000000000000001"
        self.seeds = self._build_seeds()
        self._mutations = [name for name, _ in _MUTATIONS]
        self._weights = [w for _, w in _MUTATIONS]

    # Seeds ---------------------------------------------------------------------------------------
    def _build_seeds(self) -> dict[str, list[pb_message.Message]]:
        host, _, port = self.endpoint.rpartition(":")
        endpoints = d.Endpoints(scheme=d.IPv4, addresses=[d.Address(host=host.strip("[]"), port=int(port))])
        topic = d.Resource(name=self.topic)
        group = d.Resource(name=self.group)
        queue = d.MessageQueue(
            topic=topic,
            id=0,
            permission=d.READ_WRITE,
            broker=d.Broker(name="broker-0", id=0, endpoints=endpoints),
            accept_message_types=[d.NORMAL],
        )
        tag_all = d.FilterExpression(type=d.TAG, expression="*")
        message = d.Message(
            topic=topic,
            user_properties={"k": "v"},
            system_properties=d.SystemProperties(
                tag="fuzz",
                keys=["key"],
                message_id=self.message_id,
                # A matching digest: the server refuses a wrong one (B15), and the seed should
                # reach the store; mutations of the body or the checksum exercise the refusal.
                body_digest=d.Digest(type=d.CRC32, checksum=compute_digest(DigestType.CRC32, b"fuzz body")),
                body_encoding=d.IDENTITY,
                message_type=d.NORMAL,
                born_host="127.0.0.1",
            ),
            body=b"fuzz body",
        )
        # A fixed instant, not the clock: a case must be the same bytes whichever second the Fuzzer was
        # built in (`Fuzzer(endpoint, seed=seed).case(i)` regenerates a reported case).
        message.system_properties.born_timestamp.seconds = _BORN_TIMESTAMP
        fifo = d.Message()
        fifo.CopyFrom(message)
        fifo.system_properties.message_type = d.FIFO
        fifo.system_properties.message_group = "g1"
        settings_pub = s.TelemetryCommand(
            settings=d.Settings(
                client_type=d.PRODUCER,
                access_point=endpoints,
                publishing=d.Publishing(topics=[topic], max_body_size=4 << 20, validate_message_type=True),
                user_agent=d.UA(language=d.PYTHON, version="5.1.0", platform="linux", hostname="fuzz"),
            )
        )
        settings_pub.settings.request_timeout.seconds = 3
        settings_sub = s.TelemetryCommand(
            settings=d.Settings(
                client_type=d.SIMPLE_CONSUMER,
                access_point=endpoints,
                subscription=d.Subscription(
                    group=group, subscriptions=[d.SubscriptionEntry(topic=topic, expression=tag_all)]
                ),
            )
        )
        receive = s.ReceiveMessageRequest(
            group=group, message_queue=queue, filter_expression=tag_all, batch_size=16, auto_renew=False
        )
        receive.invisible_duration.seconds = 30
        receive.long_polling_timeout.seconds = 5
        pull = s.PullMessageRequest(
            group=group, message_queue=queue, offset=0, batch_size=16, filter_expression=tag_all
        )
        pull.long_polling_timeout.seconds = 5
        change = s.ChangeInvisibleDurationRequest(
            group=group, topic=topic, receipt_handle=self.receipt_handle, message_id=self.message_id
        )
        change.invisible_duration.seconds = 30
        seeds: dict[str, list[pb_message.Message]] = {
            "QueryRoute": [s.QueryRouteRequest(topic=topic, endpoints=endpoints)],
            "Heartbeat": [
                s.HeartbeatRequest(client_type=d.PRODUCER),
                s.HeartbeatRequest(group=group, client_type=d.SIMPLE_CONSUMER),
            ],
            "SendMessage": [s.SendMessageRequest(messages=[message]), s.SendMessageRequest(messages=[fifo])],
            "QueryAssignment": [s.QueryAssignmentRequest(topic=topic, group=group, endpoints=endpoints)],
            "ReceiveMessage": [receive],
            "AckMessage": [
                s.AckMessageRequest(
                    group=group,
                    topic=topic,
                    entries=[
                        s.AckMessageEntry(message_id=self.message_id, receipt_handle=self.receipt_handle)
                    ],
                )
            ],
            "ForwardMessageToDeadLetterQueue": [
                s.ForwardMessageToDeadLetterQueueRequest(
                    group=group,
                    topic=topic,
                    receipt_handle=self.receipt_handle,
                    message_id=self.message_id,
                    delivery_attempt=1,
                    max_delivery_attempts=16,
                )
            ],
            "PullMessage": [pull],
            "UpdateOffset": [s.UpdateOffsetRequest(group=group, message_queue=queue, offset=0)],
            "GetOffset": [s.GetOffsetRequest(group=group, message_queue=queue)],
            "QueryOffset": [s.QueryOffsetRequest(message_queue=queue, query_offset_policy=d.BEGINNING)],
            "EndTransaction": [
                s.EndTransactionRequest(
                    topic=topic,
                    message_id=self.message_id,
                    transaction_id="fuzz-transaction",
                    resolution=d.COMMIT,
                    source=d.SOURCE_CLIENT,
                )
            ],
            "Telemetry": [settings_pub, settings_sub],
            "NotifyClientTermination": [s.NotifyClientTerminationRequest(group=group)],
            "ChangeInvisibleDuration": [change],
            "RecallMessage": [s.RecallMessageRequest(topic=topic, recall_handle="fuzz-recall-handle")],
            "SyncLiteSubscription": [
                s.SyncLiteSubscriptionRequest(
                    action=d.PARTIAL_ADD, topic=topic, group=group, lite_topic_set=["lite-1"]
                )
            ],
        }
        # An RPC added to the proto later still gets fuzzed, from an empty request.
        for rpc in self.rpcs:
            seeds.setdefault(rpc.name, [rpc.request()])
        return seeds

    # Cases ---------------------------------------------------------------------------------------
    def case(self, index: int) -> Case:
        """Case `index` of this seed: the same bytes every time."""
        rng = random.Random((self.seed << 32) ^ index)
        rpc = rng.choice(self.rpcs)
        mutation = rng.choices(self._mutations, self._weights)[0]
        seed_msg = rng.choice(self.seeds[rpc.name])
        payload = self._mutate(mutation, rpc, seed_msg, rng)
        metadata = self.metadata
        if rng.random() < self.metadata_rate:
            metadata = self._mutate_metadata(rng)
        if rpc.client_streaming:
            deadline = self.stream_timeout
        elif rpc.server_streaming:
            # Half the long polls get a deadline the server accepts (>= the 5 s minimum, 7.5), so
            # valid-looking receives get past the polling check; the rest are refused at once.
            deadline = self.long_poll_timeout if rng.random() < 0.5 else self.stream_timeout
        else:
            deadline = self.timeout
        return Case(index, rpc, mutation, payload, metadata, deadline)

    def _mutate(self, mutation: str, rpc: Rpc, seed_msg: pb_message.Message, rng: random.Random) -> bytes:
        valid = seed_msg.SerializeToString()
        if mutation == "valid":
            return valid
        if mutation == "fields":
            msg = type(seed_msg)()
            msg.CopyFrom(seed_msg)
            for _ in range(rng.randint(1, 3)):
                _mutate_message(msg, rng)
            return msg.SerializeToString()
        if mutation == "invalid_utf8":
            msg = type(seed_msg)()
            msg.CopyFrom(seed_msg)
            strings: list[tuple[pb_message.Message, _Field]] = []
            _string_fields(msg, strings)
            if strings:
                holder, f = rng.choice(strings)
                marker = "Zq" + "".join(rng.choice("ABCDEFGHJK") for _ in range(10))
                setattr(holder, f.name, marker)
                bad = rng.choice(_INVALID_UTF8)
                replacement = (bad * (len(marker) // len(bad) + 1))[: len(marker)]
                return msg.SerializeToString().replace(marker.encode(), replacement, 1)
            mutation = "bitflip"
        if mutation == "truncate":
            return valid[: rng.randrange(len(valid))] if valid else b"\x0a"
        if mutation == "bitflip":
            data = bytearray(valid or b"\x00")
            for _ in range(rng.randint(1, 8)):
                i = rng.randrange(len(data))
                data[i] ^= 1 << rng.randrange(8)
            return bytes(data)
        spans = _top_level_fields(valid)
        if mutation == "wire_type" and spans:
            sp = rng.choice(spans)
            if rng.random() < 0.5:
                # Same field number, another wire type, the old value bytes left in place.
                wt = rng.choice([w for w in (0, 1, 2, 3, 4, 5, 6, 7) if w != sp.wire_type])
                return valid[: sp.start] + _key(sp.field, wt) + valid[sp.value_start :]
            # A well-formed value of the wrong type (a varint where a message/string belongs).
            replacement = _key(sp.field, 0 if sp.wire_type == 2 else 2)
            replacement += _varint(rng.choice(_I64)) if sp.wire_type == 2 else _varint(3) + b"abc"
            return valid[: sp.start] + replacement + valid[sp.end :]
        if mutation == "huge_length":
            length_spans = [sp for sp in spans if sp.wire_type == 2]
            huge = rng.choice(_HUGE_LENGTHS)
            if length_spans and rng.random() < 0.5:
                sp = rng.choice(length_spans)
                return valid[: sp.start] + _key(sp.field, 2) + _varint(huge) + valid[sp.value_start :]
            return valid + _key(rng.randint(1, 8), 2) + _varint(huge) + rng.randbytes(rng.randint(0, 16))
        if mutation == "deep_nesting":
            depth = rng.choice((64, 101, 1000, 10_000))
            field = rng.choice((1, 2, 3, 1999))
            if rng.random() < 0.5:
                nested = _key(field, 3) * depth + _key(field, 4) * depth  # nested groups
            else:
                nested = b""
                for _ in range(min(depth, 2000)):  # nested length-delimited (a message in a message)
                    nested = _key(field, 2) + _varint(len(nested)) + nested
            return valid + nested
        if mutation == "unknown_fields":
            extra = bytearray()
            for _ in range(rng.randint(1, 10)):
                field = rng.choice((rng.randint(16, 2**29 - 1), rng.randint(1, 15)))
                wt = rng.choice((0, 1, 2, 5))
                extra += _key(field, wt)
                if wt == 0:
                    extra += _varint(rng.getrandbits(64))
                elif wt == 1:
                    extra += rng.randbytes(8)
                elif wt == 2:
                    blob = rng.randbytes(rng.randint(0, 64))
                    extra += _varint(len(blob)) + blob
                else:
                    extra += rng.randbytes(4)
            return valid + bytes(extra)
        if mutation == "duplicate_field" and spans:
            sp = rng.choice(spans)
            return valid + valid[sp.start : sp.end] * rng.randint(1, 50)
        if mutation == "wrong_message":
            other = rng.choice(self.rpcs)
            return rng.choice(self.seeds[other.name]).SerializeToString()
        if mutation == "empty":
            return b""
        return rng.randbytes(rng.choice((1, 2, 3, 5, 8, 16, 64, 256, 1024, 4096)))

    def _mutate_metadata(self, rng: random.Random) -> Metadata:
        md = dict(self.metadata)
        choice = rng.randrange(6)
        printable = "".join(chr(c) for c in range(0x20, 0x7F))
        garbage = "".join(rng.choice(printable) for _ in range(rng.choice((1, 16, 200))))
        if choice == 0:
            md.pop("x-mq-client-id", None)
        elif choice == 1:
            md[rng.choice(list(md))] = garbage
        elif choice == 2:
            md["authorization"] = rng.choice(
                (
                    garbage,
                    "MQv2-HMAC-SHA1",
                    "MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, Signature=zz",
                    "MQv2-HMAC-SHA1 Credential=, SignedHeaders=, Signature=",
                )
            )
            md["x-mq-date-time"] = rng.choice(("20240101T000000Z", garbage, ""))
        elif choice == 3:
            md["x-mq-client-id"] = "c" * 4000
        elif choice == 4:
            md["x-mq-language"] = rng.choice(("", "COBOL", garbage))
        else:
            md.clear()
        return tuple(md.items())

    # Running -------------------------------------------------------------------------------------
    async def run(self, cases: int = 10_000, *, start: int = 0) -> FuzzReport:
        options = [
            ("grpc.max_send_message_length", -1),
            ("grpc.max_receive_message_length", -1),
            ("grpc.enable_retries", 0),
        ]
        began = time.monotonic()
        outcomes: dict[str, Counter[str]] = defaultdict(Counter)
        mutations: Counter[str] = Counter()
        by_outcome: Counter[str] = Counter()
        examples: list[Violation] = []
        liveness = liveness_failures = 0
        async with grpc.aio.insecure_channel(self.endpoint, options=options) as channel:
            calls = _Calls(channel)
            unimplemented = await self._probe_unimplemented(calls)
            await self._harvest_handle(calls)

            def record(case: Case, outcome: str, violation: str | None) -> None:
                outcomes[case.rpc.name][outcome] += 1
                mutations[case.mutation] += 1
                if violation is not None:
                    by_outcome[outcome] += 1
                    if len(examples) < self.examples:
                        examples.append(
                            Violation(
                                case.index,
                                case.rpc.name,
                                case.mutation,
                                outcome,
                                violation,
                                len(case.payload),
                                case.payload[:48].hex(),
                                case.payload,
                                case.metadata,
                            )
                        )

            end = start + cases
            pool = _Background(self.background)
            try:
                for batch_start in range(start, end, self.batch):
                    indices = iter(range(batch_start, min(batch_start + self.batch, end)))
                    await asyncio.gather(
                        *(
                            self._worker(calls, indices, unimplemented, record, pool)
                            for _ in range(self.concurrency)
                        )
                    )
                    liveness += 1
                    if not await self._alive(calls):
                        liveness_failures += 1
                        break  # the server is gone: every further case would only say so again
                await pool.join()
            finally:
                await pool.cancel()
        return FuzzReport(
            endpoint=self.endpoint,
            seed=self.seed,
            cases=sum(mutations.values()),
            elapsed=time.monotonic() - began,
            outcomes=MappingProxyType({k: MappingProxyType(dict(v)) for k, v in sorted(outcomes.items())}),
            mutations=MappingProxyType(dict(mutations)),
            violations=sum(by_outcome.values()),
            violations_by_outcome=MappingProxyType(dict(by_outcome)),
            violation_examples=tuple(examples),
            liveness_checks=liveness,
            liveness_failures=liveness_failures,
            unimplemented=tuple(sorted(unimplemented)),
        )

    async def _worker(
        self,
        calls: _Calls,
        indices: Iterator[int],
        unimplemented: frozenset[str],
        record: Callable[[Case, str, str | None], None],
        pool: _Background,
    ) -> None:
        for index in indices:
            case = self.case(index)
            if case.deadline > self.timeout / 2 and (case.rpc.server_streaming or case.rpc.client_streaming):
                await pool.spawn(self._run_one(calls, case, unimplemented, record))
            else:
                await self._run_one(calls, case, unimplemented, record)

    async def _run_one(
        self,
        calls: _Calls,
        case: Case,
        unimplemented: frozenset[str],
        record: Callable[[Case, str, str | None], None],
    ) -> None:
        outcome, violation = await self.execute(calls, case, unimplemented)
        record(case, outcome, violation)

    async def execute(
        self, calls: _Calls, case: Case, unimplemented: frozenset[str] = frozenset()
    ) -> tuple[str, str | None]:
        """Run one case; (outcome, violation description or None)."""
        rpc = case.rpc
        try:
            if rpc.client_streaming:
                raws = await calls.stream_stream(rpc.path, case.payload, case.metadata, case.deadline)
            elif rpc.server_streaming:
                raws = await calls.unary_stream(rpc.path, case.payload, case.metadata, case.deadline)
            else:
                raws = [await calls.unary_unary(rpc.path, case.payload, case.metadata, case.deadline)]
        except grpc.aio.AioRpcError as exc:
            code = exc.code()
            outcome = f"grpc:{code.name}"
            if code in _ALLOWED_CODES:
                return outcome, None
            if code == grpc.StatusCode.DEADLINE_EXCEEDED and (rpc.server_streaming or rpc.client_streaming):
                return "deadline", None  # a valid long poll or an open Telemetry stream
            if code == grpc.StatusCode.UNIMPLEMENTED and rpc.name in unimplemented:
                return outcome, None
            details = exc.details() or ""
            if code == grpc.StatusCode.UNKNOWN and ("DecodeError" in details or "Error parsing" in details):
                # grpc.aio answers UNKNOWN when the request deserializer raises; a server must map
                # undecodable requests to INVALID_ARGUMENT (or INTERNAL, as grpc-java does) itself.
                outcome += ":decode"
            return outcome, details[:300]
        if rpc.client_streaming and not raws:
            try:
                rpc.request.FromString(case.payload)
            except pb_message.DecodeError:
                # The stream ended OK without a word although the command could not be decoded.
                return "stream-ended:undecodable", "an undecodable command closed the stream silently"
        return self._check_responses(rpc, raws)

    def _check_responses(self, rpc: Rpc, raws: list[bytes]) -> tuple[str, str | None]:
        status: int | None = None
        for raw in raws:
            try:
                response = rpc.response.FromString(raw)
            except pb_message.DecodeError as exc:
                return "bad-response", f"the response does not parse as {rpc.response.__name__}: {exc}"
            if response.HasField("status"):
                status = response.status.code  # type: ignore[attr-defined]
        if status is not None:
            return f"status:{status}", None
        if rpc.client_streaming:
            # Telemetry answers settings with settings (no Status needed); a stream may also just end.
            return ("stream-response" if raws else "stream-ended"), None
        if rpc.server_streaming and not raws:
            return "no-status", "the stream ended without any response"
        return "no-status", f"{rpc.response.__name__} without a Status"

    async def _probe_unimplemented(self, calls: _Calls) -> frozenset[str]:
        """RPCs that answer UNIMPLEMENTED to a valid request are excused from then on (B16)."""
        out: set[str] = set()
        for rpc in self.rpcs:
            payload = self.seeds[rpc.name][0].SerializeToString()
            case = Case(-1, rpc, "valid", payload, self.metadata, self.stream_timeout)
            outcome, _ = await self.execute(calls, case)
            if outcome == "grpc:UNIMPLEMENTED":
                out.add(rpc.name)
        return frozenset(out)

    async def _harvest_handle(self, calls: _Calls) -> None:
        """Best effort: send and receive one message so ack-like seeds carry a real receipt handle."""
        with_real: list[str] = []
        try:
            await calls.unary_unary(
                f"/{SERVICE}/SendMessage",
                self.seeds["SendMessage"][0].SerializeToString(),
                self.metadata,
                5.0,
            )
            receive = s.ReceiveMessageRequest()
            receive.CopyFrom(self.seeds["ReceiveMessage"][0])  # type: ignore[arg-type]
            receive.batch_size = 1
            raws = await calls.unary_stream(
                f"/{SERVICE}/ReceiveMessage",
                receive.SerializeToString(),
                self.metadata,
                self.long_poll_timeout,
            )
        except grpc.aio.AioRpcError:
            return
        for raw in raws:
            response = s.ReceiveMessageResponse.FromString(raw)
            if response.HasField("message") and response.message.system_properties.receipt_handle:
                sp = response.message.system_properties
                with_real = [sp.receipt_handle, sp.message_id]
                break
        if not with_real:
            return
        handle, message_id = with_real
        for name in ("AckMessage", "ChangeInvisibleDuration", "ForwardMessageToDeadLetterQueue"):
            for seed_msg in self.seeds.get(name, ()):
                entries = getattr(seed_msg, "entries", None)
                if entries is not None:
                    entries[0].receipt_handle = handle
                    entries[0].message_id = message_id
                else:
                    seed_msg.receipt_handle = handle  # type: ignore[attr-defined]
                    seed_msg.message_id = message_id  # type: ignore[attr-defined]
        self.receipt_handle, self.message_id = handle, message_id

    async def _alive(self, calls: _Calls) -> bool:
        payload = self.seeds["QueryRoute"][0].SerializeToString()
        for _ in range(3):
            try:
                raw = await calls.unary_unary(f"/{SERVICE}/QueryRoute", payload, self.metadata, self.timeout)
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.2)
                continue
            return s.QueryRouteResponse.FromString(raw).HasField("status")
        return False


class _Background:
    """Owned tasks for slow cases, at most `limit` at a time (`spawn` waits for a free slot)."""

    def __init__(self, limit: int) -> None:
        self._slots = asyncio.Semaphore(limit)
        self._tasks: set[asyncio.Task[None]] = set()

    async def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        await self._slots.acquire()
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._slots.release()

    async def join(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks))

    async def cancel(self) -> None:
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class _Calls:
    """Cached raw (bytes in, bytes out) multicallables on one channel."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._channel = channel
        self._uu: dict[str, Any] = {}
        self._us: dict[str, Any] = {}
        self._ss: dict[str, Any] = {}

    async def unary_unary(self, path: str, payload: bytes, md: Metadata, seconds: float) -> bytes:
        mc = self._uu.get(path)
        if mc is None:
            mc = self._uu[path] = self._channel.unary_unary(path, None, None)
        raw: bytes = await mc(payload, metadata=md, timeout=seconds)
        return raw

    async def unary_stream(self, path: str, payload: bytes, md: Metadata, seconds: float) -> list[bytes]:
        mc = self._us.get(path)
        if mc is None:
            mc = self._us[path] = self._channel.unary_stream(path, None, None)
        call = mc(payload, metadata=md, timeout=seconds)
        out: list[bytes] = []
        try:
            async for raw in call:
                out.append(raw)
                if len(out) >= 64:
                    break
        finally:
            call.cancel()
        return out

    async def stream_stream(self, path: str, payload: bytes, md: Metadata, seconds: float) -> list[bytes]:
        mc = self._ss.get(path)
        if mc is None:
            mc = self._ss[path] = self._channel.stream_stream(path, None, None)
        call = mc(None, metadata=md, timeout=seconds)
        out: list[bytes] = []
        try:
            await call.write(payload)
            try:
                await call.done_writing()
            except Exception:
                # grpc.aio lets cygrpc's ExecuteBatchError out of `done_writing` when the server ended the
                # call between the write and the half-close (`write` turns the same failure into the call's
                # status). Wait for that status: the read below reports how the call ended.
                await call.code()
            raw = await call.read()
            if isinstance(raw, bytes):  # else grpc.aio.EOF: the server ended the stream
                out.append(raw)
        finally:
            call.cancel()
        return out


async def fuzz(endpoint: str, *, cases: int = 10_000, seed: int = 0, **options: Any) -> FuzzReport:
    """Fuzz `endpoint` with `cases` cases; `options` go to `Fuzzer`."""
    return await Fuzzer(endpoint, seed=seed, **options).run(cases)
