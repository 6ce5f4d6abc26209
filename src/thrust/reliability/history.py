"""Jepsen-style message history: a cheap recorder and a checker for P1-P4 of docs/reliability.md §1.

Why one module of ~800 lines (docs/CONVENTIONS.md): the recorder's event vocabulary and the checker
that reads it are one format; `check` walks every event once and derives P1-P4, order and DLQ
verdicts from the same indexes, which a split would have to pass around.

The recorder appends one tuple per event under a `threading.Lock` and never awaits, so producer
tasks, consumer callbacks and worker threads can share one recorder. The checker follows the
vocabulary of docs/reliability.md §1:

- *lost*: a payload with an OK send that was never delivered (Jepsen `total-queue`, MQChecker);
- *unexpected*: a delivery of a payload that was never sent, or under a message id that none of the
  payload's sends produced;
- *recovered*: delivered although every send of it failed or had an unknown outcome (allowed);
- *duplicates*, split by cause. RocketMQ clients reuse the message id on automatic retries
  (apache/rocketmq-clients docs/message_id.md), so a stored copy cannot be told from a redelivery by id
  alone: a redelivery of the same stored message has a delivery attempt one higher than an earlier
  delivery of that id, while a second stored copy starts again at attempt 1. Payloads stored under
  several message ids are application resends or "unknown" sends that were in fact stored.
  Redeliveries the consumer asked for (nack / change-invisible) are not duplicates;
- *order*: within a message group, first deliveries follow send order (OrderChecker plus the
  "no inversion" rule of docs/reliability.md §1), and no later message is delivered while an earlier one of
  the same group is still pending (RocketMQ FIFO blocks the group until ack, docs/protocol.md §7.6).

By default the recorder keeps its events in memory. With ``HistoryRecorder(path=...)`` it streams each
event as one JSON line to an append-only file instead and keeps nothing but a counter, so a long run
(the L5 soak) does not grow the recording process; ``History.load(path)`` (or ``snapshot()``, or
``check()`` on the recorder) reads the file back, and the checker's verdicts are the same as from memory.

Pure module: no grpc, no asyncio. Times are seconds from the recorder's clock (monotonic by default).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import IO, NamedTuple

__all__ = [
    "Duplicate",
    "Event",
    "History",
    "HistoryRecorder",
    "OrderViolation",
    "Report",
    "Unexpected",
    "Verdict",
    "check",
]

# Event kinds.
INVOKE = "invoke"
OK = "ok"
FAIL = "fail"
UNKNOWN = "unknown"
DELIVER = "deliver"
ACK = "ack"
ACK_FAIL = "ack_fail"
NACK = "nack"
DLQ = "dlq"
FAULT = "fault"
HEAL = "heal"

_COMPLETIONS = frozenset({OK, FAIL, UNKNOWN})
_ACK_RESULTS = frozenset({ACK, ACK_FAIL, NACK})

# Duplicate causes.
CAUSE_RESEND = "producer-resend"  # the same payload stored under several message ids
CAUSE_UNKNOWN_STORED = "unknown-send-stored"  # an unknown/failed send was stored, then resent
CAUSE_SAME_ID_RETRY = "producer-retry-same-id"  # two stored copies of one message id (both attempt 1)
CAUSE_ACK_FAILED = "redelivery-after-ack-failure"
CAUSE_ABANDONED = "redelivery-never-acked"
CAUSE_AFTER_ACK = "redelivery-after-ack"  # acked OK and still delivered again
CAUSE_REQUESTED = "redelivery-requested"  # nacked: expected, not a duplicate

_INF = float("inf")

_PRODUCER_CAUSES = frozenset({CAUSE_RESEND, CAUSE_UNKNOWN_STORED, CAUSE_SAME_ID_RETRY})


class Event(NamedTuple):
    """One recorded event. `ref` is the `seq` of the invoke (send completions) or delivery (acks)."""

    kind: str
    seq: int
    t: float
    ref: int
    payload_id: str
    message_id: str | None
    group: str | None
    attempt: int | None
    actor: str
    detail: str


_Row = tuple[str, int, float, int, str, "str | None", "str | None", "int | None", str, str]

# File format: one JSON array per line, the row's fields in `Event` order, trailing fields that equal
# these defaults (ref, payload_id, message_id, group, attempt, actor, detail) left out.
_DEFAULTS: tuple[object, ...] = (-1, "", None, None, None, "", "")
_FIXED = 3  # kind, seq, t are always written


@dataclass(frozen=True)
class History:
    """An immutable snapshot of recorded events, in recording order."""

    events: tuple[Event, ...]

    @classmethod
    def of(cls, rows: Iterable[Event | tuple[object, ...]]) -> History:
        return cls(tuple(r if isinstance(r, Event) else Event._make(r) for r in rows))

    def __len__(self) -> int:
        return len(self.events)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> History:
        """Read a history file written by a file-backed `HistoryRecorder` (JSON lines)."""
        return cls(tuple(_read_rows(path)))


def _encode(row: _Row) -> str:
    n = len(row)
    while n > _FIXED and row[n - 1] == _DEFAULTS[n - 1 - _FIXED]:
        n -= 1
    return json.dumps(row[:n], separators=(",", ":"), ensure_ascii=False) + "\n"


def _read_rows(path: str | os.PathLike[str]) -> Iterable[Event]:
    # Equal strings share one object (payload and message ids appear in several events each), which
    # keeps a long history's snapshot at roughly the size the in-memory recorder would have had.
    strings: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            fields = json.loads(line)
            if len(fields) < _FIXED:
                raise ValueError(f"{path}: malformed history line {line!r}")
            fields.extend(_DEFAULTS[len(fields) - _FIXED :])
            yield Event._make(strings.setdefault(x, x) if isinstance(x, str) else x for x in fields)


class HistoryRecorder:
    """Records sends, deliveries, acks, DLQ findings and fault windows.

    Send lifecycle: ``op = rec.invoke(payload)`` then exactly one of ``rec.ok(op, message_id)``,
    ``rec.fail(op)`` or ``rec.unknown(op)``. Delivery: ``d = rec.delivered(payload, message_id,
    attempt=...)`` then ``rec.acked(d)``, ``rec.ack_failed(d)`` or ``rec.nacked(d)``. Each call is one
    lock-protected list append; `t` overrides the clock (synthetic histories).

    With `path`, each event is instead written as one JSON line to that file (created or truncated;
    buffered, flushed by `flush()`, `snapshot()` and `close()`), and nothing is kept in memory:
    `snapshot()` reads the file back. Close the recorder (or use it as a context manager) when done.
    """

    __slots__ = ("_clock", "_events", "_file", "_lock", "_path", "_seq")

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        path: str | os.PathLike[str] | None = None,
        buffering: int = 1 << 20,
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._events: list[_Row] = []
        self._seq = 0
        self._path = path
        self._file: IO[str] | None = None
        if path is not None:
            self._file = open(path, "w", encoding="utf-8", buffering=buffering)

    @property
    def path(self) -> str | os.PathLike[str] | None:
        """The history file of a file-backed recorder; None when events are kept in memory."""
        return self._path

    def _add(
        self,
        kind: str,
        t: float | None,
        ref: int = -1,
        payload_id: str = "",
        message_id: str | None = None,
        group: str | None = None,
        attempt: int | None = None,
        actor: str = "",
        detail: str = "",
    ) -> int:
        now = self._clock() if t is None else t
        with self._lock:
            seq = self._seq
            self._seq = seq + 1
            row = (kind, seq, now, ref, payload_id, message_id, group, attempt, actor, detail)
            if self._path is None:
                self._events.append(row)
            elif self._file is None:
                raise ValueError("the history file is closed")
            else:
                self._file.write(_encode(row))
        return seq

    # Sends -----------------------------------------------------------------------------------
    def invoke(
        self, payload_id: str, *, group: str | None = None, producer: str = "", t: float | None = None
    ) -> int:
        """A send of `payload_id` starts; returns the op handle for its completion."""
        return self._add(INVOKE, t, -1, payload_id, None, group, None, producer)

    def ok(self, op: int, message_id: str, *, t: float | None = None) -> None:
        self._add(OK, t, op, "", message_id)

    def fail(
        self, op: int, *, error: str = "", message_id: str | None = None, t: float | None = None
    ) -> None:
        """A definite failure (a broker error code, a rejected request)."""
        self._add(FAIL, t, op, "", message_id, detail=error)

    def unknown(
        self, op: int, *, error: str = "", message_id: str | None = None, t: float | None = None
    ) -> None:
        """An indeterminate outcome (timeout, UNAVAILABLE after the request left): maybe stored."""
        self._add(UNKNOWN, t, op, "", message_id, detail=error)

    def sent(
        self,
        payload_id: str,
        outcome: str,
        message_id: str | None = None,
        *,
        group: str | None = None,
        producer: str = "",
        error: str = "",
        t: float | None = None,
    ) -> int:
        """Invoke and complete in one call (`outcome` is "ok", "fail" or "unknown")."""
        if outcome not in _COMPLETIONS:
            raise ValueError(f"outcome must be one of {sorted(_COMPLETIONS)}, not {outcome!r}")
        if outcome == OK and message_id is None:
            raise ValueError("an OK send needs its message id")
        op = self.invoke(payload_id, group=group, producer=producer, t=t)
        self._add(outcome, t, op, "", message_id, detail=error)
        return op

    # Deliveries ------------------------------------------------------------------------------
    def delivered(
        self,
        payload_id: str,
        message_id: str,
        *,
        group: str | None = None,
        attempt: int | None = None,
        consumer: str = "",
        t: float | None = None,
    ) -> int:
        """A consumer received `payload_id`; returns the handle for its ack/nack."""
        return self._add(DELIVER, t, -1, payload_id, message_id, group, attempt, consumer)

    def acked(self, delivery: int, *, t: float | None = None) -> None:
        self._add(ACK, t, delivery)

    def ack_failed(self, delivery: int, *, error: str = "", t: float | None = None) -> None:
        self._add(ACK_FAIL, t, delivery, detail=error)

    def nacked(self, delivery: int, *, t: float | None = None) -> None:
        """The consumer asked for redelivery (handler failure, change-invisible)."""
        self._add(NACK, t, delivery)

    def dead_lettered(
        self, payload_id: str, message_id: str, *, attempt: int | None = None, t: float | None = None
    ) -> None:
        """`payload_id` was found in `%DLQ%<group>` while draining."""
        self._add(DLQ, t, -1, payload_id, message_id, None, attempt)

    # Faults ----------------------------------------------------------------------------------
    def fault_started(self, name: str, *, t: float | None = None) -> None:
        self._add(FAULT, t, detail=name)

    def fault_healed(self, name: str, *, t: float | None = None) -> None:
        self._add(HEAL, t, detail=name)

    # Reading ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._seq

    def snapshot(self) -> History:
        """The events so far (a file-backed recorder flushes its file and reads it back)."""
        if self._path is not None:
            self.flush()
            return History.load(self._path)
        with self._lock:
            rows = list(self._events)
        return History(tuple(Event._make(r) for r in rows))

    def flush(self) -> None:
        """Write buffered events to the history file (no-op in memory)."""
        with self._lock:
            if self._file is not None:
                self._file.flush()

    def close(self) -> None:
        """Flush and close the history file; the file stays readable with `snapshot()`. Idempotent."""
        with self._lock:
            f, self._file = self._file, None
        if f is not None:
            f.close()

    def __enter__(self) -> HistoryRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# Report ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """One property's verdict; `ok` is None when the history cannot show it (not applicable)."""

    name: str
    ok: bool | None
    detail: str


@dataclass(frozen=True)
class Duplicate:
    payload_id: str
    cause: str
    message_ids: tuple[str, ...]
    attempts: tuple[int | None, ...]


@dataclass(frozen=True)
class Unexpected:
    payload_id: str
    message_id: str
    reason: str


@dataclass(frozen=True)
class OrderViolation:
    group: str
    kind: str  # "inversion" | "overtake"
    earlier: str  # sent first
    later: str  # sent after `earlier` but delivered ahead of it


@dataclass(frozen=True)
class Report:
    payloads: int
    sends: int
    sends_ok: int
    sends_failed: int
    sends_unknown: int
    sends_hung: int
    deliveries: int
    delivered_payloads: int
    faults: int
    lost: int
    lost_examples: tuple[str, ...]
    unexpected: int
    unexpected_examples: tuple[Unexpected, ...]
    unacked: int
    unacked_examples: tuple[str, ...]
    recovered: int
    recovered_examples: tuple[str, ...]
    duplicated_payloads: int
    producer_duplicates: int
    redeliveries: int
    requested_redeliveries: int
    duplicate_causes: Mapping[str, int]
    duplicate_examples: tuple[Duplicate, ...]
    duplicate_window: int
    order_inversions: int
    order_overtakes: int
    order_examples: tuple[OrderViolation, ...]
    dead_lettered: int
    dlq_violations: int
    dlq_examples: tuple[str, ...]
    slow_calls: int
    recovery_times: tuple[float, ...]
    unrecovered_faults: int
    verdicts: tuple[Verdict, ...] = field(default=())

    @property
    def duplicates(self) -> int:
        """Extra deliveries nobody asked for: producer-side copies plus unrequested redeliveries."""
        return self.producer_duplicates + self.redeliveries

    def verdict(self, name: str) -> Verdict:
        for v in self.verdicts:
            if v.name == name:
                return v
        raise KeyError(name)

    @property
    def p1(self) -> Verdict:
        return self.verdict("P1")

    @property
    def p2(self) -> Verdict:
        return self.verdict("P2")

    @property
    def p3(self) -> Verdict:
        return self.verdict("P3")

    @property
    def p4(self) -> Verdict:
        return self.verdict("P4")

    @property
    def p5(self) -> Verdict:
        return self.verdict("P5")

    @property
    def p6(self) -> Verdict:
        return self.verdict("P6")

    @property
    def order(self) -> Verdict:
        return self.verdict("order")

    @property
    def dlq(self) -> Verdict:
        return self.verdict("DLQ")

    @property
    def ok(self) -> bool:
        """Every applicable verdict holds."""
        return all(v.ok is not False for v in self.verdicts)

    @property
    def summary(self) -> str:
        lines = [
            f"history: {self.payloads} payloads, {self.sends} sends ({self.sends_ok} ok, "
            f"{self.sends_failed} failed, {self.sends_unknown} unknown, {self.sends_hung} hung), "
            f"{self.deliveries} deliveries of {self.delivered_payloads} payloads, {self.faults} faults"
        ]
        for v in self.verdicts:
            mark = "n/a " if v.ok is None else ("ok  " if v.ok else "FAIL")
            lines.append(f"  {v.name:<5} {mark} {v.detail}")
        lines.append("verdict: " + ("OK" if self.ok else "FAILED"))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary


# Checker ---------------------------------------------------------------------------------------


class _Send(NamedTuple):
    invoke: Event
    done: Event | None


def _resolution(delivery: Event, results: Mapping[int, list[Event]]) -> str | None:
    """What became of a delivery: ACK wins over NACK over ACK_FAIL; None if nothing was recorded."""
    kinds = {e.kind for e in results.get(delivery.seq, ())}
    for kind in (ACK, NACK, ACK_FAIL):
        if kind in kinds:
            return kind
    return None


def _first_resolution_time(delivery: Event, results: Mapping[int, list[Event]]) -> float | None:
    times = [e.t for e in results.get(delivery.seq, ()) if e.kind in (ACK, NACK)]
    return min(times) if times else None


def check(
    history: History | HistoryRecorder,
    *,
    require_ack: bool = True,
    max_attempts: int | None = None,
    call_bound: float | None = None,
    recovery_bound: float = 15.0,
    copies_per_send: int = 1,
    attempt_timeout: float | None = None,
    examples: int = 5,
) -> Report:
    """Check a drained history.

    `require_ack`: every delivered payload must end acked or dead-lettered (P1 counts the others).
    `max_attempts`: the group's max delivery attempts (RocketMQ default 17); enables the DLQ check.
    `call_bound`: P3, the longest a send may take from invoke to completion (seconds).
    `recovery_bound`: P4, from a fault's heal to the next OK send / first delivery (docs/reliability.md §1: 15
    s). `copies_per_send`: how many duplicates one at-risk send may cause (the producer's max attempts minus
    one, plus one for an application resend); scales the P2 window. `attempt_timeout`: the producer's
    request timeout, the deadline of each attempt. A send that took longer than that had an attempt end at
    its deadline with its outcome unknown, and the retry may have stored the message again under the same
    id (at-least-once, docs/protocol.md §5.2, §5.6): such a send widens the P2 window by the attempts that
    can have timed out within its duration, at most `copies_per_send`, fault or no fault.
    """
    hist = history.snapshot() if isinstance(history, HistoryRecorder) else history
    events = hist.events

    invokes: dict[int, Event] = {}
    done: dict[int, Event] = {}
    deliveries: list[Event] = []
    results: dict[int, list[Event]] = defaultdict(list)
    dlq: dict[str, list[Event]] = defaultdict(list)
    faults: list[Event] = []
    heals: list[Event] = []
    for e in events:
        k = e.kind
        if k == INVOKE:
            invokes[e.seq] = e
        elif k in _COMPLETIONS:
            done.setdefault(e.ref, e)  # the first completion counts; a second is a caller bug
        elif k == DELIVER:
            deliveries.append(e)
        elif k in _ACK_RESULTS:
            results[e.ref].append(e)
        elif k == DLQ:
            dlq[e.payload_id].append(e)
        elif k == FAULT:
            faults.append(e)
        elif k == HEAL:
            heals.append(e)

    sends: dict[str, list[_Send]] = defaultdict(list)
    for seq, inv in invokes.items():
        sends[inv.payload_id].append(_Send(inv, done.get(seq)))
    by_payload: dict[str, list[Event]] = defaultdict(list)
    for d in deliveries:
        by_payload[d.payload_id].append(d)

    outcome_counts = Counter(s.done.kind if s.done else "hung" for ss in sends.values() for s in ss)
    first_ok: dict[str, Event] = {}  # payload -> its first OK send completion
    for ss in sends.values():
        for s in ss:
            if s.done is not None and s.done.kind == OK:
                p = s.invoke.payload_id
                if p not in first_ok or s.done.seq < first_ok[p].seq:
                    first_ok[p] = s.done
    ok_payloads = set(first_ok)

    # P1: lost, unexpected, unacked; recovered is informative.
    lost = sorted(p for p in ok_payloads if p not in by_payload and p not in dlq)
    unexpected: list[Unexpected] = []
    for p, ds in by_payload.items():
        tried = sends.get(p)
        if not tried:
            unexpected.extend(Unexpected(p, d.message_id or "", "never sent") for d in ds)
            continue
        # Only when every send's id is known can a foreign id be called unexpected (ids are client-made).
        ids = {s.done.message_id for s in tried if s.done is not None}
        if None in ids or any(s.done is None for s in tried):
            continue
        unexpected.extend(
            Unexpected(p, d.message_id or "", "message id not produced by any send of this payload")
            for d in ds
            if d.message_id not in ids
        )
    unexpected_payloads = len({u.payload_id for u in unexpected})
    recovered = sorted(p for p in by_payload if p in sends and p not in ok_payloads)
    unacked: list[str] = []
    if require_ack:
        for p, ds in sorted(by_payload.items()):
            if p not in dlq and not any(_resolution(d, results) == ACK for d in ds):
                unacked.append(p)

    # Duplicates, by cause.
    causes: Counter[str] = Counter()
    dup_examples: list[Duplicate] = []
    duplicated_payloads = 0
    for p, ds in by_payload.items():
        payload_causes: list[tuple[str, str, tuple[int | None, ...]]] = []
        by_id: dict[str, list[Event]] = defaultdict(list)
        for d in ds:
            by_id[d.message_id or ""].append(d)
        for mid, dm in by_id.items():
            # Pair each delivery with the earlier delivery of the same id one attempt below it; an
            # unpaired delivery is a new stored copy (attempts restart at 1 per stored message).
            waiting: dict[int | None, list[Event]] = defaultdict(list)
            previous: Event | None = None
            copies = 0
            for d in dm:
                pred: Event | None = None
                if d.attempt is None:
                    pred = previous
                elif waiting[d.attempt - 1]:
                    pred = waiting[d.attempt - 1].pop(0)
                if pred is None:
                    copies += 1
                    if copies > 1:
                        payload_causes.append((CAUSE_SAME_ID_RETRY, mid, (d.attempt,)))
                else:
                    res = _resolution(pred, results)
                    cause = {
                        ACK: CAUSE_AFTER_ACK,
                        NACK: CAUSE_REQUESTED,
                        ACK_FAIL: CAUSE_ACK_FAILED,
                        None: CAUSE_ABANDONED,
                    }[res]
                    payload_causes.append((cause, mid, (pred.attempt, d.attempt)))
                waiting[d.attempt].append(d)
                previous = d
        if len(by_id) > 1:
            # Several stored message ids for one payload: the extra ones are producer-side copies.
            # Ids that no OK send returned came from failed/unknown sends that were stored after all.
            ok_ids = {s.done.message_id for s in sends.get(p, ()) if s.done and s.done.kind == OK}
            foreign = sum(1 for mid in by_id if mid not in ok_ids)
            for i, mid in enumerate(list(by_id)[1:]):
                cause = CAUSE_UNKNOWN_STORED if i < foreign else CAUSE_RESEND
                payload_causes.append((cause, mid, ()))
        counted = [c for c in payload_causes if c[0] != CAUSE_REQUESTED]
        if counted:
            duplicated_payloads += 1
        for cause, mid, attempts in payload_causes:
            causes[cause] += 1
            if cause != CAUSE_REQUESTED and len(dup_examples) < examples:
                dup_examples.append(Duplicate(p, cause, (mid,), attempts))
    producer_dups = sum(n for c, n in causes.items() if c in _PRODUCER_CAUSES)
    redeliveries = sum(n for c, n in causes.items() if c not in _PRODUCER_CAUSES and c != CAUSE_REQUESTED)

    # P2 window: un-acked deliveries and in-flight sends at each fault start, plus every send with a
    # failed/unknown outcome and every delivery whose ack failed or never happened (P2), plus (given
    # `attempt_timeout`) the attempts that can have timed out within an OK send that outlasted one.
    at_risk_deliveries: set[int] = set()
    at_risk_sends: set[int] = set()
    for d in deliveries:
        if _resolution(d, results) in (None, ACK_FAIL):
            at_risk_deliveries.add(d.seq)
    for seq in invokes:
        c = done.get(seq)
        if c is None or c.kind != OK:
            at_risk_sends.add(seq)
    for f in faults:
        for d in deliveries:
            if d.t <= f.t:
                rt = _first_resolution_time(d, results)
                if rt is None or rt > f.t:
                    at_risk_deliveries.add(d.seq)
        for seq, inv in invokes.items():
            c = done.get(seq)
            if inv.t <= f.t and (c is None or c.t > f.t):
                at_risk_sends.add(seq)
    window = len(at_risk_deliveries) + copies_per_send * len(at_risk_sends)
    if attempt_timeout is not None:
        for seq, c in done.items():
            if seq in at_risk_sends or seq not in invokes:
                continue
            timed_out = int((c.t - invokes[seq].t) // attempt_timeout)
            window += min(copies_per_send, timed_out)

    # Order within message groups.
    order_violations: list[OrderViolation] = []
    inversions = overtakes = 0
    send_index: dict[str, tuple[str, int]] = {}
    for p in ok_payloads:
        group = next((s.invoke.group for s in sends[p] if s.invoke.group is not None), None)
        if group is not None:
            send_index[p] = (group, first_ok[p].seq)
    by_group: dict[str, list[Event]] = defaultdict(list)
    for d in deliveries:
        if d.payload_id in send_index:
            by_group[send_index[d.payload_id][0]].append(d)
    finished_at: dict[str, int] = {}  # payload -> seq of its first ACK (or DLQ): no longer pending
    for p, ds in by_payload.items():
        ack_seqs = [e.seq for d in ds for e in results.get(d.seq, ()) if e.kind == ACK]
        ack_seqs += [e.seq for e in dlq.get(p, ())]
        if ack_seqs:
            finished_at[p] = min(ack_seqs)
    track_pending = any(results.values())
    for group, ds in sorted(by_group.items()):
        last_first: str | None = None
        seen: set[str] = set()
        pending: dict[str, int] = {}  # delivered, neither acked nor dead-lettered yet -> send index
        for d in ds:
            p = d.payload_id
            idx = send_index[p][1]
            if p not in seen:
                seen.add(p)
                if last_first is not None and send_index[last_first][1] > idx:
                    inversions += 1
                    if len(order_violations) < examples:
                        order_violations.append(OrderViolation(group, "inversion", p, last_first))
                last_first = p
            if track_pending:
                # RocketMQ FIFO blocks a group until its head is acked (03fifomessage.md): a later
                # message must not be handed out while an earlier one is still pending.
                for q in [q for q in pending if q in finished_at and finished_at[q] < d.seq]:
                    del pending[q]
                earlier = [q for q, qi in pending.items() if q != p and qi < idx]
                if earlier:
                    overtakes += 1
                    if len(order_violations) < examples:
                        order_violations.append(OrderViolation(group, "overtake", min(earlier), p))
                pending[p] = idx

    # DLQ accounting.
    dlq_bad: list[str] = []
    if max_attempts is not None:
        for p, ds in by_payload.items():
            top = max((d.attempt or 0 for d in ds), default=0)
            if top > max_attempts:
                dlq_bad.append(f"{p}: delivered at attempt {top} > max {max_attempts}")
            elif p in dlq and top < max_attempts:
                dlq_bad.append(f"{p}: dead-lettered after {top} attempts < max {max_attempts}")
    dlq_bad.sort()

    # P3: every send completes, within the bound if one is given.
    hung = sorted(inv.payload_id for seq, inv in invokes.items() if seq not in done)
    slow = 0
    if call_bound is not None:
        slow = sum(1 for seq, c in done.items() if seq in invokes and c.t - invokes[seq].t > call_bound)

    # P4: after each heal, the next OK send and (if messages were waiting) the next delivery.
    recovery: list[float] = []
    unrecovered = 0
    ok_times = sorted(c.t for c in done.values() if c.kind == OK)
    first_delivery = {p: ds[0].t for p, ds in by_payload.items()}
    for h in heals:
        if any(inv.t >= h.t for inv in invokes.values()):
            after = [t for t in ok_times if t >= h.t]
            if after:
                recovery.append(after[0] - h.t)
            else:
                unrecovered += 1
        if any(first_ok[p].t <= h.t < first_delivery.get(p, _INF) for p in ok_payloads):
            after_d = [d.t for d in deliveries if d.t >= h.t]
            if after_d:
                recovery.append(after_d[0] - h.t)
            else:
                unrecovered += 1

    n_dups = producer_dups + redeliveries
    p1_ok = not lost and not unexpected and not unacked
    verdicts = (
        Verdict(
            "P1",
            p1_ok,
            f"lost={len(lost)} unexpected={len(unexpected)} unacked={len(unacked)} recovered={len(recovered)}"
            + ("" if p1_ok else _ex(lost + unacked + [f"{u.payload_id} ({u.reason})" for u in unexpected])),
        ),
        Verdict(
            "P2",
            n_dups <= window,
            f"duplicates={n_dups} (producer {producer_dups}, redelivery {redeliveries}; "
            f"requested {causes[CAUSE_REQUESTED]}) window={window}",
        ),
        Verdict(
            "P3",
            None if not invokes else (not hung and slow == 0),
            f"hung={len(hung)} slow={slow}" + ("" if call_bound is None else f" bound={call_bound:g}s"),
        ),
        Verdict(
            "P4",
            None if not heals else (unrecovered == 0 and all(r <= recovery_bound for r in recovery)),
            f"heals={len(heals)} unrecovered={unrecovered} worst="
            + (f"{max(recovery):.3f}s" if recovery else "-")
            + f" bound={recovery_bound:g}s",
        ),
        Verdict("P5", None, "resource bounds are not observable from a message history"),
        Verdict("P6", None, "log volume is not observable from a message history"),
        Verdict(
            "order",
            None if not send_index else (inversions == 0 and overtakes == 0),
            f"groups={len(by_group)} inversions={inversions} overtakes={overtakes}",
        ),
        Verdict(
            "DLQ",
            None if max_attempts is None else not dlq_bad,
            f"dead-lettered={len(dlq)} violations={len(dlq_bad)}" + _ex(dlq_bad),
        ),
    )
    return Report(
        payloads=len(set(sends) | set(by_payload)),
        sends=len(invokes),
        sends_ok=outcome_counts[OK],
        sends_failed=outcome_counts[FAIL],
        sends_unknown=outcome_counts[UNKNOWN],
        sends_hung=outcome_counts["hung"],
        deliveries=len(deliveries),
        delivered_payloads=len(by_payload),
        faults=len(faults),
        lost=len(lost),
        lost_examples=tuple(lost[:examples]),
        unexpected=unexpected_payloads,
        unexpected_examples=tuple(unexpected[:examples]),
        unacked=len(unacked),
        unacked_examples=tuple(unacked[:examples]),
        recovered=len(recovered),
        recovered_examples=tuple(recovered[:examples]),
        duplicated_payloads=duplicated_payloads,
        producer_duplicates=producer_dups,
        redeliveries=redeliveries,
        requested_redeliveries=causes[CAUSE_REQUESTED],
        duplicate_causes=MappingProxyType(dict(causes)),
        duplicate_examples=tuple(dup_examples),
        duplicate_window=window,
        order_inversions=inversions,
        order_overtakes=overtakes,
        order_examples=tuple(order_violations),
        dead_lettered=len(dlq),
        dlq_violations=len(dlq_bad),
        dlq_examples=tuple(dlq_bad[:examples]),
        slow_calls=slow,
        recovery_times=tuple(recovery),
        unrecovered_faults=unrecovered,
        verdicts=verdicts,
    )


def _ex(items: list[str], n: int = 3) -> str:
    return f" e.g. {', '.join(items[:n])}" if items else ""
