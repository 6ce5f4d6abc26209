"""In-flight records and receipt handles: delivery, invisibility, auto-renew, dead letters.

Every delivered-but-unacknowledged message has a `Record` (records.py); its receipt handle encodes the
pop time, the invisible time, the queue, the offset, a nonce and the broker (docs/protocol.md §7.1).
Auto-renewed records are renewed as the proxy does (docs/protocol.md §7.2), and a record whose attempts
are used up is dead-lettered (docs/protocol.md §7.5).

`InflightRecords` owns the invisibility timers, the auto-renewed records per client, the handle nonces
and the pop serial; it writes a record's delivery fields and nothing else of the broker. It reads group
retry policies from the catalog and stores dead letters through the `MessageStore`.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import replace

from thrust._codec.status import Code
from thrust.server.core import fifo
from thrust.server.core.catalog import Catalog
from thrust.server.core.model import BrokerError, Delivery, GroupInfo
from thrust.server.core.records import DONE, INFLIGHT, READY, Batch, Record, Subscription
from thrust.server.core.store import MessageStore
from thrust.server.core.timers import Timers

#: The proxy's `RenewStrategyPolicy`: successive renew durations by renew count (docs/protocol.md §7.2).
_RENEW_STEPS = (60.0, 180.0, 300.0, 600.0, 1800.0, 3600.0)
#: `renewMaxTimeMillis` = 3 h: after this the proxy stops renewing and nacks with the retry delay
#: (docs/protocol.md §7.2).
_RENEW_MAX = 3 * 3600.0
_HANDLE_VERSION = "1"
#: Remembered attempt ids per (group, topic) for reentrant pops.
_ATTEMPT_MEMORY = 1024

#: A parsed receipt handle: (queue id, offset, nonce).
HandleRef = tuple[int, int, int]


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


class InflightRecords:
    """Delivered records of one broker: invisibility, expiry, auto-renew, handles, dead letters.

    Args:
        broker: the broker name written into handles.
        catalog: for the groups' retry policies and dead-letter topics.
        store: where dead-lettered messages go.
        receipt_secret: when set, handles carry an HMAC-SHA256 tag and forged ones are rejected.
    """

    __slots__ = ("_broker", "_catalog", "_clients", "_nonce", "_pop_serial", "_secret", "_store", "_timers")

    def __init__(
        self, broker: str, catalog: Catalog, store: MessageStore, receipt_secret: bytes | None
    ) -> None:
        self._broker = broker
        self._catalog = catalog
        self._store = store
        self._secret = receipt_secret
        self._timers: Timers[Record] = Timers()
        self._clients: dict[str, set[Record]] = {}  # auto-renewed in-flight records per client
        # Nonces start at a random point so that unsigned handles are not trivially guessable.
        self._nonce = secrets.randbits(40)
        self._pop_serial = 0

    # ------------------------------------------------------------------ timers

    @property
    def timer_heap(self) -> list[tuple[float, int, Record]]:
        """Its timer heap, for the broker's per-request check (`Timers.heap`: read only)."""
        return self._timers.heap

    def expire_due(self, now: float) -> None:
        """Apply every invisibility deadline due at `now`."""
        while (expired := self._timers.pop_due(now)) is not None:
            when, rec = expired
            self._expire(rec, when)

    def next_time(self) -> float | None:
        """The earliest invisibility deadline or auto-renew point, or None."""
        return self._timers.peek()

    @property
    def timer_entries(self) -> int:
        """Entries of the invisibility heap, live and stale (for tests of its compaction)."""
        return self._timers.entries

    # ------------------------------------------------------------------ delivery

    def begin_pop(self) -> int:
        """A new pop starts: its serial, which `deliver` stamps on each record it delivers."""
        self._pop_serial += 1
        return self._pop_serial

    def deliver(
        self,
        rec: Record,
        now: float,
        invisible: float,
        auto_renew: bool,
        client_id: str,
        attempt_id: str | None,
    ) -> Delivery:
        """Make `rec` in flight for `invisible` seconds (auto-renewed for `client_id` if asked)."""
        sub = rec.sub
        rec.attempt += 1
        rec.state = INFLIGHT
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

    def repop(self, sub: Subscription, attempt_id: str) -> list[Delivery]:
        """The batch an earlier pop with `attempt_id` returned, if it is still entirely in flight."""
        batch = sub.attempts.get(attempt_id)
        if batch is None:
            return []
        if all(rec.state == INFLIGHT and rec.nonce == nonce for rec, nonce, _ in batch):
            return [delivery for _, _, delivery in batch]
        return []

    @staticmethod
    def remember_batch(sub: Subscription, attempt_id: str, batch: Batch) -> None:
        """Remember a pop's batch under its attempt id, so that a repeated pop returns it again."""
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

    # ------------------------------------------------------------------ settling

    def finish(self, rec: Record) -> None:
        """`rec` is done for its group (acked, filtered out or dead-lettered)."""
        sub = rec.sub
        if rec.state == DONE:
            return
        if rec.state == INFLIGHT:
            sub.n_inflight -= 1
        self._timers.cancel(rec)
        self._stop_renewing(rec)
        self._forget_batch(rec)
        rec.state = DONE
        sub.records.pop((rec.queue_id, rec.msg.offset), None)
        if rec.key is not None:
            sub.queues[rec.queue_id].pending -= 1
            fifo.settle(sub, rec)

    def dead_letter(self, rec: Record, now: float) -> None:
        """Finish `rec` and store its message in the group's dead-letter topic."""
        message = rec.msg
        self.finish(rec)
        info = self._catalog.dead_letter_topic(rec.sub.group)
        tq = self._store.queues(info)
        origin = message.dead_letter_of or (message.topic, message.message_id)
        # The message keeps its id and type (upstream derives the type from properties it keeps);
        # DeadLetterQueue{topic, message_id} on delivery names the original (docs/protocol.md §7.5).
        self._store.append_stored(tq, 0, replace(message, dead_letter_of=origin), now)

    def change_invisible(self, rec: Record, now: float, duration: float) -> str:
        """`rec` becomes visible `duration` seconds from `now`; returns its new handle (the old dies)."""
        self._stop_renewing(rec)
        self._forget_batch(rec)
        rec.nonce = self._next_nonce()
        rec.until = now + duration
        self._timers.push(rec, rec.until)
        rec.handle = self._encode_handle(rec, now, duration, auto=False)
        return rec.handle

    def release_client(self, client_id: str, now: float, delay: float) -> None:
        """Stop renewing the client's records; each becomes visible `delay` seconds from `now`."""
        for rec in self._clients.pop(client_id, ()):
            rec.auto_renew = False
            rec.until = now + delay
            self._timers.push(rec, rec.until)

    def _expire(self, rec: Record, when: float) -> None:
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
            self.dead_letter(rec, when)
            return
        rec.state = READY
        sub.n_inflight -= 1
        self._forget_batch(rec)
        if rec.key is None:
            sub.queues[rec.queue_id].retry.append(rec)
        else:
            fifo.settle(sub, rec)

    def _group_info(self, group: str) -> GroupInfo:
        try:
            return self._catalog.group(group)
        except BrokerError:
            return GroupInfo(group)

    def _stop_renewing(self, rec: Record) -> None:
        if rec.auto_renew:
            rec.auto_renew = False
            clients = self._clients.get(rec.client_id)
            if clients is not None:
                clients.discard(rec)
                if not clients:
                    del self._clients[rec.client_id]

    @staticmethod
    def _forget_batch(rec: Record) -> None:
        """`rec` changed, so its pop can no longer be repeated by attempt id."""
        batch = rec.batch
        if batch is not None:
            rec.batch = None
            attempt_id = rec.attempt_id
            if attempt_id is not None and rec.sub.attempts.get(attempt_id) is batch:
                del rec.sub.attempts[attempt_id]

    def _next_nonce(self) -> int:
        self._nonce += 1
        return self._nonce

    # ------------------------------------------------------------------ receipt handles

    def _encode_handle(self, rec: Record, pop_time: float, invisible: float, *, auto: bool) -> str:
        # Like upstream's "startOffset popTime invisibleTime ... brokerName queueId queueOffset"
        # (docs/protocol.md §7.1), plus a nonce that changes on every delivery and ChangeInvisibleDuration.
        payload = (
            f"{_HANDLE_VERSION} {int(pop_time * 1000):x} {int(invisible * 1000):x} {rec.queue_id:x} "
            f"{rec.msg.offset:x} {rec.nonce:x} {1 if auto else 0} {self._broker}"
        )
        if self._secret is None:
            return payload
        return f"{payload} {self._sign(payload)}"

    def _sign(self, payload: str) -> str:
        assert self._secret is not None
        return hmac.new(self._secret, payload.encode(), hashlib.sha256).hexdigest()[:32]

    def parse_handle(self, handle: str, now: float) -> HandleRef:
        """The (queue id, offset, nonce) of a handle this broker could have issued and that has not
        expired by its own times, or BrokerError(INVALID_RECEIPT_HANDLE)."""
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
        if parts[7] != self._broker:
            raise _invalid_handle(f"it belongs to broker {parts[7]!r}, not {self._broker!r}")
        # An auto-renew handle stays valid while the broker renews it (docs/protocol.md §7.2); any other
        # handle expires at popTime + invisibleTime (1 ms slack for the millisecond rounding; the record
        # decides).
        if parts[6] == "0" and (pop_ms + invisible_ms) / 1000 + 0.001 <= now:
            raise _invalid_handle("receipt handle is expired")
        return queue_id, offset, nonce

    @staticmethod
    def lookup(sub: Subscription | None, ref: HandleRef, handle: str, message_id: str) -> Record:
        """The in-flight record a parsed handle designates, or BrokerError(INVALID_RECEIPT_HANDLE)."""
        queue_id, offset, nonce = ref
        rec = None if sub is None else sub.records.get((queue_id, offset))
        if rec is None or rec.state != INFLIGHT:
            raise _invalid_handle("receipt handle is expired or the message was already acknowledged")
        if rec.nonce != nonce:
            raise _invalid_handle("receipt handle was superseded by a newer one")
        if rec.handle != handle:
            # Same nonce but other fields altered: not a handle this broker issued.
            raise _invalid_handle("receipt handle does not match the one issued")
        if message_id and rec.msg.message_id != message_id:
            raise _invalid_handle(f"it does not belong to message {message_id!r}")
        return rec
