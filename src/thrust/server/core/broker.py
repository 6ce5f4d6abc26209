"""One broker's message state: queues, pop/ack with invisibility, FIFO, delay, transactions, DLQ.

Pure and synchronous: no grpc, no asyncio, no threads, no clock. Every mutating call takes `now`
(epoch seconds); the service layer owns the clock and calls `tick(now)` / re-pops at `next_event_time()`.

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

Every public call first advances the timers to `now` (amortised O(number of due events)), so pop is
O(batch) amortised plus messages skipped by the filter; nothing scans the backlog.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import secrets
import zlib
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Generic, TypeVar

from thrust._codec.status import Code
from thrust.server.core.catalog import Catalog
from thrust.server.core.model import (
    BrokerError,
    Delivery,
    GroupInfo,
    InboundMessage,
    MessageMatcher,
    MessageType,
    SendResult,
    StoredMessage,
    TopicInfo,
    TransactionCheck,
)

__all__ = ["MAX_BATCH_SIZE", "MAX_INVISIBLE_DURATION", "RELEASE_DELAY", "Broker", "broker_of_handle"]

#: The broker rejects pops of more than 32 messages; the proxy caps `maxMsgNums` (docs/protocol.md §6.3).
MAX_BATCH_SIZE = 32
#: `maxInvisibleTimeMills` = 12 h (docs/protocol.md §6.3, §7.4).
MAX_INVISIBLE_DURATION = 12 * 3600.0
#: Unregistering a client nacks its auto-renewed messages with 1 s (docs/protocol.md §4.7).
RELEASE_DELAY = 1.0
#: The proxy's `RenewStrategyPolicy`: successive renew durations by renew count (docs/protocol.md §7.2).
_RENEW_STEPS = (60.0, 180.0, 300.0, 600.0, 1800.0, 3600.0)
#: `renewMaxTimeMillis` = 3 h: after this the proxy stops renewing and nacks with the retry delay
#: (docs/protocol.md §7.2).
_RENEW_MAX = 3 * 3600.0
#: Remembered transaction resolutions, so that a repeated EndTransaction with the same outcome is OK.
_RESOLVED_MEMORY = 65536
#: Remembered attempt ids per (group, topic) for reentrant pops.
_ATTEMPT_MEMORY = 1024
_HANDLE_VERSION = "1"

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


def _invalid_handle(reason: str) -> BrokerError:
    return BrokerError(Code.INVALID_RECEIPT_HANDLE, f"invalid receipt handle: {reason}")


def _not_hosted(topic: str, broker: str) -> BrokerError:
    # A broker the topic was not created on has no TopicConfig for it: upstream answers TOPIC_NOT_EXIST,
    # which the proxy maps to TOPIC_NOT_FOUND.
    return BrokerError(Code.TOPIC_NOT_FOUND, f"topic {topic!r} does not exist on broker {broker!r}")


def broker_of_handle(handle: str) -> str | None:
    """The broker name inside a receipt or recall handle made by any `Broker`, or None if malformed.

    Lets the service route Ack / ChangeInvisibleDuration / RecallMessage to the right broker.
    """
    parts = handle.split(" ")
    if len(parts) in (8, 9) and parts[0] == _HANDLE_VERSION:
        return parts[7]
    if len(parts) == 4 and parts[0] == "r":
        return parts[1]
    return None


class Broker:
    """The state of one broker: every topic's queues and every group's consumption of them.

    Args:
        name: the broker name (route `Broker.name`, `store_host`); no whitespace.
        catalog: the server's topics and groups.
        transaction_check_after: seconds after storing a transactional message before the first check,
            unless the message carries `transaction_recovery_after` (upstream `transactionTimeOut`).
        transaction_check_interval: seconds between repeated checks (`transactionCheckInterval`).
        transaction_max_checks: checks before giving up; the message is then rolled back
            (`transactionCheckMax`).
        auto_renew_invisible: invisible time of auto-renew pops (`defaultInvisibleTimeMills`, 60 s).
        max_delay: the furthest allowed delivery time ahead of `now` (1 day, docs/protocol.md §5.7).
        receipt_secret: when set, receipt handles carry an HMAC-SHA256 tag and forged ones are rejected.
        retention_messages / retention_bytes: per-queue limits after which the oldest stored messages
            are dropped (messages already delivered to a group stay valid for it).
        max_held_messages: limit on delayed plus prepared transactional messages (TOO_MANY_REQUESTS).
        fifo_read_ahead: per FIFO group and queue, how many unacknowledged messages may be read ahead
            past blocked message groups to find deliverable ones.

    Raises:
        ValueError: invalid configuration.
    """

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

    # ------------------------------------------------------------------ producing

    def send(self, messages: Sequence[InboundMessage], now: float) -> list[SendResult]:
        """Store one SendMessage request's messages (all or none); one result per message, in order.

        The broker picks the queue (docs/protocol.md §5.5): a message group shared by every message of the
        request is hashed (crc32) over the topic's queues, a request of one PRIORITY message goes to queue
        min(priority, queues - 1), otherwise the whole request goes to the next queue round-robin.
        Messages with a future `delivery_timestamp` are held until then and get a recall handle;
        TRANSACTION messages get a transaction id and are held until committed. A held message's
        `SendResult.offset` is its offset in the broker's timer or half queue, as upstream reports it,
        not in its topic's queue (see `_next_timer_offset`).

        Raises:
            BrokerError(MESSAGE_CORRUPTED): no messages, or different topics.
            BrokerError(TOPIC_NOT_FOUND): unknown topic (without auto-create), or not hosted here.
            BrokerError(MESSAGE_PROPERTY_CONFLICT_WITH_TYPE): the topic does not accept a message's type.
            BrokerError(ILLEGAL_DELIVERY_TIME): a delivery time more than `max_delay` ahead.
            BrokerError(TOO_MANY_REQUESTS): too many delayed/prepared messages held.
        """
        self._advance(now)
        if not messages:
            raise BrokerError(Code.MESSAGE_CORRUPTED, "no message to send")
        topic = messages[0].topic
        for message in messages:
            if message.topic != topic:
                raise BrokerError(Code.MESSAGE_CORRUPTED, "all messages of one request must share a topic")
        info = self._catalog.topic(topic)
        if not info.hosted_on(self.name):
            raise _not_hosted(topic, self.name)
        held = 0
        for message in messages:
            if message.message_type not in info.types:
                raise BrokerError(
                    Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                    f"topic {topic!r} does not accept {_type_name(message.message_type)} messages",
                )
            due = message.delivery_timestamp
            if due is not None and due - now > self._max_delay:
                raise BrokerError(
                    Code.ILLEGAL_DELIVERY_TIME,
                    f"delivery time is more than {self._max_delay:g} s ahead",
                )
            if message.message_type == MessageType.TRANSACTION or (due is not None and due > now):
                held += 1
        if held and len(self._held) + len(self._txns) + held > self._max_held:
            raise BrokerError(Code.TOO_MANY_REQUESTS, "too many delayed or prepared messages held")
        ts = self._topic_state(info)
        queue_id = self._select_queue(ts, info, messages)
        results: list[SendResult] = []
        for message in messages:
            due = message.delivery_timestamp
            if message.message_type == MessageType.TRANSACTION:
                txn_id = self._new_transaction_id()
                stored = StoredMessage.of(
                    message,
                    queue_id=queue_id,
                    offset=self._next_half_offset(),
                    store_timestamp=now,
                    broker=self.name,
                    transaction_id=txn_id,
                )
                txn = _Txn(stored, ts)
                self._txns[txn_id] = txn
                after = message.transaction_recovery_after
                self._txn_timers.push(txn, now + (self._txn_check_after if after is None else after))
                results.append(SendResult(message.message_id, queue_id, stored.offset, txn_id, ""))
            elif due is not None:
                recall = self._new_recall_handle()
                if due > now:
                    stored = StoredMessage.of(
                        message,
                        queue_id=queue_id,
                        offset=self._next_timer_offset(),
                        store_timestamp=now,
                        broker=self.name,
                    )
                    self._hold(recall, stored, ts)
                else:
                    # Already due: stored at once; the handle resolves to nothing (recall → NOT_FOUND).
                    stored = self._append(ts, queue_id, message, now)
                results.append(SendResult(message.message_id, queue_id, stored.offset, "", recall))
            else:
                stored = self._append(ts, queue_id, message, now)
                results.append(SendResult(message.message_id, queue_id, stored.offset, "", ""))
        return results

    def recall(self, *, topic: str, recall_handle: str, now: float) -> str:
        """Cancel a delayed message before its delivery time; returns its message id (RecallMessage).

        Raises:
            BrokerError(BAD_REQUEST): a malformed handle, one from another broker, or another topic's.
            BrokerError(NOT_FOUND): unknown, already recalled, or already delivered. The reference lists
                no dedicated code; NOT_FOUND (40400) is the generic "no such thing" one.
        """
        self._advance(now)
        parts = recall_handle.split(" ")
        if len(parts) != 4 or parts[0] != "r":
            raise BrokerError(Code.BAD_REQUEST, "malformed recall handle")
        if parts[1] != self.name:
            raise BrokerError(Code.BAD_REQUEST, f"recall handle belongs to broker {parts[1]!r}")
        held = self._held.get(recall_handle)
        if held is None:
            raise BrokerError(
                Code.NOT_FOUND, "no delayed message for this recall handle (delivered or recalled)"
            )
        if held.msg.topic != topic:
            raise BrokerError(
                Code.BAD_REQUEST, f"recall handle is for topic {held.msg.topic!r}, not {topic!r}"
            )
        del self._held[recall_handle]
        self._delayed.cancel(held)
        # Upstream recalls by putting a delete marker (PROPERTY_TIMER_DEL_UNIQKEY) through the timer queue
        # (RecallMessageProcessor), which takes the next offset there.
        self._next_timer_offset()
        return held.msg.message_id

    def end_transaction(
        self, *, topic: str, message_id: str, transaction_id: str, commit: bool | None, now: float
    ) -> None:
        """Commit (the message becomes deliverable) or roll back (discarded) a prepared message.

        Repeating the outcome a transaction already got is accepted (a retried EndTransaction).
        `commit=None` (the resolution left unspecified) resolves nothing: the message stays prepared and
        its checks go on, as upstream, which passes TransactionStatus.UNKNOWN to the broker
        (EndTransactionActivity) and answers OK.

        Raises:
            BrokerError(INVALID_TRANSACTION_ID): unknown id, an id of another topic or message, or a
                resolution contradicting the one already applied (including a give-up rollback).
        """
        self._advance(now)
        txn = self._txns.get(transaction_id)
        if txn is None:
            done = self._resolved.get(transaction_id)
            if done is not None and (done == (topic, message_id, commit) or commit is None):
                return
            reason = "unknown transaction id" if done is None else "transaction already resolved otherwise"
            raise BrokerError(Code.INVALID_TRANSACTION_ID, f"{reason}: {transaction_id!r}")
        if txn.msg.topic != topic or txn.msg.message_id != message_id:
            raise BrokerError(
                Code.INVALID_TRANSACTION_ID,
                f"transaction {transaction_id!r} is not for message {message_id!r} of topic {topic!r}",
            )
        if commit is not None:
            self._resolve_transaction(txn, commit, now)

    # ------------------------------------------------------------------ consuming

    def pop(
        self,
        *,
        client_id: str,
        group: str,
        topic: str,
        queue_id: int,
        message_filter: MessageMatcher,
        batch_size: int,
        invisible_duration: float,
        auto_renew: bool,
        attempt_id: str | None,
        now: float,
    ) -> list[Delivery]:
        """Pop up to `min(batch_size, 32)` visible messages for `group` (docs/protocol.md §6.3); may be
        empty.

        `queue_id` -1 pops across all of this broker's queues (pop mode, docs/protocol.md §3.3),
        otherwise from that queue only. With `auto_renew` the messages stay invisible
        `auto_renew_invisible` seconds and are renewed by the broker until acked or
        `release_client(client_id)`; otherwise for `invisible_duration` (the service enforces
        10 s..12 h; here any value in (0, 12 h]).
        Messages the filter rejects are skipped for this group for good (upstream acks them).
        Redelivered messages are mixed with new ones: every fifth message taken prefers the retry queue.
        On a PRIORITY topic a non-FIFO pop of queue -1 takes new messages from the highest queue down,
        then redeliveries (`_take_by_priority`).
        For FIFO groups, a message group is blocked while an earlier message of it is in flight. A pop
        repeating the `attempt_id` of a batch that is still entirely in flight returns that batch again.

        Raises:
            BrokerError(TOPIC_NOT_FOUND / CONSUMER_GROUP_NOT_FOUND): unknown topic or group.
            BrokerError(BAD_REQUEST): batch_size < 1 or a queue id the topic does not have.
            BrokerError(ILLEGAL_INVISIBLE_TIME): invisible_duration outside (0, 12 h] without auto_renew.
        """
        self._advance(now)
        info = self._catalog.topic(topic)
        if not info.hosted_on(self.name):
            raise _not_hosted(topic, self.name)
        ginfo = self._catalog.group(group)
        if batch_size < 1:
            raise BrokerError(Code.BAD_REQUEST, f"batch size must be at least 1, got {batch_size}")
        if auto_renew:
            invisible = self._auto_renew_invisible
        else:
            if not 0 < invisible_duration <= MAX_INVISIBLE_DURATION:
                raise BrokerError(
                    Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {invisible_duration:g} s out of range"
                )
            invisible = invisible_duration
        ts = self._topic_state(info)
        nqueues = len(ts.logs)
        if queue_id != -1 and not 0 <= queue_id < nqueues:
            raise BrokerError(Code.BAD_REQUEST, f"topic {topic!r} has no queue {queue_id}")
        sub = self._sub(ginfo, ts)
        if attempt_id:
            again = self._repop(sub, attempt_id)
            if again:
                return again
        need = min(batch_size, MAX_BATCH_SIZE)
        self._pop_serial += 1
        batch: list[tuple[_Rec, int, Delivery]] = []

        def deliver(rec: _Rec) -> None:
            delivery = self._deliver(rec, now, invisible, auto_renew, client_id, attempt_id)
            batch.append((rec, rec.nonce, delivery))

        if queue_id == -1 and info.priority and not sub.fifo:
            self._take_by_priority(sub, ts.logs, message_filter, need, deliver)
            order: Sequence[int] = ()
        elif queue_id == -1:
            start = sub.rr % nqueues
            sub.rr += 1
            order = [(start + i) % nqueues for i in range(nqueues)]
        else:
            order = (queue_id,)
        for qid in order:
            remaining = need - len(batch)
            if remaining <= 0:
                break
            if sub.fifo:
                self._take_fifo(sub, qid, ts.logs[qid], message_filter, remaining, deliver)
            else:
                self._take_normal(sub, qid, ts.logs[qid], message_filter, remaining, deliver)
        if attempt_id and batch:
            stale = sub.attempts.pop(attempt_id, None)
            if stale is not None:
                for rec, _, _ in stale:
                    if rec.batch is stale:
                        rec.batch = None
            sub.attempts[attempt_id] = batch
            for rec, _, _ in batch:
                rec.batch = batch
            while len(sub.attempts) > _ATTEMPT_MEMORY:
                _, old = sub.attempts.popitem(last=False)
                for rec, _, _ in old:
                    if rec.batch is old:
                        rec.batch = None
        return [delivery for _, _, delivery in batch]

    def ack(
        self, *, client_id: str, group: str, topic: str, receipt_handle: str, message_id: str, now: float
    ) -> None:
        """Acknowledge a delivered message: it is done for `group` (docs/protocol.md §7.3).

        An auto-renewed message accepts the handle it was delivered with, however old (docs/protocol.md §7.2).
        `client_id` is not checked: any client of the group may ack. A non-empty `message_id` must
        match the handle's message.

        Raises:
            BrokerError(INVALID_RECEIPT_HANDLE): malformed, forged, other broker, expired, superseded by
                ChangeInvisibleDuration or a redelivery, or already acked.
            BrokerError(TOPIC_NOT_FOUND / CONSUMER_GROUP_NOT_FOUND): unknown topic or group.
        """
        rec = self._resolve_handle(group, topic, receipt_handle, message_id, now)
        self._finish(rec)

    def change_invisible_duration(
        self,
        *,
        client_id: str,
        group: str,
        topic: str,
        receipt_handle: str,
        message_id: str,
        duration: float,
        now: float,
    ) -> str:
        """Make a delivered message visible again `duration` seconds from now; returns the new handle.

        The old handle dies; auto-renewal stops (the proxy drops its renew entry, docs/protocol.md §7.2). When
        the message becomes visible it is redelivered with `delivery_attempt + 1` (or dead-lettered once the
        group's max attempts are used up). `duration` 0 makes it visible at once (a nack).

        Raises:
            BrokerError(ILLEGAL_INVISIBLE_TIME): duration outside [0, 12 h].
            BrokerError(INVALID_RECEIPT_HANDLE): as for `ack`.
        """
        if not 0 <= duration <= MAX_INVISIBLE_DURATION:
            raise BrokerError(Code.ILLEGAL_INVISIBLE_TIME, f"invisible duration {duration:g} s out of range")
        rec = self._resolve_handle(group, topic, receipt_handle, message_id, now)
        self._stop_renewing(rec)
        self._forget_batch(rec)
        rec.nonce = self._next_nonce()
        rec.until = now + duration
        self._timers.push(rec, rec.until)
        rec.handle = self._encode_handle(rec, now, duration, auto=False)
        return rec.handle

    def forward_to_dead_letter_queue(
        self, *, client_id: str, group: str, topic: str, receipt_handle: str, message_id: str, now: float
    ) -> None:
        """Move a delivered message to `%DLQ%<group>` and finish it for `group` (docs/protocol.md §7.5).

        Raises:
            BrokerError(INVALID_RECEIPT_HANDLE): as for `ack`.
        """
        rec = self._resolve_handle(group, topic, receipt_handle, message_id, now)
        self._dead_letter(rec, now)

    def release_client(self, client_id: str, now: float) -> None:
        """The client left (NotifyClientTermination or lost stream): stop renewing its messages.

        Each auto-renewed in-flight message of the client becomes visible `RELEASE_DELAY` (1 s) later,
        like the proxy's ChangeInvisible(1 s) on unregistering (docs/protocol.md §4.7). Its handle stays valid
        until then. Messages popped without auto-renew keep their own invisible time.
        """
        self._advance(now)
        for rec in self._clients.pop(client_id, ()):
            rec.auto_renew = False
            rec.until = now + RELEASE_DELAY
            self._timers.push(rec, rec.until)

    # ------------------------------------------------------------------ time

    def tick(self, now: float) -> list[TransactionCheck]:
        """Advance every timer to `now`; returns the transaction checks that are due.

        Delayed messages due are stored, expired invisibility makes messages visible (or dead-letters
        them), auto-renewals happen. Each prepared transactional message is checked first after
        `transaction_recovery_after` (else `transaction_check_after`), then every
        `transaction_check_interval` until resolved; when a check falls due after `transaction_max_checks`
        checks, the broker gives up and rolls the message back.
        """
        self._advance(now)
        checks: list[TransactionCheck] = []
        while (due := self._txn_timers.pop_due(now)) is not None:
            _, txn = due
            if txn.checks >= self._txn_max_checks:
                self._resolve_transaction(txn, False, now)
                continue
            txn.checks += 1
            checks.append(TransactionCheck(txn.msg.producer_client_id, txn.msg, txn.msg.transaction_id))
            self._txn_timers.push(txn, now + self._txn_interval)
        return checks

    def next_event_time(self) -> float | None:
        """The earliest moment something changes without a request, or None when nothing is pending.

        That is the soonest of: a delayed message due, an in-flight message's invisibility ending (or
        its auto-renewal), a transaction check due. It may already be past when `tick`/`pop` has not run
        since. Acks, sends and other requests also change what pop returns; the service handles those.
        """
        best: float | None = None
        for when in (self._timers.peek(), self._delayed.peek(), self._txn_timers.peek()):
            if when is not None and (best is None or when < best):
                best = when
        return best

    # ------------------------------------------------------------------ inspection

    def backlog(self, topic: str, group: str | None = None) -> int:
        """Messages of `topic` on this broker waiting for delivery.

        With `group`: messages that group has not read yet plus those waiting for redelivery (not
        counting in-flight ones). Without: the largest such count over the groups consuming the topic,
        or every stored message when no group has consumed it yet. Unknown topics have no backlog.
        """
        ts = self._topics.get(topic)
        if ts is None:
            return 0
        if group is not None:
            sub = self._subs.get((group, topic))
            return self._lag(ts, sub)
        lags = [self._lag(ts, sub) for (_, name), sub in self._subs.items() if name == topic]
        return max(lags) if lags else self._lag(ts, None)

    def inflight(self, group: str, topic: str) -> int:
        """Messages of `topic` delivered to `group`, not acked, and still invisible.

        Like `backlog`, this reads the state as of the last call that advanced time (any request or
        `tick`); call `tick(now)` first for an exact figure at `now`.
        """
        sub = self._subs.get((group, topic))
        return 0 if sub is None else sub.n_inflight

    def messages(self, topic: str) -> list[StoredMessage]:
        """Committed messages of `topic` on this broker: the stored ones in (queue, offset) order, then
        the delayed ones not yet due (uncommitted transactional messages are not included)."""
        ts = self._topics.get(topic)
        if ts is None:
            return []
        out = [message for log in ts.logs for message in log.items]
        out.extend(held.msg for held in self._delayed.items() if held.msg.topic == topic)
        return out

    # ------------------------------------------------------------------ internals: storage

    def _topic_state(self, info: TopicInfo) -> _TopicState:
        ts = self._topics.get(info.name)
        if ts is None:
            ts = self._topics[info.name] = _TopicState(info.name, info.queues)
        elif len(ts.logs) < info.queues:
            ts.logs.extend(_QueueLog() for _ in range(info.queues - len(ts.logs)))
        return ts

    def _select_queue(self, ts: _TopicState, info: TopicInfo, messages: Sequence[InboundMessage]) -> int:
        if len(messages) == 1:
            priority = messages[0].priority
            if priority is not None and messages[0].message_type == MessageType.PRIORITY:
                # Upstream's broker stores a PRIORITY message in queue min(priority, queues - 1) of the
                # broker the proxy chose (`SendMessageProcessor.sendMessage`), and pops of a PRIORITY
                # topic read the highest queue first. Only single sends: `sendBatchMessage` keeps the
                # queue the proxy picked for the whole batch, so a batch's priorities order nothing.
                return min(priority, info.queues - 1)
        groups = {message.message_group for message in messages}
        if len(groups) == 1:
            (group,) = groups
            if group:
                # Stable across processes (unlike hash()): the same group always lands on the same queue.
                return zlib.crc32(group.encode("utf-8", "surrogatepass")) % info.queues
        queue_id = ts.rr % info.queues
        ts.rr += 1
        return queue_id

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

    def _hold(self, key: str, stored: StoredMessage, ts: _TopicState) -> None:
        held = _Held(key, stored, ts)
        self._held[key] = held
        self._delayed.push(held, stored.delivery_timestamp or 0.0)

    def _next_timer_offset(self) -> int:
        # Upstream stores a message whose delivery time is in the future in the timer topic
        # rmq_sys_wheel_timer, queue 0, not in its own topic (HookUtils.transformTimerMessage), and
        # SendMessageProcessor answers that put's consume-queue offset (getLogicsOffset), which the proxy
        # passes on as SendResultEntry.offset (SendMessageActivity). So the offset a producer sees for a
        # delayed message counts every message that went through this broker's timer queue, whatever its
        # topic; the message gets an offset in its own queue only when it lands. Whatever upstream puts
        # into that queue takes an offset here too: delayed sends, delayed commits, recall markers.
        offset = self._timer_offset
        self._timer_offset += 1
        return offset

    def _next_half_offset(self) -> int:
        # Likewise a prepared transactional message goes to RMQ_SYS_TRANS_HALF_TOPIC, queue 0
        # (TransactionalMessageBridge.parseHalfMessageInner): its offset is the half queue's. (Upstream
        # also re-puts a half message there at each check; the checks here do not count.)
        offset = self._half_offset
        self._half_offset += 1
        return offset

    def _new_transaction_id(self) -> str:
        self._serial += 1
        return f"{self.name}-{self._serial:x}-{secrets.token_hex(4)}"

    def _new_recall_handle(self) -> str:
        self._serial += 1
        return f"r {self.name} {self._serial:x} {secrets.token_hex(8)}"

    def _resolve_transaction(self, txn: _Txn, commit: bool, now: float) -> None:
        stored = txn.msg
        del self._txns[stored.transaction_id]
        self._txn_timers.cancel(txn)
        self._resolved[stored.transaction_id] = (stored.topic, stored.message_id, commit)
        while len(self._resolved) > _RESOLVED_MEMORY:
            self._resolved.popitem(last=False)
        if not commit:
            return
        due = stored.delivery_timestamp
        if due is not None and due > now:
            self._serial += 1
            # The committed message goes through the timer queue upstream (EndTransactionProcessor puts
            # it; HookUtils moves it to rmq_sys_wheel_timer), taking an offset there.
            self._next_timer_offset()
            self._hold(f"txn {self._serial}", stored, txn.topic)
        else:
            self._append_stored(txn.topic, stored.queue_id, stored, now)

    def _advance(self, now: float) -> None:
        """Apply every timer due at `now`: delayed messages land, invisibility expires or renews."""
        # Fast path (every request comes through here): nothing can be due when both heap tops,
        # stale or not, lie in the future.
        delayed = self._delayed._heap
        timers = self._timers._heap
        if (not delayed or delayed[0][0] > now) and (not timers or timers[0][0] > now):
            return
        while (due := self._delayed.pop_due(now)) is not None:
            when, held = due
            self._held.pop(held.key, None)
            queue_id = min(held.msg.queue_id, len(held.topic.logs) - 1)
            self._append_stored(held.topic, queue_id, held.msg, when)
        while (expired := self._timers.pop_due(now)) is not None:
            when, rec = expired
            self._expire(rec, when)

    # ------------------------------------------------------------------ internals: consumption

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

    def _repop(self, sub: _Sub, attempt_id: str) -> list[Delivery]:
        batch = sub.attempts.get(attempt_id)
        if batch is None:
            return []
        if all(rec.state == _INFLIGHT and rec.nonce == nonce for rec, nonce, _ in batch):
            return [delivery for _, _, delivery in batch]
        return []

    def _deliver(
        self,
        rec: _Rec,
        now: float,
        invisible: float,
        auto_renew: bool,
        client_id: str,
        attempt_id: str | None,
    ) -> Delivery:
        sub = rec.sub
        rec.attempt += 1
        rec.state = _INFLIGHT
        sub.n_inflight += 1
        rec.nonce = self._next_nonce()
        rec.until = now + invisible
        rec.client_id = client_id
        rec.attempt_id = attempt_id
        rec.popped_in = self._pop_serial
        if auto_renew:
            rec.auto_renew = True
            rec.first_pop = now
            rec.renews = 0
            clients = self._clients.get(client_id)
            if clients is None:
                clients = self._clients[client_id] = set()
            clients.add(rec)
        self._timers.push(rec, rec.until)
        rec.handle = self._encode_handle(rec, now, invisible, auto=auto_renew)
        return Delivery(rec.msg, rec.handle, rec.attempt, rec.until, rec.msg.dead_letter_of)

    def _take_normal(
        self,
        sub: _Sub,
        qid: int,
        log: _QueueLog,
        flt: MessageMatcher,
        need: int,
        deliver: _DeliverFn,
    ) -> None:
        sq = sub.queues[qid]
        for _ in range(need):
            # Deterministic stand-in for upstream's 20 % "read the retry topic first" (docs/protocol.md §6.3):
            # every fifth message taken prefers a redelivery, the others prefer new messages.
            if sub.mix % 5 == 0:
                rec = self._next_retry(sq, flt) or self._next_new(sub, sq, qid, log, flt)
            else:
                rec = self._next_new(sub, sq, qid, log, flt) or self._next_retry(sq, flt)
            if rec is None:
                return
            sub.mix += 1
            deliver(rec)

    def _take_by_priority(
        self, sub: _Sub, logs: list[_QueueLog], flt: MessageMatcher, need: int, deliver: _DeliverFn
    ) -> None:
        """Priority mode (upstream `PopMessageProcessor.processRequest` for a PRIORITY topic and a
        non-FIFO pop, with the group's default `priority.factor` 100 and `priorityOrderAsc`): new messages
        from the highest queue, the highest priority, down; then redeliveries, which upstream reads from
        the retry topic only when the queues did not fill the batch (`popFromRetryProbabilityForPriority`
        is 0). So under a steady backlog a redelivery waits behind every new message, as upstream's does."""
        order = range(len(logs) - 1, -1, -1)
        for qid in order:
            sq = sub.queues[qid]
            log = logs[qid]
            while need > 0 and (rec := self._next_new(sub, sq, qid, log, flt)) is not None:
                deliver(rec)
                need -= 1
        for qid in order:
            sq = sub.queues[qid]
            while need > 0 and (rec := self._next_retry(sq, flt)) is not None:
                deliver(rec)
                need -= 1

    def _next_retry(self, sq: _SubQueue, flt: MessageMatcher) -> _Rec | None:
        while sq.retry:
            rec = sq.retry.popleft()
            if rec.state != _READY:
                continue
            if not flt.matches(rec.msg.tag, rec.msg.properties):
                # Subscription changed: upstream acks non-matching messages (docs/protocol.md §6.3).
                self._finish(rec)
                continue
            return rec
        return None

    def _next_new(
        self, sub: _Sub, sq: _SubQueue, qid: int, log: _QueueLog, flt: MessageMatcher
    ) -> _Rec | None:
        cursor = max(sq.cursor, log.base)  # messages trimmed before this group read them are lost to it
        end = log.end
        items = log.items
        base = log.base
        while cursor < end:
            message = items[cursor - base]
            cursor += 1
            if flt.matches(message.tag, message.properties):
                sq.cursor = cursor
                rec = _Rec(sub, message, None)
                sub.records[(qid, message.offset)] = rec
                return rec
        sq.cursor = cursor
        return None

    def _take_fifo(
        self,
        sub: _Sub,
        qid: int,
        log: _QueueLog,
        flt: MessageMatcher,
        need: int,
        deliver: _DeliverFn,
    ) -> None:
        sq = sub.queues[qid]
        serial = self._pop_serial
        taken = 0
        while taken < need:
            key = self._next_ready_group(sub, sq, qid, log, flt)
            if key is None:
                return
            # Deliver the group's visible messages in offset order. Messages delivered earlier in this
            # same pop do not block (a batch carries consecutive messages of a group, like upstream's
            # FIFO pop); any other in-flight message blocks the rest of the group.
            for rec in sq.groups[key]:
                if rec.state == _DONE:
                    continue
                if rec.state == _INFLIGHT:
                    if rec.popped_in == serial:
                        continue
                    break
                deliver(rec)
                taken += 1
                if taken >= need:
                    break

    def _first_deliverable(self, dq: deque[_Rec]) -> int | None:
        """Offset of the message group's next deliverable message, or None when the group is blocked."""
        serial = self._pop_serial
        for rec in dq:
            if rec.state == _READY:
                return rec.msg.offset
            if rec.state == _INFLIGHT and rec.popped_in != serial:
                return None
        return None

    def _next_ready_group(
        self, sub: _Sub, sq: _SubQueue, qid: int, log: _QueueLog, flt: MessageMatcher
    ) -> str | int | None:
        ready = sq.ready
        while True:
            while ready:
                offset, key = heapq.heappop(ready)
                dq = sq.groups.get(key)
                if dq and self._first_deliverable(dq) == offset:
                    return key
            if not self._fifo_read_one(sub, sq, qid, log, flt):
                return None

    def _fifo_read_one(self, sub: _Sub, sq: _SubQueue, qid: int, log: _QueueLog, flt: MessageMatcher) -> bool:
        """Read the next matching message into its message group; False at the end or the read-ahead cap."""
        if sq.pending >= self._fifo_read_ahead:
            return False
        cursor = max(sq.cursor, log.base)
        end = log.end
        while cursor < end:
            message = log.items[cursor - log.base]
            cursor += 1
            if not flt.matches(message.tag, message.properties):
                continue
            sq.cursor = cursor
            # Messages without a message group are not ordered: each gets a key of its own.
            key: str | int = message.message_group if message.message_group else message.offset
            rec = _Rec(sub, message, key)
            sub.records[(qid, message.offset)] = rec
            dq = sq.groups.get(key)
            if dq is None:
                dq = sq.groups[key] = deque()
            dq.append(rec)
            sq.pending += 1
            if len(dq) == 1 or self._first_deliverable(dq) == message.offset:
                heapq.heappush(sq.ready, (message.offset, key))
            return True
        sq.cursor = cursor
        return False

    def _fifo_settle(self, sub: _Sub, rec: _Rec) -> None:
        """After `rec` changed state: drop finished heads; a visible head makes its group deliverable."""
        key = rec.key
        assert key is not None
        sq = sub.queues[rec.queue_id]
        dq = sq.groups.get(key)
        if dq is None:
            return
        while dq and dq[0].state == _DONE:
            dq.popleft()
        if not dq:
            del sq.groups[key]
            return
        head = dq[0]
        if head.state == _READY:
            heapq.heappush(sq.ready, (head.msg.offset, key))

    def _expire(self, rec: _Rec, when: float) -> None:
        """`rec`'s invisibility ended at `when`: renew it, or make it visible, or dead-letter it."""
        sub = rec.sub
        policy = self._group_info(sub.group).retry
        if rec.auto_renew:
            if when - rec.first_pop < _RENEW_MAX:
                # Emulates the proxy's renew (docs/protocol.md §7.2): same handle, a longer invisible time.
                step = _RENEW_STEPS[min(rec.renews, len(_RENEW_STEPS) - 1)]
                rec.renews += 1
                rec.until = when + step
                self._timers.push(rec, rec.until)
                return
            # renewMaxTimeMillis reached: the proxy nacks with the group's retry delay; the handle dies.
            self._stop_renewing(rec)
            self._forget_batch(rec)
            rec.nonce = self._next_nonce()
            rec.handle = ""
            rec.until = when + policy.delay(rec.attempt)
            self._timers.push(rec, rec.until)
            return
        if rec.attempt >= policy.max_attempts:
            # The next delivery would exceed max attempts: dead-letter instead (docs/protocol.md §7.5).
            self._dead_letter(rec, when)
            return
        rec.state = _READY
        sub.n_inflight -= 1
        self._forget_batch(rec)
        if rec.key is None:
            sub.queues[rec.queue_id].retry.append(rec)
        else:
            self._fifo_settle(sub, rec)

    def _finish(self, rec: _Rec) -> None:
        """`rec` is done for its group (acked, filtered out or dead-lettered)."""
        sub = rec.sub
        if rec.state == _DONE:
            return
        if rec.state == _INFLIGHT:
            sub.n_inflight -= 1
        self._timers.cancel(rec)
        self._stop_renewing(rec)
        self._forget_batch(rec)
        rec.state = _DONE
        sub.records.pop((rec.queue_id, rec.msg.offset), None)
        if rec.key is not None:
            sub.queues[rec.queue_id].pending -= 1
            self._fifo_settle(sub, rec)

    def _dead_letter(self, rec: _Rec, now: float) -> None:
        message = rec.msg
        self._finish(rec)
        info = self._catalog.dead_letter_topic(rec.sub.group)
        ts = self._topic_state(info)
        origin = message.dead_letter_of or (message.topic, message.message_id)
        # The message keeps its id and type (upstream derives the type from properties it keeps);
        # DeadLetterQueue{topic, message_id} on delivery names the original (docs/protocol.md §7.5).
        self._append_stored(ts, 0, replace(message, dead_letter_of=origin), now)

    def _stop_renewing(self, rec: _Rec) -> None:
        if rec.auto_renew:
            rec.auto_renew = False
            clients = self._clients.get(rec.client_id)
            if clients is not None:
                clients.discard(rec)
                if not clients:
                    del self._clients[rec.client_id]

    def _forget_batch(self, rec: _Rec) -> None:
        """`rec` changed, so its pop can no longer be repeated by attempt id."""
        batch = rec.batch
        if batch is not None:
            rec.batch = None
            attempt_id = rec.attempt_id
            if attempt_id is not None and rec.sub.attempts.get(attempt_id) is batch:
                del rec.sub.attempts[attempt_id]

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

    # ------------------------------------------------------------------ internals: receipt handles

    def _next_nonce(self) -> int:
        self._nonce += 1
        return self._nonce

    def _encode_handle(self, rec: _Rec, pop_time: float, invisible: float, *, auto: bool) -> str:
        # Like upstream's "startOffset popTime invisibleTime ... brokerName queueId queueOffset"
        # (docs/protocol.md §7.1), plus a nonce that changes on every delivery and ChangeInvisibleDuration.
        payload = (
            f"{_HANDLE_VERSION} {int(pop_time * 1000):x} {int(invisible * 1000):x} {rec.queue_id:x} "
            f"{rec.msg.offset:x} {rec.nonce:x} {1 if auto else 0} {self.name}"
        )
        if self._secret is None:
            return payload
        return f"{payload} {self._sign(payload)}"

    def _sign(self, payload: str) -> str:
        assert self._secret is not None
        return hmac.new(self._secret, payload.encode(), hashlib.sha256).hexdigest()[:32]

    def _resolve_handle(self, group: str, topic: str, handle: str, message_id: str, now: float) -> _Rec:
        """The in-flight record `handle` designates, or BrokerError(INVALID_RECEIPT_HANDLE)."""
        parts = handle.split(" ") if isinstance(handle, str) else []
        if len(parts) != (8 if self._secret is None else 9) or parts[0] != _HANDLE_VERSION:
            raise _invalid_handle("malformed")
        if self._secret is not None:
            payload = handle[: handle.rfind(" ")]
            if not hmac.compare_digest(self._sign(payload), parts[8]):
                raise _invalid_handle("signature mismatch")
        numbers = parts[1:6]
        if any(not 0 < len(p) <= 16 for p in numbers):  # at most 64-bit values (and no float overflow)
            raise _invalid_handle("malformed")
        try:
            pop_ms, invisible_ms, queue_id, offset, nonce = [int(p, 16) for p in numbers]
        except ValueError:
            raise _invalid_handle("malformed") from None
        if min(pop_ms, invisible_ms, queue_id, offset, nonce) < 0 or parts[6] not in ("0", "1"):
            raise _invalid_handle("malformed")
        if parts[7] != self.name:
            raise _invalid_handle(f"it belongs to broker {parts[7]!r}, not {self.name!r}")
        # An auto-renew handle stays valid while the broker renews it (docs/protocol.md §7.2); any other
        # handle expires at popTime + invisibleTime (1 ms slack for the millisecond rounding; the record
        # decides).
        if parts[6] == "0" and (pop_ms + invisible_ms) / 1000 + 0.001 <= now:
            raise _invalid_handle("receipt handle is expired")
        self._catalog.topic(topic)
        self._catalog.group(group)
        self._advance(now)
        sub = self._subs.get((group, topic))
        rec = None if sub is None else sub.records.get((queue_id, offset))
        if rec is None or rec.state != _INFLIGHT:
            raise _invalid_handle("receipt handle is expired or the message was already acknowledged")
        if rec.nonce != nonce:
            raise _invalid_handle("receipt handle was superseded by a newer one")
        if rec.handle != handle:
            # Same nonce but other fields altered: not a handle this broker issued.
            raise _invalid_handle("receipt handle does not match the one issued")
        if message_id and rec.msg.message_id != message_id:
            raise _invalid_handle(f"it does not belong to message {message_id!r}")
        return rec


def _type_name(kind: MessageType | int) -> str:
    try:
        return MessageType(kind).name
    except ValueError:
        return str(kind)
