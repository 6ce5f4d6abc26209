"""What the parts of a `PushConsumer` share: the attributes they all use (`PushState`, set by
`PushConsumer.__init__`), one received message (`_Delivery`), one assigned queue (`_Queue`) and what a
nack or dead-letter entry carries (`_Token`).

`PushConsumer` is built in layers, one module each, every layer using only itself and the layers below:
`PushState` (here) <- `Results` (results.py: listener results, acks, nacks, FIFO retries and the settling
RPCs) <- `Receiving` (receiving.py: the per-queue receive loop) <- `Assignments` (assignments.py: the
assignment scan, creating and dropping queues) <- `PushConsumer` (thrust.push_consumer: configuration,
start and close, statistics). The Telemetry handler is telemetry.py.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from typing import Any

from thrust._codec.status import Code
from thrust._consumption import ListenerExecutor, RateLimitedLog
from thrust._core.ack import AckBatcher, AckConfig, AckEntry, AckKey
from thrust._core.assignment import AssignmentTable, QueueId
from thrust._core.endpoints import Endpoint
from thrust._core.fifo import FifoSequencer
from thrust._core.process_queue import ProcessQueue, QueueBudget
from thrust._core.routes import AssignmentEndpointSelector, RouteQueue
from thrust._io.rpc import OK_OR_MULTIPLE
from thrust._io.session import ClientSession
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
from thrust._push.settle import BatchDriver
from thrust.config import ClientConfig
from thrust.errors import ThrustError
from thrust.message import FilterExpression, ReceivedMessage

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
    """The io side of one assigned queue: its `ProcessQueue` (pure), runner task and receive tasks."""

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


# AckMessage / ChangeInvisibleDuration / DLQ outcomes are judged per entry by the batcher (results_for), so
# the rpc boundary must hand back every answered status instead of raising on non-OK.
_ANY_CODE: frozenset[int] = frozenset(int(c) for c in Code) | OK_OR_MULTIPLE


def _new_attempt_id() -> str:
    return str(uuid.uuid4())


class PushState:
    """The attributes every layer of `PushConsumer` reads; `PushConsumer.__init__` sets them all."""

    config: ClientConfig
    group: str
    subscriptions: dict[str, FilterExpression]
    listener: Callable[[ReceivedMessage], Any]
    consumption_thread_count: int
    async_concurrency: int
    fifo_parallel_groups: bool
    shutdown_grace: float
    scan_interval: float
    ack_retry_window: float
    _receives_per_queue: int
    _budget: QueueBudget
    _ack_config: AckConfig
    _session: ClientSession | None
    _executor: ListenerExecutor[_Delivery] | None
    _acks: BatchDriver | None
    _nacks: BatchDriver | None
    _dlq: BatchDriver | None
    _table: AssignmentTable
    _queues: dict[QueueId, _Queue]
    # Dropped queues whose receives are still in flight (`Assignments._drop_queue`), for close to cancel.
    _retired: set[_Queue]
    _selector: AssignmentEndpointSelector
    _scanners: dict[str, asyncio.Task[None]]
    _route_changed: dict[str, asyncio.Event]
    _fifo_timers: dict[_Delivery, asyncio.TimerHandle]
    _start_task: asyncio.Task[None] | None
    _close_task: asyncio.Task[None] | None
    _closing: bool
    _group_pb: pb.Resource
    _topic_pb: dict[str, pb.Resource]
    _filter_pb: dict[str, pb.FilterExpression]
    _receive_log: RateLimitedLog
    _scan_log: RateLimitedLog
    _last_receive_error: ThrustError | None
    _counters: dict[str, int]

    @property
    def client_id(self) -> str | None:
        return self._session.client_id if self._session is not None else None

    @property
    def session(self) -> ClientSession:
        """The underlying session (internal API, for tests and tools)."""
        if self._session is None:
            raise RuntimeError("the consumer is not started")
        return self._session
