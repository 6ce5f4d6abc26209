from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Callable, Iterator

import pytest

from thrust._codec import ids
from thrust._codec.ids import (
    CUSTOM_EPOCH,
    MessageIdGenerator,
    decode_message_id,
    is_valid_message_id,
    new_message_id,
)

V1_RE = re.compile(r"01[0-9A-F]{32}")
EXAMPLE = "0156F7E71C361B21BC024CCDBE00000000"  # apache/rocketmq-clients docs/message_id.md


def fixed(value: float) -> Callable[[], float]:
    return lambda: value


def ticking(values: list[float]) -> Callable[[], float]:
    it: Iterator[float] = iter(values)
    last = [values[0]]

    def clock() -> float:
        last[0] = next(it, last[0])
        return last[0]

    return clock


def test_custom_epoch_is_2021_utc() -> None:
    import datetime

    assert datetime.datetime.fromtimestamp(CUSTOM_EPOCH, datetime.UTC) == datetime.datetime(
        2021, 1, 1, tzinfo=datetime.UTC
    )


def test_reference_example_layout() -> None:
    gen = MessageIdGenerator(
        mac=0x56F7E71C361B, pid=0x21BC, clock=fixed(CUSTOM_EPOCH + 0x024CCDBE + 0.75), monotonic=fixed(100.2)
    )
    assert gen.prefix == "0156F7E71C361B21BC"
    assert gen.next() == EXAMPLE
    assert gen.next() == "0156F7E71C361B21BC024CCDBE00000001"


def test_mac_and_pid_are_truncated_to_their_lower_bytes() -> None:
    gen = MessageIdGenerator(
        mac=bytes.fromhex("AABB56F7E71C361B"), pid=0x1234_21BC, clock=fixed(CUSTOM_EPOCH)
    )
    assert gen.prefix == "0156F7E71C361B21BC"
    gen = MessageIdGenerator(mac=0xFFFF_0000_0000_0001, pid=1, clock=fixed(CUSTOM_EPOCH))
    assert gen.prefix == "010000000000010001"
    with pytest.raises(ValueError):
        MessageIdGenerator(mac=b"\x01\x02")


def test_default_generator_uses_host_identity() -> None:
    gen = MessageIdGenerator()
    value = gen.next()
    assert V1_RE.fullmatch(value)
    info = decode_message_id(value)
    assert info is not None
    assert info.pid == os.getpid() & 0xFFFF
    assert info.mac is not None and len(info.mac) == 6


def test_seconds_follow_the_monotonic_clock_not_the_wall_clock() -> None:
    wall = [CUSTOM_EPOCH + 1000.0]
    mono = ticking([50.9, 50.9, 51.0, 52.5, 60.0])
    gen = MessageIdGenerator(mac=1, pid=1, clock=lambda: wall[0], monotonic=mono)
    secs = []
    for _ in range(4):
        wall[0] -= 500  # a wall-clock step backwards must not matter
        info = decode_message_id(gen.next())
        assert info is not None and info.seconds is not None
        secs.append(info.seconds)
    # Java truncates both monotonic readings to whole seconds before subtracting.
    assert secs == [1000, 1001, 1002, 1010]


def test_seconds_wrap_to_32_bits() -> None:
    gen = MessageIdGenerator(mac=1, pid=1, clock=fixed(CUSTOM_EPOCH + 2**32 + 5), monotonic=fixed(0))
    assert gen.next()[18:26] == "00000005"
    before = MessageIdGenerator(mac=1, pid=1, clock=fixed(CUSTOM_EPOCH - 1), monotonic=fixed(0))
    assert before.next()[18:26] == "FFFFFFFF"


def test_sequence_wraps_at_2_pow_32() -> None:
    gen = MessageIdGenerator(mac=1, pid=1, clock=fixed(CUSTOM_EPOCH), monotonic=fixed(0), sequence=2**32 - 2)
    assert [gen.next()[-8:] for _ in range(3)] == ["FFFFFFFE", "FFFFFFFF", "00000000"]


def test_iterator_protocol() -> None:
    gen = MessageIdGenerator(mac=1, pid=1, clock=fixed(CUSTOM_EPOCH), monotonic=fixed(0))
    first, second = next(gen), next(iter(gen))
    assert first[-8:] == "00000000" and second[-8:] == "00000001"


def test_next_is_thread_safe() -> None:
    gen = MessageIdGenerator(mac=1, pid=1)
    results: list[list[str]] = [[] for _ in range(8)]

    def work(out: list[str]) -> None:
        for _ in range(2000):
            out.append(gen.next())

    threads = [threading.Thread(target=work, args=(out,)) for out in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    all_ids = [i for out in results for i in out]
    assert len(set(all_ids)) == len(all_ids) == 16000
    assert sorted(int(i[-8:], 16) for i in all_ids) == list(range(16000))


def test_new_message_id_is_process_wide_and_unique() -> None:
    a, b = new_message_id(), new_message_id()
    assert V1_RE.fullmatch(a) and V1_RE.fullmatch(b)
    assert a != b
    assert a[:18] == b[:18]
    assert int(b[-8:], 16) == (int(a[-8:], 16) + 1) & 0xFFFFFFFF


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_generator_is_recreated_after_fork() -> None:
    parent_id = new_message_id()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        try:
            os.close(read_fd)
            os.write(write_fd, f"{new_message_id()} {os.getpid()}".encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        child_id, child_pid = pipe.read().decode().split()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    child = decode_message_id(child_id)
    parent = decode_message_id(parent_id)
    assert child is not None and parent is not None
    assert child.pid == int(child_pid) & 0xFFFF
    assert parent.pid == os.getpid() & 0xFFFF
    assert child.mac == parent.mac
    assert child.sequence == 0  # a fresh generator in the child
    # The parent's generator is untouched.
    assert new_message_id()[:18] == parent_id[:18]


def test_after_fork_hook_resets_the_process_generator() -> None:
    new_message_id()
    assert ids._generator is not None
    ids._after_fork_in_child()
    assert ids._generator is None
    assert V1_RE.fullmatch(new_message_id())


# -- decoding ----------------------------------------------------------------------------------------


def test_decode_v1() -> None:
    info = decode_message_id(EXAMPLE)
    assert info is not None
    assert info.version == 1
    assert info.raw == EXAMPLE
    assert info.mac == bytes.fromhex("56F7E71C361B")
    assert info.pid == 0x21BC
    assert info.seconds == 0x024CCDBE
    assert info.sequence == 0
    assert info.timestamp == CUSTOM_EPOCH + 0x024CCDBE


def test_decode_is_case_insensitive() -> None:
    info = decode_message_id(EXAMPLE.lower())
    assert info is not None and info.pid == 0x21BC


def test_decode_roundtrip() -> None:
    gen = MessageIdGenerator(
        mac=0xA1B2C3D4E5F6, pid=0xBEEF, clock=fixed(CUSTOM_EPOCH + 12345), monotonic=fixed(7)
    )
    for expected_seq in range(3):
        info = decode_message_id(gen.next())
        assert info is not None
        assert (info.mac, info.pid, info.seconds, info.sequence) == (
            bytes.fromhex("A1B2C3D4E5F6"),
            0xBEEF,
            12345,
            expected_seq,
        )


@pytest.mark.parametrize("legacy", ["C0A8010A1F4C18B4AAC2726F1F340000", "short", "x" * 40])
def test_decode_other_lengths_is_opaque_v0(legacy: str) -> None:
    info = decode_message_id(legacy)
    assert info is not None
    assert info.version == 0
    assert info.raw == legacy
    assert info.mac is None and info.pid is None and info.seconds is None and info.sequence is None
    assert info.timestamp is None


def test_decode_unknown_version() -> None:
    info = decode_message_id("02" + EXAMPLE[2:])
    assert info is not None
    assert info.version == 2
    assert info.mac is None


@pytest.mark.parametrize("garbled", ["", "   ", "Z" + EXAMPLE[1:], EXAMPLE[:-1] + "G", "01" + " " * 32])
def test_decode_garbled(garbled: str) -> None:
    assert decode_message_id(garbled) is None


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        (EXAMPLE, True),
        (EXAMPLE.lower(), True),
        ("02" + EXAMPLE[2:], True),
        ("00" + EXAMPLE[2:], False),
        ("C0A8010A1F4C18B4AAC2726F1F340000", True),
        ("", False),
        ("0156F7E71C361B21BC024CCDBE0000000", False),
        ("Z" + EXAMPLE[1:], False),
        ("not-an-id", False),
    ],
)
def test_is_valid_message_id(value: str, valid: bool) -> None:
    assert is_valid_message_id(value) is valid


def test_is_valid_message_id_without_legacy() -> None:
    assert not is_valid_message_id("C0A8010A1F4C18B4AAC2726F1F340000", allow_legacy=False)
    assert is_valid_message_id(EXAMPLE, allow_legacy=False)


def test_host_mac_is_cached() -> None:
    assert ids._host_mac() is ids._host_mac()
    assert len(ids._host_mac()) == 6


def test_python_version_has_register_at_fork() -> None:
    # The fork hook is what keeps pids right; make sure it is active on supported platforms.
    if sys.platform != "win32":
        assert hasattr(os, "register_at_fork")
