"""Shared helpers of the reliability suite: one loop per test, and sends/receives recorded in a history.

Every payload carries its id at the start of the body (`b"<pid>|..."`), so a delivery can be matched to
its send without trusting message ids (the checker uses the ids to tell duplicates apart).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any, TypeVar

import thrust

# Re-exported: the suite's tests import them from here (tests/support.py has the one definition).
from tests.support import run as run
from tests.support import until as until
from thrust.errors import ConnectionError, ThrustError, TimeoutError
from thrust.reliability.history import HistoryRecorder

T = TypeVar("T")

# Transport-level failures leave the outcome of a send unknown: the request may have been stored.
INDETERMINATE = (TimeoutError, ConnectionError)


def body(pid: str, size: int = 0) -> bytes:
    """A body starting with the payload id, padded to at least `size` bytes."""
    head = pid.encode() + b"|"
    return head + b"x" * max(0, size - len(head))


def pid_of(message: thrust.ReceivedMessage) -> str:
    return message.body.split(b"|", 1)[0].decode()


async def send_recorded(
    rec: HistoryRecorder,
    producer: thrust.Producer,
    message: thrust.Message,
    pid: str,
    *,
    producer_name: str = "p",
) -> thrust.SendReceipt | None:
    """Send once, recording invoke and ok / fail / unknown; never raises a ThrustError."""
    op = rec.invoke(pid, group=message.message_group, producer=producer_name)
    try:
        receipt = await producer.send(message)
    except INDETERMINATE as exc:
        rec.unknown(op, error=type(exc).__name__)
        return None
    except ThrustError as exc:
        rec.fail(op, error=type(exc).__name__)
        return None
    rec.ok(op, receipt.message_id)
    return receipt


def record_delivery(rec: HistoryRecorder, m: thrust.ReceivedMessage, consumer: str = "c") -> int:
    return rec.delivered(
        pid_of(m), m.message_id, group=m.message_group, attempt=m.delivery_attempt, consumer=consumer
    )


async def drain(
    rec: HistoryRecorder,
    consumer: thrust.SimpleConsumer,
    expected: Iterable[str],
    *,
    budget: float = 30.0,
    idle: float = 3.0,
    invisible: float = 30.0,
    name: str = "c",
) -> set[str]:
    """Receive and ack until every `expected` payload arrived (then `idle` more seconds of nothing),
    or `budget` runs out. Records every delivery and ack; returns the payload ids seen."""
    want = set(expected)
    seen: set[str] = set()
    end = time.monotonic() + budget
    quiet_since: float | None = None
    while time.monotonic() < end:
        try:
            batch = await consumer.receive(32, invisible)
        except ThrustError:
            await asyncio.sleep(0.2)
            continue
        if not batch:
            if want <= seen:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since >= idle:
                    break
            continue
        quiet_since = None
        refs = [record_delivery(rec, m, name) for m in batch]
        errors = await consumer.ack_many(batch)
        for m, ref, err in zip(batch, refs, errors, strict=True):
            seen.add(pid_of(m))
            if err is None:
                rec.acked(ref)
            else:
                rec.ack_failed(ref, error=type(err).__name__)
    return seen


def assert_report(report: Any, *names: str, not_applicable: Iterable[str] = ()) -> None:
    """Assert that the named verdicts hold: each must be shown true by the history. A verdict the history
    cannot show (`ok is None`: no sends for P3, no heal for P4, no FIFO group for `order`, no
    `max_attempts` for DLQ) fails, unless the caller names it in `not_applicable`, which asserts that it is
    indeed not applicable (a test that expects n/a and gets a verdict has changed). The summary explains
    a failure."""
    expected_na = set(not_applicable)
    for name in names:
        v = report.verdict(name)
        if name in expected_na:
            assert v.ok is None, f"{name} was expected to be n/a, got {v.ok}: {v.detail}\n{report.summary}"
            continue
        assert v.ok is not None, f"{name} is n/a (the history cannot show it): {v.detail}\n{report.summary}"
        assert v.ok, f"{name} failed: {v.detail}\n{report.summary}"
    unknown = expected_na - set(names)
    assert not unknown, f"not_applicable names verdicts that were not asked for: {sorted(unknown)}"


def first_delivery_times(rec: HistoryRecorder, pids: Iterable[str]) -> dict[str, float]:
    """When each payload was first delivered (the recorder's monotonic clock)."""
    want = set(pids)
    times: dict[str, float] = {}
    for e in rec.snapshot().events:
        if e.kind == "deliver" and e.payload_id in want and e.payload_id not in times:
            times[e.payload_id] = e.t
    return times
