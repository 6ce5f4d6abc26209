"""The per-message decode path of the push consumer stays cheap: checks that pin the fast paths down
(no timing: they assert which work is skipped, and that the answers did not change)."""

from __future__ import annotations

import hashlib

import pytest

from thrust._codec import convert, digest
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb

BODY = b"x" * 64


class _Forbidden:
    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"slow path used: {name}")


def _refuse_enum(kind: object) -> digest.DigestType:
    raise AssertionError("slow path used: DigestType conversion")


@pytest.mark.parametrize(
    ("kind", "fn"), [(digest.DigestType.MD5, hashlib.md5), (digest.DigestType.SHA1, hashlib.sha1)]
)
def test_hash_digests_verify_without_enum_conversion_or_regex(
    monkeypatch: pytest.MonkeyPatch, kind: digest.DigestType, fn: object
) -> None:
    """MD5 (what the proxy sends for every message) and SHA1 are checked with one hash and one string
    comparison: no IntEnum conversion and no regex per message."""
    monkeypatch.setattr(digest, "_digest_type", _refuse_enum)
    monkeypatch.setattr(digest, "_HEX_RE", _Forbidden())
    hexed = fn(BODY).hexdigest()  # type: ignore[operator]
    for k in (kind, int(kind)):
        assert digest.verify_digest(k, BODY, hexed.upper())
        assert digest.verify_digest(k, BODY, hexed.lower())
        assert not digest.verify_digest(k, BODY, hexed[:-1] + ("0" if hexed[-1] != "0" else "1"))
        assert not digest.verify_digest(k, BODY, "")
        # Non-ASCII text never matches, even where lower() would fold it (fullwidth digits and letters).
        assert not digest.verify_digest(k, BODY, hexed.translate({c: c + 0xFEE0 for c in range(0x21, 0x7F)}))


def test_crc32_and_unknown_types_keep_their_strict_checks() -> None:
    crc = format(hashlib.md5(BODY).digest()[0], "X")  # any wrong value
    good = format(__import__("zlib").crc32(BODY), "X")
    assert digest.verify_digest(digest.DigestType.CRC32, BODY, good)
    assert digest.verify_digest(1, BODY, "0" + good.lower())
    assert not digest.verify_digest(1, BODY, crc)
    assert not digest.verify_digest(1, BODY, "0x" + good)  # int() would accept it; a checksum must not
    assert not digest.verify_digest(1, BODY, " " + good)
    with pytest.raises(ValueError):
        digest.verify_digest(0, BODY, good)
    with pytest.raises(ValueError):
        digest.verify_digest(9, BODY, good)


def test_decode_of_a_proxy_message_takes_the_fast_digest_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(digest, "_digest_type", _refuse_enum)
    m = pb.Message()
    m.topic.name = "t"
    m.body = BODY
    sp = m.system_properties
    sp.message_id = "01" + "0" * 32
    sp.receipt_handle = "rh"
    sp.body_digest.type = pb.MD5
    sp.body_digest.checksum = hashlib.md5(BODY).hexdigest().upper()
    sp.born_timestamp.seconds = 1_700_000_000
    sp.born_timestamp.nanos = 500_000_000
    sp.store_timestamp.seconds = 1_700_000_001
    sp.delivery_attempt = 3
    got = convert.received_from_pb(m)
    assert got.body == BODY and got.delivery_attempt == 3
    assert got.born_timestamp == 1_700_000_000.5 and got.store_timestamp == 1_700_000_001.0
    assert got.delivery_timestamp is None and got.tag is None and got.queue_offset is None
    sp.body_digest.checksum = "0" * 32
    with pytest.raises(convert.Corrupted):
        convert.received_from_pb(m)


def test_a_burst_of_results_goes_to_the_ack_batcher_in_one_call() -> None:
    """`AckDriver.add_many`: one clock read and at most one wake-up of the flusher for a whole burst of
    consumed messages; the batches that go out are the same as with one `add` per message."""
    import asyncio

    from thrust._core.ack import AckBatch, AckBatcher, AckConfig, AckEntry, AckKey, Outcome, results_for
    from thrust._core.endpoints import parse_endpoint
    from thrust._io.batching import AckDriver

    sent: list[int] = []

    async def send(batch: AckBatch) -> list[tuple[AckEntry, Outcome]]:
        sent.append(len(batch))
        return results_for(batch, 20000)

    async def main() -> None:
        finished: list[int] = []
        driver = AckDriver(
            "ack", AckBatcher(AckConfig(max_batch=32, linger=0.0)), send, lambda f: finished.append(len(f))
        )
        key = AckKey(parse_endpoint("127.0.0.1:8081"), "g", "t")
        driver.add_many([(key, AckEntry(f"m{i}", f"h{i}", 1e12)) for i in range(70)], 0.0)
        assert driver.wakeups == 1
        assert await driver.drain(5.0)
        await driver.close()
        assert sorted(sent) == [6, 32, 32]
        assert sum(finished) == 70

    asyncio.run(main())


def test_an_ack_answer_wakes_the_flusher_only_when_it_makes_a_batch_due() -> None:
    """`AckDriver`: an answer that leaves nothing due (the usual case: the next batch is still lingering)
    costs the flusher no turn; one that frees a key held back by its in-flight limit sends the next batch
    at once, without waiting for the linger."""
    import asyncio
    import time

    from tests.support import until
    from thrust._core.ack import AckBatch, AckBatcher, AckConfig, AckEntry, AckKey, Outcome, results_for
    from thrust._core.endpoints import parse_endpoint
    from thrust._io.batching import AckDriver

    sent: list[int] = []
    gate: asyncio.Queue[None] = asyncio.Queue()

    async def send(batch: AckBatch) -> list[tuple[AckEntry, Outcome]]:
        sent.append(len(batch))
        await gate.get()
        return results_for(batch, 20000)

    async def main() -> None:
        finished: list[int] = []
        config = AckConfig(max_batch=4, linger=3600.0, max_in_flight_batches=1)
        driver = AckDriver("ack", AckBatcher(config), send, lambda f: finished.append(len(f)))
        key = AckKey(parse_endpoint("127.0.0.1:8081"), "g", "t")
        # Two full batches; the in-flight limit lets one go.
        driver.add_many([(key, AckEntry(f"m{i}", f"h{i}", 1e12)) for i in range(8)], time.monotonic())
        await until(lambda: sent == [4], what="the first batch sent")
        assert driver.wakeups == 1
        gate.put_nowait(None)  # the answer frees the key: the second batch is due now
        await until(lambda: sent == [4, 4], what="the second batch sent")
        assert driver.wakeups == 2
        driver.add(key, AckEntry("m8", "h8", 1e12))  # the key's first pending entry: one wake-up
        assert driver.wakeups == 3
        gate.put_nowait(None)  # answered while m8 lingers (an hour): no turn
        # The answer's fates are reported before it decides whether the flusher is owed a turn.
        await until(lambda: sum(finished) == 8, what="the second batch's fates")
        assert sent == [4, 4] and driver.wakeups == 3
        gate.put_nowait(None)
        assert await driver.drain(5.0)
        await driver.close()
        assert sent == [4, 4, 1] and sum(finished) == 9

    asyncio.run(main())
