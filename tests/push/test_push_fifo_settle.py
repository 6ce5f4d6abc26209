"""FIFO push consumer: a message group goes on only once its head is settled on the server.

Java's `FifoConsumeService` submits a group's next message when `ProcessQueueImpl.eraseFifoMessage` has
completed, i.e. once `ackFifoMessage` / `forwardToDeadLetterQueue` has succeeded (docs/protocol.md §7.6).
Every test sends the whole group before the consumer starts, so that the server hands it out in one
receive and only the client's own sequencing keeps the order (the server blocks a group only between
receives).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from tests.push._util import run, until
from thrust._codec.status import Code
from thrust.message import ConsumeResult, Message, ReceivedMessage
from thrust.producer import Producer
from thrust.push_consumer import PushConsumer
from thrust.server.config import GroupSpec
from thrust.server.core.model import GroupRetryPolicy
from thrust.server.faults import Faults, Rpc
from thrust.simple_consumer import SimpleConsumer
from thrust.testing import embedded_server

DLQ = Rpc.FORWARD_MESSAGE_TO_DEAD_LETTER_QUEUE.value
ACK = Rpc.ACK_MESSAGE.value
BODIES = (b"poison", b"next1", b"next2")


def _group(name: str) -> GroupSpec:
    # Two attempts: the poison fails once, is retried locally once, then is forwarded to %DLQ%<group>.
    return GroupSpec(name, fifo=True, retry=GroupRetryPolicy(max_attempts=2, customized=(0.02,)))


async def _send_group(endpoint: str, topic: str, bodies: tuple[bytes, ...] = BODIES) -> list[str]:
    async with Producer(endpoints=endpoint, topics=[topic]) as producer:
        return [
            (await producer.send(Message(topic=topic, body=b, message_group="k"))).message_id for b in bodies
        ]


class _Recorder:
    """A listener that fails the poison message and records, per delivery, the body and the server's count
    of settled requests of `rpc` at that moment (what the server had settled before the delivery)."""

    def __init__(self, stats_entries: object, rpc: str) -> None:
        self._entries = stats_entries
        self._rpc = rpc
        self._lock = threading.Lock()
        self.seen: list[tuple[bytes, int]] = []

    def __call__(self, m: ReceivedMessage) -> ConsumeResult:
        with self._lock:
            self.seen.append((m.body, self._entries[self._rpc]))  # type: ignore[index]
        return ConsumeResult.FAILURE if m.body == b"poison" else ConsumeResult.SUCCESS

    @property
    def bodies(self) -> list[bytes]:
        with self._lock:
            return [b for b, _ in self.seen]


async def _dead_letters(endpoint: str, group: str) -> list[bytes]:
    async with SimpleConsumer(
        endpoints=endpoint, group="dlqreader", subscriptions={f"%DLQ%{group}": "*"}, await_duration=1
    ) as reader:
        dead: list[ReceivedMessage] = []
        end = time.monotonic() + 10
        while not dead and time.monotonic() < end:
            dead = await reader.receive(32, 30)
        for m in dead:
            await reader.ack(m)
        return [m.body for m in dead]


def test_fifo_group_waits_for_a_failing_dead_letter_forward_and_keeps_its_order() -> None:
    """The forward of the poison message fails three times (INTERNAL_SERVER_ERROR): it is retried, and the
    next message of the group runs only once the server has the poison in %DLQ%. Nothing is lost."""

    async def main() -> None:
        faults = Faults()
        async with embedded_server(
            topics=["q:1:FIFO"], groups=[_group("gq"), "dlqreader"], faults=faults
        ) as srv:
            ep = srv.endpoints[0]
            await _send_group(ep, "q")
            faults.fail_next(Rpc.FORWARD_MESSAGE_TO_DEAD_LETTER_QUEUE, Code.INTERNAL_SERVER_ERROR, count=3)
            listener = _Recorder(srv.stats.entries, DLQ)
            consumer = PushConsumer(endpoints=ep, group="gq", subscriptions={"q": "*"}, listener=listener)
            async with consumer:
                await until(lambda: consumer.stats().acked == 2, timeout=15)
                s = consumer.stats()
            assert listener.bodies == [b"poison", b"poison", b"next1", b"next2"]
            # next1 was handed to the listener only after the (fourth) forward had succeeded on the server.
            assert [n for b, n in listener.seen if b != b"poison"] == [1, 1]
            assert srv.stats.calls[DLQ] == 4 and srv.stats.injected[DLQ] == 3
            assert (s.dead_lettered, s.acked, s.dead_letters_pending, s.consume_failures) == (1, 2, 0, 2)
            assert s.nacked == 0
            # The local retry and the successors released by the forward were counted into the listener
            # and out again, like the first deliveries.
            assert s.listeners_in_flight == 0 and [q.listeners_in_flight for q in s.queues] == [0]
            assert await _dead_letters(ep, "gq") == [b"poison"]

    run(main())


def test_fifo_group_waits_for_a_failing_ack() -> None:
    """Each message's first two acks fail: the next message of its group runs only once it is acked."""

    async def main() -> None:
        faults = Faults()
        async with embedded_server(topics=["q:1:FIFO"], groups=[_group("ga")], faults=faults) as srv:
            ep = srv.endpoints[0]
            await _send_group(ep, "q", (b"a", b"b", b"c"))
            faults.fail_ack_entries(Code.INTERNAL_SERVER_ERROR, first_attempts=2)
            listener = _Recorder(srv.stats.entries, ACK)
            consumer = PushConsumer(endpoints=ep, group="ga", subscriptions={"q": "*"}, listener=listener)
            async with consumer:
                await until(lambda: consumer.stats().acked == 3, timeout=15)
                s = consumer.stats()
            # (body, messages the server had acked before it ran)
            assert listener.seen == [(b"a", 0), (b"b", 1), (b"c", 2)]
            assert srv.stats.injected[ACK + ".entry"] == 6
            assert (s.acked, s.acks_dropped_invalid, s.acks_dropped_expired) == (3, 0, 0)
            assert s.listeners_in_flight == 0 and [q.listeners_in_flight for q in s.queues] == [0]

    run(main())


def test_fifo_forward_answered_invalid_receipt_handle_releases_the_group() -> None:
    """INVALID_RECEIPT_HANDLE: the server no longer holds the message under this handle, so no retry can
    succeed; the forward is not retried and the group goes on (as Java does for a FIFO ack answered so,
    `ackFifoMessage`)."""

    async def main() -> None:
        faults = Faults()
        async with embedded_server(topics=["q:1:FIFO"], groups=[_group("gi")], faults=faults) as srv:
            ep = srv.endpoints[0]
            poison_id, *_ = await _send_group(ep, "q")
            faults.expire_messages(poison_id)
            listener = _Recorder(srv.stats.entries, DLQ)
            consumer = PushConsumer(endpoints=ep, group="gi", subscriptions={"q": "*"}, listener=listener)
            async with consumer:
                await until(lambda: consumer.stats().acked == 2, timeout=15)
                s = consumer.stats()
            assert listener.bodies == [b"poison", b"poison", b"next1", b"next2"]
            assert srv.stats.calls[DLQ] == 1  # refused for good: not retried
            assert (s.dead_lettered, s.dead_letters_pending) == (0, 0)

    run(main())


@pytest.mark.slow
def test_close_with_a_forward_still_failing_is_bounded_and_the_poison_comes_back_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The forward keeps failing: the group stays blocked behind the poison message while the consumer runs;
    close gives the forward a bounded drain, then gives up and logs it. The server redelivers the poison
    ahead of the rest of its group to the next consumer, which dead-letters it and goes on, in order."""

    async def main() -> None:
        faults = Faults()
        async with embedded_server(
            topics=["q:1:FIFO"], groups=[_group("gc"), "dlqreader"], faults=faults
        ) as srv:
            ep = srv.endpoints[0]
            await _send_group(ep, "q")
            faults.fail_fraction(Rpc.FORWARD_MESSAGE_TO_DEAD_LETTER_QUEUE, Code.INTERNAL_SERVER_ERROR, 1.0)
            first = _Recorder(srv.stats.entries, DLQ)
            consumer = PushConsumer(
                endpoints=ep, group="gc", subscriptions={"q": "*"}, listener=first, request_timeout=1.0
            )
            await consumer.start()
            try:
                await until(lambda: srv.stats.calls[DLQ] >= 4, timeout=15)
                # A negative check, so a fixed span: next1 let past the unsettled poison would arrive in it.
                await asyncio.sleep(0.3)
                assert first.bodies == [b"poison", b"poison"]  # next1 waits behind the unsettled poison
                assert consumer.stats().dead_letters_pending == 1
            finally:
                started = time.monotonic()
                await consumer.close()
                took = time.monotonic() - started
            # Bounded by the drain (request timeout + 1 s) plus cancelling and leaving, not by the 60 s ack
            # window: a generous net far below that window.
            assert took < 20.0, took
            assert any("not settled" in r.getMessage() and "dlq" in r.getMessage() for r in caplog.records)

            faults.clear()
            second = _Recorder(srv.stats.entries, DLQ)
            consumer = PushConsumer(endpoints=ep, group="gc", subscriptions={"q": "*"}, listener=second)
            async with consumer:
                await until(lambda: consumer.stats().acked == 2, timeout=15)
                s = consumer.stats()
            # Redelivered at server attempt 2 = max attempts: forwarded at its first failure, then the rest.
            assert second.bodies == [b"poison", b"next1", b"next2"]
            assert s.dead_lettered == 1
            assert await _dead_letters(ep, "gc") == [b"poison"]

    with caplog.at_level(logging.WARNING, logger="thrust.consumer"):
        run(main())
