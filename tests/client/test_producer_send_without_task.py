"""`send_async` on the native transport starts a send with no task of its own when nothing needs waiting
(the route cached, the endpoint's session ready): the call completes by a callback from the transport,
which settles the returned future (`Producer._start_without_task`). The rest of a send's life must be the
same as a task's: a failed first attempt retried on the same plan, a final failure typed, the window slot
and the counters given back exactly once, a cancelled future cancelling its call, and `close()` waiting
for such sends. On grpcio every send keeps its task; the same scenarios run there too."""

from __future__ import annotations

import asyncio

import pytest

import thrust
from tests.client._util import run
from thrust._codec.status import Code
from thrust.server.faults import Rpc
from thrust.testing import embedded_server


def _sends_running() -> int:
    return sum(1 for t in asyncio.all_tasks() if t.get_name().startswith("thrust-send") and not t.done())


async def _warm(p: thrust.Producer) -> None:
    await p.send(thrust.Message(topic="t", body=b"warm"))  # the route cached, the session ready


def test_pipelined_sends_run_without_a_task_each_on_native() -> None:
    async def scenario() -> None:
        async with (
            embedded_server(topics=["t"]) as srv,
            thrust.Producer(endpoints=srv.endpoints[0], topics=["t"], max_in_flight=8) as p,
        ):
            await _warm(p)
            native = p.stats().transport == "native"
            futures = [await p.send_async(thrust.Message(topic="t", body=b"%d" % i)) for i in range(40)]
            running = _sends_running()
            receipts = await asyncio.gather(*futures)
            assert len({r.message_id for r in receipts}) == 40
            if native:
                assert not any(isinstance(f, asyncio.Task) for f in futures)
                assert running == 0
            else:
                assert all(isinstance(f, asyncio.Task) for f in futures)
            stats = p.stats()
            assert (stats.sends, stats.messages_sent, stats.failures, stats.in_flight) == (41, 41, 0, 0)
            assert srv.stats.entries["SendMessage"] == 41
            # Every window slot came back: max_in_flight sends start again without waiting.
            more = [await p.send_async(thrust.Message(topic="t", body=b"m")) for _ in range(8)]
            await asyncio.gather(*more)

    run(scenario)


def test_a_failed_first_attempt_is_retried_and_a_final_failure_is_typed() -> None:
    async def scenario() -> None:
        async with (
            embedded_server(topics=["t"]) as srv,
            thrust.Producer(endpoints=srv.endpoints[0], topics=["t"], max_attempts=3) as p,
        ):
            await _warm(p)
            srv.faults.fail_next(Rpc.SEND_MESSAGE, Code.INTERNAL_SERVER_ERROR, count=1)
            receipt = await (await p.send_async(thrust.Message(topic="t", body=b"again")))
            assert receipt.message_id
            stats = p.stats()
            assert (stats.sends, stats.retries, stats.messages_sent, stats.failures) == (2, 1, 2, 0)
            assert srv.stats.injected["SendMessage"] == 1 and srv.stats.entries["SendMessage"] == 2

            # Not retriable: the first attempt's error is the send's.
            srv.faults.fail_next(Rpc.SEND_MESSAGE, Code.FORBIDDEN, count=1, message="injected FORBIDDEN")
            future = await p.send_async(thrust.Message(topic="t", body=b"refused"))
            with pytest.raises(thrust.ForbiddenError, match="injected FORBIDDEN") as info:
                await future
            assert info.value.request_id
            stats = p.stats()
            assert (stats.sends, stats.retries, stats.failures, stats.messages_failed, stats.in_flight) == (
                3,
                1,
                1,
                1,
                0,
            )

            # Every attempt failing: retried up to max_attempts, then the last error.
            srv.faults.fail_next(Rpc.SEND_MESSAGE, Code.INTERNAL_SERVER_ERROR, count=3)
            with pytest.raises(thrust.InternalError):
                await (await p.send_async(thrust.Message(topic="t", body=b"lost")))
            stats = p.stats()
            assert (stats.sends, stats.retries, stats.failures, stats.in_flight) == (4, 3, 2, 0)
            assert srv.stats.injected["SendMessage"] == 5

    run(scenario)


def test_a_cancelled_send_gives_its_slot_back_and_close_waits_for_the_rest() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv:
            p = thrust.Producer(endpoints=srv.endpoints[0], topics=["t"], max_in_flight=2, request_timeout=5)
            await p.start()
            try:
                await _warm(p)
                srv.faults.drop_next(Rpc.SEND_MESSAGE, count=1)  # held until the client gives up on it
                held = await p.send_async(thrust.Message(topic="t", body=b"held"))
                await asyncio.sleep(0)
                held.cancel()
                # Both slots are free again: two sends start at once and complete.
                futures = [await p.send_async(thrust.Message(topic="t", body=b"%d" % i)) for i in range(2)]
                await asyncio.gather(*futures)
                stats = p.stats()
                assert (stats.sends, stats.failures, stats.messages_sent, stats.in_flight) == (4, 1, 3, 0)

                # close() right after starting sends: each ends with its receipt, none is left pending.
                last = [await p.send_async(thrust.Message(topic="t", body=b"c%d" % i)) for i in range(2)]
            finally:
                await p.close()
            assert all(f.done() for f in last)
            assert all(not f.cancelled() and f.exception() is None for f in last)
            assert p.stats().in_flight == 0

    run(scenario)
