"""The producer's linger batch: which sends share one SendMessage request, and when the request leaves.

Opt-in (`Producer(batch_max_messages=N > 1)`). Plain `send()` calls are collected per lane and sent as
one request per batch; every caller still gets its own receipt or error. Pure and synchronous: no I/O,
no clock; `now` is monotonic seconds passed in. The io driver (`thrust._io.batching.LingerDriver`) only
asks:

    acc.room_for(size)             may one more message be accepted now? (no: the caller waits)
    acc.add(entry, now) -> bool    accept it; True: wake the flusher (a new deadline, or something due)
    acc.due(now)                   is a request ready to leave? then take a window slot and
    acc.take_ready(now)            take it: the oldest due request (a `Batch`), or None
    acc.next_wakeup()              when the oldest open batch lingers out (None: nothing open)
    acc.on_done(batch) -> bool     its answer came, whatever it was: frees room, unblocks a FIFO group
    acc.withdraw(entry)            its caller gave up before the request left: it is not sent
    acc.flush_all(), acc.drain()   close: everything is due now; then what never left, to fail

**What may share a request** (`lane_for`), from what upstream does with a multi-message SendMessage:

- One topic per request (apache/rocketmq `SendMessageActivity.buildMessage`: "topic in message is not
  same" is MESSAGE_CORRUPTED), and one message type: the proxy checks the topic's type against the first
  message only (`ProducerProcessor.sendMessage`) and derives the request's sysFlag from it
  (`SendMessageActivity.buildSysFlag`), so a mixed request would be misfiled, not refused.
- NORMAL messages of a topic share batches (lane `(topic, None)`).
- DELAY messages go alone (`lane_for` -> None): a batch is stored through `SendMessageProcessor
  .sendBatchMessage` as one `MessageExtBatch`, and the broker's timer hook (`HookUtils
  .handleScheduleMessage`, registered in `BrokerController.registerMessageStoreHook`) only looks at a
  single `MessageExtBrokerInner`: the delivery time of a batched message would be silently ignored.
- TRANSACTION messages go alone: `CommitLog.asyncPutMessages` refuses a prepared batch
  (MESSAGE_ILLEGAL), and the producer's transactions never use this path.
- PRIORITY messages go alone: the broker puts a priority message in the queue of its priority; a
  batch keeps the one queue the proxy chose for the whole request.
- FIFO messages go alone, but in order: the proxy hashes the message group to a queue only for a
  request of ONE message (`SendMessageActivity.SendMessageQueueSelector.select`: `shardingKey` is read
  when `getMessagesCount() == 1`); a multi-message request goes to the next queue round robin
  (`selectOneByPipeline`), so two batches of one group would land in different queues and be consumed
  out of order (FIFO consumption is ordered per queue). Each group is a lane `(topic, group)` of
  one-message requests with at most ONE request in flight, released in the order of the `send()` calls:
  concurrent sends of one group are stored in call order, which an unbatched producer does not promise.

**When a batch leaves**: a lane has at most one open batch; it closes when it holds `max_messages`
messages or the next message would take it over `max_bytes` (estimated wire bytes, `estimate_size`; a
single message larger than that goes alone), and an open batch is due `linger` seconds after its first
message. A due batch that has not found a window slot yet keeps filling until it is taken, so a busy
producer sends fuller batches without waiting longer. Due requests leave oldest first (by the arrival of
their first message), across lanes.

**Bounded**: `max_pending` messages and `max_pending_bytes` accepted and not yet answered (queued and in
flight together); `room_for` says no beyond that and the driver makes `send()` wait (one message is
always admitted into an empty accumulator, however large, so no message waits forever).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "MESSAGE_OVERHEAD",
    "SPLIT_ON_REFUSAL",
    "Batch",
    "LaneKey",
    "LingerAccumulator",
    "LingerConfig",
    "Pending",
    "estimate_size",
    "lane_for",
    "split_on_refusal",
]

LaneKey = tuple[str, str | None]
"""(topic, message group): group None is the shared lane of a topic's NORMAL messages."""

MESSAGE_OVERHEAD = 256
"""Bytes added to each message's body and properties in `estimate_size`: the broker's per-message header
in a batch (`MessageDecoder.encodeMessages`: sizes, magic code, CRC, flag) and the system properties the
proxy adds (unique key, producer group, born host and time, reconsume times), whose sum per message the
broker checks against its `maxMessageSize` for the whole batch (`MessageExtEncoder.encode(MessageExtBatch)`,
4 MiB by default)."""

# Status codes the proxy answers for ONE bad message of a request: it builds every message before it sends
# any (SendMessageActivity.buildMessage / buildMessageProperty / validateMessageBodySize, GrpcValidator
# .validateTag), so the first bad one refuses the whole request and nothing is stored.
SPLIT_ON_REFUSAL = frozenset(
    {
        40000,  # BAD_REQUEST (transaction recovery time)
        40004,  # ILLEGAL_MESSAGE_TAG
        40005,  # ILLEGAL_MESSAGE_KEY
        40006,  # ILLEGAL_MESSAGE_GROUP
        40007,  # ILLEGAL_MESSAGE_PROPERTY_KEY
        40009,  # ILLEGAL_MESSAGE_ID
        40012,  # ILLEGAL_DELIVERY_TIME
        40016,  # MESSAGE_CORRUPTED
        41300,  # PAYLOAD_TOO_LARGE
        41301,  # MESSAGE_BODY_TOO_LARGE
        41302,  # MESSAGE_BODY_EMPTY
        43101,  # MESSAGE_PROPERTIES_TOO_LARGE
    }
)


def split_on_refusal(code: int | None, count: int) -> bool:
    """Whether a request of `count` messages refused with `code` is resent one message per request.

    A code in `SPLIT_ON_REFUSAL` means one message was bad and none was stored, so sending each alone is
    safe (no duplicate) and gives the bad one its own error and the others their receipts. Any other
    failure (transport, timeout, 5xxxx) may have stored the batch: it is retried whole by the producer's
    retry policy, or failed whole."""
    return count > 1 and code is not None and int(code) in SPLIT_ON_REFUSAL


def lane_for(
    topic: str, *, message_group: str | None, delayed: bool, priority: int | None, transactional: bool = False
) -> LaneKey | None:
    """The lane of a message, or None when it must be sent alone, outside the accumulator (see module)."""
    if delayed or priority is not None or transactional:
        return None
    return (topic, message_group)


def estimate_size(
    body: bytes, properties: Mapping[str, str], tag: str | None, keys: Iterable[str], topic: str
) -> int:
    """Estimated bytes of one message in a batch: body, properties, tag and keys, plus `MESSAGE_OVERHEAD`
    and the topic (the proxy writes it as the producer group of every message). Characters count as bytes
    (an ASCII estimate); the bound is kept well below the broker's limit by default."""
    size = len(body) + MESSAGE_OVERHEAD + len(topic)
    if properties:
        for k, v in properties.items():
            size += len(k) + len(v) + 2
    if tag:
        size += len(tag)
    for key in keys:
        size += len(key) + 1
    return size


@dataclass(frozen=True, slots=True)
class LingerConfig:
    """Bounds of the linger batch (see `thrust.Producer` for the public names).

    Attributes:
        max_messages: messages per request (>= 1; 1 sends every message alone, still through the lanes).
        max_bytes: estimated bytes per request (`estimate_size`); a larger message goes alone.
        linger: seconds an open batch waits for more messages after its first one (0: only what arrives
            before the flusher runs, or while every window slot is busy).
        max_pending: messages accepted and not yet answered, queued and in flight.
        max_pending_bytes: their estimated bytes.
    """

    max_messages: int
    max_bytes: int
    linger: float
    max_pending: int
    max_pending_bytes: int

    def __post_init__(self) -> None:
        if self.max_messages < 1:
            raise ValueError("batch_max_messages must be >= 1")
        if self.max_bytes < 1:
            raise ValueError("batch_max_bytes must be >= 1")
        if not self.linger >= 0:
            raise ValueError("batch_linger must be >= 0 seconds")
        if self.max_pending < self.max_messages:
            raise ValueError("batch_max_pending must be >= batch_max_messages")
        if self.max_pending_bytes < self.max_bytes:
            raise ValueError("batch_max_pending_bytes must be >= batch_max_bytes")


_QUEUED, _TAKEN, _WITHDRAWN, _DONE = range(4)
_OPEN, _CLOSED, _SENT = range(3)


class Pending:
    """One accepted message. The io layer subclasses it to carry its future and its wire message."""

    __slots__ = ("_batch", "_state", "lane", "seq", "size")

    def __init__(self, lane: LaneKey, size: int) -> None:
        self.lane = lane
        self.size = size
        self.seq = 0
        self._state = _QUEUED
        self._batch: Batch | None = None

    @property
    def queued(self) -> bool:
        """Accepted and not yet taken into a request (nor withdrawn)."""
        return self._state == _QUEUED


class Batch:
    """One request's worth of messages of one lane, in the order they were added."""

    __slots__ = ("_entries", "_state", "_withdrawn", "bytes", "count", "lane", "opened_at", "seq")

    def __init__(self, lane: LaneKey, opened_at: float, seq: int) -> None:
        self.lane = lane
        self.opened_at = opened_at
        self.seq = seq
        self.count = 0  # live entries (withdrawn ones excluded)
        self.bytes = 0
        self._entries: list[Pending] = []
        self._withdrawn = 0
        self._state = _OPEN

    @property
    def entries(self) -> list[Pending]:
        """The messages to send, in order (withdrawn ones left out)."""
        if not self._withdrawn:
            return self._entries
        return [e for e in self._entries if e._state != _WITHDRAWN]

    def __len__(self) -> int:
        return self.count


class _Lane:
    """An ordered (FIFO group) lane: messages wait in call order; one request in flight at a time."""

    __slots__ = ("busy", "key", "listed", "waiting")

    def __init__(self, key: LaneKey) -> None:
        self.key = key
        self.waiting: deque[Pending] = deque()
        self.busy = False
        self.listed = False  # in `_lane_ready`


class LingerAccumulator:
    """Linger batching state of one producer (module docstring). Not thread-safe: one owner (the loop)."""

    def __init__(self, config: LingerConfig) -> None:
        self.config = config
        self._open: dict[str, Batch] = {}  # shared lanes: topic -> its open batch
        self._by_age: deque[Batch] = deque()  # open batches, oldest first (closed ones skipped lazily)
        self._full: deque[Batch] = deque()  # closed by count or bytes, waiting for a slot
        self._lanes: dict[LaneKey, _Lane] = {}  # ordered lanes with messages waiting or in flight
        self._lane_ready: deque[_Lane] = deque()  # ordered lanes whose head may leave now
        self._flushing = False
        self._seq = 0
        self.pending = 0  # accepted, not answered, not withdrawn
        self.pending_bytes = 0
        self.queued = 0  # accepted, not yet taken
        self.in_flight = 0  # batches taken, not done
        self.batches_taken = 0
        self.messages_taken = 0

    # -- admission ---------------------------------------------------------------------------------

    def room_for(self, size: int) -> bool:
        """Whether a message of `size` estimated bytes may be accepted now (else: backpressure)."""
        if self.pending == 0:
            return True
        c = self.config
        return self.pending < c.max_pending and self.pending_bytes + size <= c.max_pending_bytes

    def add(self, entry: Pending, now: float) -> bool:
        """Accept `entry` (the caller checked `room_for`). True when the flusher should look again."""
        if entry.seq != 0:
            raise ValueError("entry already added")
        self._seq += 1
        entry.seq = self._seq
        self.pending += 1
        self.pending_bytes += entry.size
        self.queued += 1
        topic, group = entry.lane
        if group is not None:
            lane = self._lanes.get(entry.lane)
            if lane is None:
                lane = self._lanes[entry.lane] = _Lane(entry.lane)
            lane.waiting.append(entry)
            if not lane.busy and not lane.listed:
                lane.listed = True
                self._lane_ready.append(lane)
                return True
            return False
        c = self.config
        wake = False
        batch = self._open.get(topic)
        if batch is not None and batch.bytes + entry.size > c.max_bytes and batch.count:
            self._close(batch)  # the newcomer does not fit: this one leaves as it is
            batch = None
        if batch is None:
            batch = self._open[topic] = Batch(entry.lane, now, entry.seq)
            self._by_age.append(batch)
            wake = True
        batch._entries.append(entry)
        batch.count += 1
        batch.bytes += entry.size
        entry._batch = batch
        if batch.count >= c.max_messages or batch.bytes >= c.max_bytes:
            self._close(batch)
            wake = True
        return wake

    def _close(self, batch: Batch) -> None:
        batch._state = _CLOSED
        if self._open.get(batch.lane[0]) is batch:
            del self._open[batch.lane[0]]
        self._full.append(batch)

    def withdraw(self, entry: Pending) -> bool:
        """The caller gave up on `entry`: if it has not been taken yet, it is dropped (never sent) and its
        room freed; True then. False when it is already in a request (its answer will be ignored)."""
        if entry._state != _QUEUED:
            return False
        entry._state = _WITHDRAWN
        self.pending -= 1
        self.pending_bytes -= entry.size
        self.queued -= 1
        batch = entry._batch
        if batch is not None:
            batch.count -= 1
            batch.bytes -= entry.size
            batch._withdrawn += 1
        else:
            lane = self._lanes.get(entry.lane)
            if lane is not None:
                lane.waiting.remove(entry)
                self._forget_lane(lane)
        return True

    # -- dispatch ----------------------------------------------------------------------------------

    def _oldest_open(self) -> Batch | None:
        by_age = self._by_age
        while by_age:
            head = by_age[0]
            if head._state == _OPEN and head.count:
                return head
            if head._state == _OPEN:
                # Every message of this open batch was withdrawn: forget it (the next add opens a new one).
                del self._open[head.lane[0]]
                head._state = _SENT
            by_age.popleft()  # closed (it is in `_full`) or emptied
        return None

    def _head_lane(self) -> _Lane | None:
        ready = self._lane_ready
        while ready and not ready[0].waiting:
            lane = ready.popleft()  # its messages were withdrawn
            lane.listed = False
            self._forget_lane(lane)
        return ready[0] if ready else None

    def _head_full(self) -> Batch | None:
        full = self._full
        while full and full[0].count == 0:
            full.popleft()._state = _SENT
        return full[0] if full else None

    def due(self, now: float) -> bool:
        """Whether a request may leave now."""
        if self._head_full() is not None or self._head_lane() is not None:
            return True
        oldest = self._oldest_open()
        return oldest is not None and (self._flushing or oldest.opened_at + self.config.linger <= now)

    def take_ready(self, now: float) -> Batch | None:
        """The oldest due request, removed from the accumulator (now in flight), or None."""
        full = self._head_full()
        lane = self._head_lane()
        oldest = self._oldest_open()
        if oldest is not None and not (self._flushing or oldest.opened_at + self.config.linger <= now):
            oldest = None
        best: Batch | None = None
        if full is not None:
            best = full
        if oldest is not None and (best is None or oldest.seq < best.seq):
            best = oldest
        if lane is not None and (best is None or lane.waiting[0].seq < best.seq):
            self._lane_ready.popleft()
            lane.listed = False
            lane.busy = True
            entry = lane.waiting.popleft()
            batch = Batch(lane.key, now, entry.seq)
            batch._entries.append(entry)
            batch.count = 1
            batch.bytes = entry.size
            entry._batch = batch
            return self._taken(batch)
        if best is None:
            return None
        if best is full:
            self._full.popleft()
        else:
            self._by_age.popleft()
            del self._open[best.lane[0]]
        return self._taken(best)

    def _taken(self, batch: Batch) -> Batch:
        batch._state = _SENT
        for e in batch.entries:
            e._state = _TAKEN
        self.queued -= batch.count
        self.in_flight += 1
        self.batches_taken += 1
        self.messages_taken += batch.count
        return batch

    def next_wakeup(self) -> float | None:
        """When the oldest open batch becomes due (monotonic seconds), or None when nothing is open."""
        oldest = self._oldest_open()
        return None if oldest is None else oldest.opened_at + self.config.linger

    def on_done(self, batch: Batch) -> bool:
        """The request of `batch` was answered (or failed, or was abandoned): its messages leave the
        accumulator. True when a FIFO group's next message may now leave (wake the flusher)."""
        if batch._state != _SENT:
            raise ValueError("batch was not taken")
        batch._state = _DONE
        self.in_flight -= 1
        for e in batch.entries:
            e._state = _DONE
            self.pending -= 1
            self.pending_bytes -= e.size
        if batch.lane[1] is None:
            return False
        lane = self._lanes.get(batch.lane)
        if lane is None:
            return False
        lane.busy = False
        if lane.waiting and not lane.listed:
            lane.listed = True
            self._lane_ready.append(lane)
            return True
        self._forget_lane(lane)
        return False

    def _forget_lane(self, lane: _Lane) -> None:
        if not lane.waiting and not lane.busy and not lane.listed:
            self._lanes.pop(lane.key, None)

    # -- close -------------------------------------------------------------------------------------

    def flush_all(self) -> None:
        """Closing: every open batch is due now, whatever its linger."""
        self._flushing = True

    def drain(self) -> list[Pending]:
        """Remove every message not taken yet (closing, at the deadline) and return them, oldest first;
        the caller fails them. Requests in flight stay until `on_done`."""
        out: list[Pending] = []
        for batch in (*self._full, *self._by_age):
            if batch._state in (_OPEN, _CLOSED):
                out.extend(batch.entries)
                batch._state = _SENT
        for lane in self._lanes.values():
            out.extend(lane.waiting)
            lane.waiting.clear()
            lane.listed = False
        self._full.clear()
        self._by_age.clear()
        self._open.clear()
        self._lane_ready.clear()
        self._lanes = {k: v for k, v in self._lanes.items() if v.busy}
        for e in out:
            e._state = _DONE
            self.pending -= 1
            self.pending_bytes -= e.size
        self.queued = 0
        out.sort(key=lambda e: e.seq)
        return out

    def idle(self) -> bool:
        """Nothing queued and nothing in flight."""
        return self.pending == 0 and self.in_flight == 0
