"""The producer's linger batch (`Producer(batch_max_messages=N)`) against the embedded server over gRPC.

Plain `send()` calls share SendMessage requests and each caller still gets its own receipt or error. The
embedded server answers a batch with ONE entry, as the real proxy does (SendMessageActivity
.convertToSendMessageResponse), so the per-message receipts here are the ones a real proxy gives.
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict

import pytest

import thrust
import thrust.sync
from tests.client._util import run
from tests.engines import EmbeddedInThread
from tests.support import until
from thrust._codec.status import Code
from thrust.server.faults import Rpc
from thrust.server.service import EmbeddedServer
from thrust.testing import embedded_server


def stored(srv: EmbeddedServer, topic: str) -> dict[str, tuple[int, int, bytes]]:
    """message id -> (queue, offset, body) of what the broker stored for `topic`."""
    return {m.message_id: (m.queue_id, m.offset, m.body) for m in srv.brokers[0].messages(topic)}


def message(i: int, topic: str = "t") -> thrust.Message:
    return thrust.Message(topic=topic, body=b"%d" % i)


def producer(srv: EmbeddedServer, topic: str, **kw: object) -> thrust.Producer:
    kw.setdefault("batch_max_messages", 32)
    return thrust.Producer(endpoints=srv.endpoints[0], topics=[topic], **kw)  # type: ignore[arg-type]


def test_concurrent_sends_share_requests_and_each_gets_its_own_receipt() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv, producer(srv, "t") as p:
            calls = srv.stats.calls["SendMessage"]
            bodies = [b"m%d" % i for i in range(200)]
            receipts = await asyncio.gather(*(p.send(thrust.Message(topic="t", body=b)) for b in bodies))
            # 200 sends issued together: 6 full batches of 32 and one of 8 (after its linger).
            assert srv.stats.calls["SendMessage"] - calls == 7
            assert srv.stats.entries["SendMessage"] == 200
            assert len({r.message_id for r in receipts}) == 200
            where = stored(srv, "t")
            for body, receipt in zip(bodies, receipts, strict=True):
                _, offset, stored_body = where[receipt.message_id]
                assert stored_body == body  # the receipt names this caller's message
                assert receipt.offset == offset and receipt.topic == "t"

    run(scenario)


def test_send_async_and_a_single_send_go_through_the_batch_too() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv, producer(srv, "t", batch_linger=0.0) as p:
            futures = [await p.send_async(thrust.Message(topic="t", body=b"%d" % i)) for i in range(64)]
            receipts = await asyncio.gather(*futures)
            assert srv.stats.calls["SendMessage"] == 2  # 64 pipelined messages: two full batches
            lone = await p.send(thrust.Message(topic="t", body=b"alone"))  # nothing to wait for
            assert stored(srv, "t")[lone.message_id][2] == b"alone"
            assert len({r.message_id for r in [*receipts, lone]}) == 65

    run(scenario)


def test_fifo_groups_keep_call_order_across_requests_while_sends_are_slowed_at_random() -> None:
    # 30 % of SendMessage calls are held 20-60 ms before the server handles them. FIFO messages go one per
    # request (the proxy hashes a message group to its queue only for a one-message request), one request
    # in flight per group, so later messages of a group can not overtake a slow one; NORMAL ones batch.
    async def scenario() -> None:
        async with (
            embedded_server(topics=["f:4:NORMAL+FIFO"]) as srv,
            producer(srv, "f", batch_max_messages=16) as p,
        ):
            srv.faults.delay_fraction(Rpc.SEND_MESSAGE, 0.3, 0.02, 0.06)
            futures = []
            for i in range(40):
                for group in ("a", "b", "c"):
                    m = thrust.Message(topic="f", body=f"{group}{i}".encode(), message_group=group)
                    futures.append(await p.send_async(m))
                futures.append(await p.send_async(thrust.Message(topic="f", body=b"n%d" % i)))
            receipts = await asyncio.gather(*futures)
            assert srv.stats.delayed["SendMessage"] > 0
            # 120 FIFO messages one per request, 40 NORMAL ones in a few batches.
            assert 120 < srv.stats.calls["SendMessage"] < 140
            order: dict[str, list[int]] = defaultdict(list)
            queues: dict[str, set[int]] = defaultdict(set)
            for m in srv.brokers[0].messages("f"):  # (queue, offset) order
                if m.message_group:
                    order[m.message_group].append(int(m.body[1:]))
                    queues[m.message_group].add(m.queue_id)
            assert order == {g: list(range(40)) for g in "abc"}
            assert all(len(q) == 1 for q in queues.values())  # each group in its own one queue
            assert len({r.message_id for r in receipts}) == 160

    run(scenario)


def test_delay_and_priority_messages_go_alone_next_to_batched_normal_ones() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["m:4:NORMAL+DELAY+PRIORITY"]) as srv, producer(srv, "m") as p:
            delayed = [p.send(thrust.Message(topic="m", body=b"d%d" % i, delay=3600.0)) for i in range(3)]
            urgent = [p.send(thrust.Message(topic="m", body=b"p%d" % i, priority=3)) for i in range(3)]
            normal = [p.send(thrust.Message(topic="m", body=b"n%d" % i)) for i in range(20)]
            results = await asyncio.gather(*delayed, *urgent, *normal)
            d, u, n = results[:3], results[3:6], results[6:]
            # Each delay message got its own recall handle: it went alone (a batch answers one entry).
            assert len({r.recall_handle for r in d}) == 3 and all(r.recall_handle for r in d)
            assert await p.recall("m", d[0].recall_handle) == d[0].message_id
            where = stored(srv, "m")
            assert all(where[r.message_id][0] == 3 for r in u)  # queue min(priority, queues - 1)
            assert len({where[r.message_id][0] for r in n}) == 1  # one batch, one queue
            # 3 delay + 3 priority requests, one batch of 20.
            assert srv.stats.calls["SendMessage"] == 7
            assert len({r.message_id for r in results}) == 26

    run(scenario)


def test_an_oversized_message_fails_alone_and_the_others_are_sent() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv, producer(srv, "t") as p:
            limit = p.session.settings.max_body_size
            sends = [p.send(thrust.Message(topic="t", body=b"%d" % i)) for i in range(10)]
            sends.insert(5, p.send(thrust.Message(topic="t", body=b"x" * (limit + 1))))
            results = await asyncio.gather(*sends, return_exceptions=True)
            big = results.pop(5)
            assert isinstance(big, thrust.ValidationError) and big.code is Code.MESSAGE_BODY_TOO_LARGE
            assert all(isinstance(r, thrust.SendReceipt) for r in results)
            assert srv.stats.entries["SendMessage"] == 10
            # Topic names are checked once each (then remembered); a bad one is refused every time.
            for _ in range(2):
                with pytest.raises(thrust.ValidationError) as refused:
                    await p.send(thrust.Message(topic="bad topic", body=b"x"))
                assert refused.value.code is Code.ILLEGAL_TOPIC

    run(scenario)


def test_a_batch_refused_for_one_message_is_resent_one_by_one_and_only_that_one_fails() -> None:
    # The proxy refuses a whole request for one bad message and stores nothing (SendMessageActivity
    # .buildMessage); the producer then sends each message alone. The server is made to refuse the batch
    # and then the first single message.
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv, producer(srv, "t") as p:
            srv.faults.fail_next(Rpc.SEND_MESSAGE, Code.MESSAGE_BODY_TOO_LARGE, 2)
            results = await asyncio.gather(
                *(p.send(thrust.Message(topic="t", body=b"%d" % i)) for i in range(5)),
                return_exceptions=True,
            )
            first, rest = results[0], results[1:]
            assert isinstance(first, thrust.PayloadTooLargeError)
            assert all(isinstance(r, thrust.SendReceipt) for r in rest)
            assert srv.stats.calls["SendMessage"] == 1 + 5  # the batch, then each alone
            assert sorted(b for _, _, b in stored(srv, "t").values()) == [b"1", b"2", b"3", b"4"]

    run(scenario)


def test_a_batch_is_retried_whole_by_the_bounded_policy_and_each_caller_gets_its_own_error() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv, producer(srv, "t", max_attempts=3) as p:
            # A retriable failure, then success: the same batch (same ids) is stored once.
            srv.faults.fail_next(Rpc.SEND_MESSAGE, Code.INTERNAL_SERVER_ERROR, 1)
            ok = await asyncio.gather(*(p.send(thrust.Message(topic="t", body=b"%d" % i)) for i in range(4)))
            assert srv.stats.calls["SendMessage"] == 2
            assert set(stored(srv, "t")) == {r.message_id for r in ok}
            # Failing every time: 3 attempts of the one batch, then every caller fails.
            srv.faults.fail_next(Rpc.SEND_MESSAGE, Code.INTERNAL_SERVER_ERROR, 10)
            failed = await asyncio.gather(
                *(p.send(thrust.Message(topic="t", body=b"f")) for _ in range(4)), return_exceptions=True
            )
            assert srv.stats.calls["SendMessage"] == 2 + 3
            assert all(isinstance(e, thrust.InternalError) for e in failed)
            assert len({id(e) for e in failed}) == 4  # each its own exception object
            srv.faults.clear()

    run(scenario)


def test_send_waits_while_the_pending_bound_is_reached() -> None:
    async def scenario() -> None:
        async with (
            embedded_server(topics=["t"]) as srv,
            producer(srv, "t", batch_max_messages=2, batch_max_pending=4, batch_linger=0.0) as p,
        ):
            srv.faults.add_latency(Rpc.SEND_MESSAGE, 0.2)
            first = [await p.send_async(thrust.Message(topic="t", body=b"%d" % i)) for i in range(4)]
            fifth = asyncio.ensure_future(p.send_async(thrust.Message(topic="t", body=b"4")))
            await until(lambda: srv.stats.calls["SendMessage"] >= 1)  # the first batch is at the server
            linger = p._linger
            assert linger is not None
            assert not fifth.done() and linger.acc.pending == 4  # waits for room: nothing more accepted
            future = await fifth  # admitted once the first batch was answered
            assert any(f.done() for f in first)
            assert linger.acc.pending <= 4
            await asyncio.gather(*first, future)
            srv.faults.clear()

    run(scenario)


def test_a_cancelled_send_is_withdrawn_and_the_rest_of_its_batch_is_sent() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv, producer(srv, "t", batch_linger=60.0) as p:
            tasks = [asyncio.ensure_future(p.send(message(i))) for i in range(5)]
            held = await p.send_async(thrust.Message(topic="t", body=b"held"))
            await until(lambda: p._linger.acc.pending == 6)  # all six wait in one open batch (60 s linger)
            tasks[2].cancel()
            held.cancel()
            with pytest.raises(asyncio.CancelledError):
                await tasks[2]
            linger = p._linger
            assert linger is not None and linger.acc.pending == 5  # the awaited one is gone already
            await p.close()  # flushes the open batch
            receipts = [t.result() for i, t in enumerate(tasks) if i != 2]
            assert sorted(b for _, _, b in stored(srv, "t").values()) == [b"0", b"1", b"3", b"4"]
            assert {r.message_id for r in receipts} == set(stored(srv, "t"))
            assert srv.stats.calls["SendMessage"] == 1

    run(scenario)


def test_a_send_cancelled_in_flight_leaves_the_other_receipts_alone() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv, producer(srv, "t", batch_linger=0.0) as p:
            srv.faults.add_latency(Rpc.SEND_MESSAGE, 0.2)
            tasks = [asyncio.ensure_future(p.send(message(i))) for i in range(4)]
            await until(lambda: srv.stats.calls["SendMessage"] >= 1)  # the batch is at the server
            tasks[0].cancel()
            receipts = await asyncio.gather(*tasks[1:])
            assert tasks[0].cancelled()
            assert len(stored(srv, "t")) == 4  # it had left: stored, only its answer is dropped
            assert {r.message_id for r in receipts} < set(stored(srv, "t"))
            srv.faults.clear()

    run(scenario)


def test_close_flushes_lingering_batches() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["a", "b"]) as srv:
            p = thrust.Producer(endpoints=srv.endpoints[0], batch_max_messages=100, batch_linger=60.0)
            await p.start()
            futures = [await p.send_async(thrust.Message(topic=t, body=b"x")) for t in ("a", "b") * 5]
            assert srv.stats.calls["SendMessage"] == 0
            await p.close()
            assert all(f.result().message_id for f in futures)
            assert srv.stats.calls["SendMessage"] == 2  # one per topic
            with pytest.raises(thrust.ClientClosedError):
                await p.send(thrust.Message(topic="a", body=b"late"))
            await p.close()  # idempotent

    run(scenario)


def test_close_is_bounded_and_fails_what_was_not_answered_with_a_typed_error() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv:
            # One request at a time; the server never answers it (nor handles it).
            p = producer(srv, "t", batch_max_messages=2, max_in_flight=1, batch_linger=0.0)
            await p.start()
            srv.faults.drop_next(Rpc.SEND_MESSAGE, 10, process=False)
            futures = [await p.send_async(thrust.Message(topic="t", body=b"%d" % i)) for i in range(6)]
            # the first batch is in flight, two more wait for the slot
            await until(lambda: srv.stats.calls["SendMessage"] >= 1)
            await p.close(timeout=0.5)
            for f in futures:
                with pytest.raises(thrust.ClientClosedError):
                    f.result()
            assert srv.stats.calls["SendMessage"] == 1
            srv.faults.clear()

    run(scenario)


def test_a_flusher_that_dies_of_a_bug_fails_the_sends_instead_of_leaving_them_waiting() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv, producer(srv, "t", batch_linger=0.0) as p:
            linger = p._linger
            assert linger is not None

            def bug(now: float) -> None:
                raise RuntimeError("bug")

            linger.acc.take_ready = bug  # type: ignore[method-assign, assignment]
            with pytest.raises(thrust.InternalError, match="linger batch failed"):
                await p.send(message(0))
            with pytest.raises(thrust.InternalError, match="linger batch failed"):
                await p.send(message(1))
            assert srv.stats.calls["SendMessage"] == 0

    run(scenario)


def test_batch_options_are_checked_at_construction() -> None:
    for bad in (
        {"batch_max_messages": 0},
        {"batch_max_messages": 8, "batch_linger": -1.0},
        {"batch_max_messages": 8, "batch_max_pending": 4},
        {"batch_max_messages": 8, "batch_max_bytes": 0},
    ):
        with pytest.raises(ValueError):
            thrust.Producer(endpoints="127.0.0.1:1", **bad)  # type: ignore[arg-type]
    assert thrust.Producer(endpoints="127.0.0.1:1")._linger_config is None  # off by default


def test_sync_producer_threads_share_requests_and_get_their_own_receipts() -> None:
    server = EmbeddedInThread()
    try:
        engine = server.engine()
        topic = engine.topic(queues=4)
        results: dict[int, list[thrust.SendReceipt]] = {}
        with thrust.sync.Producer(endpoints=engine.endpoint, topics=[topic], batch_max_messages=16) as p:

            def worker(n: int) -> None:
                results[n] = [p.send(thrust.Message(topic=topic, body=b"%d-%d" % (n, i))) for i in range(25)]

            threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
        where = {m.message_id: m.body for m in server.server.brokers[0].messages(topic)}
        for n, receipts in results.items():
            assert [where[r.message_id] for r in receipts] == [b"%d-%d" % (n, i) for i in range(25)]
        assert sum(map(len, results.values())) == 200
        # Eight threads each waiting for its own receipt: requests carry up to 8 messages.
        assert server.server.stats.calls["SendMessage"] < 200
    finally:
        server.close()
