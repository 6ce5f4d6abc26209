"""One regression test per hot-path fault of the Rust push consumer (bench scenarios
1, 2, 3, 4, 5a, 5b: docs/benchmarks.md#scenarios).

Each asserts behaviour (counts, which calls were made, which thread ran what, what had happened when)
against the embedded server. Waits have generous deadlines; the outcome is read from events and counters,
never from how fast this machine is.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tests.push._util import ready, run, send_all, until
from thrust.message import ConsumeResult, Message, ReceivedMessage
from thrust.producer import Producer
from thrust.push_consumer import PushConsumer
from thrust.testing import embedded_server


@pytest.mark.slow
def test_acks_are_batched_and_consumption_never_waits_for_them() -> None:
    """Item 1: with a 2 s ack round trip, 160 cached messages are all consumed before the first ack returns
    (a listener waiting for its ack would have consumed 2, one per thread); acks go out as a few
    multi-entry AckMessage calls; at close acked == consumed."""

    async def main() -> None:
        async with embedded_server(topics=["t:1"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            consumed: list[str] = []
            go = threading.Event()

            def listener(m: ReceivedMessage) -> ConsumeResult:
                go.wait(30)
                consumed.append(m.message_id)
                return ConsumeResult.SUCCESS

            consumer = PushConsumer(
                endpoints=ep,
                group="g",
                subscriptions={"t": "*"},
                listener=listener,
                consumption_thread_count=2,
            )
            async with Producer(endpoints=ep, topics=["t"]) as producer, consumer:
                await ready(consumer)
                srv.faults.add_latency("AckMessage", 2.0)  # below the 3 s request timeout
                # Sending is not what is measured: the 160 messages are received and cached while the
                # listener holds, then consumed in one go.
                ids = await send_all(producer, [Message(topic="t", body=b"m%d" % i) for i in range(160)])
                await until(lambda: sum(q.cached_messages for q in consumer.stats().queues) >= 158, 30)
                go.set()
                await until(lambda: len(consumed) == 160 or consumer.stats().acked > 0, 30)
                # Consumption finished while no ack round trip had completed yet.
                assert len(consumed) == 160 and consumer.stats().acked == 0, (len(consumed), consumer.stats())
                await until(lambda: consumer.stats().acked == 160, 30)
                s = consumer.stats()
            assert sorted(consumed) == sorted(ids)
            assert srv.stats.entries["AckMessage"] == 160
            # Batched: far fewer RPCs than entries (up to 64 entries per batch, a 10 ms linger).
            assert srv.stats.calls["AckMessage"] <= 160 // 4
            assert s.ack_rpcs == srv.stats.calls["AckMessage"]
            assert consumer.stats().acked == consumer.stats().consumed == 160

    run(main())


def test_an_ack_batch_holds_two_receives_worth_by_default() -> None:
    """`ack_batch_size` defaults to 64 (two receives of 32): with a linger too long to matter, 128 consumed
    messages are acked in exactly two AckMessage calls of 64 entries, not four of 32."""

    async def main() -> None:
        async with embedded_server(topics=["t:1"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with Producer(endpoints=ep, topics=["t"]) as producer:
                await producer.send_batch([Message(topic="t", body=b"m%d" % i) for i in range(128)])
            consumer = PushConsumer(
                endpoints=ep,
                group="g",
                subscriptions={"t": "*"},
                listener=lambda m: ConsumeResult.SUCCESS,
                ack_linger=60.0,  # only a full batch goes out
            )
            async with consumer:
                await until(lambda: consumer.stats().acked == 128, 30)
                calls, entries = srv.stats.calls["AckMessage"], srv.stats.entries["AckMessage"]
            assert (calls, entries) == (2, 128)

    run(main())


@pytest.mark.slow
def test_plain_listener_runs_on_its_own_pool_and_the_loop_stays_free() -> None:
    """Item 2: a listener blocking 10 ms runs on `consumption_thread_count` threads (never the loop's), all of
    them busy at once; an unrelated 10 ms timer on the client's loop keeps ticking while listeners run."""

    async def main() -> None:
        async with embedded_server(topics=["t:1"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            lock = threading.Lock()
            state = {"now": 0, "peak": 0, "n": 0, "started": 0}
            threads: set[int] = set()
            # The first six calls meet here: all six threads busy at once, however slow the machine is
            # to hand out the messages (with fewer threads the barrier breaks and the peak stays below 6).
            meet = threading.Barrier(6)

            def listener(m: ReceivedMessage) -> ConsumeResult:
                with lock:
                    state["now"] += 1
                    state["peak"] = max(state["peak"], state["now"])
                    threads.add(threading.get_ident())
                    state["started"] += 1
                    first = state["started"] <= 6
                if first:
                    meet.wait(20)
                time.sleep(0.010)
                with lock:
                    state["now"] -= 1
                    state["n"] += 1
                return ConsumeResult.SUCCESS

            ticks = {"all": 0, "during_listener": 0}
            stop = asyncio.Event()

            async def ticker() -> None:
                while not stop.is_set():
                    await asyncio.sleep(0.010)
                    ticks["all"] += 1
                    # A tick on the loop while a listener call is running on another thread: the loop is
                    # not the one blocked in it.
                    if state["now"] > 0:
                        ticks["during_listener"] += 1

            consumer = PushConsumer(
                endpoints=ep,
                group="g",
                subscriptions={"t": "*"},
                listener=listener,
                consumption_thread_count=6,
            )
            async with Producer(endpoints=ep, topics=["t"]) as producer, consumer:
                await ready(consumer)
                tick = asyncio.ensure_future(ticker())
                await send_all(producer, [Message(topic="t", body=b"x") for _ in range(300)], chunk=64)
                await until(lambda: state["n"] == 300, timeout=60)
                stop.set()
                await tick
            assert threading.get_ident() not in threads
            assert len(threads) == 6
            assert state["peak"] == 6
            # Were the listener on the loop, no tick could ever run while a listener call is in progress.
            assert ticks["during_listener"] >= 5, ticks

    run(main())


@pytest.mark.slow
def test_a_broker_slow_to_answer_settings_does_not_stall_the_healthy_one() -> None:
    """Item 3: broker 1 answers Settings only after 5 s; consumption from broker 0 goes on meanwhile (before
    the consumer made a single call of broker 1's), and broker 1's messages are consumed once its session
    is up."""

    async def main() -> None:
        async with embedded_server(topics=["t:2"], groups=["g"], brokers=2) as srv:
            # (receives the consumer had made of broker 1 when it got the message, the message's endpoint)
            got: list[tuple[int, str]] = []

            def listener(m: ReceivedMessage) -> ConsumeResult:
                got.append((srv.stats.broker_calls[(1, "ReceiveMessage")], str(m.endpoint)))
                return ConsumeResult.SUCCESS

            async with Producer(endpoints=srv.endpoints[0], topics=["t"]) as producer:
                # start() returns once one broker's session is up; wait for both (on a loaded machine the
                # second may still be connecting), then make new sessions with broker 1 wait.
                await until(lambda: len(producer.session.open_sessions()) == 2)
                # Below the 6 s the client waits for a first Settings answer (request timeout + 3 s).
                srv.faults.delay_settings(5.0, broker=1)
                consumer = PushConsumer(
                    endpoints=srv.endpoints[0], group="g", subscriptions={"t": "*"}, listener=listener
                )
                async with consumer:
                    await until(lambda: len(consumer.stats().queues) == 2)
                    await until(lambda: any(q.receives_in_flight for q in consumer.stats().queues))
                    await send_all(producer, [Message(topic="t", body=b"x") for _ in range(40)])
                    await until(lambda: len(got) == 40, timeout=30)
            ep0, ep1 = srv.endpoints
            # The Settings reply of broker 1 was held (and only that one).
            held = srv.stats.latency
            assert held.get((1, "Telemetry"), 0.0) >= 5.0 and (0, "Telemetry") not in held, held
            early = [e for receives, e in got if receives == 0]
            assert early and all(e == ep0 for e in early), got
            assert srv.stats.broker_calls[(1, "SendMessage")] > 0, srv.stats.broker_calls
            assert ep1 in [e for receives, e in got if receives > 0], (srv.stats.broker_calls, got)
            assert srv.stats.broker_calls[(1, "AckMessage")] >= 1

    run(main())


@pytest.mark.slow
def test_failed_acks_retry_per_entry_and_invalid_handles_are_dropped_at_once() -> None:
    """Item 4: 400 messages, the first ack of each fails once, 4 receipt handles are invalid: the 396 valid
    acks complete, each invalid handle is attempted exactly once, nothing waits behind anything."""

    async def main() -> None:
        async with embedded_server(topics=["t:1"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            go = threading.Event()
            consumer = PushConsumer(
                endpoints=ep,
                group="g",
                subscriptions={"t": "*"},
                listener=lambda m: go.wait(10) and ConsumeResult.SUCCESS,
                consumption_thread_count=8,
            )
            async with Producer(endpoints=ep, topics=["t"]) as producer, consumer:
                await ready(consumer)
                srv.faults.fail_ack_entries(first_attempts=1)
                ids = await send_all(producer, [Message(topic="t", body=b"m%d" % i) for i in range(400)], 32)
                srv.faults.expire_messages(*ids[::100])
                go.set()  # nothing is acked before the faults are in place
                await until(lambda: consumer.stats().acked == 396, timeout=30)
                await until(lambda: consumer.stats().acks_dropped_invalid == 4)
                s = consumer.stats()
                assert s.acks_retrying == 0 and s.acks_pending == 0
            # 396 x (one failed + one good attempt) + 4 x one attempt each.
            assert s.ack_attempts == 396 * 2 + 4
            assert s.acks_dropped_expired == 0 and s.acks_dropped_overflow == 0
            assert srv.stats.entries["AckMessage"] == 396

    run(main())


def test_a_new_queue_starts_at_once_while_a_dropped_queue_sits_in_a_long_poll() -> None:
    """Item 5a: the assignment moves from queue 0 (in a 20 s long poll) to queue 1: queue 0's poll is
    cancelled, queue 1 receives at once, and a message taken from queue 0 before the move is still acked."""

    async def main() -> None:
        async with embedded_server(topics=["t:2"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            release = threading.Event()
            consumed: list[tuple[str, int]] = []

            def listener(m: ReceivedMessage) -> ConsumeResult:
                if m.body == b"first":
                    release.wait(10)
                consumed.append((m.body.decode(), m.queue_id))
                return ConsumeResult.SUCCESS

            consumer = PushConsumer(
                endpoints=ep, group="g", subscriptions={"t": "*"}, listener=listener, scan_interval=0.1
            )
            chosen = {"queue": 0}
            original = consumer._scanner._query_assignment

            async def assignment(topic: str, route: object) -> list[object]:
                await original(topic, route)  # type: ignore[arg-type]
                return [q for q in route.queues if q.queue_id == chosen["queue"]]  # type: ignore[attr-defined]

            consumer._scanner._query_assignment = assignment  # type: ignore[method-assign,assignment]
            async with Producer(endpoints=ep, topics=["t"]) as producer, consumer:
                await ready(consumer)
                await producer.send(Message(topic="t", body=b"first"))
                await until(lambda: consumer.stats().listeners_in_flight == 1)
                # Queue 0 is now in a long poll (nothing else to deliver) and its first message is in the
                # listener. Move the assignment.
                await until(lambda: consumer.stats().receives_in_flight >= 1)
                chosen["queue"] = 1
                moved = time.monotonic()
                await until(lambda: consumer.stats().queues_dropped == 1)
                await until(lambda: [q.queue_id for q in consumer.stats().queues] == [1])
                await until(lambda: consumer.stats().receives_in_flight >= 1)
                await producer.send(Message(topic="t", body=b"second"))
                await until(lambda: any(b == "second" for b, _ in consumed))
                # Queue 1 served "second" while the message taken from queue 0 was still in the listener,
                # before the 20 s long poll queue 0 sat in could have ended on its own (a generous net:
                # the steps above take well under a second on a quiet machine).
                assert ("second", 1) in consumed and consumer.stats().listeners_in_flight == 1
                assert time.monotonic() - moved < 15
                release.set()
                await until(lambda: consumer.stats().acked == 2, timeout=5)
            assert srv.stats.entries["AckMessage"] == 2

    run(main())


@pytest.mark.slow
def test_a_topics_scan_never_touches_another_topics_queues() -> None:
    """Item 5b: topics a and b scanned every 0.1 s; no queue is ever dropped or recreated, and both topics
    are consumed completely."""

    async def main() -> None:
        async with embedded_server(topics=["a:1", "b:1"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            got: dict[str, int] = {"a": 0, "b": 0}

            def listener(m: ReceivedMessage) -> ConsumeResult:
                got[m.topic] += 1
                return ConsumeResult.SUCCESS

            consumer = PushConsumer(
                endpoints=ep,
                group="g",
                subscriptions={"a": "*", "b": "*"},
                listener=listener,
                scan_interval=0.1,
            )
            async with Producer(endpoints=ep, topics=["a", "b"]) as producer, consumer:
                await ready(consumer, queues=2)
                queue_objects = {qid: id(q) for qid, q in consumer._scanner.queues.items()}
                scans_before = srv.stats.calls["QueryAssignment"]
                for _ in range(10):
                    await send_all(
                        producer, [Message(topic=t, body=b"x") for t in ("a", "b") for _ in range(10)]
                    )
                    # Each batch meets a rescan of both topics (one QueryAssignment each) before the next.
                    scanned = srv.stats.calls["QueryAssignment"]
                    await until(lambda: srv.stats.calls["QueryAssignment"] >= scanned + 2, timeout=10)  # noqa: B023
                await until(lambda: got == {"a": 100, "b": 100}, timeout=10)
                assert srv.stats.calls["QueryAssignment"] - scans_before >= 10
                assert {qid: id(q) for qid, q in consumer._scanner.queues.items()} == queue_objects
                assert consumer.stats().queues_dropped == 0

    run(main())
