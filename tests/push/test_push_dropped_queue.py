"""A queue that stops being assigned while its receives are in flight loses nothing.

The proxy registers a push consumer's receipt handles before it writes the messages, and renews them for
as long as the client stays connected (apache/rocketmq proxy `ReceiveMessageActivity`,
`DefaultReceiptHandleManager`). A message the client never reads off a stream it cancelled, or reads and
then leaves unsettled, therefore comes back only once the consumer closes: on a real cluster, acknowledged
sends went missing after a broker was killed (docs/reliability.md, bug 11). Java never cancels a dropped
queue's receive (`ProcessQueueImpl.drop()` only stops the next one) and consumes what it brings; so does
thrust now.

The embedded server's `Faults.hold_popped_next` holds a receive's answer after it popped the messages,
which is the window in which a cancel loses them. Each test first proves the queue was dropped before the
message reached the listener, so it cannot pass without exercising the drop.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.push._util import ready, run, until
from thrust.message import ConsumeResult, Message, ReceivedMessage
from thrust.producer import Producer
from thrust.push_consumer import PushConsumer
from thrust.server.config import GroupSpec
from thrust.server.core.model import GroupRetryPolicy
from thrust.testing import embedded_server

pytestmark = [pytest.mark.slow]

# Long enough for the scan (every 0.1 s) to drop the queue while the answer is held; what the tests check
# does not depend on it (each asserts the drop came first).
HOLD = 4.0


def _switchable(consumer: PushConsumer) -> dict[str, bool]:
    """Make the consumer's assignment scan answer nothing once `switch["assigned"]` is False."""
    switch = {"assigned": True}
    original = consumer._scanner._query_assignment

    async def assignment(topic: str, route: object) -> list[object]:
        queues = await original(topic, route)  # type: ignore[arg-type]
        return list(queues) if switch["assigned"] else []

    consumer._scanner._query_assignment = assignment  # type: ignore[method-assign,assignment]
    return switch


def test_a_dropped_queues_receive_runs_to_its_end_and_its_messages_are_consumed() -> None:
    """The queue is dropped while the server holds a receive that has popped a message: the receive is not
    cancelled, and the message reaches the listener (after the drop) and is acked."""

    async def main() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            seen: list[tuple[bytes, int]] = []
            consumer: PushConsumer

            async def listener(m: ReceivedMessage) -> ConsumeResult:
                # An async listener runs on the loop: the counter is read in order with the drop.
                seen.append((m.body, consumer.stats().queues_dropped))
                return ConsumeResult.SUCCESS

            consumer = PushConsumer(
                endpoints=ep, group="g", subscriptions={"t": "*"}, listener=listener, scan_interval=0.1
            )
            switch = _switchable(consumer)
            async with Producer(endpoints=ep, topics=["t"]) as producer, consumer:
                await ready(consumer)
                srv.faults.hold_popped_next(HOLD)
                await producer.send(Message(topic="t", body=b"held"))
                await until(lambda: srv.faults.stats.held_pops == 1)
                switch["assigned"] = False
                await until(lambda: consumer.stats().queues_dropped == 1)
                assert seen == []  # the answer is still held: the drop came first
                await until(lambda: bool(seen), timeout=HOLD + 30)
                assert seen == [(b"held", 1)]
                assert consumer.stats().queues == ()
                await until(lambda: consumer.stats().acked == 1)
            assert srv.stats.entries["AckMessage"] == 1

    run(main())


def test_a_dropped_fifo_queue_consumes_its_waiting_messages_in_order() -> None:
    """FIFO: the queue is dropped while the head of a message group is in the listener and the rest of the
    group waits behind it. The group goes on, in order, on the dropped queue; nothing is left popped."""

    async def main() -> None:
        group = GroupSpec("gf", fifo=True, retry=GroupRetryPolicy(max_attempts=3, customized=(0.02,)))
        async with embedded_server(topics=["t:1:FIFO"], groups=[group]) as srv:
            ep = srv.endpoints[0]
            async with Producer(endpoints=ep, topics=["t"]) as producer:
                for body in (b"a", b"b", b"c"):
                    await producer.send(Message(topic="t", body=body, message_group="k"))
            gate = asyncio.Event()
            seen: list[tuple[bytes, int]] = []
            consumer: PushConsumer

            async def listener(m: ReceivedMessage) -> ConsumeResult:
                if m.body == b"a":
                    await gate.wait()
                seen.append((m.body, consumer.stats().queues_dropped))
                return ConsumeResult.SUCCESS

            consumer = PushConsumer(
                endpoints=ep, group="gf", subscriptions={"t": "*"}, listener=listener, scan_interval=0.1
            )
            switch = _switchable(consumer)
            async with consumer:
                await until(lambda: consumer.stats().listeners_in_flight == 1)
                await until(lambda: consumer.stats().cached_messages == 3)  # the head runs, two wait
                switch["assigned"] = False
                await until(lambda: consumer.stats().queues_dropped == 1)
                gate.set()
                await until(lambda: len(seen) == 3)
                assert seen == [(b"a", 1), (b"b", 1), (b"c", 1)]
                await until(lambda: consumer.stats().acked == 3)
            assert srv.stats.entries["AckMessage"] == 3

    run(main())


def test_a_fifo_message_in_its_local_retry_backoff_is_retried_after_its_queue_is_dropped() -> None:
    """FIFO: the head failed and waits for its local retry when the queue is dropped. It is still retried
    and acked (given up, it would stay popped for this client until it closes)."""

    async def main() -> None:
        group = GroupSpec("gr", fifo=True, retry=GroupRetryPolicy(max_attempts=3, customized=(3.0,)))
        async with embedded_server(topics=["t:1:FIFO"], groups=[group]) as srv:
            ep = srv.endpoints[0]
            async with Producer(endpoints=ep, topics=["t"]) as producer:
                await producer.send(Message(topic="t", body=b"x", message_group="k"))
            attempts: list[tuple[int, int]] = []
            consumer: PushConsumer

            async def listener(m: ReceivedMessage) -> ConsumeResult:
                attempts.append((m.delivery_attempt, consumer.stats().queues_dropped))
                return ConsumeResult.FAILURE if len(attempts) == 1 else ConsumeResult.SUCCESS

            consumer = PushConsumer(
                endpoints=ep, group="gr", subscriptions={"t": "*"}, listener=listener, scan_interval=0.1
            )
            switch = _switchable(consumer)
            async with consumer:
                await until(lambda: len(attempts) == 1)
                switch["assigned"] = False
                await until(lambda: consumer.stats().queues_dropped == 1)
                await until(lambda: len(attempts) == 2)
                assert attempts == [(1, 0), (2, 1)]
                await until(lambda: consumer.stats().acked == 1)
            assert srv.stats.entries["AckMessage"] == 1

    run(main())


def test_push_receives_leave_the_server_more_than_a_request_timeout_after_their_poll() -> None:
    """Each push receive asks for the whole long polling under a deadline 5 s longer than long polling +
    request timeout (`ClientSettings.push_receive_deadline`), so that a loaded proxy answers before the
    client gives up."""

    async def main() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            consumer = PushConsumer(
                endpoints=ep, group="g", subscriptions={"t": "*"}, listener=lambda m: ConsumeResult.SUCCESS
            )
            asked: list[tuple[float, float]] = []
            async with consumer:
                session = consumer.session
                original = session.receive

                async def receive(endpoint, request, *, timeout, **options):  # type: ignore[no-untyped-def]
                    poll = request.long_polling_timeout
                    asked.append((poll.seconds + poll.nanos / 1e9, timeout))
                    return await original(endpoint, request, timeout=timeout, **options)

                session.receive = receive  # type: ignore[method-assign]
                async with Producer(endpoints=ep, topics=["t"]) as producer:
                    await producer.send(Message(topic="t", body=b"x"))
                full = consumer.session.settings.long_polling_timeout
                # (a queue's first poll may be shorter: `ClientSettings.push_spread_poll`)
                await until(lambda: any(poll == full for poll, _ in asked), what="a poll of the whole 20 s")
            settings = consumer.session.settings
            assert all(timeout == settings.push_receive_deadline for _, timeout in asked)
            assert all(timeout - poll >= settings.request_timeout + 5.0 for poll, timeout in asked)
            assert settings.push_receive_deadline - full == settings.request_timeout + 5.0

    run(main())
