"""A broker's stored messages: per topic and queue an append-only log, trimmed past the retention limits.

`MessageStore` owns every topic's queues on one broker; the broker, the in-flight records (dead letters)
and the delayed messages (landing when due) append through it. Old messages are trimmed in chunks, like
upstream deletes commit-log files (docs/protocol.md §6.3 for what consumers see of that).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from thrust.server.core.model import InboundMessage, StoredMessage, TopicInfo


class QueueLog:
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


class TopicQueues:
    """This broker's queues of one topic, and the round-robin position of sends that pick no queue."""

    __slots__ = ("logs", "name", "rr")

    def __init__(self, name: str, queues: int) -> None:
        self.name = name
        self.logs = [QueueLog() for _ in range(queues)]
        self.rr = 0


class MessageStore:
    """Every topic's queues on one broker.

    Args:
        broker: the broker name stamped on stored messages.
        retention_messages / retention_bytes: per-queue limits after which the oldest messages go.
    """

    __slots__ = ("_broker", "_retention_bytes", "_retention_messages", "_topics")

    def __init__(self, broker: str, *, retention_messages: int, retention_bytes: int) -> None:
        self._broker = broker
        self._retention_messages = retention_messages
        self._retention_bytes = retention_bytes
        self._topics: dict[str, TopicQueues] = {}

    def queues(self, info: TopicInfo) -> TopicQueues:
        """The topic's queues, created on first use and grown when the catalog's queue count grew."""
        tq = self._topics.get(info.name)
        if tq is None:
            tq = self._topics[info.name] = TopicQueues(info.name, info.queues)
        elif len(tq.logs) < info.queues:
            tq.logs.extend(QueueLog() for _ in range(info.queues - len(tq.logs)))
        return tq

    def get(self, topic: str) -> TopicQueues | None:
        """The topic's queues if anything was stored or consumed there, else None."""
        return self._topics.get(topic)

    def drop(self, topic: str) -> None:
        """Delete the topic's queues and messages (an expired lite topic)."""
        self._topics.pop(topic, None)

    def stored(self, topic: str) -> Iterator[StoredMessage]:
        """The retained messages of `topic`, in (queue, offset) order."""
        tq = self._topics.get(topic)
        if tq is not None:
            for log in tq.logs:
                yield from log.items

    def append(self, tq: TopicQueues, queue_id: int, message: InboundMessage, now: float) -> StoredMessage:
        """Store a producer's message at the end of queue `queue_id`."""
        log = tq.logs[queue_id]
        stored = StoredMessage.of(
            message, queue_id=queue_id, offset=log.end, store_timestamp=now, broker=self._broker
        )
        self._push(log, stored)
        return stored

    def append_stored(
        self, tq: TopicQueues, queue_id: int, message: StoredMessage, now: float
    ) -> StoredMessage:
        """Store a message held elsewhere until now (delayed, committed, dead-lettered) in `tq`."""
        log = tq.logs[queue_id]
        stored = replace(
            message,
            topic=tq.name,
            queue_id=queue_id,
            offset=log.end,
            store_timestamp=now,
            broker=self._broker,
        )
        self._push(log, stored)
        return stored

    def _push(self, log: QueueLog, stored: StoredMessage) -> None:
        log.items.append(stored)
        log.bytes += len(stored.body)
        log.trim(self._retention_messages, self._retention_bytes)
