"""The records the parts of a `PushConsumer` pass between them: one received message (`_Delivery`), one
assigned queue (`_Queue`) and what a nack or dead-letter entry carries (`_Token`), plus their constants.

`PushConsumer` (thrust.push_consumer: configuration, start and close ordering, statistics) composes three
objects, each owning its own state and given only what it needs: `AssignmentScanner` (scanner.py: the
assignment scan, the table of queues, creating, dropping and closing them), `QueueReceiver` (receiver.py:
the per-queue receive loop, streams, decode and dispatch to the listener pool) and `Settler` (settler.py:
listener results, acks, nacks, dead-letter forwards, FIFO retries and the cache slots they release). The
Telemetry handler is commands.py; the RPC drivers of the batchers are `thrust._io.batching`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from thrust._codec.status import Code
from thrust._core.ack import AckBatcher, AckEntry, AckKey
from thrust._core.assignment import QueueId
from thrust._core.endpoints import Endpoint
from thrust._core.fifo import FifoSequencer
from thrust._core.process_queue import ProcessQueue
from thrust._core.routes import RouteQueue
from thrust._io.rpc import OK_OR_MULTIPLE, Renewal
from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
from thrust.message import ReceivedMessage

logger = logging.getLogger("thrust.consumer")

MiB = 1024 * 1024

# How long a consumed message's ack (or nack) keeps being retried. Push receives use auto_renew, so the
# proxy holds the message invisible with its default 60 s invisible time and renews it
# (docs/protocol.md §6.3, §7.2); an entry still failing after that long is given up rather than retried
# forever (bench scenario 4).
ACK_RETRY_WINDOW = 60.0

# Close nacks the messages it never started with this invisible duration, so that the rest of the group gets
# them about a second later instead of after the server's invisible time (60 s for push receives).
CLOSE_NACK_DELAY = 1.0


class _Delivery:
    """One received message on its way through the listener, the FIFO chain and the ack batcher."""

    __slots__ = ("arrived", "message", "nbytes", "queue")

    def __init__(self, message: ReceivedMessage, queue: _Queue, arrived: float = 0.0) -> None:
        # Replaced by a copy one attempt later on each local FIFO retry (`_fifo_failed`), so that the
        # listener, the retry backoff and the dead-letter forward read the same count.
        self.message = message
        self.queue = queue
        self.nbytes = len(message.body)
        # When it was decoded (monotonic): the start of its await time, until the listener takes it.
        self.arrived = arrived


class _Token:
    """What a nack / dead-letter entry needs beyond its id and handle: the queue, topic and a number (the
    nack's invisible duration, or the delivery attempt reported to the dead-letter queue), and the delivery
    whose cache slot it holds until it settles (None for a corrupted message, which was never cached)."""

    __slots__ = ("delivery", "message_id", "queue", "topic", "value")

    def __init__(
        self, queue: _Queue, topic: str, message_id: str, value: float, delivery: _Delivery | None = None
    ) -> None:
        self.queue = queue
        self.topic = topic
        self.message_id = message_id
        self.value = value
        self.delivery = delivery


class _Queue:
    """The io side of one assigned queue: its `ProcessQueue` (pure), runner task and receive tasks.

    A record the three parts of the consumer share, as a partition's state is in a Kafka consumer's
    subscription state; each field has one writer. `AssignmentScanner` creates it (`id`, `route_queue`,
    `pq`, `ack_key`, `request`, `runner`) and stops it (`halt`, `bound_settling`); `QueueReceiver` writes
    `receivers`, `timer`, `renewal`, `fifo` and `received`, and hands what it received to the listener
    through the settler; `Settler` writes `settling`, `acks_pending`, `consumed` and `in_listener`
    (counted in by `Settler.hand_over`, out by the results). `event` is the queue's wake-up: set by
    whoever made room or changed the plan."""

    __slots__ = (
        "ack_key",
        "acks_pending",
        "consumed",
        "event",
        "fifo",
        "id",
        "in_listener",
        "pq",
        "received",
        "receivers",
        "renewal",
        "request",
        "route_queue",
        "runner",
        "settling",
        "timer",
    )

    def __init__(self, qid: QueueId, route_queue: RouteQueue, pq: ProcessQueue, ack_key: AckKey) -> None:
        self.id = qid
        self.route_queue = route_queue
        self.pq = pq
        self.ack_key = ack_key
        self.event = asyncio.Event()
        self.receivers: set[asyncio.Task[None]] = set()
        self.runner: asyncio.Task[None] | None = None
        self.timer: asyncio.TimerHandle | None = None
        # The idle receive in flight that renews its empty long polls itself (`QueueReceiver._receive`).
        self.renewal: Renewal | None = None
        self.request: spb.ReceiveMessageRequest | None = None
        self.fifo: FifoSequencer[_Delivery] | None = None
        # FIFO heads whose ack / dead-letter forward their group waits for, with the batcher holding it (so
        # that dropping the queue can bound them: `_drop_queue`).
        self.settling: dict[AckEntry, AckBatcher] = {}
        self.in_listener = 0
        self.acks_pending = 0
        self.received = 0
        self.consumed = 0

    @property
    def endpoint(self) -> Endpoint:
        return self.route_queue.endpoint

    def expired(self, now: float) -> bool:
        """`ProcessQueue.expired`, the polls that the receive in flight renewed by itself counted as the
        activity they are (the loop sees such a receive only when it ends: `Renewal`)."""
        renewal = self.renewal
        if renewal is not None and renewal.advanced():
            self.pq.on_renewed(now)
        return self.pq.expired(now)

    def halt(self) -> None:
        """No new receive starts (the runner sees `pq.dropped` and ends; a receive renewing its empty polls
        stops after the one in flight); its wake-up timer is cancelled."""
        self.pq.drop()
        if self.renewal is not None:
            self.renewal.stop()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.event.set()

    def bound_settling(self, bound: float) -> None:
        """The FIFO heads' acks and forwards are given up at `bound` (monotonic) at the latest."""
        for entry, batcher in self.settling.items():
            batcher.cap_deadline(entry, bound)


# AckMessage / ChangeInvisibleDuration / DLQ outcomes are judged per entry by the batcher (results_for), so
# the rpc boundary must hand back every answered status instead of raising on non-OK.
_ANY_CODE: frozenset[int] = frozenset(int(c) for c in Code) | OK_OR_MULTIPLE


def _new_attempt_id() -> str:
    return str(uuid.uuid4())
