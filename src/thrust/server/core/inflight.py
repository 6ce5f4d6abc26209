"""In-flight records and receipt handles: delivery, invisibility, auto-renew, dead letters.

Every delivered-but-unacknowledged message has a `_Rec`; its receipt handle encodes the pop time, the
invisible time, the queue, the offset, a nonce and the broker (docs/protocol.md §7.1). Auto-renewed
records are renewed as the proxy does (docs/protocol.md §7.2), and a record whose attempts are used up is
dead-lettered (docs/protocol.md §7.5).
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import replace

from thrust._codec.status import Code
from thrust.server.core.broker_state import (
    _DONE,
    _INFLIGHT,
    _READY,
    _Rec,
    _Sub,
)
from thrust.server.core.fifo import FifoGroups
from thrust.server.core.model import (
    BrokerError,
    Delivery,
)

#: The proxy's `RenewStrategyPolicy`: successive renew durations by renew count (docs/protocol.md §7.2).
_RENEW_STEPS = (60.0, 180.0, 300.0, 600.0, 1800.0, 3600.0)
#: `renewMaxTimeMillis` = 3 h: after this the proxy stops renewing and nacks with the retry delay
#: (docs/protocol.md §7.2).
_RENEW_MAX = 3 * 3600.0
_HANDLE_VERSION = "1"


def _invalid_handle(reason: str) -> BrokerError:
    return BrokerError(Code.INVALID_RECEIPT_HANDLE, f"invalid receipt handle: {reason}")


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


class InflightRecords(FifoGroups):
    """The in-flight layer of `Broker`: `_advance` (every due timer), delivery, expiry, handles."""

    __slots__ = ()

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

    def _repop(self, sub: _Sub, attempt_id: str) -> list[Delivery]:
        batch = sub.attempts.get(attempt_id)
        if batch is None:
            return []
        if all(rec.state == _INFLIGHT and rec.nonce == nonce for rec, nonce, _ in batch):
            return [delivery for _, _, delivery in batch]
        return []

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
