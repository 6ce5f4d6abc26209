"""One regression test per hot-path fault of the Rust push consumer (bench scenarios
1, 2, 3, 4, 5a, 5b: docs/benchmarks.md#scenarios).

Each asserts behaviour (counts, which calls were made, which thread ran what) against the embedded server;
where a bound on time is asserted it is far below what the faulty design needs (seconds vs. a long poll or
a per-message ack round trip), not a speed target.
"""

from __future__ import annotations

import asyncio
import statistics
import threading
import time

from tests.push._util import ready, run, send_all, until
from thrust.message import ConsumeResult, Message, ReceivedMessage
from thrust.producer import Producer
from thrust.push_consumer import PushConsumer
from thrust.testing import embedded_server


def test_seed1_acks_are_batched_and_consumption_never_waits_for_them() -> None:
    """Item 1: with a 2 s ack round trip, 160 messages are consumed long before the first ack returns;
    acks go out as a few multi-entry AckMessage calls; at close acked == consumed."""

    async def main() -> None:
        async with embedded_server(topics=["t:1"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            consumed: list[str] = []
            consumer = PushConsumer(
                endpoints=ep,
                group="g",
                subscriptions={"t": "*"},
                listener=lambda m: consumed.append(m.message_id) or ConsumeResult.SUCCESS,
                consumption_thread_count=2,
            )
            async with Producer(endpoints=ep, topics=["t"]) as producer, consumer:
                await ready(consumer)
                srv.faults.add_latency("AckMessage", 2.0)
                sent_at = time.monotonic()
                ids = await send_all(producer, [Message(topic="t", body=b"m%d" % i) for i in range(160)])
                await until(lambda: len(consumed) == 160)
                # Consumption finished while no ack round trip had completed yet.
                assert consumer.stats().acked == 0
                assert time.monotonic() - sent_at < 2.0
                await until(lambda: consumer.stats().acked == 160)
                s = consumer.stats()
            assert sorted(consumed) == sorted(ids)
            assert srv.stats.entries["AckMessage"] == 160
            # Batched: far fewer RPCs than entries (32 entries per batch, a 10 ms linger).
            assert srv.stats.calls["AckMessage"] <= 160 // 4
            assert s.ack_rpcs == srv.stats.calls["AckMessage"]
            assert consumer.stats().acked == consumer.stats().consumed == 160

    run(main())


def test_seed2_plain_listener_runs_on_its_own_pool_and_the_loop_stays_free() -> None:
    """Item 2: a listener blocking 10 ms runs on `consumption_thread_count` threads (never the loop's), all of
    them busy at once; an unrelated 10 ms timer on the client's loop keeps ticking on time."""

    async def main() -> None:
        async with embedded_server(topics=["t:1"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            lock = threading.Lock()
            state = {"now": 0, "peak": 0, "n": 0}
            threads: set[int] = set()

            def listener(m: ReceivedMessage) -> ConsumeResult:
                with lock:
                    state["now"] += 1
                    state["peak"] = max(state["peak"], state["now"])
                    threads.add(threading.get_ident())
                time.sleep(0.010)
                with lock:
                    state["now"] -= 1
                    state["n"] += 1
                return ConsumeResult.SUCCESS

            lateness: list[float] = []
            stop = asyncio.Event()

            async def ticker() -> None:
                while not stop.is_set():
                    t = time.monotonic()
                    await asyncio.sleep(0.010)
                    lateness.append(time.monotonic() - t - 0.010)

            consumer = PushConsumer(
                endpoints=ep,
                group="g",
                subscriptions={"t": "*"},
                listener=listener,
                consumption_thread_count=6,
            )
            async with Producer(endpoints=ep, topics=["t"]) as producer, consumer:
                await ready(consumer)
                await send_all(producer, [Message(topic="t", body=b"x") for _ in range(300)], chunk=64)
                tick = asyncio.ensure_future(ticker())
                await until(lambda: state["n"] == 300, timeout=20)
                stop.set()
                await tick
            assert threading.get_ident() not in threads
            assert len(threads) == 6
            assert state["peak"] == 6
            # Were the listener on the loop, each tick would wait for up to a whole batch of 10 ms calls.
            assert statistics.median(lateness) < 0.005, lateness
            assert max(lateness) < 0.1, max(lateness)

    run(main())


def test_seed3_a_broker_slow_to_answer_settings_does_not_stall_the_healthy_one() -> None:
    """Item 3: broker 1 answers Settings only after 3 s; consumption from broker 0 goes on meanwhile, and
    broker 1's messages are consumed once its session is up."""

    async def main() -> None:
        async with embedded_server(topics=["t:2"], groups=["g"], brokers=2) as srv:
            got: list[tuple[float, str]] = []

            def listener(m: ReceivedMessage) -> ConsumeResult:
                got.append((time.monotonic(), str(m.endpoint)))
                return ConsumeResult.SUCCESS

            async with Producer(endpoints=srv.endpoints[0], topics=["t"]) as producer:
                # start() returns once one broker's session is up; wait for both (on a loaded machine the
                # second may still be connecting), then make new sessions with broker 1 wait.
                await until(lambda: len(producer.session.open_sessions()) == 2)
                srv.faults.delay_settings(3.0, broker=1)
                consumer = PushConsumer(
                    endpoints=srv.endpoints[0], group="g", subscriptions={"t": "*"}, listener=listener
                )
                started = time.monotonic()
                async with consumer:
                    await until(lambda: len(consumer.stats().queues) == 2)
                    await until(lambda: any(q.receives_in_flight for q in consumer.stats().queues))
                    await send_all(producer, [Message(topic="t", body=b"x") for _ in range(40)])
                    await until(lambda: len(got) == 40, timeout=15)
            ep0, ep1 = srv.endpoints
            early = [e for t, e in got if t - started < 2.5]
            late = [e for t, e in got if t - started >= 2.5]
            assert early and all(e == ep0 for e in early), early
            assert srv.stats.broker_calls[(1, "SendMessage")] > 0, srv.stats.broker_calls
            assert ep1 in late, (srv.stats.broker_calls, got)
            assert srv.stats.broker_calls[(1, "AckMessage")] >= 1

    run(main())


def test_seed4_failed_acks_retry_per_entry_and_invalid_handles_are_dropped_at_once() -> None:
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
                start = time.monotonic()
                await until(lambda: consumer.stats().acked == 396, timeout=15)
                took = time.monotonic() - start
                await until(lambda: consumer.stats().acks_dropped_invalid == 4)
                s = consumer.stats()
                assert s.acks_retrying == 0 and s.acks_pending == 0
            # 396 x (one failed + one good attempt) + 4 x one attempt each.
            assert s.ack_attempts == 396 * 2 + 4
            assert s.acks_dropped_expired == 0 and s.acks_dropped_overflow == 0
            assert srv.stats.entries["AckMessage"] == 396
            assert took < 10.0

    run(main())


def test_seed5a_a_new_queue_starts_at_once_while_a_dropped_queue_sits_in_a_long_poll() -> None:
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
            original = consumer._query_assignment

            async def assignment(topic: str, route: object) -> list[object]:
                await original(topic, route)  # type: ignore[arg-type]
                return [q for q in route.queues if q.queue_id == chosen["queue"]]  # type: ignore[attr-defined]

            consumer._query_assignment = assignment  # type: ignore[method-assign,assignment]
            async with Producer(endpoints=ep, topics=["t"]) as producer, consumer:
                await ready(consumer)
                await producer.send(Message(topic="t", body=b"first"))
                await until(lambda: consumer.stats().listeners_in_flight == 1)
                # Queue 0 is now in a long poll (nothing else to deliver) and its first message is in the
                # listener. Move the assignment.
                await until(lambda: consumer.stats().receives_in_flight >= 1)
                chosen["queue"] = 1
                moved = time.monotonic()
                await until(lambda: consumer.stats().queues_dropped == 1, timeout=5)
                await until(lambda: [q.queue_id for q in consumer.stats().queues] == [1])
                await until(lambda: consumer.stats().receives_in_flight >= 1, timeout=5)
                await producer.send(Message(topic="t", body=b"second"))
                await until(lambda: any(b == "second" for b, _ in consumed), timeout=5)
                # Far below the 20 s long poll that queue 0 was sitting in.
                assert time.monotonic() - moved < 5
                release.set()
                await until(lambda: consumer.stats().acked == 2, timeout=5)
            assert srv.stats.entries["AckMessage"] == 2

    run(main())


def test_seed5b_a_topics_scan_never_touches_another_topics_queues() -> None:
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
                queue_objects = {qid: id(q) for qid, q in consumer._queues.items()}
                scans_before = srv.stats.calls["QueryAssignment"]
                for _ in range(10):
                    await send_all(
                        producer, [Message(topic=t, body=b"x") for t in ("a", "b") for _ in range(10)]
                    )
                    await asyncio.sleep(0.1)
                await until(lambda: got == {"a": 100, "b": 100}, timeout=10)
                assert srv.stats.calls["QueryAssignment"] - scans_before >= 10
                assert {qid: id(q) for qid, q in consumer._queues.items()} == queue_objects
                assert consumer.stats().queues_dropped == 0

    run(main())
