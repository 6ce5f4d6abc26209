"""A broker's data: queues and cursors, per-group records, timers, and `BrokerState`, which holds them.

`Broker` (broker.py) is built in layers, each a class of its own module that uses only what the layers
below it define: `BrokerState` (this module: the data and storing messages) <- `FifoGroups` (fifo.py:
message-group order) <- `InflightRecords` (inflight.py: delivered records, invisibility, auto-renew,
receipt handles, dead letters) <- `ScheduledMessages` (scheduled.py: delay, recall, transactions, the
broker's clock) <- `Broker` (broker.py: send, pop, ack and the rest of the public API).

Data structures (docs/protocol.md §6.3 and §7 for the behaviour they emulate):

- Per topic and queue an append-only log (`_QueueLog`: a list plus the offset of its first element);
  old messages are trimmed in chunks past the retention limits, like upstream deletes commit-log files.
- Per (group, topic) a `_Sub`: per queue a read cursor (new messages) and a retry deque (messages
  visible again after invisibility expired or a nack); for FIFO groups, per message group a deque of the
  unacknowledged messages in offset order plus a heap of message groups whose head can be delivered.
  Each delivered-but-unacknowledged message has one `_Rec` in `_Sub.records`.
- Three lazy-deletion timer heaps for the whole broker: invisibility deadlines (and auto-renew points)
  of in-flight records, due times of delayed messages, and transaction checks. Cancelled entries stay in
  the heap until they reach the top or the heap is compacted (when stale entries outnumber live ones).
"""

from __future__ import annotations

import heapq
import secrets
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Generic, TypeVar

from thrust.server.core.catalog import Catalog
from thrust.server.core.model import (
    BrokerError,
    Delivery,
    GroupInfo,
    InboundMessage,
    StoredMessage,
    TopicInfo,
)

# Record states (per message per group).
_READY = 0  # visible: read by a FIFO group but not delivered yet, or waiting for redelivery
_INFLIGHT = 1  # delivered, not acked, invisible
_DONE = 2  # acked, filtered out or dead-lettered; no longer tracked


class _Timed:
    """Something a `_Timers` heap can schedule: `timer_seq` identifies its one live heap entry (0: none)."""

    __slots__ = ("timer_seq",)

    def __init__(self) -> None:
        self.timer_seq = 0


_T = TypeVar("_T", bound=_Timed)


class _Timers(Generic[_T]):
    """A min-heap of deadlines with lazy deletion; each item has at most one live entry.

    Rescheduling or cancelling an item leaves its old entry in place (recognised as stale because its
    sequence number no longer matches `item.timer_seq`); the heap is rebuilt from live entries when stale
    ones outnumber them, so memory stays O(live) and every operation O(log n) amortised.
    """

    __slots__ = ("_heap", "_live", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, _T]] = []
        self._live = 0
        self._seq = 0

    def __len__(self) -> int:
        return self._live

    def push(self, item: _T, when: float) -> None:
        """(Re)schedule `item` at `when`, replacing any earlier schedule."""
        if item.timer_seq == 0:
            self._live += 1
        self._seq += 1
        item.timer_seq = self._seq
        heapq.heappush(self._heap, (when, self._seq, item))
        self._maybe_compact()

    def cancel(self, item: _T) -> None:
        """Unschedule `item` (no-op when it is not scheduled)."""
        if item.timer_seq:
            item.timer_seq = 0
            self._live -= 1
            self._maybe_compact()

    def peek(self) -> float | None:
        """The earliest live deadline, or None."""
        heap = self._heap
        while heap and heap[0][2].timer_seq != heap[0][1]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop_due(self, now: float) -> tuple[float, _T] | None:
        """Remove and return `(deadline, item)` of the earliest live entry due at `now`, else None."""
        when = self.peek()
        if when is None or when > now:
            return None
        _, _, item = heapq.heappop(self._heap)
        item.timer_seq = 0
        self._live -= 1
        return when, item

    def items(self) -> Iterator[_T]:
        """The scheduled items, in no particular order."""
        return (item for _, seq, item in self._heap if item.timer_seq == seq)

    def _maybe_compact(self) -> None:
        if len(self._heap) > 2 * self._live + 1024:
            self._heap = [entry for entry in self._heap if entry[2].timer_seq == entry[1]]
            heapq.heapify(self._heap)


class _QueueLog:
    """One queue's append-only log: `items[i]` has offset `base + i`."""

    __slots__ = ("base", "bytes", "items")

    def __init__(self) -> None:
        self.items: list[StoredMessage] = []
        self.base = 0
        self.bytes = 0

    @property
    def end(self) -> int:
        """The offset the next message will get."""
        return self.base + len(self.items)

    def trim(self, max_messages: int, max_bytes: int) -> None:
        """Drop the oldest messages in a chunk once over a limit (down to 15/16 of both limits).

        Chunked like upstream's file-granular commit-log deletion, so trimming is O(1) amortised.
        """
        if len(self.items) <= max_messages and self.bytes <= max_bytes:
            return
        keep_messages = max_messages - max_messages // 16
        keep_bytes = max_bytes - max_bytes // 16
        drop = max(0, len(self.items) - keep_messages)
        remaining = self.bytes - sum(len(m.body) for m in self.items[:drop])
        while drop < len(self.items) and remaining > keep_bytes:
            remaining -= len(self.items[drop].body)
            drop += 1
        del self.items[:drop]
        self.base += drop
        self.bytes = remaining


class _TopicState:
    """This broker's queues of one topic."""

    __slots__ = ("logs", "name", "rr")

    def __init__(self, name: str, queues: int) -> None:
        self.name = name
        self.logs = [_QueueLog() for _ in range(queues)]
        self.rr = 0


class _SubQueue:
    """One group's progress on one queue."""

    __slots__ = ("cursor", "groups", "pending", "ready", "retry")

    def __init__(self, cursor: int) -> None:
        self.cursor = cursor  # next offset never read by this group
        self.retry: deque[_Rec] = deque()  # non-FIFO: visible again, in order of expiry
        # FIFO: unacknowledged records per message group, in offset order (heads are never DONE)
        self.groups: dict[str | int, deque[_Rec]] = {}
        self.ready: list[tuple[int, str | int]] = []  # FIFO: (head offset, key) of deliverable groups
        self.pending = 0  # FIFO: records held in `groups`


class _Sub:
    """A consumer group's consumption of one topic on this broker (its own progress)."""

    __slots__ = ("attempts", "fifo", "group", "mix", "n_inflight", "queues", "records", "rr", "topic")

    def __init__(self, group: str, topic: str, fifo: bool) -> None:
        self.group = group
        self.topic = topic
        self.fifo = fifo
        self.queues: list[_SubQueue] = []
        self.records: dict[tuple[int, int], _Rec] = {}
        self.n_inflight = 0
        self.attempts: OrderedDict[str, list[tuple[_Rec, int, Delivery]]] = OrderedDict()
        self.rr = 0  # queue rotation for queue_id -1
        self.mix = 0  # retry/new interleaving counter


class _Rec(_Timed):
    """One message as seen by one group: delivery count, current handle nonce, visibility."""

    __slots__ = (
        "attempt",
        "attempt_id",
        "auto_renew",
        "batch",
        "client_id",
        "first_pop",
        "handle",
        "key",
        "msg",
        "nonce",
        "popped_in",
        "queue_id",
        "renews",
        "state",
        "sub",
        "until",
    )

    def __init__(self, sub: _Sub, msg: StoredMessage, key: str | int | None) -> None:
        super().__init__()
        self.sub = sub
        self.msg = msg
        self.queue_id = msg.queue_id
        self.key = key  # FIFO message-group key, None for non-FIFO groups
        self.state = _READY
        self.attempt = 0
        self.nonce = 0
        self.until = 0.0
        self.auto_renew = False
        self.client_id = ""
        self.first_pop = 0.0
        self.renews = 0
        self.attempt_id: str | None = None
        self.handle = ""  # the live receipt handle, exactly as issued
        self.popped_in = 0  # serial of the pop that last delivered it
        self.batch: list[tuple[_Rec, int, Delivery]] | None = None


_DeliverFn = Callable[[_Rec], None]


class _Held(_Timed):
    """A delayed message waiting for its delivery time (upstream: the timer/schedule topic)."""

    __slots__ = ("key", "msg", "topic")

    def __init__(self, key: str, msg: StoredMessage, topic: _TopicState) -> None:
        super().__init__()
        self.key = key
        self.msg = msg
        self.topic = topic


class _Txn(_Timed):
    """A prepared (half) transactional message waiting for EndTransaction."""

    __slots__ = ("checks", "msg", "topic")

    def __init__(self, msg: StoredMessage, topic: _TopicState) -> None:
        super().__init__()
        self.msg = msg
        self.topic = topic
        self.checks = 0


class BrokerState:
    """Everything one broker holds; the arguments are `Broker`'s (broker.py)."""

    __slots__ = (
        "_auto_renew_invisible",
        "_catalog",
        "_clients",
        "_delayed",
        "_fifo_read_ahead",
        "_half_offset",
        "_held",
        "_max_delay",
        "_max_held",
        "_nonce",
        "_pop_serial",
        "_resolved",
        "_retention_bytes",
        "_retention_messages",
        "_secret",
        "_serial",
        "_subs",
        "_timer_offset",
        "_timers",
        "_topics",
        "_txn_check_after",
        "_txn_interval",
        "_txn_max_checks",
        "_txn_timers",
        "_txns",
        "name",
    )

    def __init__(
        self,
        name: str,
        catalog: Catalog,
        *,
        transaction_check_after: float = 6.0,
        transaction_check_interval: float = 6.0,
        transaction_max_checks: int = 15,
        auto_renew_invisible: float = 60.0,
        max_delay: float = 86400.0,
        receipt_secret: bytes | None = None,
        retention_messages: int = 1_000_000,
        retention_bytes: int = 256 * 1024 * 1024,
        max_held_messages: int = 1_000_000,
        fifo_read_ahead: int = 4096,
    ) -> None:
        if not name or any(c.isspace() for c in name):
            raise ValueError(f"broker name must be non-empty without whitespace: {name!r}")
        if transaction_check_interval <= 0 or auto_renew_invisible <= 0:
            raise ValueError("transaction_check_interval and auto_renew_invisible must be positive")
        if retention_messages < 1 or retention_bytes < 1 or fifo_read_ahead < 1:
            raise ValueError("retention limits and fifo_read_ahead must be positive")
        self.name = name
        self._catalog = catalog
        self._txn_check_after = transaction_check_after
        self._txn_interval = transaction_check_interval
        self._txn_max_checks = transaction_max_checks
        self._auto_renew_invisible = auto_renew_invisible
        self._max_delay = max_delay
        self._secret = receipt_secret
        self._retention_messages = retention_messages
        self._retention_bytes = retention_bytes
        self._max_held = max_held_messages
        self._fifo_read_ahead = fifo_read_ahead
        self._topics: dict[str, _TopicState] = {}
        self._subs: dict[tuple[str, str], _Sub] = {}
        self._timers: _Timers[_Rec] = _Timers()
        self._delayed: _Timers[_Held] = _Timers()
        self._txn_timers: _Timers[_Txn] = _Timers()
        self._held: dict[str, _Held] = {}  # by recall handle
        self._txns: dict[str, _Txn] = {}  # by transaction id
        self._resolved: OrderedDict[str, tuple[str, str, bool]] = OrderedDict()
        self._clients: dict[str, set[_Rec]] = {}  # auto-renewed in-flight records per client
        # Nonces start at a random point so that unsigned handles are not trivially guessable.
        self._nonce = secrets.randbits(40)
        self._serial = 0
        self._pop_serial = 0
        # Next offsets of the two holding queues (see `_next_timer_offset`): upstream's
        # rmq_sys_wheel_timer and RMQ_SYS_TRANS_HALF_TOPIC, one queue (id 0) each per broker.
        self._timer_offset = 0
        self._half_offset = 0

    # ------------------------------------------------------------------ storage

    def _topic_state(self, info: TopicInfo) -> _TopicState:
        ts = self._topics.get(info.name)
        if ts is None:
            ts = self._topics[info.name] = _TopicState(info.name, info.queues)
        elif len(ts.logs) < info.queues:
            ts.logs.extend(_QueueLog() for _ in range(info.queues - len(ts.logs)))
        return ts

    def _append(self, ts: _TopicState, queue_id: int, message: InboundMessage, now: float) -> StoredMessage:
        log = ts.logs[queue_id]
        stored = StoredMessage.of(
            message, queue_id=queue_id, offset=log.end, store_timestamp=now, broker=self.name
        )
        self._push_log(log, stored)
        return stored

    def _append_stored(
        self, ts: _TopicState, queue_id: int, message: StoredMessage, now: float
    ) -> StoredMessage:
        log = ts.logs[queue_id]
        stored = replace(
            message, topic=ts.name, queue_id=queue_id, offset=log.end, store_timestamp=now, broker=self.name
        )
        self._push_log(log, stored)
        return stored

    def _push_log(self, log: _QueueLog, stored: StoredMessage) -> None:
        log.items.append(stored)
        log.bytes += len(stored.body)
        log.trim(self._retention_messages, self._retention_bytes)

    def _sub(self, ginfo: GroupInfo, ts: _TopicState) -> _Sub:
        key = (ginfo.name, ts.name)
        sub = self._subs.get(key)
        if sub is None:
            # The group's FIFO flag is sampled here, when it first consumes the topic.
            sub = self._subs[key] = _Sub(ginfo.name, ts.name, ginfo.fifo)
        if len(sub.queues) < len(ts.logs):
            # A new group starts at the oldest retained message. Upstream pops with initMode=MAX, but
            # PopMessageProcessor.getInitOffset starts at offset 0 while the queue's minimum offset is 0
            # and that message is still in memory (initPopOffsetByCheckMsgInMem, default true), so on a
            # young topic a new group reads the earlier messages there too (tests/conformance
            # test_differential "new-group-reads-earlier-messages"). Only once the queue was trimmed
            # does upstream start at its last message instead; here the group still reads what is left.
            sub.queues.extend(_SubQueue(log.base) for log in ts.logs[len(sub.queues) :])
        return sub

    def _group_info(self, group: str) -> GroupInfo:
        try:
            return self._catalog.group(group)
        except BrokerError:
            return GroupInfo(group)

    def _lag(self, ts: _TopicState, sub: _Sub | None) -> int:
        if sub is None:
            return sum(len(log.items) for log in ts.logs)
        unread = 0
        for qid, log in enumerate(ts.logs):
            cursor = sub.queues[qid].cursor if qid < len(sub.queues) else 0
            unread += log.end - max(cursor, log.base)
        return unread + len(sub.records) - sub.n_inflight

    def _next_nonce(self) -> int:
        self._nonce += 1
        return self._nonce
