"""Consumer groups' progress on one broker: per (group, topic) a `Subscription`, per message a `Record`.

Data structures (docs/protocol.md §6.3 and §7 for the behaviour they emulate):

- Per (group, topic) a `Subscription`: per queue a `SubQueue` with a read cursor (new messages) and a
  retry deque (messages visible again after invisibility expired or a nack); for FIFO groups, per
  message group a deque of the unacknowledged messages in offset order plus a heap of message groups
  whose head can be delivered (fifo.py).
- Each delivered-but-unacknowledged message, and each message a FIFO group read ahead, has one `Record`
  in `Subscription.records`; its delivery fields are written only by `InflightRecords` (inflight.py).

`Subscriptions` owns the map of them; the broker creates one when a group first pops a topic.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterator

from thrust.server.core.model import Delivery, GroupInfo, StoredMessage
from thrust.server.core.store import TopicQueues
from thrust.server.core.timers import Timed

# Record states (per message per group).
READY = 0  # visible: read by a FIFO group but not delivered yet, or waiting for redelivery
INFLIGHT = 1  # delivered, not acked, invisible
DONE = 2  # acked, filtered out or dead-lettered; no longer tracked


class SubQueue:
    """One group's progress on one queue."""

    __slots__ = ("cursor", "groups", "pending", "ready", "retry")

    def __init__(self, cursor: int) -> None:
        self.cursor = cursor  # next offset never read by this group
        self.retry: deque[Record] = deque()  # non-FIFO: visible again, in order of expiry
        # FIFO: unacknowledged records per message group, in offset order (heads are never DONE)
        self.groups: dict[str | int, deque[Record]] = {}
        self.ready: list[tuple[int, str | int]] = []  # FIFO: (head offset, key) of deliverable groups
        self.pending = 0  # FIFO: records held in `groups`


#: One pop's deliveries with the nonce each record had then, remembered for a repeated attempt id.
Batch = list[tuple["Record", int, Delivery]]


class Subscription:
    """A consumer group's consumption of one topic on this broker (its own progress)."""

    __slots__ = ("attempts", "fifo", "group", "mix", "n_inflight", "queues", "records", "rr", "topic")

    def __init__(self, group: str, topic: str, fifo: bool) -> None:
        self.group = group
        self.topic = topic
        self.fifo = fifo
        self.queues: list[SubQueue] = []
        self.records: dict[tuple[int, int], Record] = {}
        self.n_inflight = 0
        self.attempts: OrderedDict[str, Batch] = OrderedDict()
        self.rr = 0  # queue rotation for queue_id -1
        self.mix = 0  # retry/new interleaving counter

    def lag(self, tq: TopicQueues) -> int:
        """Messages not read yet plus those waiting for redelivery (not the in-flight ones)."""
        unread = 0
        for qid, log in enumerate(tq.logs):
            cursor = self.queues[qid].cursor if qid < len(self.queues) else 0
            unread += log.end - max(cursor, log.base)
        return unread + len(self.records) - self.n_inflight


class Record(Timed):
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

    def __init__(self, sub: Subscription, msg: StoredMessage, key: str | int | None) -> None:
        super().__init__()
        self.sub = sub
        self.msg = msg
        self.queue_id = msg.queue_id
        self.key = key  # FIFO message-group key, None for non-FIFO groups
        self.state = READY
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
        self.batch: Batch | None = None


#: Delivers one record within the current pop (broker.py builds it per pop).
DeliverFn = Callable[[Record], None]


class Subscriptions:
    """Every (group, topic) subscription of one broker."""

    __slots__ = ("_subs",)

    def __init__(self) -> None:
        self._subs: dict[tuple[str, str], Subscription] = {}

    def get(self, group: str, topic: str) -> Subscription | None:
        """The group's subscription of the topic, or None when the group never popped it here."""
        return self._subs.get((group, topic))

    def drop_topic(self, topic: str) -> None:
        """Forget every group's consumption of `topic` (an expired lite topic)."""
        for key in [key for key in self._subs if key[1] == topic]:
            del self._subs[key]

    def reset(self, group: str, topic: str) -> None:
        """Forget `group`'s consumption of `topic`: its next pop starts from the cursor `open` gives."""
        self._subs.pop((group, topic), None)

    def of_topic(self, topic: str) -> Iterator[Subscription]:
        """The subscriptions of every group consuming `topic`."""
        return (sub for (_, name), sub in self._subs.items() if name == topic)

    def open(self, ginfo: GroupInfo, tq: TopicQueues, *, fifo: bool | None = None) -> Subscription:
        """The group's subscription of the topic, created on first use, with a `SubQueue` per queue.

        `fifo` overrides the group's flag (a lite topic is always consumed in order, core/lite.py)."""
        key = (ginfo.name, tq.name)
        sub = self._subs.get(key)
        if sub is None:
            # The group's FIFO flag is sampled here, when it first consumes the topic.
            sub = self._subs[key] = Subscription(ginfo.name, tq.name, ginfo.fifo if fifo is None else fifo)
        if len(sub.queues) < len(tq.logs):
            # A new group starts at the oldest retained message. Upstream pops with initMode=MAX, but
            # PopMessageProcessor.getInitOffset starts at offset 0 while the queue's minimum offset is 0
            # and that message is still in memory (initPopOffsetByCheckMsgInMem, default true), so on a
            # young topic a new group reads the earlier messages there too (tests/conformance
            # test_differential "new-group-reads-earlier-messages"). Only once the queue was trimmed
            # does upstream start at its last message instead; here the group still reads what is left.
            sub.queues.extend(SubQueue(log.base) for log in tq.logs[len(sub.queues) :])
        return sub
