"""The assignment scan: QueryAssignment per topic, and creating and dropping that topic's queues
(bench scenarios 5a, 5b; docs/benchmarks.md#scenarios). One scheduler task starts the scans
(`thrust._core.scan_schedule`: each topic every `scan_interval`, at most `max_scan_rate` periodic scans a
second over all topics), rather than a task per topic scanning every 5 s: docs/benchmarks.md, "A consumer
of a thousand topics".
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from thrust._codec import convert
from thrust._consumption import RateLimitedLog
from thrust._core.ack import AckKey
from thrust._core.assignment import AssignmentTable, QueueId
from thrust._core.process_queue import ProcessQueue, QueueBudget
from thrust._core.routes import AssignmentEndpointSelector, RouteQueue, TopicRoute
from thrust._core.scan_schedule import ScanSchedule
from thrust._core.settings import ClientSettings
from thrust._io.session import ClientSession
from thrust._io.tasks import Spawn
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
from thrust._push.model import _new_attempt_id, _Queue, logger
from thrust.errors import ThrustError

# Runs one queue until it is dropped or closed (`QueueReceiver.run`).
RunQueue = Callable[[_Queue], Coroutine[Any, Any, None]]

# Scans in flight at once: a consumer's first scans of 1,000 topics go out this many at a time rather than
# as 1,000 calls at once, and one slow QueryAssignment holds up no other topic's scan.
MAX_CONCURRENT_SCANS = 16


class AssignmentScanner:
    """Owns the assignment: the route watch, the scan schedule and its scheduler task, the `AssignmentTable`,
    the queues (created with a runner task from `run_queue`, dropped, closed), the dropped queues whose
    receives are still in flight (`_retired`), the cache budget they share, and the count of drops. Its
    tasks are started with `spawn` (the consumer's task set). `PushConsumer` builds it with the resources
    it needs, starts it once the session is up (`start`) and closes it (`stop`, then `close_queues`)."""

    def __init__(
        self,
        *,
        group: str,
        group_pb: pb.Resource,
        topic_pb: dict[str, pb.Resource],
        filter_pb: dict[str, pb.FilterExpression],
        namespace: str,
        budget: QueueBudget,
        receives_per_queue: int,
        scan_interval: float,
        max_scan_rate: float,
        ack_retry_window: float,
        run_queue: RunQueue,
        spawn: Spawn,
    ) -> None:
        self._group = group
        self._group_pb = group_pb
        self._topic_pb = topic_pb
        self._filter_pb = filter_pb
        self._namespace = namespace
        self._budget = budget
        self._receives_per_queue = receives_per_queue
        self._scan_interval = scan_interval
        self._ack_retry_window = ack_retry_window
        self._run_queue = run_queue
        self._spawn = spawn
        self._session: ClientSession | None = None
        self._table = AssignmentTable()
        self._answers = convert.QueuesMemo()  # the last QueryAssignment answer per topic, converted
        # Per topic, the answer `_apply_assignment` applied last.
        self._applied: dict[str, Sequence[RouteQueue]] = {}
        self.queues: dict[QueueId, _Queue] = {}
        # Dropped queues whose receives are still in flight (`_drop_queue`), for close to cancel.
        self._retired: set[_Queue] = set()
        self._selector = AssignmentEndpointSelector()
        self._schedule = ScanSchedule(interval=scan_interval, max_rate=max_scan_rate)
        self._scheduler: asyncio.Task[None] | None = None
        self._scans: set[asyncio.Task[None]] = set()
        # Set when a scan ends, a route changes or the schedule may have a topic due earlier.
        self._scan_wake = asyncio.Event()
        self._scan_log = RateLimitedLog(10.0, "%s; retried at the next scan")
        self._closing = False
        self.queues_dropped = 0

    @property
    def session(self) -> ClientSession:
        if self._session is None:
            raise RuntimeError("the consumer is not started")
        return self._session

    async def start(self, session: ClientSession) -> None:
        """Watch the topics' routes, fetch them, then start the scheduler (every topic's first scan at once,
        `MAX_CONCURRENT_SCANS` at a time)."""
        self._session = session
        topics = list(self._topic_pb)
        session.add_route_listener(self._on_route_change)
        # Routes only: a broker slow to answer Settings must not hold up the others (bench scenario 3).
        await asyncio.gather(*(session.route(t) for t in topics))
        self._schedule.set_topics(topics)
        self._scheduler = self._spawn(self._scan_scheduler(), "thrust-scan")

    def apply_settings(self, settings: ClientSettings) -> None:
        """The server's Settings win: batch size, long polling, request timeout; FIFO queues keep one receive
        at a time (a second receive could only come back out of order). Every queue re-plans."""
        self._budget.apply_settings(settings)
        self._budget.max_receives_in_flight = 1 if settings.fifo else self._receives_per_queue
        for q in self.queues.values():
            q.event.set()  # once per Settings answer, not per assignment change

    def stop(self) -> None:
        """Close begins: no scan applies its answer any more, and route changes are ignored."""
        self._closing = True

    def close_queues(self) -> None:
        """Close: cancel the scans and every queue's receives (`_close_queue`), the retired ones' too.
        The tasks are awaited (bounded) with the rest of the consumer's task set, at the end of close."""
        if self._scheduler is not None:
            self._scheduler.cancel()
        for task in self._scans:
            task.cancel()
        for q in [*self.queues.values(), *self._retired]:
            self._close_queue(q)

    async def _scan_scheduler(self) -> None:
        """Start each scan when the schedule says it is due, at most `MAX_CONCURRENT_SCANS` at once."""
        schedule = self._schedule
        wake = self._scan_wake
        loop = asyncio.get_running_loop()
        # One timer for the next round of scans, kept while its time stands: the loop wakes for each round
        # and as its scans end, and an `asyncio.timeout` per wait made and cancelled a timer each time, a
        # fifth of an idle 1,000-topic consumer's loop time when scans started one by one.
        timer: asyncio.TimerHandle | None = None
        timer_due: float | None = None

        def fire() -> None:
            nonlocal timer, timer_due
            timer, timer_due = None, None  # fired: the next wait arms a new one if still needed
            wake.set()

        try:
            while not self._closing:
                wake.clear()
                if len(self._scans) >= MAX_CONCURRENT_SCANS:
                    await wake.wait()  # set when a scan ends
                    continue
                now = time.monotonic()
                topic, due = schedule.next(now)
                if topic is None:
                    if due != timer_due:
                        if timer is not None:
                            timer.cancel()
                        timer, timer_due = None, due
                        if due is not None:
                            timer = loop.call_at(loop.time() + max(0.0, due - now), fire)
                    await wake.wait()
                    continue
                schedule.started(topic)
                task = self._spawn(self._scan_once(topic), None)
                self._scans.add(task)
                task.add_done_callback(self._scan_done)
        finally:
            if timer is not None:
                timer.cancel()

    def _scan_done(self, task: asyncio.Task[None]) -> None:
        # The slot frees only now, after the scan's own wake-up already ran the scheduler: wake it again,
        # or scans that all end in one loop iteration would leave it waiting on a full set for ever.
        self._scans.discard(task)
        self._scan_wake.set()

    async def _scan_once(self, topic: str) -> None:
        session = self.session
        try:
            await self._scan(topic, await session.route(topic))
        except ThrustError as exc:
            self._scan_log.failure(f"assignment scan of {topic!r} failed: {exc}", None)
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("assignment scan of %r failed", topic)
        finally:
            self._schedule.done(topic, time.monotonic())
            self._scan_wake.set()

    def _on_route_change(self, topic: str, route: TopicRoute) -> None:
        """Route listener (the session refreshes routes every 30 s): queues on brokers that left the route
        are dropped now (their sessions are being closed), and the topic is scanned again at once."""
        if topic not in self._topic_pb or self._closing:
            return
        if any(q.id.topic == topic and q.endpoint not in route.endpoints for q in self.queues.values()):
            self._apply_assignment(
                topic,
                [
                    q.route_queue
                    for q in self.queues.values()
                    if q.id.topic == topic and q.endpoint in route.endpoints
                ],
            )
        self._schedule.request(topic)
        self._scan_wake.set()

    async def _query_assignment(self, topic: str, route: TopicRoute) -> Sequence[RouteQueue]:
        """The queues QueryAssignment assigns to this client for `topic` (docs/protocol.md §3.3, §3.4)."""
        session = self.session
        endpoint = self._selector.pick(route, session.access_point)
        if endpoint is None:
            return []
        request = spb.QueryAssignmentRequest(
            topic=self._topic_pb[topic],
            group=self._group_pb,
            endpoints=session.access_point_pb,
        )
        response = await session.call(endpoint, "QueryAssignment", request)
        assignments = response.assignments
        return self._answers.queues(topic, assignments, (a.message_queue for a in assignments))

    async def _scan(self, topic: str, route: TopicRoute) -> None:
        assigned = await self._query_assignment(topic, route)
        if self._closing:
            return
        self._apply_assignment(topic, assigned)

    def _apply_assignment(self, topic: str, assigned: Sequence[RouteQueue]) -> None:
        """Drop and create only this topic's queues (bench scenario 5b)."""
        now = time.monotonic()
        expired = [qid for qid in self._table.queues(topic) if self.queues[qid].expired(now)]
        if not expired and self._applied.get(topic) is assigned:
            # The answer last applied, again (`QueuesMemo` returns it for an unchanged answer): the table,
            # which only this method changes, already matches it.
            return
        self._applied[topic] = assigned
        by_id = {q.id: q for q in assigned if q.topic == topic and q.readable}
        diff = self._table.sync(topic, by_id, expired)
        if not diff:
            return
        for qid in diff.to_drop:
            q = self.queues.pop(qid, None)
            if q is not None:
                self._drop_queue(q)
        for qid in diff.to_add:
            self._create_queue(qid, by_id[qid], now)
        budget = self._budget
        budget.set_queue_count(len(self._table))
        if budget.active_count:
            # Thresholds were re-split: the active queues re-plan (their share changed). Idle queues run
            # their one poll of `idle_batch` and re-plan when it ends; waking all of them here, on each of a
            # thousand topics' first scans, cost O(topics²) wake-ups.
            for q in self.queues.values():
                if q.pq.active:
                    q.event.set()
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("topic %r: +%s -%s", topic, sorted(diff.to_add), sorted(diff.to_drop))

    def _create_queue(self, qid: QueueId, route_queue: RouteQueue, now: float) -> None:
        pq = ProcessQueue(qid, self._budget, _new_attempt_id, now)
        q = _Queue(qid, route_queue, pq, AckKey(route_queue.endpoint, self._group, qid.topic))
        q.request = spb.ReceiveMessageRequest(
            group=self._group_pb,
            message_queue=convert.message_queue_to_pb(route_queue, self._namespace),
            filter_expression=self._filter_pb[qid.topic],
            auto_renew=True,
        )
        self.queues[qid] = q
        q.runner = self._spawn(self._run_queue(q), f"thrust-queue-{qid}")

    def _drop_queue(self, q: _Queue) -> None:
        """The queue is no longer assigned (QueryAssignment stopped naming it, its endpoint left the route, or
        it expired): no new receives start on it. The receives in flight run to their end, within their
        deadline, and what they bring is consumed and settled like any other message, a FIFO queue's in
        order; its FIFO heads keep their group waiting, bounded by the ack retry window from now on. Java
        does the same: `ProcessQueueImpl.drop()` only stops the next receive, and a receive that completes
        after it is cached and consumed (`onReceiveMessageResult`).

        Cancelling those receives loses messages for as long as the consumer lives. The proxy may already
        have popped a batch for one (a receive addressed to a broker that left its route is served from
        another broker: proxy `ReceiveMessageActivity.ReceiveMessageQueueSelector`), registers auto-renewed
        receipt handles before it writes them, and renews them while this client stays connected
        (`DefaultReceiptHandleManager`, up to its 3 h `renewMaxTimeMillis`): messages the client never read
        off a cancelled stream, or left unsettled, come back only once it unregisters (docs/reliability.md,
        bug 11). `_close_queue` is the close's version, which cancels."""
        if q.pq.dropped:
            return
        q.halt()
        self.queues_dropped += 1
        if q.settling:
            # The heads' groups still wait for them (the chains go on once they settle), but no longer
            # without bound: Java gives a dropped queue's FIFO acks up at once (`ackFifoMessageLater`:
            # "Process queue was dropped"); an ack still spares the group a redelivery, so it keeps the
            # ordinary window.
            q.bound_settling(time.monotonic() + self._ack_retry_window)
        if q.receivers:
            # Owned until they end, so that close can still cancel them (`close_queues`).
            self._retired.add(q)
            for task in q.receivers:
                task.add_done_callback(lambda t, q=q: self._retired_receive_done(q, t))  # type: ignore[misc]

    def _retired_receive_done(self, q: _Queue, task: asyncio.Task[None]) -> None:
        q.receivers.discard(task)
        if not q.receivers:
            self._retired.discard(q)

    def _close_queue(self, q: _Queue) -> None:
        """Close: stop receiving at once, cancelling the long polls in flight (bench scenario 5a). Unlike a
        drop while running, nothing is lost by it: the session's NotifyClientTermination makes the proxy
        release every handle it holds for this client after `invisibleTimeMillisWhenClear` (1 s). Messages
        already taken are still consumed and acked within the shutdown grace; FIFO messages not started
        yet are left to that redelivery, ahead of the rest of their group."""
        q.halt()
        for task in q.receivers:
            task.cancel()
        if q.fifo is not None:
            waiting = q.fifo.drop()
            if waiting:
                # Never started: release their cache space.
                q.pq.on_consumed(len(waiting), sum(d.nbytes for d in waiting), time.monotonic())
        if q.settling:
            # No group waits here any more: the heads' acks and forwards are bounded like any other.
            q.bound_settling(time.monotonic() + self._ack_retry_window)
            q.settling.clear()
