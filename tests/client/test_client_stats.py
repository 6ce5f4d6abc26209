"""`Producer.stats()` and `SimpleConsumer.stats()` (and the sync facade's), counted over real gRPC against
the embedded server, with faults injected where a count needs a failure."""

from __future__ import annotations

import asyncio

import pytest

import thrust
import thrust.sync
from tests.client._util import run
from tests.push._util import until
from thrust._codec.status import Code
from thrust.server.faults import Rpc
from thrust.testing import ServerThread, embedded_server


def test_producer_stats_count_sends_messages_retries_failures_and_in_flight() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv:
            async with thrust.Producer(endpoints=srv.endpoints[0], topics=["t"], max_attempts=2) as p:
                s = p.stats()
                assert (s.sends, s.messages_sent, s.retries, s.failures, s.in_flight) == (0, 0, 0, 0, 0)
                assert s.latency.count == 0 and s.latency.max == 0.0
                for i in range(3):
                    await p.send(thrust.Message(topic="t", body=b"m%d" % i))
                await p.send_batch([thrust.Message(topic="t", body=b"b%d" % i) for i in range(4)])
                s = p.stats()
                assert (s.sends, s.messages_sent, s.retries, s.failures) == (4, 7, 0, 0)
                assert s.latency.count == 4 and 0 < s.latency.p50 <= s.latency.p99 <= s.latency.max

                # One retriable failure, then success on the second attempt: one retry, no failure.
                srv.faults.fail_next(Rpc.SEND_MESSAGE, Code.TOO_MANY_REQUESTS)
                await p.send(thrust.Message(topic="t", body=b"r"))
                s = p.stats()
                assert (s.sends, s.messages_sent, s.retries, s.failures) == (5, 8, 1, 0)

                # Both attempts fail: one more retry, one failed request of one message.
                srv.faults.fail_next(Rpc.SEND_MESSAGE, Code.TOO_MANY_REQUESTS, 2)
                with pytest.raises(thrust.TooManyRequestsError):
                    await p.send(thrust.Message(topic="t", body=b"f"))
                s = p.stats()
                assert (s.sends, s.messages_sent, s.retries, s.failures, s.messages_failed) == (6, 8, 2, 1, 1)
                assert s.latency.count == 5  # failed requests are not in the latency

                # A request held by the server is in flight until it is answered.
                srv.faults.add_latency(Rpc.SEND_MESSAGE, 0.5)
                future = await p.send_async(thrust.Message(topic="t", body=b"slow"))
                await until(lambda: p.stats().in_flight > 0)  # (its task starts on a later loop iteration)
                assert p.stats().in_flight == 1 and not future.done()
                await future
                assert p.stats().in_flight == 0 and p.stats().messages_sent == 9
                assert "sends=7" in repr(p)

    run(scenario)


def test_simple_consumer_stats_count_receives_acks_renewals_and_failures() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.Producer(endpoints=ep, topics=["t"]) as p,
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=5
                ) as c,
            ):
                s = c.stats()
                assert (s.receives, s.messages_received, s.acks, s.renewals) == (0, 0, 0, 0)
                for i in range(4):
                    await p.send(thrust.Message(topic="t", body=b"m%d" % i))
                got: list[thrust.ReceivedMessage] = []
                while len(got) < 4:
                    got += await c.receive(32)
                s = c.stats()
                assert s.messages_received == 4 and s.receives >= 1 and s.receive_failures == 0

                await c.change_invisible_duration(got[0], 20)
                await c.ack(got[0])
                assert await c.ack_many(got[1:3]) == [None, None]
                srv.faults.expire_receipt_handles(got[3].receipt_handle)
                with pytest.raises(thrust.InvalidReceiptHandleError):
                    await c.ack(got[3])
                s = c.stats()
                assert (s.acks, s.ack_failures, s.renewals, s.renewal_failures) == (3, 1, 1, 0)
                srv.faults.expire_receipt_handles(got[3].receipt_handle)
                with pytest.raises(thrust.ThrustError):
                    await c.change_invisible_duration(got[3], 20)
                assert c.stats().renewal_failures == 1

                receives = c.stats().receives
                srv.faults.fail_next(Rpc.RECEIVE_MESSAGE, Code.INTERNAL_SERVER_ERROR)
                with pytest.raises(thrust.InternalError):
                    await c.receive(32)
                s = c.stats()
                assert s.receive_failures == 1 and s.receives == receives

                # A long poll that finds nothing is in flight while it waits; cancelling it is no failure.
                task = asyncio.get_running_loop().create_task(c.receive(32))
                await until(lambda: c.stats().receives_in_flight > 0)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                s = c.stats()
                assert s.receives_in_flight == 0 and s.receive_failures == 1
                assert "acks=3" in repr(c)

    run(scenario)


@pytest.mark.slow  # the server holds an empty long poll for its 5 s minimum
def test_simple_consumer_counts_an_empty_receive() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            async with thrust.SimpleConsumer(
                endpoints=srv.endpoints[0], group="g", subscriptions={"t": "*"}, await_duration=5
            ) as c:
                assert await c.receive(1) == []
                s = c.stats()
                assert (s.receives, s.empty_receives, s.messages_received) == (1, 1, 0)

    run(scenario)


def test_sync_clients_expose_their_stats() -> None:
    with ServerThread(topics=["t"], groups=["g"]) as srv:
        ep = srv.endpoint
        with thrust.sync.Producer(endpoints=ep, topics=["t"]) as p:
            p.send(thrust.Message(topic="t", body=b"x"))
            s = p.stats()
            assert (s.sends, s.messages_sent) == (1, 1) and s.latency.count == 1
        with thrust.sync.SimpleConsumer(
            endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=5
        ) as c:
            got: list[thrust.ReceivedMessage] = []
            while not got:
                got = c.receive(32)
            c.ack(got[0])
            s = c.stats()
            assert (s.messages_received, s.acks) == (1, 1)


def test_the_session_counts_each_call_it_begins_by_rpc() -> None:
    """`ClientSession.calls`: every unary call and receive begun, retries included (what
    `thrust perf scale` reports as a client's calls per second, on servers that count none)."""

    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.Producer(endpoints=ep, topics=["t"], max_attempts=2) as p,
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=5
                ) as c,
            ):
                sent0 = p.session.calls().get("SendMessage", 0)
                await p.send(thrust.Message(topic="t", body=b"a"))
                srv.faults.fail_next(Rpc.SEND_MESSAGE, Code.TOO_MANY_REQUESTS)
                await p.send(thrust.Message(topic="t", body=b"b"))  # two attempts
                assert p.session.calls()["SendMessage"] - sent0 == 3
                assert p.session.calls()["QueryRoute"] >= 1
                assert "ReceiveMessage" not in p.session.calls()

                received0 = c.session.calls().get("ReceiveMessage", 0)
                got: list[thrust.ReceivedMessage] = []
                receives = 0
                while len(got) < 2:
                    got += await c.receive(32)
                    receives += 1
                assert c.session.calls()["ReceiveMessage"] - received0 == receives
                acked0 = c.session.calls().get("AckMessage", 0)
                await c.ack(got[0])
                assert c.session.calls()["AckMessage"] - acked0 == 1

    run(scenario)
