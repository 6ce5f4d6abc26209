"""Listener results and settling: acks, nacks and dead-letter forwards through their batchers, FIFO
local retries, and the cache slots a message holds until its ack settles (bench scenarios 1, 4, 7;
docs/benchmarks.md#scenarios).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from thrust._codec import convert
from thrust._core.ack import AckBatch, AckBatcher, AckConfig, AckEntry, AckKey, Fate, Outcome, results_for
from thrust._core.fifo import (
    FIFO_SETTLE_BACKOFF,
    UNTIL_SETTLED,
    FifoAction,
    fifo_failure_action,
    fifo_settle_config,
    releases_chain,
)
from thrust._instrument import Instrumentation
from thrust._io.batching import AckDriver
from thrust._io.rpc import OK_OR_MULTIPLE
from thrust._io.session import ClientSession
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
from thrust._push.model import _ANY_CODE, CLOSE_NACK_DELAY, _Delivery, _Queue, _Token, logger
from thrust.errors import error_for_status
from thrust.message import ConsumeSuspend, ReceivedMessage

# Hands deliveries to the listener pool (`ListenerExecutor.submit`); returns how many it took.
Submit = Callable[[list[_Delivery]], int]


class Settler:
    """Owns what happens after the listener: the ack, nack and dead-letter drivers (one `AckBatcher`
    each), the FIFO retry timers and the counters of results. `PushConsumer` builds it with the
    resources and bounds it needs, binds it to the session and the listener pool at start (`start`), stops
    it at close (`stop`, `nack_unstarted`, `drain`) and reads its counters for `stats()`.

    `client` is the consumer the settle spans are reported for (the instrumentation reads its identity);
    the settler never calls it."""

    def __init__(
        self,
        *,
        ack_config: AckConfig,
        ack_retry_window: float,
        group_pb: pb.Resource,
        topic_pb: dict[str, pb.Resource],
        namespace: str,
        instrumentation: Instrumentation | None,
        client: object,
    ) -> None:
        self._ack_config = ack_config
        self._ack_retry_window = ack_retry_window
        self._group_pb = group_pb
        self._topic_pb = topic_pb
        self._namespace = namespace
        self._instrumentation = instrumentation
        self._client = client
        self._session: ClientSession | None = None
        self._submit: Submit | None = None
        self.acks: AckDriver | None = None
        self.nacks: AckDriver | None = None
        self.dlq: AckDriver | None = None
        self._fifo_timers: dict[_Delivery, asyncio.TimerHandle] = {}
        # Suspended FIFO heads' entries -> (lite topic, seconds), until their nack settles (`_suspend`).
        self._suspended: dict[AckEntry, tuple[str | None, float]] = {}
        self._closing = False
        self.consumed = 0
        self.consume_failures = 0
        self.nacked = 0
        self.dead_lettered = 0

    def start(self, session: ClientSession, submit: Submit) -> None:
        """Bind to the session and the listener pool; start the three drivers (on the running loop)."""
        self._session = session
        self._submit = submit
        self.acks = AckDriver("ack", AckBatcher(self._ack_config), self._send_acks, self._acks_finished)
        self.nacks = AckDriver(
            "nack", AckBatcher(AckConfig.unbatched()), self._send_nack, self._nacks_finished
        )
        # Only FIFO groups forward to the dead-letter queue themselves, and a poison message's group waits for
        # the forward: it is retried on the FIFO schedule.
        self.dlq = AckDriver(
            "dlq",
            AckBatcher(AckConfig.unbatched(backoff=FIFO_SETTLE_BACKOFF)),
            self._send_dlq,
            self._dlq_finished,
        )

    def hand_over(self, deliveries: list[_Delivery]) -> int:
        """Hand `deliveries` to the listener pool, counting them into their queues' `in_listener`: the
        settler is that count's one writer (the results come back to it, `on_results`), whether the
        deliveries are new from `QueueReceiver` or a FIFO retry or successor of its own."""
        submit = self._submit
        assert submit is not None
        for d in deliveries:
            d.queue.in_listener += 1
        return submit(deliveries)

    def drivers(self) -> list[AckDriver]:
        return [d for d in (self.acks, self.nacks, self.dlq) if d is not None]

    def set_fifo(self, fifo: bool) -> None:
        """The server's Settings: a FIFO group's next message waits for each ack (docs/protocol.md §7.6), so
        its acks go out without linger, on the FIFO retry schedule."""
        if self.acks is not None:
            self.acks.batcher.config = fifo_settle_config(self._ack_config) if fifo else self._ack_config

    def stop(self) -> None:
        """Close begins: no FIFO retry or follow-up reaches the listener pool any more."""
        self._closing = True
        for handle in self._fifo_timers.values():
            handle.cancel()
        self._fifo_timers.clear()

    def retrying_by_queue(self) -> dict[_Queue, int]:
        """The acks waiting in the retry schedule, per queue (`QueueStats.acks_retrying`)."""
        retrying: dict[_Queue, int] = {}
        if self.acks is not None and self.acks.batcher.stats().retrying:
            for entry in self.acks.batcher.retrying_entries():
                d = entry.token
                if isinstance(d, _Delivery):
                    retrying[d.queue] = retrying.get(d.queue, 0) + 1
        return retrying

    @property
    def session(self) -> ClientSession:
        if self._session is None:
            raise RuntimeError("the consumer is not started")
        return self._session

    def on_results(self, results: list[tuple[_Delivery, object]]) -> None:
        """All results since the last wake-up, on the loop: acks, nacks, FIFO retries.

        A message keeps its cache slot until its ack (nack, dead-letter forward) settles, as Java evicts from
        its process queue only when the ack completes (docs/protocol.md §8.3): acks that cannot keep up then
        hold back receiving instead of piling up in the batcher until it overflows. The listener is never
        held back while the cache has room (bench scenario 1).

        A FIFO message stays at the head of its chain until its ack or dead-letter forward has settled on
        the server (`_heads_settled`), as Java's `FifoConsumeService` submits the next message only when
        `eraseFifoMessage` completes (docs/protocol.md §7.6)."""
        now = time.monotonic()
        acks = self.acks
        assert acks is not None
        deadline = now + self._ack_retry_window
        to_ack: list[tuple[AckKey, AckEntry]] = []
        failures = 0
        for d, ok in results:
            q = d.queue
            q.in_listener -= 1
            if ok is True:
                q.consumed += 1
                m = d.message
                q.acks_pending += 1
                if q.fifo is None:
                    to_ack.append((q.ack_key, AckEntry(m.message_id, m.receipt_handle, deadline, d)))
                else:
                    to_ack.append((q.ack_key, self._head_entry(q, m, d, deadline, acks.batcher)))
            elif ok is False:
                failures += 1
                if q.fifo is not None:
                    self._fifo_failed(d, now)
                else:
                    self._nack(d, deadline)
            else:
                # A ConsumeSuspend (only a lite push consumer's executor passes one through); Java counts it
                # with the failures (ProcessQueueImpl.statsConsumptionResult).
                assert isinstance(ok, ConsumeSuspend)
                failures += 1
                self._suspend(d, ok.seconds, now)
        # Counters and the batcher once per burst of results, not once per message.
        self.consumed += len(to_ack)
        if failures:
            self.consume_failures += failures
        if to_ack:
            acks.add_many(to_ack, now)

    @staticmethod
    def _head_entry(
        q: _Queue, m: ReceivedMessage, token: object, deadline: float, batcher: AckBatcher
    ) -> AckEntry:
        """The ack / forward entry of a FIFO chain head: retried until settled while its queue is assigned
        (`UNTIL_SETTLED`), else bounded by `deadline`; tracked in `q.settling` either way, so that a drop
        bounds it and its settling lets the chain go on (a dropped queue's chains are still consumed,
        `AssignmentScanner._drop_queue`)."""
        entry = AckEntry(m.message_id, m.receipt_handle, deadline if q.pq.dropped else UNTIL_SETTLED, token)
        q.settling[entry] = batcher
        return entry

    def _nack(self, d: _Delivery, deadline: float) -> None:
        """FAILURE: ChangeInvisibleDuration by the server's backoff for this delivery attempt
        (docs/protocol.md §7.4)."""
        m = d.message
        assert self.nacks is not None
        delay = self.session.settings.retry_policy.next_delay(max(1, m.delivery_attempt))
        entry = AckEntry(
            m.message_id, m.receipt_handle, deadline, _Token(d.queue, m.topic, m.message_id, delay, d)
        )
        d.queue.acks_pending += 1
        self.nacks.add(d.queue.ack_key, entry)

    def _suspend(self, d: _Delivery, seconds: float, now: float) -> None:
        """ConsumeSuspend: ChangeInvisibleDuration by `seconds` (Java `ProcessQueueImpl.eraseFifoMessage` with
        a `ConsumeResultSuspend`: no local retry, no dead-lettering). A FIFO head stays at the head of its
        chain until it settles; then the messages of its lite topic behind it are suspended too instead of
        going to the listener (`LiteFifoConsumeService.consumeIteratively`), so none of them overtakes it."""
        m = d.message
        q = d.queue
        assert self.nacks is not None
        token = _Token(q, m.topic, m.message_id, seconds, d)
        deadline = now + self._ack_retry_window
        q.acks_pending += 1
        if q.fifo is None:
            self.nacks.add(q.ack_key, AckEntry(m.message_id, m.receipt_handle, deadline, token))
            return
        entry = self._head_entry(q, m, token, deadline, self.nacks.batcher)
        self._suspended[entry] = (m.lite_topic, seconds)
        self.nacks.add(q.ack_key, entry)

    def nack_unstarted(self, unstarted: list[_Delivery]) -> None:
        """Close: messages handed to the pool but never started go back to the server now, with a short
        ChangeInvisibleDuration, instead of staying invisible until the server's invisible time (60 s,
        auto-renewed) runs out. The nacks are sent while running listeners finish and are awaited with the
        acks. FIFO messages are left to the server's redelivery: nacking a group's head out of turn could only
        reorder it."""
        fifo = self.session.settings.fifo
        deadline = time.monotonic() + self._ack_retry_window
        assert self.nacks is not None
        for d in unstarted:
            q = d.queue
            q.in_listener -= 1
            if fifo:
                continue
            m = d.message
            token = _Token(q, m.topic, m.message_id, CLOSE_NACK_DELAY, d)
            q.acks_pending += 1
            self.nacks.add(q.ack_key, AckEntry(m.message_id, m.receipt_handle, deadline, token))
        if not fifo:
            logger.info("close: %d received messages were not started; nacked for redelivery", len(unstarted))

    def _fifo_failed(self, d: _Delivery, now: float) -> None:
        """A FIFO message failed: retry locally on a loop timer, or dead-letter it. Either way it stays at the
        head of its chain: the group goes on once the forward has settled (`_heads_settled`)."""
        policy = self.session.settings.retry_policy
        m = d.message
        # Local retries count up from the server's delivery_attempt, and the
        # listener sees each one (Java `MessageViewImpl.incrementAndGetDeliveryAttempt`).
        attempt = m.delivery_attempt
        if fifo_failure_action(attempt, policy.max_attempts) is FifoAction.RETRY:
            delay = policy.next_delay(attempt)
            d.message = m._redelivered()
            loop = asyncio.get_running_loop()
            self._fifo_timers[d] = loop.call_later(delay, self._fifo_retry, d)
            return
        q = d.queue
        dlq = self.dlq
        assert dlq is not None
        token = _Token(q, m.topic, m.message_id, attempt, d)
        entry = self._head_entry(q, m, token, now + self._ack_retry_window, dlq.batcher)
        q.acks_pending += 1
        dlq.add(q.ack_key, entry)

    def _fifo_retry(self, d: _Delivery) -> None:
        self._fifo_timers.pop(d, None)
        if self._closing or self._submit is None:
            return
        # Retried even if its queue was dropped meanwhile: the proxy renews the message for this client
        # until it is settled (`AssignmentScanner._drop_queue`), so giving it up here would hold it back
        # until close.
        self.hand_over([d])

    def corrupted(self, q: _Queue, bad: Sequence[convert.Corrupted]) -> None:
        """Messages of `q` that failed to decode. Java: a corrupted standard message is nacked, a corrupted
        FIFO one dead-lettered (docs/protocol.md §6.6). They never took a cache slot."""
        logger.warning("%d corrupted message(s) from %s (%s)", len(bad), q.id, bad[0].reason)
        settings = self.session.settings
        for c in bad:
            token = _Token(q, c.topic, c.message_id, 1)
            entry = AckEntry(c.message_id, c.receipt_handle, time.monotonic() + self._ack_retry_window, token)
            if settings.fifo:
                assert self.dlq is not None
                self.dlq.add(q.ack_key, entry)
            else:
                assert self.nacks is not None
                self.nacks.add(q.ack_key, entry)

    # -- settling RPCs ------------------------------------------------------------------------------------

    async def _settle_call(self, operation: str, batch: AckBatch, rpc: str, request: Any) -> Any:
        """One settling RPC of `batch`, in a settle span when the consumer is instrumented."""
        endpoint = batch.key.endpoint
        instrumentation = self._instrumentation
        if instrumentation is None:
            return await self.session.call(endpoint, rpc, request, ok=_ANY_CODE)
        messages = []
        for entry in batch.entries:
            token = entry.token
            d = token if type(token) is _Delivery else getattr(token, "delivery", None)
            if isinstance(d, _Delivery):
                messages.append(d.message)
        span = instrumentation.settle(self._client, operation, batch.key.topic, messages)
        try:
            response = await self.session.call(endpoint, rpc, request, ok=_ANY_CODE)
        except BaseException as exc:
            span.end(endpoint, exc)
            raise
        code = response.status.code
        span.end(
            endpoint, None if code in OK_OR_MULTIPLE else error_for_status(code, response.status.message)
        )
        return response

    async def _send_acks(self, batch: AckBatch) -> Sequence[tuple[AckEntry, Outcome]]:
        key = batch.key
        request = spb.AckMessageRequest(group=self._group_pb, topic=self._topic_pb[key.topic])
        # Entries made in place with `add`: a list of AckMessageEntry objects passed as `entries=` is
        # copied into the request one by one, which made encoding twice as slow (1.7 against 0.9 µs per
        # entry, measured with timeit on a 32-entry request).
        add = request.entries.add
        for e in batch.entries:
            token = e.token
            # `_lite_topic_of` inline for the usual token, a delivery: one call fewer per message.
            lite_topic = token.message.lite_topic if type(token) is _Delivery else _lite_topic_of(token)
            if lite_topic is None:
                add(message_id=e.message_id, receipt_handle=e.receipt_handle)
            else:
                add(message_id=e.message_id, receipt_handle=e.receipt_handle, lite_topic=lite_topic)
        response = await self._settle_call("ack", batch, "AckMessage", request)
        return results_for(
            batch, response.status.code, [(r.message_id, r.status.code) for r in response.entries]
        )

    async def _send_nack(self, batch: AckBatch) -> Sequence[tuple[AckEntry, Outcome]]:
        entry = batch.entries[0]
        token = entry.token
        assert isinstance(token, _Token)
        request = spb.ChangeInvisibleDurationRequest(
            group=self._group_pb,
            topic=self._topic_resource(token.topic),
            receipt_handle=entry.receipt_handle,
            invisible_duration=convert.duration(token.value),
            message_id=token.message_id,
        )
        lite_topic = _lite_topic_of(token)
        if lite_topic is not None:
            # As the Java client's ConsumerImpl.wrapChangeInvisibleDuration for a lite message.
            request.lite_topic = lite_topic
            request.suspend = True
        response = await self._settle_call(
            "change_invisible_duration", batch, "ChangeInvisibleDuration", request
        )
        return results_for(batch, response.status.code)

    async def _send_dlq(self, batch: AckBatch) -> Sequence[tuple[AckEntry, Outcome]]:
        entry = batch.entries[0]
        token = entry.token
        assert isinstance(token, _Token)
        request = spb.ForwardMessageToDeadLetterQueueRequest(
            group=self._group_pb,
            topic=self._topic_resource(token.topic),
            receipt_handle=entry.receipt_handle,
            message_id=token.message_id,
            delivery_attempt=int(token.value),
            max_delivery_attempts=self.session.settings.retry_policy.max_attempts,
        )
        lite_topic = _lite_topic_of(token)
        if lite_topic is not None:
            request.lite_topic = lite_topic
        response = await self._settle_call(
            "forward_to_dead_letter_queue", batch, "ForwardMessageToDeadLetterQueue", request
        )
        return results_for(batch, response.status.code)

    def _topic_resource(self, topic: str) -> pb.Resource:
        return self._topic_pb.get(topic) or pb.Resource(resource_namespace=self._namespace, name=topic)

    def _acks_finished(self, finished: list[tuple[AckEntry, Fate]]) -> None:
        self._release([entry.token for entry, _fate in finished])
        if self._session is not None and self._session.settings.fifo:
            self._heads_settled(finished)

    def _nacks_finished(self, finished: list[tuple[AckEntry, Fate]]) -> None:
        self.nacked += sum(1 for _entry, fate in finished if fate is Fate.ACKED)
        self._release([entry.token for entry, _fate in finished])
        if self._suspended:
            self._heads_settled(finished)  # suspended FIFO heads (`_suspend`); other nacks are no heads

    def _dlq_finished(self, finished: list[tuple[AckEntry, Fate]]) -> None:
        self.dead_lettered += sum(1 for _entry, fate in finished if fate is Fate.ACKED)
        self._release([entry.token for entry, _fate in finished])
        self._heads_settled(finished)

    def _heads_settled(self, finished: list[tuple[AckEntry, Fate]]) -> None:
        """FIFO chain heads whose ack or dead-letter forward left its batcher: the core decides whether the
        chain goes on (`FifoSequencer.settled`); the next messages are handed to the listener pool."""
        follow_ups: list[_Delivery] = []
        for entry, fate in finished:
            token = entry.token
            d = token if type(token) is _Delivery else getattr(token, "delivery", None)
            if not isinstance(d, _Delivery):
                continue  # a corrupted message's forward: never in a chain
            q = d.queue
            suspended = self._suspended.pop(entry, None) if self._suspended else None
            if q.settling.pop(entry, None) is None or q.fifo is None:
                continue  # not a head its group waits for (the queue was dropped: the chain is gone)
            nxt = q.fifo.settled(d, fate)
            if nxt is not None and suspended is not None and nxt.message.lite_topic == suspended[0]:
                self._suspend(nxt, suspended[1], time.monotonic())  # its lite topic is put aside too
            elif nxt is not None:
                follow_ups.append(nxt)
            elif not releases_chain(fate):
                logger.warning(
                    "FIFO message %s of %s given up (%s) before the server settled it: its message group "
                    "stays blocked until the queue moves or the consumer closes, when the server "
                    "redelivers it ahead of the rest of its group",
                    d.message.message_id,
                    q.id,
                    fate.name,
                )
        if follow_ups and not self._closing and self._submit is not None:
            self.hand_over(follow_ups)

    def _release(self, tokens: list[object]) -> None:
        """Settled (acked, nacked, forwarded or given up): the messages leave the cache, making room.

        Once per finished batch; a batch's entries nearly always share one queue, so the per-queue sums are
        kept in locals until the queue changes."""
        freed: dict[_Queue, list[int]] = {}
        q: _Queue | None = None
        n = nbytes = 0
        for token in tokens:
            d = token if type(token) is _Delivery else getattr(token, "delivery", None)
            if d is None:
                continue  # a corrupted message's nack: it never took a cache slot
            assert isinstance(d, _Delivery)
            if d.queue is not q:
                if q is not None:
                    self._add_freed(freed, q, n, nbytes)
                q = d.queue
                n = nbytes = 0
            q.acks_pending -= 1
            n += 1
            nbytes += d.nbytes
        if q is not None:
            self._add_freed(freed, q, n, nbytes)
        if freed:
            now = time.monotonic()
            for q, (n, nbytes) in freed.items():
                q.pq.on_consumed(n, nbytes, now)
                q.event.set()

    @staticmethod
    def _add_freed(freed: dict[_Queue, list[int]], q: _Queue, n: int, nbytes: int) -> None:
        slot = freed.get(q)
        if slot is None:
            freed[q] = [n, nbytes]
        else:
            slot[0] += n
            slot[1] += nbytes


def _lite_topic_of(token: object) -> str | None:
    """The lite topic of the message an entry settles (None for other messages). A lite message's ack,
    nack and dead-letter forward name it, as the Java client's do: the server finds the message under its
    lite topic (upstream 5.5 `AckMessageEntry.lite_topic`)."""
    d = token if type(token) is _Delivery else getattr(token, "delivery", None)
    return d.message.lite_topic if isinstance(d, _Delivery) else None
