"""FIFO consumption on the broker: message groups, blocking, and which message of a queue goes next.

A FIFO group's messages are read into per-message-group deques; a message group is blocked while an
earlier message of it is in flight, unless it was delivered in the same pop (docs/protocol.md §7.6).
"""

from __future__ import annotations

import heapq
from collections import deque

from thrust.server.core.broker_state import (
    _DONE,
    _INFLIGHT,
    _READY,
    BrokerState,
    _DeliverFn,
    _QueueLog,
    _Rec,
    _Sub,
    _SubQueue,
)
from thrust.server.core.model import (
    MessageMatcher,
)


class FifoGroups(BrokerState):
    """The FIFO layer of `Broker`: reading messages into message groups and taking deliverable heads."""

    __slots__ = ()

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
