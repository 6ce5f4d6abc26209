"""The push consumer hands a receive's first message to the listener while the server is still streaming
the rest of the batch (bench scenario 5a; `thrust._push.receiver._Stream`), and keeps its accounting right
when the stream breaks after that. Real embedded server; the server's ReceiveMessage is wrapped so that it
pauses after writing the first message of a stream (or breaks the stream there), which turns "before the
stream ended" into an ordering of events rather than a wall-clock threshold.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from tests.push._util import run, until
from thrust._core.process_queue import ProcessQueue, ReceiveTicket
from thrust.message import ConsumeResult, Message, ReceivedMessage
from thrust.producer import Producer
from thrust.push_consumer import PushConsumer
from thrust.server.config import GroupSpec
from thrust.server.service.consumer import ConsumerRpcs
from thrust.testing import embedded_server

# Fail-safe only: a client that reads the whole stream before handing anything over makes the paused
# stream wait this long, and the ordering assertions then fail.
PAUSE_LIMIT = 5.0


class _StreamHook:
    """Wraps `ConsumerRpcs.ReceiveMessage`: the first stream that carries messages pauses after its
    first message until `release` is set (or PAUSE_LIMIT passes), or breaks there when `break_stream`."""

    def __init__(self, *, break_stream: bool = False) -> None:
        self.break_stream = break_stream
        self.events: list[str] = []
        self.release: asyncio.Event | None = None
        self.paused_once = False
        self.timed_out = False

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        original = ConsumerRpcs.ReceiveMessage
        hook = self

        async def receive(self: Any, request: Any, context: Any) -> AsyncIterator[Any]:
            target = not hook.paused_once
            written = 0
            async for response in original(self, request, context):
                is_message = response.WhichOneof("content") == "message"
                if target and written and not is_message:
                    hook.events.append("server: stream's last message written")
                if target and is_message and not written:
                    # Recorded before the write, not after: the server resumes this generator only when
                    # grpc asks for the next item, and a fast client can have the message in its
                    # listener by then (the native transport does), which would order the records
                    # wrongly without the client having done anything wrong.
                    hook.events.append("server: writing first message")
                yield response
                if not is_message or not target:
                    continue
                written += 1
                if written == 1:
                    hook.paused_once = True
                    if hook.break_stream:
                        await context.abort(grpc.StatusCode.INTERNAL, "stream broken after one message")
                    assert hook.release is not None
                    try:
                        await asyncio.wait_for(hook.release.wait(), PAUSE_LIMIT)
                    except TimeoutError:
                        hook.timed_out = True

        monkeypatch.setattr(ConsumerRpcs, "ReceiveMessage", receive)


def _recording_listener() -> tuple[list[int], Callable[[ReceivedMessage], ConsumeResult]]:
    """A listener that records each body (an int) it consumes, and the list it records them in."""
    seen: list[int] = []
    lock = threading.Lock()

    def listener(m: ReceivedMessage) -> ConsumeResult:
        with lock:
            seen.append(int(m.body))
        return ConsumeResult.SUCCESS

    return seen, listener


def _first_message_before_stream_end(monkeypatch: pytest.MonkeyPatch, fifo: bool) -> None:
    hook = _StreamHook()
    hook.install(monkeypatch)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        hook.release = asyncio.Event()
        groups = [GroupSpec("g", fifo=True)] if fifo else ["g"]
        topic = "t:1:FIFO" if fifo else "t:1"
        async with embedded_server(topics=[topic], groups=groups) as srv:
            ep = srv.endpoints[0]
            seen: list[int] = []
            lock = threading.Lock()

            def listener(m: ReceivedMessage) -> ConsumeResult:
                with lock:
                    if not seen:
                        # On the loop, in order with the server's own records.
                        loop.call_soon_threadsafe(hook.events.append, "listener: first message")
                        loop.call_soon_threadsafe(hook.release.set)  # type: ignore[union-attr]
                    seen.append(int(m.body))
                return ConsumeResult.SUCCESS

            async with Producer(endpoints=ep, topics=["t"]) as producer:
                for i in range(40):  # one receive takes 32 of them, in order
                    await producer.send(
                        Message(topic="t", body=b"%d" % i, message_group="mg" if fifo else None)
                    )
                consumer = PushConsumer(endpoints=ep, group="g", subscriptions={"t": "*"}, listener=listener)
                async with consumer:
                    await until(lambda: consumer.stats().acked == 40, timeout=20)
                    await until(lambda: consumer.stats().cached_messages == 0)
                    s = consumer.stats()
        assert not hook.timed_out, hook.events
        assert hook.events == [
            "server: writing first message",
            "listener: first message",
            "server: stream's last message written",
        ]
        assert sorted(seen) == list(range(40))  # each exactly once
        if fifo:
            assert seen == list(range(40))  # and in order: the rest of the stream followed the first
        assert (s.received, s.consumed, s.acked) == (40, 40, 40)
        assert s.receives_in_flight <= 2 and s.acks_dropped_invalid == 0

    run(main())


def test_first_message_reaches_the_listener_before_the_stream_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    _first_message_before_stream_end(monkeypatch, fifo=False)


def test_fifo_first_message_reaches_the_listener_before_the_stream_ends_and_order_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _first_message_before_stream_end(monkeypatch, fifo=True)


def test_a_stream_broken_after_its_first_message_keeps_that_message_and_rotates_the_attempt_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first message was handed over when the stream breaks: it is consumed once and acked, its cache
    slot is freed by the ack, and the retry carries a new attempt id (the old one would have the broker serve
    the same batch, that message included, again)."""
    hook = _StreamHook(break_stream=True)
    hook.install(monkeypatch)

    async def main() -> None:
        async with embedded_server(topics=["t:1"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            seen, listener = _recording_listener()

            async with Producer(endpoints=ep, topics=["t"]) as producer:
                for i in range(40):
                    await producer.send(Message(topic="t", body=b"%d" % i))
                consumer = PushConsumer(endpoints=ep, group="g", subscriptions={"t": "*"}, listener=listener)
                async with consumer:
                    # The broken receive popped 0..31 and delivered 0; 1..31 stay invisible on the server.
                    # The retry pops 32..39.
                    await until(lambda: consumer.stats().acked == 9, timeout=20)
                    await until(lambda: consumer.stats().cached_messages == 0)
                    s = consumer.stats()
                    receives = [r.attempt_id for r in srv.stats.receives if r.topic == "t"]
        assert hook.paused_once and hook.events == ["server: writing first message"]
        assert sorted(seen) == [0, *range(32, 40)]  # nothing twice
        assert (s.received, s.consumed, s.acked, s.receive_failures) == (9, 9, 9, 1)
        assert s.cached_bytes == 0 and s.receives_in_flight <= 2
        assert receives.count(receives[0]) == 1  # rotated: the broken receive's batch is not asked for again

    run(main())


def test_an_active_queues_receives_hand_their_messages_over_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the receive of an idle queue hands its first message over early; under a backlog the queue is
    active and each later stream goes to the listener in one hand-off, when it ends (one wake-up of the
    loop and of a listener thread fewer per receive)."""
    partial: list[int] = []
    whole: list[int] = []
    on_partial, on_received = ProcessQueue.on_partial, ProcessQueue.on_received

    def counted_partial(self: ProcessQueue, ticket: ReceiveTicket, n: int, *args: Any) -> bool:
        partial.append(n)
        return on_partial(self, ticket, n, *args)

    def counted_received(self: ProcessQueue, ticket: ReceiveTicket, n: int, *args: Any) -> None:
        whole.append(n)
        on_received(self, ticket, n, *args)

    monkeypatch.setattr(ProcessQueue, "on_partial", counted_partial)
    monkeypatch.setattr(ProcessQueue, "on_received", counted_received)

    async def main() -> None:
        async with embedded_server(topics=["t:1"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with Producer(endpoints=ep, topics=["t"]) as producer:
                await producer.send_batch([Message(topic="t", body=b"%d" % i) for i in range(100)])
            seen, listener = _recording_listener()

            consumer = PushConsumer(endpoints=ep, group="g", subscriptions={"t": "*"}, listener=listener)
            async with consumer:
                await until(lambda: consumer.stats().acked == 100, timeout=20)
        assert sorted(seen) == list(range(100))
        # the first receive, of the new (idle) queue: its first message early, the rest at its end; the
        # receives after it, of the active queue, each handed over whole
        assert partial == [1], partial
        assert sum(partial) + sum(whole) == 100 and sum(1 for n in whole if n) >= 4, whole

    run(main())
