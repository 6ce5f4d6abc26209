"""The assignment scan: QueryAssignment per topic, and creating and dropping that topic's queues
(bench scenarios 5a, 5b; docs/benchmarks.md#scenarios).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from thrust._codec import convert
from thrust._core.ack import AckKey
from thrust._core.assignment import QueueId
from thrust._core.process_queue import ProcessQueue
from thrust._core.routes import RouteQueue, TopicRoute
from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
from thrust._push.receiving import Receiving
from thrust._push.state import _new_attempt_id, _Queue, logger
from thrust.errors import ThrustError


class Assignments(Receiving):
    """The assignment layer of `PushConsumer`."""

    async def _scan_loop(self, topic: str) -> None:
        """Scan `topic` every `scan_interval`, and at once when the session reports a route change."""
        assert self._session is not None
        session = self._session
        changed = self._route_changed[topic]
        while not self._closing:
            # Cleared before the scan: a change reported while it runs triggers the next one at once.
            changed.clear()
            try:
                await self._scan(topic, await session.route(topic))
            except ThrustError as exc:
                self._scan_log.failure(f"assignment scan of {topic!r} failed: {exc}", None)
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("assignment scan of %r failed", topic)
            try:
                async with asyncio.timeout(self.scan_interval):
                    await changed.wait()
            except TimeoutError:
                pass

    def _on_route_change(self, topic: str, route: TopicRoute) -> None:
        """Route listener (the session refreshes routes every 30 s): queues on brokers that left the route
        are dropped now (their sessions are being closed), and the topic is scanned again at once."""
        changed = self._route_changed.get(topic)
        if changed is None or self._closing:
            return
        if any(q.id.topic == topic and q.endpoint not in route.endpoints for q in self._queues.values()):
            self._apply_assignment(
                topic,
                [
                    q.route_queue
                    for q in self._queues.values()
                    if q.id.topic == topic and q.endpoint in route.endpoints
                ],
            )
        changed.set()

    async def _query_assignment(self, topic: str, route: TopicRoute) -> list[RouteQueue]:
        """The queues QueryAssignment assigns to this client for `topic` (docs/protocol.md §3.3, §3.4)."""
        session = self.session
        endpoint = self._selector.pick(route, session.access_point)
        if endpoint is None:
            return []
        request = spb.QueryAssignmentRequest(
            topic=self._topic_pb[topic],
            group=self._group_pb,
            endpoints=convert.endpoint_to_pb(session.access_point),
        )
        response = await session.call(endpoint, "QueryAssignment", request)
        return convert.route_queues_from_pb(topic, (a.message_queue for a in response.assignments))

    async def _scan(self, topic: str, route: TopicRoute) -> None:
        assigned = await self._query_assignment(topic, route)
        if self._closing:
            return
        self._apply_assignment(topic, assigned)

    def _apply_assignment(self, topic: str, assigned: Sequence[RouteQueue]) -> None:
        """Drop and create only this topic's queues (bench scenario 5b)."""
        now = time.monotonic()
        by_id = {q.id: q for q in assigned if q.topic == topic and q.readable}
        expired = [qid for qid in self._table.queues(topic) if self._queues[qid].pq.expired(now)]
        diff = self._table.sync(topic, by_id, expired)
        if not diff:
            return
        for qid in diff.to_drop:
            q = self._queues.pop(qid, None)
            if q is not None:
                self._drop_queue(q)
        for qid in diff.to_add:
            self._create_queue(qid, by_id[qid], now)
        self._budget.set_queue_count(len(self._table))
        for q in self._queues.values():
            q.event.set()  # thresholds were re-split: every queue re-plans
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("topic %r: +%s -%s", topic, sorted(diff.to_add), sorted(diff.to_drop))

    def _create_queue(self, qid: QueueId, route_queue: RouteQueue, now: float) -> None:
        pq = ProcessQueue(qid, self._budget, _new_attempt_id, now)
        q = _Queue(qid, route_queue, pq, AckKey(route_queue.endpoint, self.group, qid.topic))
        q.request = spb.ReceiveMessageRequest(
            group=self._group_pb,
            message_queue=convert.message_queue_to_pb(route_queue, self.config.namespace),
            filter_expression=self._filter_pb[qid.topic],
            auto_renew=True,
        )
        self._queues[qid] = q
        q.runner = asyncio.get_running_loop().create_task(self._run_queue(q), name=f"thrust-queue-{qid}")

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
        q.pq.drop()
        self._counters["queues_dropped"] += 1
        if q.timer is not None:
            q.timer.cancel()
            q.timer = None
        q.event.set()
        if q.settling:
            # The heads' groups still wait for them (the chains go on once they settle), but no longer
            # without bound: Java gives a dropped queue's FIFO acks up at once (`ackFifoMessageLater`:
            # "Process queue was dropped"); an ack still spares the group a redelivery, so it keeps the
            # ordinary window.
            bound = time.monotonic() + self.ack_retry_window
            for entry, batcher in q.settling.items():
                batcher.cap_deadline(entry, bound)
        if q.receivers:
            # Owned until they end, so that close can still cancel them (`PushConsumer.close`).
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
        q.pq.drop()
        for task in q.receivers:
            task.cancel()
        if q.timer is not None:
            q.timer.cancel()
            q.timer = None
        q.event.set()
        if q.fifo is not None:
            waiting = q.fifo.drop()
            if waiting:
                # Never started: release their cache space.
                q.pq.on_consumed(len(waiting), sum(d.nbytes for d in waiting), time.monotonic())
        if q.settling:
            # No group waits here any more: the heads' acks and forwards are bounded like any other.
            bound = time.monotonic() + self.ack_retry_window
            for entry, batcher in q.settling.items():
                batcher.cap_deadline(entry, bound)
            q.settling.clear()
