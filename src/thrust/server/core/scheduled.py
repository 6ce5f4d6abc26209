"""Messages a broker holds before storing them: delayed ones and prepared (half) transactional ones.

A delayed message waits in the broker's timer queue until its delivery time and can be recalled until
then (docs/protocol.md §5.7): `DelayedMessages`. A transactional one waits as a half message until
EndTransaction, and is checked with its producer until it is resolved (docs/protocol.md §5.8):
`Transactions`. Neither stores anything itself: the broker lands what they release in its
`MessageStore`.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from collections.abc import Iterator

from thrust._codec.status import Code
from thrust.server.core.model import BrokerError, InboundMessage, StoredMessage, TransactionCheck
from thrust.server.core.store import TopicQueues
from thrust.server.core.timers import Timed, Timers

#: Remembered transaction resolutions, so that a repeated EndTransaction with the same outcome is OK.
_RESOLVED_MEMORY = 65536


class Held(Timed):
    """A delayed message waiting for its delivery time (upstream: the timer/schedule topic)."""

    __slots__ = ("key", "msg", "topic")

    def __init__(self, key: str, msg: StoredMessage, topic: TopicQueues) -> None:
        super().__init__()
        self.key = key
        self.msg = msg
        self.topic = topic


class DelayedMessages:
    """One broker's delayed messages, by recall handle, with their due times and the timer queue.

    Args:
        broker: the broker name in recall handles and on held messages.
    """

    __slots__ = ("_broker", "_delayed", "_held", "_serial", "_timer_offset")

    def __init__(self, broker: str) -> None:
        self._broker = broker
        self._held: dict[str, Held] = {}  # by recall handle
        self._delayed: Timers[Held] = Timers()
        self._serial = 0
        # Next offset of the holding queue (see `next_offset`): upstream's rmq_sys_wheel_timer, one
        # queue (id 0) per broker.
        self._timer_offset = 0

    def __len__(self) -> int:
        return len(self._held)

    def next_offset(self) -> int:
        """Take the next offset of the broker's timer queue."""
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

    def new_recall_handle(self) -> str:
        self._serial += 1
        return f"r {self._broker} {self._serial:x} {secrets.token_hex(8)}"

    def hold(self, key: str, stored: StoredMessage, tq: TopicQueues) -> None:
        """Hold `stored` (for `tq`) until its delivery time; `key` is its recall handle."""
        held = Held(key, stored, tq)
        self._held[key] = held
        self._delayed.push(held, stored.delivery_timestamp or 0.0)

    def hold_committed(self, stored: StoredMessage, tq: TopicQueues) -> None:
        """Hold a committed transactional message whose delivery time is still ahead (no recall)."""
        self._serial += 1
        # The committed message goes through the timer queue upstream (EndTransactionProcessor puts
        # it; HookUtils moves it to rmq_sys_wheel_timer), taking an offset there.
        self.next_offset()
        self.hold(f"txn {self._serial}", stored, tq)

    def recall(self, topic: str, recall_handle: str) -> str:
        """Cancel a held message; returns its message id (see `Broker.recall` for the errors)."""
        parts = recall_handle.split(" ")
        if len(parts) != 4 or parts[0] != "r":
            raise BrokerError(Code.BAD_REQUEST, "malformed recall handle")
        if parts[1] != self._broker:
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
        self.next_offset()
        return held.msg.message_id

    @property
    def timer_heap(self) -> list[tuple[float, int, Held]]:
        """Its timer heap, for the broker's per-request check (`Timers.heap`: read only)."""
        return self._delayed.heap

    def pop_due(self, now: float) -> tuple[float, Held] | None:
        """Release the earliest held message due at `now`, with its due time; None when none is."""
        due = self._delayed.pop_due(now)
        if due is not None:
            self._held.pop(due[1].key, None)
        return due

    def next_time(self) -> float | None:
        return self._delayed.peek()

    def pending(self, topic: str) -> Iterator[StoredMessage]:
        """The held messages of `topic`, in no particular order."""
        return (held.msg for held in self._delayed.items() if held.msg.topic == topic)


class Txn(Timed):
    """A prepared (half) transactional message waiting for EndTransaction."""

    __slots__ = ("checks", "msg", "topic")

    def __init__(self, msg: StoredMessage, topic: TopicQueues) -> None:
        super().__init__()
        self.msg = msg
        self.topic = topic
        self.checks = 0


class Transactions:
    """One broker's prepared transactional messages, their checks, and recent resolutions.

    Args:
        broker: the broker name in transaction ids and on half messages.
        check_after / check_interval / max_checks: `Broker`'s transaction_check_* arguments.
    """

    __slots__ = (
        "_broker",
        "_check_after",
        "_half_offset",
        "_interval",
        "_max_checks",
        "_resolved",
        "_serial",
        "_timers",
        "_txns",
    )

    def __init__(self, broker: str, *, check_after: float, check_interval: float, max_checks: int) -> None:
        self._broker = broker
        self._check_after = check_after
        self._interval = check_interval
        self._max_checks = max_checks
        self._txns: dict[str, Txn] = {}  # by transaction id
        self._timers: Timers[Txn] = Timers()
        self._resolved: OrderedDict[str, tuple[str, str, bool]] = OrderedDict()
        self._serial = 0
        # Next offset of upstream's RMQ_SYS_TRANS_HALF_TOPIC, queue 0 (see `prepare`).
        self._half_offset = 0

    def __len__(self) -> int:
        return len(self._txns)

    def prepare(self, message: InboundMessage, queue_id: int, tq: TopicQueues, now: float) -> StoredMessage:
        """Hold `message` as a half message for queue `queue_id` of `tq` and schedule its first check."""
        self._serial += 1
        txn_id = f"{self._broker}-{self._serial:x}-{secrets.token_hex(4)}"
        # A prepared transactional message goes to RMQ_SYS_TRANS_HALF_TOPIC, queue 0
        # (TransactionalMessageBridge.parseHalfMessageInner): its offset is the half queue's. (Upstream
        # also re-puts a half message there at each check; the checks here do not count.)
        offset = self._half_offset
        self._half_offset += 1
        stored = StoredMessage.of(
            message,
            queue_id=queue_id,
            offset=offset,
            store_timestamp=now,
            broker=self._broker,
            transaction_id=txn_id,
        )
        txn = Txn(stored, tq)
        self._txns[txn_id] = txn
        after = message.transaction_recovery_after
        self._timers.push(txn, now + (self._check_after if after is None else after))
        return stored

    def end(
        self, topic: str, message_id: str, transaction_id: str, commit: bool | None
    ) -> tuple[StoredMessage, TopicQueues] | None:
        """Resolve a prepared message; returns it with its topic's queues when committed, else None.

        See `Broker.end_transaction` for the rules and errors.
        """
        txn = self._txns.get(transaction_id)
        if txn is None:
            done = self._resolved.get(transaction_id)
            if done is not None and (done == (topic, message_id, commit) or commit is None):
                return None
            reason = "unknown transaction id" if done is None else "transaction already resolved otherwise"
            raise BrokerError(Code.INVALID_TRANSACTION_ID, f"{reason}: {transaction_id!r}")
        if txn.msg.topic != topic or txn.msg.message_id != message_id:
            raise BrokerError(
                Code.INVALID_TRANSACTION_ID,
                f"transaction {transaction_id!r} is not for message {message_id!r} of topic {topic!r}",
            )
        if commit is None:
            return None
        self._resolve(txn, commit)
        return (txn.msg, txn.topic) if commit else None

    def due_checks(self, now: float) -> list[TransactionCheck]:
        """The checks due at `now`; a message checked `max_checks` times is rolled back instead."""
        checks: list[TransactionCheck] = []
        while (due := self._timers.pop_due(now)) is not None:
            _, txn = due
            if txn.checks >= self._max_checks:
                self._resolve(txn, False)
                continue
            txn.checks += 1
            checks.append(TransactionCheck(txn.msg.producer_client_id, txn.msg, txn.msg.transaction_id))
            self._timers.push(txn, now + self._interval)
        return checks

    def next_time(self) -> float | None:
        return self._timers.peek()

    def _resolve(self, txn: Txn, commit: bool) -> None:
        stored = txn.msg
        del self._txns[stored.transaction_id]
        self._timers.cancel(txn)
        self._resolved[stored.transaction_id] = (stored.topic, stored.message_id, commit)
        while len(self._resolved) > _RESOLVED_MEMORY:
            self._resolved.popitem(last=False)
