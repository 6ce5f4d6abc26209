"""One broker's message state: queues, pop/ack with invisibility, FIFO, delay, transactions, DLQ.

Pure and synchronous: no grpc, no asyncio, no threads, no clock. Every mutating call takes `now`
(epoch seconds); the service layer owns the clock and calls `tick(now)` / re-pops at `next_event_time()`.

`Broker` is the public API over objects that each own one part of the state, one module each:
`MessageStore` (store.py: every topic's queue logs), `Subscriptions` (records.py: each group's cursors,
retry queues and records), `FifoGroups` (fifo.py: message-group order), `InflightRecords` (inflight.py:
delivered records, invisibility timers, auto-renew, receipt handles, dead letters), `DelayedMessages`
and `Transactions` (scheduled.py: held messages and their timers). The broker passes each what it needs
and moves messages between them: delayed and committed messages into the store, records into flight.
Here: storing a request's messages (`send`), popping (`pop`), settling (`ack`,
`change_invisible_duration`, `forward_to_dead_letter_queue`, `release_client`), the clock (`tick`,
`next_event_time`) and inspection.

Every public call first advances the timers to `now` (amortised O(number of due events)), so pop is
O(batch) amortised plus messages skipped by the filter; nothing scans the backlog.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from thrust._codec.status import Code
from thrust.server.core.catalog import Catalog
from thrust.server.core.fifo import FifoGroups
from thrust.server.core.inflight import InflightRecords, broker_of_handle
from thrust.server.core.lite import LiteRegistry, lmq_name
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
from thrust.server.core.records import READY, Batch, DeliverFn, Record, SubQueue, Subscription, Subscriptions
from thrust.server.core.scheduled import DelayedMessages, Transactions
from thrust.server.core.store import MessageStore, QueueLog, TopicQueues

#: What `Broker.sync_lite_subscription` does (`LiteSubscriptionAction`'s values).
LITE_PARTIAL_ADD = 0
LITE_PARTIAL_REMOVE = 1
LITE_COMPLETE_ADD = 2
LITE_COMPLETE_REMOVE = 3

__all__ = ["MAX_BATCH_SIZE", "MAX_INVISIBLE_DURATION", "RELEASE_DELAY", "Broker", "broker_of_handle"]

#: The broker rejects pops of more than 32 messages; the proxy caps `maxMsgNums` (docs/protocol.md §6.3).
MAX_BATCH_SIZE = 32
#: `maxInvisibleTimeMills` = 12 h (docs/protocol.md §6.3, §7.4).
MAX_INVISIBLE_DURATION = 12 * 3600.0
#: Unregistering a client nacks its auto-renewed messages with 1 s (docs/protocol.md §4.7).
RELEASE_DELAY = 1.0


def _not_hosted(topic: str, broker: str) -> BrokerError:
    # A broker the topic was not created on has no TopicConfig for it: upstream answers TOPIC_NOT_EXIST,
    # which the proxy maps to TOPIC_NOT_FOUND.
    return BrokerError(Code.TOPIC_NOT_FOUND, f"topic {topic!r} does not exist on broker {broker!r}")


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
        lite_ttl: seconds without a new message after which a lite topic expires (0: never; core/lite.py).
        max_lite_topics: lite topics one parent topic may have on this broker.

    Raises:
        ValueError: invalid configuration.
    """

    __slots__ = (
        "_auto_renew_invisible",
        "_catalog",
        "_delayed",
        "_delayed_heap",
        "_fifo",
        "_inflight",
        "_inflight_heap",
        "_lite",
        "_lite_rr",
        "_max_delay",
        "_max_held",
        "_store",
        "_subs",
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
        lite_ttl: float = 0.0,
        max_lite_topics: int = 1_000_000,
    ) -> None:
        if not name or any(c.isspace() for c in name):
            raise ValueError(f"broker name must be non-empty without whitespace: {name!r}")
        if transaction_check_interval <= 0 or auto_renew_invisible <= 0:
            raise ValueError("transaction_check_interval and auto_renew_invisible must be positive")
        if retention_messages < 1 or retention_bytes < 1 or fifo_read_ahead < 1:
            raise ValueError("retention limits and fifo_read_ahead must be positive")
        self.name = name
        self._catalog = catalog
        self._auto_renew_invisible = auto_renew_invisible
        self._max_delay = max_delay
        self._max_held = max_held_messages
        self._store = MessageStore(
            name, retention_messages=retention_messages, retention_bytes=retention_bytes
        )
        self._subs = Subscriptions()
        self._fifo = FifoGroups(fifo_read_ahead)
        self._inflight = InflightRecords(name, catalog, self._store, receipt_secret)
        self._delayed = DelayedMessages(name)
        # The two heaps every request peeks at (`_advance`), kept to skip two method calls per request.
        self._delayed_heap = self._delayed.timer_heap
        self._inflight_heap = self._inflight.timer_heap
        self._lite = LiteRegistry(ttl=lite_ttl, max_lite_topics=max_lite_topics)
        self._lite_rr = 0
        self._txns = Transactions(
            name,
            check_after=transaction_check_after,
            check_interval=transaction_check_interval,
            max_checks=transaction_max_checks,
        )

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
        if held and len(self._delayed) + len(self._txns) + held > self._max_held:
            raise BrokerError(Code.TOO_MANY_REQUESTS, "too many delayed or prepared messages held")
        if messages[0].lite_topic is not None:
            return self._send_lite(info, messages, now)
        store = self._store
        tq = store.queues(info)
        queue_id = self._select_queue(tq, info, messages)
        results: list[SendResult] = []
        for message in messages:
            due = message.delivery_timestamp
            if message.message_type == MessageType.TRANSACTION:
                stored = self._txns.prepare(message, queue_id, tq, now)
                results.append(
                    SendResult(message.message_id, queue_id, stored.offset, stored.transaction_id, "")
                )
            elif due is not None:
                recall = self._delayed.new_recall_handle()
                if due > now:
                    stored = StoredMessage.of(
                        message,
                        queue_id=queue_id,
                        offset=self._delayed.next_offset(),
                        store_timestamp=now,
                        broker=self.name,
                    )
                    self._delayed.hold(recall, stored, tq)
                else:
                    # Already due: stored at once; the handle resolves to nothing (recall → NOT_FOUND).
                    stored = store.append(tq, queue_id, message, now)
                results.append(SendResult(message.message_id, queue_id, stored.offset, "", recall))
            else:
                stored = store.append(tq, queue_id, message, now)
                results.append(SendResult(message.message_id, queue_id, stored.offset, "", ""))
        return results

    def _send_lite(self, info: TopicInfo, messages: Sequence[InboundMessage], now: float) -> list[SendResult]:
        """Store LITE messages, each in its lite topic's own queue (created by its first message)."""
        lite = self._lite
        for message in messages:
            if message.lite_topic is None:
                raise BrokerError(Code.ILLEGAL_LITE_TOPIC, "a request mixes lite and other messages")
            lite.check_create(info.name, message.lite_topic)
        results: list[SendResult] = []
        for message in messages:
            name = message.lite_topic
            assert name is not None
            tq = self._lite_queues(info, name)
            stored = self._store.append(tq, 0, message, now)
            lite.stored(info.name, name, now)
            results.append(SendResult(message.message_id, 0, stored.offset, "", ""))
        return results

    def _lite_queues(self, info: TopicInfo, lite_topic: str) -> TopicQueues:
        return self._store.queues(TopicInfo(lmq_name(info.name, lite_topic), 1, info.types))

    def _select_queue(self, tq: TopicQueues, info: TopicInfo, messages: Sequence[InboundMessage]) -> int:
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
        queue_id = tq.rr % info.queues
        tq.rr += 1
        return queue_id

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
        tq = self._store.queues(info)
        nqueues = len(tq.logs)
        if queue_id != -1 and not 0 <= queue_id < nqueues:
            raise BrokerError(Code.BAD_REQUEST, f"topic {topic!r} has no queue {queue_id}")
        sub = self._subs.open(ginfo, tq)
        inflight = self._inflight
        if attempt_id:
            again = inflight.repop(sub, attempt_id)
            if again:
                return again
        need = min(batch_size, MAX_BATCH_SIZE)
        serial = inflight.begin_pop()
        batch: Batch = []
        deliver_record = inflight.deliver

        def deliver(rec: Record) -> None:
            delivery = deliver_record(rec, now, invisible, auto_renew, client_id, attempt_id)
            batch.append((rec, rec.nonce, delivery))

        lite_topics = self._lite.lite_topics(client_id, group, topic)
        if lite_topics:
            # The client's lite topics first, starting from a rotating one so none starves; each is one
            # ordered group. Upstream's lite pops carry no attempt id, so neither are they reentrant here.
            self._take_lite(info, ginfo, lite_topics, message_filter, need, deliver, serial)
            if len(batch) >= need:
                return [delivery for _, _, delivery in batch]

        if queue_id == -1 and info.priority and not sub.fifo:
            self._take_by_priority(sub, tq.logs, message_filter, need, deliver)
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
                self._fifo.take(sub, qid, tq.logs[qid], message_filter, remaining, deliver, serial)
            else:
                self._take_normal(sub, qid, tq.logs[qid], message_filter, remaining, deliver)
        if attempt_id and batch:
            inflight.remember_batch(sub, attempt_id, batch)
        return [delivery for _, _, delivery in batch]

    def _take_lite(
        self,
        info: TopicInfo,
        ginfo: GroupInfo,
        lite_topics: list[str],
        flt: MessageMatcher,
        need: int,
        deliver: DeliverFn,
        serial: int,
    ) -> None:
        count = len(lite_topics)
        start = self._lite_rr % count
        self._lite_rr += 1
        taken = 0

        def counted(rec: Record) -> None:
            nonlocal taken
            taken += 1
            deliver(rec)

        for i in range(count):
            if taken >= need:
                return
            tq = self._store.get(lmq_name(info.name, lite_topics[(start + i) % count]))
            if tq is None:
                continue  # subscribed before its first message, or expired
            sub = self._subs.open(ginfo, tq, fifo=True)
            self._fifo.take(sub, 0, tq.logs[0], flt, need - taken, counted, serial)

    def _take_normal(
        self,
        sub: Subscription,
        qid: int,
        log: QueueLog,
        flt: MessageMatcher,
        need: int,
        deliver: DeliverFn,
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
        self, sub: Subscription, logs: list[QueueLog], flt: MessageMatcher, need: int, deliver: DeliverFn
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

    def _next_retry(self, sq: SubQueue, flt: MessageMatcher) -> Record | None:
        while sq.retry:
            rec = sq.retry.popleft()
            if rec.state != READY:
                continue
            if not flt.matches(rec.msg.tag, rec.msg.properties):
                # Subscription changed: upstream acks non-matching messages (docs/protocol.md §6.3).
                self._inflight.finish(rec)
                continue
            return rec
        return None

    def _next_new(
        self, sub: Subscription, sq: SubQueue, qid: int, log: QueueLog, flt: MessageMatcher
    ) -> Record | None:
        cursor = max(sq.cursor, log.base)  # messages trimmed before this group read them are lost to it
        end = log.end
        items = log.items
        base = log.base
        while cursor < end:
            message = items[cursor - base]
            cursor += 1
            if flt.matches(message.tag, message.properties):
                sq.cursor = cursor
                rec = Record(sub, message, None)
                sub.records[(qid, message.offset)] = rec
                return rec
        sq.cursor = cursor
        return None

    def ack(
        self,
        *,
        client_id: str,
        group: str,
        topic: str,
        receipt_handle: str,
        message_id: str,
        now: float,
        lite_topic: str | None = None,
    ) -> None:
        """Acknowledge a delivered message: it is done for `group` (docs/protocol.md §7.3).

        An auto-renewed message accepts the handle it was delivered with, however old (docs/protocol.md §7.2).
        `client_id` is not checked: any client of the group may ack. A non-empty `message_id` must
        match the handle's message.

        Raises:
            BrokerError(INVALID_RECEIPT_HANDLE): malformed, forged, other broker, expired, superseded by
                ChangeInvisibleDuration or a redelivery, or already acked; also a lite message's handle
                without its `lite_topic` (the request names it, as upstream's AckMessageEntry does).
            BrokerError(TOPIC_NOT_FOUND / CONSUMER_GROUP_NOT_FOUND): unknown topic or group.
        """
        rec = self._resolve_handle(group, topic, receipt_handle, message_id, now, lite_topic)
        self._inflight.finish(rec)

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
        lite_topic: str | None = None,
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
        rec = self._resolve_handle(group, topic, receipt_handle, message_id, now, lite_topic)
        return self._inflight.change_invisible(rec, now, duration)

    def forward_to_dead_letter_queue(
        self,
        *,
        client_id: str,
        group: str,
        topic: str,
        receipt_handle: str,
        message_id: str,
        now: float,
        lite_topic: str | None = None,
    ) -> None:
        """Move a delivered message to `%DLQ%<group>` and finish it for `group` (docs/protocol.md §7.5).

        Raises:
            BrokerError(INVALID_RECEIPT_HANDLE): as for `ack`.
        """
        rec = self._resolve_handle(group, topic, receipt_handle, message_id, now, lite_topic)
        self._inflight.dead_letter(rec, now)

    def release_client(self, client_id: str, now: float) -> None:
        """The client left (NotifyClientTermination or lost stream): stop renewing its messages.

        Each auto-renewed in-flight message of the client becomes visible `RELEASE_DELAY` (1 s) later,
        like the proxy's ChangeInvisible(1 s) on unregistering (docs/protocol.md §4.7). Its handle stays valid
        until then. Messages popped without auto-renew keep their own invisible time.
        """
        self._advance(now)
        self._inflight.release_client(client_id, now, RELEASE_DELAY)
        self._lite.drop_client(client_id)  # upstream removeCompleteSubscription

    # ------------------------------------------------------------------ delay, transactions, the clock

    def recall(self, *, topic: str, recall_handle: str, now: float) -> str:
        """Cancel a delayed message before its delivery time; returns its message id (RecallMessage).

        Raises:
            BrokerError(BAD_REQUEST): a malformed handle, one from another broker, or another topic's.
            BrokerError(NOT_FOUND): unknown, already recalled, or already delivered. The reference lists
                no dedicated code; NOT_FOUND (40400) is the generic "no such thing" one.
        """
        self._advance(now)
        return self._delayed.recall(topic, recall_handle)

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
        committed = self._txns.end(topic, message_id, transaction_id, commit)
        if committed is None:
            return
        stored, tq = committed
        due = stored.delivery_timestamp
        if due is not None and due > now:
            self._delayed.hold_committed(stored, tq)
        else:
            self._store.append_stored(tq, stored.queue_id, stored, now)

    def tick(self, now: float) -> list[TransactionCheck]:
        """Advance every timer to `now`; returns the transaction checks that are due.

        Delayed messages due are stored, expired invisibility makes messages visible (or dead-letters
        them), auto-renewals happen. Each prepared transactional message is checked first after
        `transaction_recovery_after` (else `transaction_check_after`), then every
        `transaction_check_interval` until resolved; when a check falls due after `transaction_max_checks`
        checks, the broker gives up and rolls the message back.
        """
        self._advance(now)
        self._expire_lite(now)
        return self._txns.due_checks(now)

    def next_event_time(self) -> float | None:
        """The earliest moment something changes without a request, or None when nothing is pending.

        That is the soonest of: a delayed message due, an in-flight message's invisibility ending (or
        its auto-renewal), a transaction check due. It may already be past when `tick`/`pop` has not run
        since. Acks, sends and other requests also change what pop returns; the service handles those.
        """
        best: float | None = None
        for when in (
            self._inflight.next_time(),
            self._delayed.next_time(),
            self._txns.next_time(),
            self._lite.next_time(),
        ):
            if when is not None and (best is None or when < best):
                best = when
        return best

    def _advance(self, now: float) -> None:
        """Apply every timer due at `now`: delayed messages land, invisibility expires or renews."""
        # Fast path (every request comes through here): nothing can be due when both heap tops,
        # stale or not, lie in the future.
        delayed_heap = self._delayed_heap
        inflight_heap = self._inflight_heap
        if (not delayed_heap or delayed_heap[0][0] > now) and (
            not inflight_heap or inflight_heap[0][0] > now
        ):
            return
        delayed = self._delayed
        inflight = self._inflight
        store = self._store
        while (due := delayed.pop_due(now)) is not None:
            when, held = due
            queue_id = min(held.msg.queue_id, len(held.topic.logs) - 1)
            store.append_stored(held.topic, queue_id, held.msg, when)
        inflight.expire_due(now)

    def _resolve_handle(
        self, group: str, topic: str, handle: str, message_id: str, now: float, lite_topic: str | None = None
    ) -> Record:
        """The in-flight record `handle` designates, or BrokerError(INVALID_RECEIPT_HANDLE)."""
        ref = self._inflight.parse_handle(handle, now)
        self._catalog.topic(topic)
        self._catalog.group(group)
        self._advance(now)
        sub = self._subs.get(group, lmq_name(topic, lite_topic)) if lite_topic else None
        if sub is None:
            # Not from a lite topic's queue: a lite message in a dead-letter topic keeps its lite topic, and
            # a consumer settling it names it. The handle's nonce and text still have to match.
            sub = self._subs.get(group, topic)
        return self._inflight.lookup(sub, ref, handle, message_id)

    # ------------------------------------------------------------------ lite topics

    def sync_lite_subscription(
        self,
        *,
        client_id: str,
        group: str,
        topic: str,
        action: int,
        lite_topics: Sequence[str],
        quota: int,
        offset: tuple[str, int] | None = None,
        now: float,
    ) -> list[tuple[str, str]]:
        """SyncLiteSubscription on this broker (core/lite.py for each action); returns the (client id,
        lite topic) pairs taken from other clients of an exclusive group, to be sent a
        NotifyUnsubscribeLiteCommand.

        `offset` (PARTIAL_ADD only) moves the group's position in each added lite topic, as upstream's
        `LiteSubscriptionRegistryImpl.resetOffset`: ("min", _) to the oldest retained message, ("max", _)
        past the newest, ("offset", n) to offset n, ("tail", n) n messages back from the group's current
        position; the group's in-flight messages of that lite topic are forgotten. A timestamp is ignored,
        as upstream does for now.

        Raises:
            BrokerError(TOPIC_NOT_FOUND / CONSUMER_GROUP_NOT_FOUND): unknown topic or group.
            BrokerError(LITE_SUBSCRIPTION_QUOTA_EXCEEDED): the client would hold more than `quota`.
            BrokerError(BAD_REQUEST): an unknown action.
        """
        self._advance(now)
        info = self._catalog.topic(topic)
        ginfo = self._catalog.group(group)
        lite = self._lite
        if action == LITE_PARTIAL_ADD:
            evicted = lite.add(
                client_id, group, topic, lite_topics, quota=quota, exclusive=ginfo.lite_exclusive
            )
            if offset is not None:
                for name in lite_topics:
                    self._reset_lite_offset(info, ginfo, name, offset)
            return evicted
        if action == LITE_PARTIAL_REMOVE:
            lite.remove(client_id, group, topic, lite_topics)
        elif action == LITE_COMPLETE_ADD:
            lite.replace(client_id, group, topic, lite_topics, quota=quota)
        elif action == LITE_COMPLETE_REMOVE:
            lite.drop_client(client_id)
        else:
            raise BrokerError(Code.BAD_REQUEST, f"unknown lite subscription action {action}")
        return []

    def _reset_lite_offset(
        self, info: TopicInfo, ginfo: GroupInfo, lite_topic: str, offset: tuple[str, int]
    ) -> None:
        kind, value = offset
        tq = self._store.get(lmq_name(info.name, lite_topic))
        if tq is None:
            return  # no message yet: the group starts at its first one anyway
        log = tq.logs[0]
        name = tq.name
        old = self._subs.get(ginfo.name, name)
        current = old.queues[0].cursor if old is not None and old.queues else None
        if kind == "min":
            target = log.base
        elif kind == "max":
            target = log.end
        elif kind == "offset":
            target = value
        elif kind == "tail" and current is not None:
            target = max(0, current - value)
        else:
            return
        if current == target:
            return
        self._subs.reset(ginfo.name, name)
        self._subs.open(ginfo, tq, fifo=True).queues[0].cursor = max(log.base, min(target, log.end))

    def lite_topics(self, topic: str) -> list[str]:
        """The live lite topics of `topic` on this broker, sorted (inspection)."""
        return self._lite.of_parent(topic)

    def lite_subscription(self, client_id: str) -> tuple[str, str, list[str]] | None:
        """(group, parent topic, lite topics) the client subscribed on this broker, or None (inspection)."""
        return self._lite.subscription(client_id)

    def lite_messages(self, topic: str, lite_topic: str) -> list[StoredMessage]:
        """The retained messages of one lite topic, in offset order (inspection)."""
        return list(self._store.stored(lmq_name(topic, lite_topic)))

    def _expire_lite(self, now: float) -> None:
        for parent, name in self._lite.expire(now):
            lmq = lmq_name(parent, name)
            self._store.drop(lmq)
            self._subs.drop_topic(lmq)

    # ------------------------------------------------------------------ inspection

    def backlog(self, topic: str, group: str | None = None) -> int:
        """Messages of `topic` on this broker waiting for delivery.

        With `group`: messages that group has not read yet plus those waiting for redelivery (not
        counting in-flight ones). Without: the largest such count over the groups consuming the topic,
        or every stored message when no group has consumed it yet. Unknown topics have no backlog.
        """
        tq = self._store.get(topic)
        if tq is None:
            return 0
        if group is not None:
            sub = self._subs.get(group, topic)
            return sum(len(log.items) for log in tq.logs) if sub is None else sub.lag(tq)
        lags = [sub.lag(tq) for sub in self._subs.of_topic(topic)]
        return max(lags) if lags else sum(len(log.items) for log in tq.logs)

    def inflight(self, group: str, topic: str) -> int:
        """Messages of `topic` delivered to `group`, not acked, and still invisible.

        Like `backlog`, this reads the state as of the last call that advanced time (any request or
        `tick`); call `tick(now)` first for an exact figure at `now`.
        """
        sub = self._subs.get(group, topic)
        return 0 if sub is None else sub.n_inflight

    @property
    def invisibility_timer_entries(self) -> int:
        """Entries of the invisibility timer heap, live and stale (a test hook for its compaction)."""
        return self._inflight.timer_entries

    def messages(self, topic: str) -> list[StoredMessage]:
        """Committed messages of `topic` on this broker: the stored ones in (queue, offset) order, then
        the delayed ones not yet due (uncommitted transactional messages are not included)."""
        if self._store.get(topic) is None:
            return []
        out = list(self._store.stored(topic))
        out.extend(self._delayed.pending(topic))
        return out


def _type_name(kind: MessageType | int) -> str:
    try:
        return MessageType(kind).name
    except ValueError:
        return str(kind)
