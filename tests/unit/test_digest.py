from __future__ import annotations

import gzip
import hashlib
import os
import zlib

import pytest

from thrust._codec.digest import (
    CorruptCompressedBody,
    DecompressedTooLarge,
    DigestType,
    compute_digest,
    gzip_decode,
    gzip_encode,
    verify_digest,
)


def test_digest_type_values_follow_proto() -> None:
    assert (DigestType.CRC32, DigestType.MD5, DigestType.SHA1) == (1, 2, 3)


# -- compute ---------------------------------------------------------------------------------------


def test_known_vectors() -> None:
    # CRC32("123456789") = 0xCBF43926, MD5/SHA1 of "abc" from RFC 1321 / FIPS 180.
    assert compute_digest(DigestType.CRC32, b"123456789") == "CBF43926"
    assert compute_digest(DigestType.MD5, b"abc") == "900150983CD24FB0D6963F7D28E17F72"
    assert compute_digest(DigestType.SHA1, b"abc") == "A9993E364706816ABA3E25717850C26C9CD0D89D"


def test_crc32_is_not_zero_padded_like_java_long_to_hex_string() -> None:
    # Find a body whose CRC32 has leading zero nibbles.
    body = next(
        i.to_bytes(4, "big") for i in range(1_000_000) if zlib.crc32(i.to_bytes(4, "big")) < 0x10000000
    )
    crc = zlib.crc32(body)
    assert compute_digest(DigestType.CRC32, body) == format(crc, "X")
    assert len(compute_digest(DigestType.CRC32, body)) < 8
    assert compute_digest(DigestType.CRC32, b"") == "0"


def test_digests_are_uppercase() -> None:
    for kind in DigestType:
        value = compute_digest(kind, b"hello world")
        assert value == value.upper()


def test_accepts_int_kinds_and_buffers() -> None:
    assert compute_digest(2, bytearray(b"abc")) == compute_digest(DigestType.MD5, b"abc")
    assert compute_digest(3, memoryview(b"abc")) == hashlib.sha1(b"abc").hexdigest().upper()


@pytest.mark.parametrize("kind", [0, 4, -1])
def test_unknown_kind_is_rejected(kind: int) -> None:
    with pytest.raises(ValueError, match="unsupported digest type"):
        compute_digest(kind, b"x")
    with pytest.raises(ValueError):
        verify_digest(kind, b"x", "00")


# -- verify ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(DigestType))
def test_verify_roundtrip_and_case(kind: DigestType) -> None:
    body = os.urandom(1000)
    checksum = compute_digest(kind, body)
    assert verify_digest(kind, body, checksum)
    assert verify_digest(kind, body, checksum.lower())
    assert not verify_digest(kind, body + b"x", checksum)
    assert not verify_digest(kind, body, "")
    assert not verify_digest(kind, body, "not hex")


def test_verify_crc32_tolerates_zero_padding() -> None:
    body = b"123456789"
    assert verify_digest(DigestType.CRC32, body, "CBF43926")
    assert verify_digest(DigestType.CRC32, body, "00CBF43926")
    assert verify_digest(DigestType.CRC32, b"", "00000000")
    assert not verify_digest(DigestType.CRC32, body, "0xCBF43926")
    assert not verify_digest(DigestType.CRC32, body, " CBF43926")
    assert not verify_digest(DigestType.CRC32, body, "CBF4_3926")


def test_verify_md5_needs_the_full_digest() -> None:
    body = b"abc"
    full = compute_digest(DigestType.MD5, body)
    assert not verify_digest(DigestType.MD5, body, full[1:])
    assert not verify_digest(DigestType.MD5, body, "0" + full)


# -- compression -----------------------------------------------------------------------------------


def test_encode_default_is_a_zlib_stream_java_can_inflate() -> None:
    data = b"hello " * 100
    encoded = gzip_encode(data)
    assert zlib.decompress(encoded) == data  # what InflaterInputStream reads
    assert encoded[0] & 0x0F == 8  # zlib header: deflate method


def test_encode_gzip_container() -> None:
    data = b"hello " * 100
    encoded = gzip_encode(data, container="gzip")
    assert encoded[:2] == b"\x1f\x8b"
    assert gzip.decompress(encoded) == data


@pytest.mark.parametrize("level", [0, 1, 9])
def test_roundtrip_levels(level: int) -> None:
    data = os.urandom(5000) + b"a" * 5000
    assert gzip_decode(gzip_encode(data, level), len(data)) == data
    assert gzip_decode(gzip_encode(data, level, container="gzip"), len(data)) == data


def test_decode_accepts_foreign_encoders() -> None:
    data = b"payload" * 50
    assert gzip_decode(zlib.compress(data), 1000) == data
    assert gzip_decode(gzip.compress(data), 1000) == data
    assert gzip_decode(bytearray(zlib.compress(data)), 1000) == data
    assert gzip_decode(memoryview(gzip.compress(data)), 1000) == data


def test_decode_empty_payload() -> None:
    assert gzip_decode(gzip_encode(b""), 0) == b""
    assert gzip_decode(gzip_encode(b"", container="gzip"), 10) == b""


def test_decode_exact_limit() -> None:
    data = b"x" * 1000
    assert gzip_decode(gzip_encode(data), 1000) == data
    with pytest.raises(DecompressedTooLarge) as info:
        gzip_decode(gzip_encode(data), 999)
    assert info.value.max_size == 999
    assert isinstance(info.value, ValueError)


@pytest.mark.slow
def test_decompression_bomb_is_refused_without_inflating_it() -> None:
    bomb = gzip_encode(b"\0" * (64 * 1024 * 1024), 9)
    assert len(bomb) < 100_000
    with pytest.raises(DecompressedTooLarge):
        gzip_decode(bomb, 4 * 1024 * 1024)


def test_concatenated_gzip_members() -> None:
    data = gzip.compress(b"abc") + gzip.compress(b"def")
    assert gzip_decode(data, 100) == b"abcdef"
    with pytest.raises(DecompressedTooLarge):
        gzip_decode(data, 5)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not compressed at all",
        zlib.compress(b"hello world")[:-3],  # truncated
        gzip.compress(b"hello world", mtime=0)[:-5],
        zlib.compress(b"hello") + b"garbage",  # trailing data
        b"\x1f\x8b" + b"\x00" * 20,
    ],
)
def test_corrupt_input(data: bytes) -> None:
    with pytest.raises(CorruptCompressedBody):
        gzip_decode(data, 1000)


def test_corrupt_checksum_in_zlib_trailer() -> None:
    good = bytearray(zlib.compress(b"hello world"))
    good[-1] ^= 0xFF
    with pytest.raises(CorruptCompressedBody):
        gzip_decode(bytes(good), 1000)


def test_negative_limit_is_rejected() -> None:
    with pytest.raises(ValueError):
        gzip_decode(gzip_encode(b"x"), -1)


def test_large_roundtrip_in_pieces() -> None:
    # Output larger than zlib's internal buffers, with a limit that forces many bounded reads.
    data = os.urandom(300_000) * 3
    assert gzip_decode(gzip_encode(data), len(data)) == data
