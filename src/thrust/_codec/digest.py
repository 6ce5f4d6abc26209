"""Body digests and body compression (`SystemProperties.body_digest` / `body_encoding`,
docs/protocol.md §6.6).

Digest strings follow the Java client's `Utilities` (which is what verifies them on receipt):

- CRC32: `Long.toHexString(crc).toUpperCase()`, i.e. uppercase hex **without zero padding**
  (a CRC of 0x0000ABCD is `"ABCD"`);
- MD5 and SHA1: uppercase hex of the digest bytes (the proxy's `BinaryUtil.generateMd5` agrees).

Compression: RocketMQ calls it GZIP, but the Java client's `Utilities.compressBytesGzip` /
`uncompressBytesGzip` use `DeflaterOutputStream` / `InflaterInputStream`, i.e. a **zlib** stream
(RFC 1950), and bodies that 4.x producers compressed reach consumers the same way. `gzip_encode`
therefore writes zlib by default (what Java can read); `gzip_decode` accepts both zlib and real gzip
(RFC 1952, as written by some other clients) and refuses output larger than `max_size`.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from enum import IntEnum
from typing import Final, Literal

__all__ = [
    "CorruptCompressedBody",
    "DecompressedTooLarge",
    "DigestType",
    "compute_digest",
    "gzip_decode",
    "gzip_encode",
    "verify_digest",
]

Buffer = bytes | bytearray | memoryview


class DigestType(IntEnum):
    """`apache.rocketmq.v2.DigestType` (UNSPECIFIED=0 is not a usable algorithm)."""

    CRC32 = 1
    MD5 = 2
    SHA1 = 3


def _digest_type(kind: DigestType | int) -> DigestType:
    try:
        return DigestType(kind)
    except ValueError:
        raise ValueError(f"unsupported digest type {kind!r}") from None


def compute_digest(kind: DigestType | int, body: Buffer) -> str:
    """The checksum string the Java client computes for `body` (see the module docstring).
    Raises ValueError for DigestType UNSPECIFIED or unknown values."""
    kind = _digest_type(kind)
    if kind is DigestType.CRC32:
        return format(zlib.crc32(body), "X")
    if kind is DigestType.MD5:
        return hashlib.md5(body, usedforsecurity=False).hexdigest().upper()
    return hashlib.sha1(body, usedforsecurity=False).hexdigest().upper()


_HEX_RE: Final = re.compile(r"[0-9A-Fa-f]+")


# Runs once per received message, so no enum conversion and no regex for the hash types: a hex digest in
# lower case equals the lower-cased checksum exactly when the checksum is that digest in either case.
_HEX_HASHES: Final = {int(DigestType.MD5): hashlib.md5, int(DigestType.SHA1): hashlib.sha1}


def verify_digest(kind: DigestType | int, body: Buffer, checksum: str) -> bool:
    """Whether `checksum` matches `body`. Hex case is ignored, and a CRC32 may carry leading zeros
    (the Java client compares the exact unpadded uppercase string; we accept what other senders emit).
    Raises ValueError for DigestType UNSPECIFIED or unknown values."""
    hash_fn = _HEX_HASHES.get(kind)
    if hash_fn is not None:
        return checksum.isascii() and hash_fn(body, usedforsecurity=False).hexdigest() == checksum.lower()
    if _digest_type(kind) is DigestType.CRC32:
        # int() would also take "0x", "_" and spaces: only plain hex digits are a checksum.
        return _HEX_RE.fullmatch(checksum) is not None and int(checksum, 16) == zlib.crc32(body)
    raise ValueError(f"unsupported digest type {kind!r}")


# --------------------------------------------------------------------------------------------------
# Compression


class CorruptCompressedBody(ValueError):
    """A GZIP-encoded body that is not a valid, complete zlib or gzip stream."""


class DecompressedTooLarge(CorruptCompressedBody):
    """A GZIP-encoded body that inflates beyond the allowed size (a decompression bomb, or simply a
    body larger than the receiver accepts). Nothing beyond `max_size + 1` bytes is ever produced."""

    def __init__(self, max_size: int) -> None:
        super().__init__(f"decompressed body exceeds {max_size} bytes")
        self.max_size = max_size


_GZIP_MAGIC: Final = b"\x1f\x8b"
# wbits 32 + 15: detect a zlib or a gzip header automatically, with the largest window.
_AUTO_WBITS: Final = 32 + zlib.MAX_WBITS


def gzip_encode(data: Buffer, level: int = 6, *, container: Literal["zlib", "gzip"] = "zlib") -> bytes:
    """Compress a body for `Encoding.GZIP`. The default zlib container is what the Java client
    decompresses; pass `container="gzip"` for a real gzip member."""
    if container == "zlib":
        return zlib.compress(data, level)
    compressor = zlib.compressobj(level, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


def gzip_decode(data: Buffer, max_size: int) -> bytes:
    """Decompress a `Encoding.GZIP` body (zlib or gzip; concatenated gzip members are joined).

    Raises `DecompressedTooLarge` as soon as the output would exceed `max_size` bytes, and
    `CorruptCompressedBody` (a ValueError) for invalid, truncated or trailing-garbage input."""
    if max_size < 0:
        raise ValueError("max_size must not be negative")
    parts: list[bytes] = []
    total = 0
    remaining = bytes(data)
    while True:
        inflater = zlib.decompressobj(_AUTO_WBITS)
        pending = remaining
        while not inflater.eof:
            try:
                # Ask for at most one byte more than allowed, so a bomb is detected without inflating it.
                piece = inflater.decompress(pending, max_size - total + 1)
            except zlib.error as exc:
                raise CorruptCompressedBody(f"invalid compressed body: {exc}") from None
            progressed = bool(piece) or len(inflater.unconsumed_tail) < len(pending)
            pending = inflater.unconsumed_tail
            total += len(piece)
            if total > max_size:
                raise DecompressedTooLarge(max_size)
            parts.append(piece)
            if not progressed and not inflater.eof:
                raise CorruptCompressedBody("compressed body is truncated")
        remaining = inflater.unused_data
        if not remaining:
            return b"".join(parts)
        if not remaining.startswith(_GZIP_MAGIC):
            raise CorruptCompressedBody("trailing data after the compressed body")
