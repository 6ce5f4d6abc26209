"""The ack batcher: batched, pipelined acks with per-entry retries (bench scenarios 1 and 4,
docs/benchmarks.md#scenarios).

Upstream faults this replaces (docs/protocol.md §8.3, §9.1, §9.2): Java and Python ack one message per RPC and
the Python client blocks the consuming thread on it; Java retries every failure every 1 s forever; the Rust
client retries through one queue with head-of-line blocking, retries INVALID_RECEIPT_HANDLE forever and never
bounds the queue.

Here, entries are grouped per `AckKey` (endpoint, group, topic), because one `AckMessageRequest` carries one
group and topic and goes to one endpoint. A key's batch is flushed when it has `max_batch` entries or when
its oldest entry has waited `linger`; up to `max_in_flight_batches` batches per key are in flight at once.
Results are handled per entry:

- OK -> finished `ACKED`;
- non-retriable (INVALID_RECEIPT_HANDLE, the rest of the 400xx family) -> finished `DROPPED_INVALID` at once;
- retriable -> into the retry schedule: a heap keyed by that entry's next-attempt time, with capped
  exponential backoff per entry, so no entry waits behind another; when due, it is re-batched with the
  other pending entries of its key.

Every entry carries a `deadline` (monotonic seconds): when its message becomes visible again anyway, an ack
can no longer help, so the entry is given up (`DROPPED_EXPIRED`) instead of being retried at or after it.
The retry set is bounded (`max_retrying`, overflow drops the entry with the earliest deadline) and so is the
pending set (`max_pending`, overflow drops the newest entry); both count as `DROPPED_OVERFLOW`.

The same machinery serves nacks (`ChangeInvisibleDuration`) and dead-letter forwarding, one message per
RPC: use `AckConfig.unbatched()` (max_batch=1, linger=0) and put the request specifics in the entry's token.

How the io layer drives it (one event loop, no thinking):

    batcher.add(key, entry, now)                # from the consumption path; True -> wake the flusher
    flusher loop:
        for batch in batcher.take_ready(now):   # "what should I send now?"
            start a task that sends it, then calls
                batcher.on_results(batch, results_for(batch, status, entries), now)   # "here is the result"
             or batcher.on_batch_failed(batch, retriable, now)                       # transport failure
            and wakes the flusher
        for entry, fate in batcher.take_finished(): resolve the entry's future / evict it from the cache
        sleep until batcher.next_wakeup() or until woken                             # "when do I wake next?"
    close: send batcher.flush_all(now), then wait (bounded) for batcher.idle()
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from thrust._core.backoff import ACK_RETRY_BACKOFF, BackoffPolicy
from thrust._core.endpoints import Endpoint

__all__ = [
    "AckBatch",
    "AckBatcher",
    "AckConfig",
    "AckEntry",
    "AckKey",
    "AckStats",
    "Fate",
    "Outcome",
    "classify",
    "results_for",
]

_OK = 20000  # Code.OK
# Code.MULTIPLE_RESULTS: top-level only, look at the entries (docs/protocol.md §2.3).
_MULTIPLE_RESULTS = 30000


class Outcome(IntEnum):
    """How one entry's attempt ended."""

    OK = 0
    RETRIABLE = 1
    NON_RETRIABLE = 2


class Fate(IntEnum):
    """How an entry left the batcher for good (reported by `take_finished`)."""

    ACKED = 0
    DROPPED_INVALID = 1
    DROPPED_EXPIRED = 2
    DROPPED_OVERFLOW = 3


def classify(code: int) -> Outcome:
    """Outcome of one ack/nack/DLQ entry from its status code.

    INVALID_RECEIPT_HANDLE (40013) means the handle expired: retrying can never succeed and Java gives up on
    it (docs/protocol.md §2.3, §8.3). The rest of the 400xx family is a malformed request, equally hopeless.
    Everything else (50xxx, 42900, timeouts, unknown codes) may succeed later and stays bounded by the
    entry's deadline.
    """
    if code == _OK:
        return Outcome.OK
    if 40000 <= code < 40100:
        return Outcome.NON_RETRIABLE
    return Outcome.RETRIABLE


@dataclass(frozen=True, slots=True)
class AckKey:
    """What one ack RPC shares: the endpoint the messages came from, the consumer group and the topic."""

    endpoint: Endpoint
    group: str
    topic: str


_NEW, _PENDING, _IN_FLIGHT, _RETRYING, _DONE = range(5)


class AckEntry:
    """One message to ack (or nack).

    Attributes:
        message_id, receipt_handle: the `AckMessageEntry` fields. The original handle is fine even after the
            proxy auto-renewed it: the proxy substitutes the latest handle (docs/protocol.md §7.2).
        deadline: monotonic seconds at which the message becomes visible again anyway; the batcher never
            attempts the entry at or after it.
        token: opaque to the batcher; the io layer's handle back to the message (future, cache slot, nack
            duration...).
        attempts: attempts started so far (maintained by the batcher).
    """

    __slots__ = (
        "_gen",
        "_key",
        "_queued_at",
        "_state",
        "attempts",
        "deadline",
        "message_id",
        "receipt_handle",
        "token",
    )

    def __init__(self, message_id: str, receipt_handle: str, deadline: float, token: object = None) -> None:
        self.message_id = message_id
        self.receipt_handle = receipt_handle
        self.deadline = deadline
        self.token = token
        self.attempts = 0
        self._state = _NEW
        self._gen = 0
        self._queued_at = 0.0
        self._key: AckKey | None = None

    @property
    def key(self) -> AckKey | None:
        return self._key

    def __repr__(self) -> str:
        return f"AckEntry({self.message_id!r}, attempts={self.attempts}, deadline={self.deadline})"


class AckBatch:
    """Entries of one key to send in one RPC. `entries` is in the order to put on the wire."""

    __slots__ = ("_open", "entries", "key")

    def __init__(self, key: AckKey, entries: list[AckEntry]) -> None:
        self.key = key
        self.entries = entries
        self._open = True

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"AckBatch({self.key.topic!r}, {len(self.entries)} entries)"


def results_for(
    batch: AckBatch, top_code: int, entries: Iterable[tuple[str, int]] = ()
) -> list[tuple[AckEntry, Outcome]]:
    """Per-entry outcomes of one response, for `AckBatcher.on_results`.

    `top_code` is the response's `status.code`; `entries` are `(message_id, status.code)` of the
    `AckMessageResultEntry`s (empty for ChangeInvisibleDuration / DLQ responses, which carry only a top
    status). Entries are matched by message id, not receipt handle, because the proxy may answer with the
    renewed handle (docs/protocol.md §7.2). With no result entries, the top status applies to every entry (the
    proxy's top status is the shared code when all entries agree, docs/protocol.md §7.3); an entry the server
    did not answer for under MULTIPLE_RESULTS counts as retriable.
    """
    results = list(entries)
    if not results:
        if top_code == _MULTIPLE_RESULTS:
            return [(e, Outcome.RETRIABLE) for e in batch.entries]
        outcome = classify(top_code)
        return [(e, outcome) for e in batch.entries]
    ok = Outcome.OK
    asked = batch.entries
    if len(results) == len(asked):
        # An answer in the order of the request pairs up in one pass, without the index below.
        paired: list[tuple[AckEntry, Outcome]] = []
        for e, (message_id, code) in zip(asked, results, strict=True):
            if e.message_id != message_id:
                break
            paired.append((e, ok if code == _OK else classify(code)))
        else:
            return paired
    by_id: dict[str, list[AckEntry]] = {}
    for e in asked:
        by_id.setdefault(e.message_id, []).append(e)
    out: list[tuple[AckEntry, Outcome]] = []
    for message_id, code in results:
        candidates = by_id.get(message_id)
        if candidates:
            out.append((candidates.pop(0), ok if code == _OK else classify(code)))
    if len(out) < len(batch.entries):
        fallback = Outcome.RETRIABLE if top_code in (_OK, _MULTIPLE_RESULTS) else classify(top_code)
        for remaining in by_id.values():
            out.extend((e, fallback) for e in remaining)
    return out


@dataclass(frozen=True, slots=True)
class AckConfig:
    """Tuning of one `AckBatcher`.

    Attributes:
        max_batch: entries per RPC (flush as soon as a key has this many).
        linger: seconds the oldest pending entry of a key may wait for company; 0 flushes at once.
        max_in_flight_batches: RPCs in flight per key; more ready entries wait as pending.
        max_retrying: bound of the retry set (overflow drops the entry with the earliest deadline).
        max_pending: bound of entries waiting to be sent (overflow drops the entry being added).
        backoff: per-entry retry delay after the n-th failed attempt.
    """

    max_batch: int = 32
    linger: float = 0.005
    max_in_flight_batches: int = 4
    max_retrying: int = 10_000
    max_pending: int = 65_536
    backoff: BackoffPolicy = field(default=ACK_RETRY_BACKOFF)

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.max_in_flight_batches < 1:
            raise ValueError("max_batch and max_in_flight_batches must be >= 1")
        if self.max_retrying < 1 or self.max_pending < 1:
            raise ValueError("max_retrying and max_pending must be >= 1")
        if self.linger < 0:
            raise ValueError("linger must be >= 0")

    @classmethod
    def unbatched(
        cls, max_in_flight: int = 64, backoff: BackoffPolicy = ACK_RETRY_BACKOFF, max_retrying: int = 10_000
    ) -> AckConfig:
        """For one-message RPCs (ChangeInvisibleDuration nacks, DLQ forwarding): no batching, no linger."""
        return cls(
            max_batch=1,
            linger=0.0,
            max_in_flight_batches=max_in_flight,
            max_retrying=max_retrying,
            backoff=backoff,
        )


@dataclass(frozen=True, slots=True)
class AckStats:
    """A snapshot of the batcher's gauges (pending, in_flight, retrying) and counters (the rest).

    `attempts` counts entry attempts sent, `rpcs` batches sent.
    """

    pending: int
    in_flight: int
    retrying: int
    acked: int
    dropped_invalid: int
    dropped_expired: int
    dropped_overflow: int
    attempts: int
    rpcs: int


class _Lane:
    """Per-key state: entries waiting to be sent (FIFO) and the number of batches in flight."""

    __slots__ = ("in_flight", "pending")

    def __init__(self) -> None:
        self.pending: list[AckEntry] = []
        self.in_flight = 0


# Heap records: (time, sequence, generation, entry). The sequence keeps entries out of comparisons; the
# generation makes records stale once their entry left the retry set (lazy deletion).
_Record = tuple[float, int, int, AckEntry]


class AckBatcher:
    """Batches acks per key, sends them pipelined, retries each entry on its own schedule. See module doc."""

    __slots__ = (
        "_acked",
        "_attempts",
        "_by_deadline",
        "_dropped_expired",
        "_dropped_invalid",
        "_dropped_overflow",
        "_finished",
        "_in_flight",
        "_lanes",
        "_pending",
        "_retry_heap",
        "_retrying",
        "_rpcs",
        "_seq",
        "config",
    )

    def __init__(self, config: AckConfig | None = None) -> None:
        self.config = config or AckConfig()
        self._lanes: dict[AckKey, _Lane] = {}
        self._retry_heap: list[_Record] = []
        self._by_deadline: list[_Record] = []
        self._finished: list[tuple[AckEntry, Fate]] = []
        self._seq = 0
        self._pending = 0
        self._in_flight = 0
        self._retrying = 0
        self._acked = 0
        self._dropped_invalid = 0
        self._dropped_expired = 0
        self._dropped_overflow = 0
        self._attempts = 0
        self._rpcs = 0

    # -- intake -------------------------------------------------------------------------------------------

    def add(self, key: AckKey, entry: AckEntry, now: float) -> bool:
        """Queue `entry` for `key`.

        Returns True when the flusher should run `take_ready` / re-read `next_wakeup` (the key's first pending
        entry, or a batch became full); False when an already-armed wake-up covers it. An entry already past
        its deadline or over `max_pending` is finished at once (see `take_finished`).
        """
        return self.add_many(((key, entry),), now)

    def add_many(self, items: Iterable[tuple[AckKey, AckEntry]], now: float) -> bool:
        """`add` for each of `items` in turn (the consumption path's burst of results): True when any of
        them would have returned True.

        A burst's entries nearly always share one key (one queue's messages), so the key's lane is looked up
        once per run of the same key object rather than once per entry: `AckKey` and the `Endpoint` in it
        hash in Python, two of a push consumer's 32 Python calls per message before."""
        config = self.config
        max_pending, max_batch = config.max_pending, config.max_batch
        at_once = config.linger == 0
        kick = False
        last_key: AckKey | None = None
        pending: list[AckEntry] = []
        for key, entry in items:
            if entry._state != _NEW:
                raise ValueError(f"{entry!r} was already added")
            entry._key = key
            if now >= entry.deadline:
                self._finish(entry, Fate.DROPPED_EXPIRED)
                kick = True
                continue
            if self._pending >= max_pending:
                self._finish(entry, Fate.DROPPED_OVERFLOW)
                kick = True
                continue
            if key is not last_key:
                lane = self._lanes.get(key)
                if lane is None:
                    lane = self._lanes[key] = _Lane()
                pending = lane.pending
                last_key = key
            entry._state = _PENDING
            entry._queued_at = now
            pending.append(entry)
            self._pending += 1
            n = len(pending)
            if n == 1 or n == max_batch or at_once:
                kick = True
        return kick

    # -- what to send -------------------------------------------------------------------------------------

    def take_ready(self, now: float) -> list[AckBatch]:
        """Batches to send now. Called by the flusher when woken and at `next_wakeup()`.

        Moves retries that are due into their key's pending entries, then cuts batches from every key that
        has a full batch or whose oldest entry has lingered long enough, within its in-flight limit. Entries
        found past their deadline are finished instead of sent.
        """
        self._release_due_retries(now)
        linger = self.config.linger
        max_batch = self.config.max_batch
        batches: list[AckBatch] = []
        for key, lane in list(self._lanes.items()):
            pending = lane.pending
            while (
                pending
                and lane.in_flight < self.config.max_in_flight_batches
                and (len(pending) >= max_batch or pending[0]._queued_at + linger <= now)
            ):
                batch = self._cut(key, lane, now)
                if batch is not None:
                    batches.append(batch)
            if not pending and lane.in_flight == 0:
                del self._lanes[key]
        return batches

    def flush_all(self, now: float) -> list[AckBatch]:
        """Everything not in flight, as batches to send now, ignoring linger, backoff and the in-flight limit.

        Called once by `close()` so that nothing waits for a timer while the client drains; entries past
        their deadline are finished instead.
        """
        while self._retry_heap:
            _, _, gen, entry = heapq.heappop(self._retry_heap)
            if entry._state == _RETRYING and entry._gen == gen:
                self._retrying -= 1
                self._enqueue_retry(entry, now)
        self._by_deadline.clear()
        batches: list[AckBatch] = []
        for key, lane in list(self._lanes.items()):
            while lane.pending:
                batch = self._cut(key, lane, now)
                if batch is not None:
                    batches.append(batch)
            if lane.in_flight == 0:
                del self._lanes[key]
        return batches

    def next_wakeup(self) -> float | None:
        """The monotonic time at which `take_ready` will have something to do; None = only new events can.

        A time at or before now means "call `take_ready` now". Keys blocked by their in-flight limit are not
        counted: their next chance comes with `on_results` / `on_batch_failed`, after which the io layer
        calls `take_ready` anyway.
        """
        best: float | None = None
        limit = self.config.max_in_flight_batches
        for lane in self._lanes.values():
            if lane.pending and lane.in_flight < limit:
                first = lane.pending[0]._queued_at
                t = first if len(lane.pending) >= self.config.max_batch else first + self.config.linger
                if best is None or t < best:
                    best = t
        heap = self._retry_heap
        while heap and not (heap[0][3]._state == _RETRYING and heap[0][3]._gen == heap[0][2]):
            heapq.heappop(heap)  # drop stale records so the top is a real retry time
        if heap and (best is None or heap[0][0] < best):
            best = heap[0][0]
        return best

    # -- results ------------------------------------------------------------------------------------------

    def on_results(self, batch: AckBatch, results: Sequence[tuple[AckEntry, Outcome]], now: float) -> None:
        """Apply the per-entry outcomes of one completed RPC (build them with `results_for`).

        Entries of the batch missing from `results` are treated as retriable. A second call for the same
        batch is ignored.
        """
        if not self._close_batch(batch):
            return
        members = {id(e) for e in batch.entries}
        finished = self._finished
        acked = 0
        for entry, outcome in results:
            if entry._state != _IN_FLIGHT or id(entry) not in members:
                continue  # not part of this batch, or reported twice
            self._in_flight -= 1
            if outcome is Outcome.OK:
                # `_finish(entry, Fate.ACKED)` inline: the outcome of nearly every entry.
                entry._state = _DONE
                acked += 1
                finished.append((entry, Fate.ACKED))
            else:
                self._settle(entry, outcome, now)
        self._acked += acked
        for entry in batch.entries:
            if entry._state == _IN_FLIGHT:
                self._in_flight -= 1
                self._settle(entry, Outcome.RETRIABLE, now)

    def on_batch_failed(self, batch: AckBatch, retriable: bool, now: float) -> None:
        """The whole RPC failed (transport error, deadline, cancelled): every entry gets the same outcome."""
        outcome = Outcome.RETRIABLE if retriable else Outcome.NON_RETRIABLE
        self.on_results(batch, [(e, outcome) for e in batch.entries], now)

    def take_finished(self) -> list[tuple[AckEntry, Fate]]:
        """Entries that left the batcher since the last call, with their fate; call after every other call.

        The io layer uses it to complete the caller's future and free the message's cache slot.
        """
        finished = self._finished
        self._finished = []
        return finished

    def cap_deadline(self, entry: AckEntry, deadline: float) -> None:
        """Bring a not yet finished entry's deadline forward to `deadline` (never later).

        For an entry added with no deadline of its own (`math.inf`: the ack or dead-letter forward of a FIFO
        group's head, which its group waits for, is retried for as long as its queue is assigned, see
        `thrust._core.fifo`): once the queue is dropped nothing waits for it any more, and from then on it is
        bounded like any other entry. The deadline is checked where it always is, when the entry is next cut
        into a batch or scheduled for a retry, so a retrying entry is given up at most one backoff step after
        `deadline`; the overflow order (earliest deadline first) keeps the deadline the entry had when its
        retry was scheduled.
        """
        if entry._state != _DONE and deadline < entry.deadline:
            entry.deadline = deadline

    # -- state --------------------------------------------------------------------------------------------

    def idle(self) -> bool:
        """Nothing pending, in flight or scheduled for retry (the drain on close is complete)."""
        return self._pending == 0 and self._in_flight == 0 and self._retrying == 0

    def retrying_entries(self) -> list[AckEntry]:
        """The entries waiting in the retry schedule now (for per-queue statistics: O(retry set), not for
        the hot path)."""
        return [r[3] for r in self._retry_heap if r[3]._state == _RETRYING and r[3]._gen == r[2]]

    def stats(self) -> AckStats:
        return AckStats(
            pending=self._pending,
            in_flight=self._in_flight,
            retrying=self._retrying,
            acked=self._acked,
            dropped_invalid=self._dropped_invalid,
            dropped_expired=self._dropped_expired,
            dropped_overflow=self._dropped_overflow,
            attempts=self._attempts,
            rpcs=self._rpcs,
        )

    # -- internals ----------------------------------------------------------------------------------------

    def _cut(self, key: AckKey, lane: _Lane, now: float) -> AckBatch | None:
        """Take up to max_batch live entries from the lane's head; None if all of them had expired."""
        pending = lane.pending
        take = pending[: self.config.max_batch]
        del pending[: len(take)]
        self._pending -= len(take)
        live: list[AckEntry] = []
        for entry in take:
            if now >= entry.deadline:
                self._finish(entry, Fate.DROPPED_EXPIRED)
                continue
            entry._state = _IN_FLIGHT
            entry.attempts += 1
            live.append(entry)
        if not live:
            return None
        lane.in_flight += 1
        self._in_flight += len(live)
        self._attempts += len(live)
        self._rpcs += 1
        return AckBatch(key, live)

    def _close_batch(self, batch: AckBatch) -> bool:
        if not batch._open:
            return False
        batch._open = False
        lane = self._lanes.get(batch.key)
        if lane is not None:
            lane.in_flight -= 1
            if lane.in_flight == 0 and not lane.pending:
                del self._lanes[batch.key]
        return True

    def _settle(self, entry: AckEntry, outcome: Outcome, now: float) -> None:
        if outcome is Outcome.OK:
            self._finish(entry, Fate.ACKED)
        elif outcome is Outcome.NON_RETRIABLE:
            self._finish(entry, Fate.DROPPED_INVALID)
        else:
            self._schedule_retry(entry, now)

    def _schedule_retry(self, entry: AckEntry, now: float) -> None:
        due = now + self.config.backoff.delay(max(1, entry.attempts))
        if due >= entry.deadline:
            # The next attempt could only happen once the message is visible again: give up now.
            self._finish(entry, Fate.DROPPED_EXPIRED)
            return
        entry._state = _RETRYING
        entry._gen += 1
        self._seq += 1
        heapq.heappush(self._retry_heap, (due, self._seq, entry._gen, entry))
        heapq.heappush(self._by_deadline, (entry.deadline, self._seq, entry._gen, entry))
        self._retrying += 1
        if self._retrying > self.config.max_retrying:
            self._evict_earliest_deadline()
        if len(self._retry_heap) > 2 * self._retrying + 64:
            self._compact()

    def _evict_earliest_deadline(self) -> None:
        heap = self._by_deadline
        while heap:
            _, _, gen, victim = heapq.heappop(heap)
            if victim._state == _RETRYING and victim._gen == gen:
                self._retrying -= 1
                self._finish(victim, Fate.DROPPED_OVERFLOW)
                return

    def _compact(self) -> None:
        def live(r: _Record) -> bool:
            return r[3]._state == _RETRYING and r[3]._gen == r[2]

        self._retry_heap = [r for r in self._retry_heap if live(r)]
        heapq.heapify(self._retry_heap)
        self._by_deadline = [r for r in self._by_deadline if live(r)]
        heapq.heapify(self._by_deadline)

    def _release_due_retries(self, now: float) -> None:
        heap = self._retry_heap
        while heap and heap[0][0] <= now:
            due, _, gen, entry = heapq.heappop(heap)
            if entry._state != _RETRYING or entry._gen != gen:
                continue
            self._retrying -= 1
            self._enqueue_retry(entry, due)
        if len(self._by_deadline) > 2 * self._retrying + 64:
            self._compact()

    def _enqueue_retry(self, entry: AckEntry, queued_at: float) -> None:
        key = entry._key
        assert key is not None
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
        entry._state = _PENDING
        entry._queued_at = queued_at
        lane.pending.append(entry)
        self._pending += 1

    def _finish(self, entry: AckEntry, fate: Fate) -> None:
        entry._state = _DONE
        if fate is Fate.ACKED:
            self._acked += 1
        elif fate is Fate.DROPPED_INVALID:
            self._dropped_invalid += 1
        elif fate is Fate.DROPPED_EXPIRED:
            self._dropped_expired += 1
        else:
            self._dropped_overflow += 1
        self._finished.append((entry, fate))
