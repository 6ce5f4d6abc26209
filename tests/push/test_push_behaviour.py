"""Push consumer behaviour against the embedded server: FIFO order, dead-lettering, nack backoff, flow
control, shutdown under load, several topics, async listeners."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

import pytest

from tests.push._util import ready, run, send_all, until
from tests.support import TIMER_SLACK
from thrust._core.ack import AckBatch
from thrust.message import ConsumeResult, Message, ReceivedMessage
from thrust.producer import Producer
from thrust.push_consumer import PushConsumer
from thrust.server.config import GroupSpec
from thrust.server.core.model import GroupRetryPolicy
from thrust.server.service.consumer import ConsumerRpcs
from thrust.testing import embedded_server


def _fifo_order(parallel: bool) -> None:
    async def main() -> None:
        group = GroupSpec("gf", fifo=True, retry=GroupRetryPolicy(max_attempts=5, customized=(0.05, 0.1)))
        async with embedded_server(topics=["f:2:FIFO"], groups=[group]) as srv:
            ep = srv.endpoints[0]
            seen: list[tuple[str, int, int]] = []
            failed_once: set[str] = set()
            lock = threading.Lock()

            def listener(m: ReceivedMessage) -> ConsumeResult:
                n = int(m.body)
                with lock:
                    seen.append((m.message_group or "", n, m.delivery_attempt))
                    if n % 7 == 3 and m.message_id not in failed_once:
                        failed_once.add(m.message_id)
                        return ConsumeResult.FAILURE
                return ConsumeResult.SUCCESS

            consumer = PushConsumer(
                endpoints=ep,
                group="gf",
                subscriptions={"f": "*"},
                listener=listener,
                fifo_parallel_groups=parallel,
                consumption_thread_count=4,
            )
            async with Producer(endpoints=ep, topics=["f"]) as producer, consumer:
                await ready(consumer, queues=2)
                for n in range(20):  # in order within each group
                    await asyncio.gather(
                        *(
                            producer.send(Message(topic="f", body=b"%d" % n, message_group=f"g{g}"))
                            for g in range(4)
                        )
                    )
                await until(lambda: consumer.stats().acked == 80, timeout=20)
                s = consumer.stats()
            assert s.consume_failures == len(failed_once) > 0
            assert s.nacked == 0  # FIFO failures are retried locally, never nacked
            for g in range(4):
                order = [n for grp, n, _ in seen if grp == f"g{g}"]
                # Exactly in send order, the failed message repeated right away (before the next one).
                expected: list[int] = []
                for n in range(20):
                    expected.extend([n, n] if n % 7 == 3 else [n])
                assert order == expected, (g, order)

    run(main())


def test_fifo_messages_are_consumed_in_order_one_after_another() -> None:
    _fifo_order(parallel=False)


def test_fifo_message_groups_in_parallel_keep_order_within_each_group() -> None:
    _fifo_order(parallel=True)


def test_fifo_dead_letters_after_max_attempts_with_local_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    forwarded: list[tuple[int, int]] = []
    original = ConsumerRpcs.ForwardMessageToDeadLetterQueue

    async def spy(self: Any, request: Any, context: Any) -> Any:
        forwarded.append((request.delivery_attempt, request.max_delivery_attempts))
        return await original(self, request, context)

    monkeypatch.setattr(ConsumerRpcs, "ForwardMessageToDeadLetterQueue", spy)

    async def main() -> None:
        group = GroupSpec("gd", fifo=True, retry=GroupRetryPolicy(max_attempts=3, customized=(0.05, 0.1)))
        async with embedded_server(topics=["f:1:FIFO"], groups=[group]) as srv:
            ep = srv.endpoints[0]
            calls: list[tuple[bytes, int, float]] = []

            def listener(m: ReceivedMessage) -> ConsumeResult:
                calls.append((m.body, m.delivery_attempt, time.monotonic()))
                if m.body == b"poison":
                    raise RuntimeError("cannot handle this one")
                return ConsumeResult.SUCCESS

            consumer = PushConsumer(endpoints=ep, group="gd", subscriptions={"f": "*"}, listener=listener)
            async with Producer(endpoints=ep, topics=["f"]) as producer, consumer:
                await ready(consumer)
                for body in (b"before", b"poison", b"after"):
                    await producer.send(Message(topic="f", body=body, message_group="k"))
                await until(lambda: consumer.stats().dead_lettered == 1 and consumer.stats().acked == 2)
            bodies = [b for b, _, _ in calls]
            assert bodies == [b"before", b"poison", b"poison", b"poison", b"after"]
            poison = [(a, t) for b, a, t in calls if b == b"poison"]
            # Local retries on timers with the server's sub-second backoff; the attempt counts up from the
            # server's delivery_attempt, and the listener sees each one (Java
            # `MessageViewImpl.incrementAndGetDeliveryAttempt`).
            assert [a for a, _ in poison] == [1, 2, 3]
            assert poison[1][1] - poison[0][1] >= 0.05 - TIMER_SLACK
            assert poison[2][1] - poison[1][1] >= 0.1 - TIMER_SLACK
            assert srv.stats.calls["ForwardMessageToDeadLetterQueue"] == 1
            assert srv.stats.calls["ChangeInvisibleDuration"] == 0
        # The forward reports the attempt the listener last saw, which reached max attempts.
        assert forwarded == [(3, 3)]

    run(main())


def test_fifo_local_retries_show_the_listener_each_delivery_attempt() -> None:
    """A listener that gives up after its own limit of attempts (below the group's max) must see that
    attempt: the FIFO local retries count 1, 2, 3 as the server's redeliveries of a normal group do."""

    async def main() -> None:
        group = GroupSpec("ga", fifo=True, retry=GroupRetryPolicy(max_attempts=6, customized=(0.01,)))
        async with embedded_server(topics=["f:1:FIFO"], groups=[group]) as srv:
            ep = srv.endpoints[0]
            attempts: list[int] = []
            kept: list[ReceivedMessage] = []

            def listener(m: ReceivedMessage) -> ConsumeResult:
                attempts.append(m.delivery_attempt)
                kept.append(m)
                # Gives up (acks and moves on) on its third attempt.
                return ConsumeResult.SUCCESS if m.delivery_attempt >= 3 else ConsumeResult.FAILURE

            consumer = PushConsumer(endpoints=ep, group="ga", subscriptions={"f": "*"}, listener=listener)
            async with Producer(endpoints=ep, topics=["f"]) as producer, consumer:
                await ready(consumer)
                await producer.send(Message(topic="f", body=b"x", message_group="k"))
                # Without the count, the listener never reaches 3 and the group dead-letters at attempt 6.
                await until(lambda: consumer.stats().acked + consumer.stats().dead_lettered == 1)
                s = consumer.stats()
            assert attempts == [1, 2, 3]
            assert (s.acked, s.dead_lettered, s.consume_failures) == (1, 0, 2)
            assert srv.stats.calls["ForwardMessageToDeadLetterQueue"] == 0
            # Each attempt is its own message object: one kept from an earlier attempt says which it was.
            assert [m.delivery_attempt for m in kept] == [1, 2, 3]
            assert len({m.receipt_handle for m in kept}) == 1

    run(main())


def test_failure_nacks_with_the_servers_backoff_for_that_attempt() -> None:
    async def main() -> None:
        group = GroupSpec("gn", retry=GroupRetryPolicy(max_attempts=5, customized=(0.25, 0.5)))
        async with embedded_server(topics=["t:1"], groups=[group]) as srv:
            ep = srv.endpoints[0]
            attempts: list[int] = []

            def listener(m: ReceivedMessage) -> ConsumeResult:
                attempts.append(m.delivery_attempt)
                if m.delivery_attempt == 1:
                    return ConsumeResult.FAILURE
                if m.delivery_attempt == 2:
                    raise ValueError("an exception counts as FAILURE")
                return ConsumeResult.SUCCESS

            consumer = PushConsumer(endpoints=ep, group="gn", subscriptions={"t": "*"}, listener=listener)
            delays: list[float] = []
            send_nack = consumer._settler._send_nack

            async def spy(batch: AckBatch) -> object:
                delays.append(batch.entries[0].token.value)  # type: ignore[attr-defined]
                return await send_nack(batch)

            consumer._settler._send_nack = spy  # type: ignore[method-assign,assignment]
            async with Producer(endpoints=ep, topics=["t"]) as producer, consumer:
                await ready(consumer)
                await producer.send(Message(topic="t", body=b"x"))
                await until(lambda: consumer.stats().acked == 1)
                s = consumer.stats()
            assert attempts == [1, 2, 3]
            assert delays == [0.25, 0.5]  # sub-second, by delivery attempt, never rounded to seconds
            assert s.nacked == 2 and s.consume_failures == 2
            assert srv.stats.calls["ChangeInvisibleDuration"] == 2

    run(main())


def test_flow_control_bounds_the_cache_under_a_slow_listener_without_polling() -> None:
    async def main() -> None:
        async with embedded_server(topics=["t:1"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            gate = threading.Event()
            limit = 8 * 1024
            body = b"b" * 1024

            consumer = PushConsumer(
                endpoints=ep,
                group="g",
                subscriptions={"t": "*"},
                listener=lambda m: gate.wait(20) and ConsumeResult.SUCCESS,
                consumption_thread_count=1,
                max_cache_message_bytes=limit,
                receives_per_queue=4,
            )
            peak = {"bytes": 0, "count": 0}

            async def sample() -> None:
                while True:
                    s = consumer.stats()
                    peak["bytes"] = max(peak["bytes"], s.cached_bytes)
                    peak["count"] = max(peak["count"], s.cached_messages)
                    await asyncio.sleep(0.002)

            async with Producer(endpoints=ep, topics=["t"]) as producer, consumer:
                await ready(consumer)
                sampler = asyncio.ensure_future(sample())
                await send_all(producer, [Message(topic="t", body=body) for _ in range(200)], chunk=32)
                await until(lambda: consumer.stats().cached_bytes >= limit)
                receives = srv.stats.calls["ReceiveMessage"]
                # A negative check, so a fixed span: a receive sent on a full cache would be counted in it.
                await asyncio.sleep(1.0)
                # Full cache: no receive goes out (no polling, no busy loop) while the listener is stuck.
                assert srv.stats.calls["ReceiveMessage"] == receives
                assert consumer.stats().receives_in_flight == 0
                gate.set()
                await until(lambda: consumer.stats().acked == 200, timeout=20)
                sampler.cancel()
            # Never above the limit plus one batch (32 messages of 1 KiB).
            assert peak["bytes"] <= limit + 32 * len(body)
            assert peak["bytes"] >= limit

    run(main())


@pytest.mark.slow
def test_shutdown_under_load_is_bounded_loses_no_ack_and_leaves_nothing_running() -> None:
    async def main() -> None:
        async with embedded_server(topics=["t:2"], groups=["g"]) as srv:
            ep = srv.endpoints[0]

            def listener(m: ReceivedMessage) -> ConsumeResult:
                time.sleep(0.005)
                return ConsumeResult.SUCCESS

            consumer = PushConsumer(
                endpoints=ep,
                group="g",
                subscriptions={"t": "*"},
                listener=listener,
                consumption_thread_count=4,
                shutdown_grace=2.0,
            )
            async with Producer(endpoints=ep, topics=["t"]) as producer:
                await consumer.start()
                await ready(consumer)
                await send_all(producer, [Message(topic="t", body=b"x") for _ in range(400)], chunk=64)
                await until(lambda: consumer.stats().consumed >= 50)
                started = time.monotonic()
                await asyncio.gather(consumer.close(), consumer.close())
                took = time.monotonic() - started
                await consumer.close()  # idempotent
            s = consumer.stats()
            assert took < 2.0 + 3.0 + 2.0
            assert s.listeners_in_flight == 0 and s.receives_in_flight == 0
            assert s.acks_pending == 0 and s.acks_retrying == 0
            assert s.acked == s.consumed > 0
            assert srv.stats.entries["AckMessage"] == s.acked
            assert srv.stats.calls["NotifyClientTermination"] >= 1
            assert not [t for t in threading.enumerate() if t.name.startswith("thrust-consume")]
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            assert not [t for t in others if "thrust" in t.get_name()], others
            assert "closed" in repr(consumer)

    run(main())


def test_several_topics_with_tag_filters_and_an_async_listener() -> None:
    async def main() -> None:
        async with embedded_server(topics=["a:2", "b:2", "c:1"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            got: list[tuple[str, str | None]] = []
            running = {"now": 0, "peak": 0}

            full = asyncio.Event()

            async def listener(m: ReceivedMessage) -> ConsumeResult:
                running["now"] += 1
                running["peak"] = max(running["peak"], running["now"])
                # The first listeners wait until five run at once, so the bound is reached however the
                # messages trickle in on a loaded machine (a sixth would start while they wait if the
                # bound did not hold); after that the event stays set.
                if running["now"] >= 5:
                    full.set()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(full.wait(), 5.0)
                await asyncio.sleep(0.005)
                running["now"] -= 1
                got.append((m.topic, m.tag))
                return ConsumeResult.SUCCESS

            consumer = PushConsumer(
                endpoints=ep,
                group="g",
                subscriptions={"a": "*", "b": "tagA||tagB", "c": "tagC"},
                listener=listener,
                async_concurrency=5,
            )
            async with Producer(endpoints=ep, topics=["a", "b", "c"]) as producer, consumer:
                await ready(consumer, queues=3)
                messages = [
                    Message(topic=t, body=b"x", tag=tag)
                    for t in ("a", "b", "c")
                    for tag in ("tagA", "tagB", "tagC")
                    for _ in range(10)
                ]
                await send_all(producer, messages, chunk=30)
                await until(lambda: consumer.stats().acked == 60)
                # A negative check, so a fixed span: a duplicate would be acked (acked=61) within it.
                await asyncio.sleep(0.2)
                assert "acked=60" in repr(consumer)
            assert sorted(set(got)) == [
                ("a", "tagA"),
                ("a", "tagB"),
                ("a", "tagC"),
                ("b", "tagA"),
                ("b", "tagB"),
                ("c", "tagC"),
            ]
            assert len(got) == 60
            assert running["peak"] == 5

    run(main())


def test_receive_errors_back_off_reuse_the_attempt_id_and_several_receives_run_per_queue() -> None:
    async def main() -> None:
        async with embedded_server(topics=["t:1"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            consumer = PushConsumer(
                endpoints=ep,
                group="g",
                subscriptions={"t": "*"},
                listener=lambda m: ConsumeResult.SUCCESS,
                receives_per_queue=3,
            )
            async with Producer(endpoints=ep, topics=["t"]) as producer, consumer:
                session = consumer.session
                attempts: list[tuple[str, str]] = []
                receive = session.receive

                async def spy(
                    endpoint: object,
                    request: object,
                    *,
                    timeout: float,
                    **options: Any,
                ) -> object:
                    attempts.append((request.attempt_id, ""))  # type: ignore[attr-defined]
                    try:
                        return await receive(
                            endpoint,  # type: ignore[arg-type]
                            request,
                            timeout=timeout,
                            **options,
                        )
                    except Exception as exc:
                        attempts[-1] = (attempts[-1][0], type(exc).__name__)
                        raise

                session.receive = spy  # type: ignore[method-assign]
                srv.faults.fail_next("ReceiveMessage", "TOO_MANY_REQUESTS", 3)
                await until(lambda: consumer.stats().receive_failures == 3)
                await ready(consumer)
                failed = [a for a, err in attempts if err]
                assert len(failed) == 3
                # A failed receive's attempt id is reused by the next one (docs/protocol.md §6.1).
                after = [a for a, _ in attempts[1:4]]
                assert failed[0] in after
                # Once message sizes are known, several receives run at once on one queue.
                await send_all(producer, [Message(topic="t", body=b"x") for _ in range(40)])
                await until(lambda: consumer.stats().acked == 40)
                await until(lambda: consumer.stats().queues[0].receives_in_flight == 3)

    run(main())


def test_unsettled_acks_hold_cache_slots_so_a_slow_ack_path_bounds_receiving() -> None:
    """Acks that are queued, in flight or retrying count against the cache (Java evicts a message from its
    process queue only after the ack completes): with one entry per AckMessage and a 200 ms ack round trip,
    the ack backlog never grows past the cache limit, nothing is dropped for overflow, and every consumed
    message is acked by close."""

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
                max_cache_message_count=8,
                ack_batch_size=1,
            )
            backlog: list[int] = []
            stop = asyncio.Event()

            async def sample() -> None:
                while not stop.is_set():
                    s = consumer.stats()
                    backlog.append(s.acks_pending + s.acks_retrying)
                    await asyncio.sleep(0.002)

            async with Producer(endpoints=ep, topics=["t"]) as producer:
                ids = await send_all(producer, [Message(topic="t", body=b"m%d" % i) for i in range(40)])
            srv.faults.add_latency("AckMessage", 0.2)
            await consumer.start()
            sampler = asyncio.get_running_loop().create_task(sample())
            try:
                await until(lambda: len(consumed) >= 24)
            finally:
                await consumer.close()
                stop.set()
                await sampler
            s = consumer.stats()
        assert max(backlog) <= 8, max(backlog)
        assert s.acks_dropped_overflow == 0
        assert len(consumed) == s.consumed
        assert s.acked == s.consumed
        assert set(consumed) <= set(ids)

    run(main())


def test_acks_retrying_is_reported_per_queue_and_adds_up_to_the_total() -> None:
    async def main() -> None:
        async with embedded_server(topics=["t:1"], groups=["g"], brokers=2) as srv:
            ep = srv.endpoints[0]
            consumer = PushConsumer(
                endpoints=ep,
                group="g",
                subscriptions={"t": "*"},
                listener=lambda m: ConsumeResult.SUCCESS,
                consumption_thread_count=2,
            )
            snapshots = []

            def retrying_seen() -> bool:
                s = consumer.stats()
                if s.acks_retrying:
                    snapshots.append(s)
                return bool(s.acks_retrying)

            async with Producer(endpoints=ep, topics=["t"]) as producer, consumer:
                await ready(consumer, queues=2)
                srv.faults.fail_ack_entries(first_attempts=3)
                await send_all(producer, [Message(topic="t", body=b"m%d" % i) for i in range(40)])
                await until(retrying_seen, step=0.005)
                await until(lambda: consumer.stats().acked == 40)
                assert all(q.acks_retrying == 0 for q in consumer.stats().queues)
        s = snapshots[0]
        assert sum(q.acks_retrying for q in s.queues) == s.acks_retrying > 0
        assert all(q.acks_retrying <= q.acks_pending for q in s.queues)

    run(main())


def test_close_nacks_messages_that_never_started_so_they_come_back_soon() -> None:
    """Received messages still queued for the listener at close get a short ChangeInvisibleDuration now,
    rather than staying invisible until the server's invisible time runs out."""

    async def main() -> None:
        async with embedded_server(topics=["t:1"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            release = threading.Event()
            consumer = PushConsumer(
                endpoints=ep,
                group="g",
                subscriptions={"t": "*"},
                listener=lambda m: release.wait(10) and ConsumeResult.SUCCESS,
                consumption_thread_count=1,
                shutdown_grace=0.2,
            )
            try:
                async with Producer(endpoints=ep, topics=["t"]) as producer, consumer:
                    await ready(consumer)
                    await send_all(producer, [Message(topic="t", body=b"m%d" % i) for i in range(10)])
                    await until(lambda: consumer.stats().received == 10)
                    await until(lambda: consumer.stats().listeners_in_flight == 1)
            finally:
                release.set()
            s = consumer.stats()
            assert srv.stats.calls["ChangeInvisibleDuration"] == 9
            assert s.nacked == 9
            assert s.consume_failures == 0
            # Nacked for a short delay: a new consumer of the group gets them well within the server's
            # 60 s invisible time.
            got: list[str] = []
            again = PushConsumer(
                endpoints=ep,
                group="g",
                subscriptions={"t": "*"},
                listener=lambda m: got.append(m.message_id) or ConsumeResult.SUCCESS,
            )
            async with again:
                await until(lambda: len(got) >= 9, timeout=20)

    run(main())
