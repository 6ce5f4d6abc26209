"""The native transport's pure parts: which transport a config resolves to, and the received-message
decoding in Rust, field for field against the Python codec (`thrust._codec.convert.received_from_pb`)."""

from __future__ import annotations

import gzip
import hashlib
import zlib
from typing import Any

import pytest

from thrust._codec.convert import Corrupted, received_from_pb
from thrust._core.endpoints import parse_endpoint
from thrust._io import native
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust.config import ClientConfig
from thrust.errors import ThrustError

ENDPOINT = parse_endpoint("127.0.0.1:8081")


def _extension() -> Any:
    """The thrust_native module: these tests (marked `native`) fail, not skip, without it."""
    assert native._native is not None, "thrust_native is not installed: `make native` builds it"
    return native._native


def test_auto_takes_the_environment_then_native_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    config = ClientConfig("127.0.0.1:1")
    monkeypatch.delenv(native.TRANSPORT_ENV, raising=False)
    monkeypatch.setattr(native, "_native", object())
    assert native.resolve_transport(config) == "native"
    monkeypatch.setattr(native, "_native", None)
    assert native.resolve_transport(config) == "grpcio"
    monkeypatch.setenv(native.TRANSPORT_ENV, "grpcio")
    monkeypatch.setattr(native, "_native", object())
    assert native.resolve_transport(config) == "grpcio"
    # The variable decides only for "auto": a config that names its transport keeps it.
    assert native.resolve_transport(config.replace(transport="native")) == "native"


def test_native_without_the_package_and_a_bad_choice_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "_native", None)
    monkeypatch.delenv(native.TRANSPORT_ENV, raising=False)
    with pytest.raises(ThrustError, match=r"pip install 'thrust\[native\]'"):
        native.resolve_transport(ClientConfig("127.0.0.1:1", transport="native"))
    monkeypatch.setenv(native.TRANSPORT_ENV, "rust")
    with pytest.raises(ThrustError, match="THRUST_TRANSPORT"):
        native.resolve_transport(ClientConfig("127.0.0.1:1"))
    with pytest.raises(ValueError, match="transport"):
        ClientConfig("127.0.0.1:1", transport="rust")  # type: ignore[arg-type]


def _message(body: bytes = b"hello", **system: Any) -> pb.Message:
    m = pb.Message(body=body)
    m.topic.name = "t"
    sp = m.system_properties
    sp.message_id = "01ABC"
    sp.receipt_handle = "handle"
    for name, value in system.items():
        if name == "keys":
            sp.keys.extend(value)
        elif name in ("born_timestamp", "store_timestamp", "delivery_timestamp"):
            getattr(sp, name).FromNanoseconds(value)
        elif name == "digest":
            sp.body_digest.type, sp.body_digest.checksum = value
        else:
            setattr(sp, name, value)
    return m


_CASES = {
    "plain": _message(),
    "every field": _message(
        b"body",
        tag="TagA",
        keys=["k1", "k2"],
        message_group="g1",
        delivery_attempt=3,
        born_timestamp=1_700_000_000_123_456_789,
        store_timestamp=1_700_000_001_000_000_000,
        delivery_timestamp=1_700_000_002_500_000_000,
        born_host="10.0.0.1",
        queue_id=7,
        queue_offset=12345,
        message_type=pb.FIFO,
        priority=4,
        trace_context="00-abc-def-01",
    ),
    "no delivery attempt": _message(message_type=pb.DELAY),
    "lite topic": _message(message_type=pb.LITE, lite_topic="session-42"),
    "md5": _message(b"x", digest=(pb.MD5, hashlib.md5(b"x").hexdigest().upper())),
    "md5 lower case": _message(b"x", digest=(pb.MD5, hashlib.md5(b"x").hexdigest())),
    "sha1": _message(b"x", digest=(pb.SHA1, hashlib.sha1(b"x").hexdigest().upper())),
    "crc32": _message(b"x", digest=(pb.CRC32, format(zlib.crc32(b"x"), "X"))),
    "crc32 padded": _message(b"x", digest=(pb.CRC32, "000" + format(zlib.crc32(b"x"), "X"))),
    "crc32 not hex": _message(b"x", digest=(pb.CRC32, "0x" + format(zlib.crc32(b"x"), "X"))),
    "md5 mismatch": _message(b"x", digest=(pb.MD5, hashlib.md5(b"y").hexdigest())),
    "unknown digest type": _message(b"x", digest=(9, "00")),
    "zlib body": _message(zlib.compress(b"inflated" * 10), body_encoding=pb.GZIP),
    "gzip body": _message(gzip.compress(b"inflated" * 10), body_encoding=pb.GZIP),
    "corrupt gzip": _message(b"\x78\x9cnot zlib", body_encoding=pb.GZIP),
    "zlib with trailing garbage": _message(zlib.compress(b"a") + b"junk", body_encoding=pb.GZIP),
}


@pytest.mark.native
@pytest.mark.parametrize("case", list(_CASES))
def test_native_decoding_matches_the_python_codec(case: str) -> None:
    thrust_native = _extension()
    message = _CASES[case]
    message.user_properties["p"] = "v"
    decoded = thrust_native.decode_for_test(native.new_hub(), message.SerializeToString(), ENDPOINT)
    try:
        expected: Any = received_from_pb(message, ENDPOINT)
    except Corrupted as exc:
        expected = exc
    assert type(decoded) is type(expected)
    if isinstance(expected, Corrupted):
        assert (decoded.message_id, decoded.topic, decoded.receipt_handle) == (
            expected.message_id,
            expected.topic,
            expected.receipt_handle,
        )
        assert decoded.reason.split(":")[0] == expected.reason.split(":")[0]
        return
    for name in type(expected).__slots__:
        if name == "_settler":
            continue
        assert getattr(decoded, name) == getattr(expected, name), name
    assert decoded.receipt_handle == "handle" and decoded.endpoint == ENDPOINT
    with pytest.raises(AttributeError):
        decoded.body = b"changed"  # as immutable as one the Python codec built


@pytest.mark.native
def test_no_completion_waits_without_a_wake_up() -> None:
    """Completions pushed from several threads while the loop drains: each one is either taken by a drain
    or followed by a byte on the hub's socket, so a loop that sleeps until the socket is readable never
    sleeps on a completion (the order of `Hub::drain`; in the wrong order calls hung under load)."""
    import select

    thrust_native = _extension()
    hub = native.new_hub()
    threads, per_thread = 4, 50_000
    thrust_native.push_for_test(hub, threads, per_thread)
    taken = drains = 0
    while taken < threads * per_thread:
        readable, _, _ = select.select([hub.fileno()], [], [], 2.0)
        items = hub.drain()
        assert readable or not items, f"{len(items)} completions queued with no wake-up ({taken} taken)"
        taken += len(items)
        drains += 1
    assert taken == threads * per_thread


@pytest.mark.native
def test_the_allocator_asks_for_no_transparent_huge_pages() -> None:
    """thrust_native's allocator (mimalloc, built with its `no_thp` feature: native/Cargo.toml) must not
    `madvise(MADV_HUGEPAGE)` its arena: with it, on a host whose transparent huge pages are in `madvise`
    mode, every client's RSS grew in 2 MiB steps (docs/benchmarks.md, "Memory per client"). The kernel
    marks such a mapping `hg` in /proc/self/smaps; this process asks for huge pages nowhere else."""
    import select

    thrust_native = _extension()
    hub = native.new_hub()
    # Completions allocated on tokio's threads and freed on this one: the allocator has set up its arena.
    thrust_native.push_for_test(hub, 2, 10_000)
    taken = 0
    while taken < 20_000:
        select.select([hub.fileno()], [], [], 2.0)
        taken += len(hub.drain())
    with open("/proc/self/smaps") as smaps:
        advised = [line for line in smaps if line.startswith("VmFlags:") and " hg" in line]
    assert advised == []


# gRPC status codes (grpc.StatusCode's numbers): tonic's Code and gRPC core share them.
CANCELLED, UNKNOWN, DEADLINE_EXCEEDED, UNAVAILABLE = 1, 2, 4, 14


@pytest.mark.native
@pytest.mark.parametrize(
    ("code", "transport", "remote_reset", "timed_out", "reported"),
    [
        # tonic's words for a connection error it could not classify: gRPC core says UNAVAILABLE.
        (UNKNOWN, True, False, False, UNAVAILABLE),
        (UNKNOWN, False, False, False, UNKNOWN),  # the server's own UNKNOWN stays
        # A call queued on a connection the server closed ("operation was canceled: connection closed"):
        # gRPC core reports UNAVAILABLE, a retriable ConnectionError.
        (CANCELLED, True, False, False, UNAVAILABLE),
        (CANCELLED, True, True, False, CANCELLED),  # a stream the server reset with CANCEL
        (CANCELLED, False, False, False, CANCELLED),  # a status the server sent
        # tonic's own deadline (the request's grpc-timeout) ends the call CANCELLED "Timeout expired" from
        # a transport error: gRPC core says DEADLINE_EXCEEDED (it was UNAVAILABLE, a ConnectionError, for
        # an ack that outlasted its timeout under load).
        (CANCELLED, True, False, True, DEADLINE_EXCEEDED),
        (DEADLINE_EXCEEDED, True, False, False, DEADLINE_EXCEEDED),
        (UNAVAILABLE, True, False, False, UNAVAILABLE),
    ],
)
def test_transport_failures_are_reported_with_grpc_cores_codes(
    code: int, transport: bool, remote_reset: bool, timed_out: bool, reported: int
) -> None:
    """The code the extension reports for a failed call (native/src/lib.rs, `reported_code`). Which
    variant a real closed connection produces depends on timing
    (tests/client/test_client_connection_closed.py meets them as they come); this table holds each."""
    assert _extension().reported_code_for_test(code, transport, remote_reset, timed_out) == reported
