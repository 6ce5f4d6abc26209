"""Delayed and transactional messages, and the broker's clock (`tick`, `next_event_time`).

A delayed message waits in the broker's timer queue until its delivery time and can be recalled until
then (docs/protocol.md §5.7); a transactional one waits as a half message until EndTransaction, and is
checked with its producer until it is resolved (docs/protocol.md §5.8).
"""

from __future__ import annotations

import secrets

from thrust._codec.status import Code
from thrust.server.core.broker_state import (
    _Held,
    _TopicState,
    _Txn,
)
from thrust.server.core.inflight import InflightRecords
from thrust.server.core.model import (
    BrokerError,
    StoredMessage,
    TransactionCheck,
)

#: Remembered transaction resolutions, so that a repeated EndTransaction with the same outcome is OK.
_RESOLVED_MEMORY = 65536


class ScheduledMessages(InflightRecords):
    """The delay and transaction layer of `Broker`, and its clock."""

    __slots__ = ()

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
