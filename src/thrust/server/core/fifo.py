"""FIFO consumption on the broker: message groups, blocking, and which message of a queue goes next.

A FIFO group's messages are read into per-message-group deques (`SubQueue.groups`, records.py); a
message group is blocked while an earlier message of it is in flight, unless it was delivered in the
same pop (docs/protocol.md §7.6). `FifoGroups` holds only the read-ahead limit: the per-group state
lives in each subscription's queues, and the pop serial comes with each call.
"""

from __future__ import annotations

import heapq
from collections import deque

from thrust.server.core.model import MessageMatcher
from thrust.server.core.records import DONE, INFLIGHT, READY, DeliverFn, Record, SubQueue, Subscription
from thrust.server.core.store import QueueLog


def first_deliverable(dq: deque[Record], serial: int) -> int | None:
    """Offset of the message group's next deliverable message, or None when the group is blocked.

    `serial` is the current pop's: a message delivered in this same pop does not block.
    """
    for rec in dq:
        if rec.state == READY:
            return rec.msg.offset
        if rec.state == INFLIGHT and rec.popped_in != serial:
            return None
    return None


def settle(sub: Subscription, rec: Record) -> None:
    """After `rec` changed state: drop finished heads; a visible head makes its group deliverable."""
    key = rec.key
    assert key is not None
    sq = sub.queues[rec.queue_id]
    dq = sq.groups.get(key)
    if dq is None:
        return
    while dq and dq[0].state == DONE:
        dq.popleft()
    if not dq:
        del sq.groups[key]
        return
    head = dq[0]
    if head.state == READY:
        heapq.heappush(sq.ready, (head.msg.offset, key))


class FifoGroups:
    """Reading a FIFO group's messages into message groups and taking deliverable heads.

    Args:
        read_ahead: per FIFO group and queue, how many unacknowledged messages may be read ahead past
            blocked message groups to find deliverable ones.
    """

    __slots__ = ("_read_ahead",)

    def __init__(self, read_ahead: int) -> None:
        self._read_ahead = read_ahead

    def take(
        self,
        sub: Subscription,
        qid: int,
        log: QueueLog,
        flt: MessageMatcher,
        need: int,
        deliver: DeliverFn,
        serial: int,
    ) -> None:
        """Deliver up to `need` messages of queue `qid` in message-group order within pop `serial`."""
        sq = sub.queues[qid]
        taken = 0
        while taken < need:
            key = self._next_ready_group(sub, sq, qid, log, flt, serial)
            if key is None:
                return
            # Deliver the group's visible messages in offset order. Messages delivered earlier in this
            # same pop do not block (a batch carries consecutive messages of a group, like upstream's
            # FIFO pop); any other in-flight message blocks the rest of the group.
            for rec in sq.groups[key]:
                if rec.state == DONE:
                    continue
                if rec.state == INFLIGHT:
                    if rec.popped_in == serial:
                        continue
                    break
                deliver(rec)
                taken += 1
                if taken >= need:
                    break

    def _next_ready_group(
        self, sub: Subscription, sq: SubQueue, qid: int, log: QueueLog, flt: MessageMatcher, serial: int
    ) -> str | int | None:
        ready = sq.ready
        while True:
            while ready:
                offset, key = heapq.heappop(ready)
                dq = sq.groups.get(key)
                if dq and first_deliverable(dq, serial) == offset:
                    return key
            if not self._read_one(sub, sq, qid, log, flt, serial):
                return None

    def _read_one(
        self, sub: Subscription, sq: SubQueue, qid: int, log: QueueLog, flt: MessageMatcher, serial: int
    ) -> bool:
        """Read the next matching message into its message group; False at the end or the read-ahead cap."""
        if sq.pending >= self._read_ahead:
            return False
        cursor = max(sq.cursor, log.base)
        end = log.end
        while cursor < end:
            message = log.items[cursor - log.base]
            cursor += 1
            if not flt.matches(message.tag, message.properties):
                continue
            sq.cursor = cursor
            # Messages without a message group are not ordered: each gets a key of its own. A lite topic's
            # messages are one ordered group (core/lite.py).
            key: str | int = message.message_group or message.lite_topic or message.offset
            rec = Record(sub, message, key)
            sub.records[(qid, message.offset)] = rec
            dq = sq.groups.get(key)
            if dq is None:
                dq = sq.groups[key] = deque()
            dq.append(rec)
            sq.pending += 1
            if len(dq) == 1 or first_deliverable(dq, serial) == message.offset:
                heapq.heappush(sq.ready, (message.offset, key))
            return True
        sq.cursor = cursor
        return False
