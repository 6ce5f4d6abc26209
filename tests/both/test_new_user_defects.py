"""Behaviour defects a new user found, checked on both servers (each also has an embedded-only test
that pins the mechanism; these show the behaviour holds against the real proxy too)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import thrust
from tests.client._util import run
from tests.engines import Engine
from tests.push._util import until


@pytest.mark.slow
def test_fifo_local_retries_count_delivery_attempts(engine: Engine) -> None:
    topic, group = engine.topic("FIFO"), engine.group(fifo=True, max_attempts=6)

    async def main() -> None:
        attempts: list[int] = []
        lock = threading.Lock()

        def listener(m: thrust.ReceivedMessage) -> thrust.ConsumeResult:
            with lock:
                attempts.append(m.delivery_attempt)
                # A listener that gives up at its third attempt must see that attempt.
                ok = m.delivery_attempt >= 3
            return thrust.ConsumeResult.SUCCESS if ok else thrust.ConsumeResult.FAILURE

        consumer = thrust.PushConsumer(
            endpoints=engine.endpoint, group=group, subscriptions={topic: "*"}, listener=listener
        )
        async with thrust.Producer(endpoints=engine.endpoint, topics=[topic]) as producer, consumer:
            await producer.send(thrust.Message(topic=topic, body=b"x", message_group="k"))
            await until(lambda: consumer.stats().acked == 1, timeout=40)
        assert attempts == [1, 2, 3]

    run(main)


@pytest.mark.slow
def test_close_cancels_a_pending_long_poll_at_once(engine: Engine) -> None:
    topic, group = engine.topic(), engine.group()

    async def scenario() -> None:
        events: list[str] = []
        consumer = thrust.SimpleConsumer(
            endpoints=engine.endpoint, group=group, subscriptions={topic: "*"}, await_duration=20
        )
        await consumer.start()

        async def poll() -> None:
            try:
                await consumer.receive(32, 30)
                events.append("receive: returned")
            except thrust.ClientClosedError:
                events.append("receive: ClientClosedError")

        waiting = asyncio.create_task(poll())
        # The long poll's call is out (nothing to receive: it would wait its 20 s).
        await until(lambda: consumer.stats().receives_in_flight == 1, what="the receive's call started")
        started = time.monotonic()
        await consumer.close()
        events.append("closed")
        await waiting
        # The poll ended by the close, not by its 20 s wait.
        assert events == ["receive: ClientClosedError", "closed"]
        assert time.monotonic() - started < 10  # a loose net under the event order above

    run(scenario)


def test_a_backlog_on_two_brokers_drains_without_empty_receives(engine2: Engine) -> None:
    topic, group = engine2.topic(queues=8), engine2.group()
    count = 60

    async def scenario() -> None:
        async with thrust.Producer(endpoints=engine2.endpoint, topics=[topic]) as producer:
            for i in range(count):
                await producer.send(thrust.Message(topic=topic, body=b"%d" % i))
        got: set[str] = set()
        receives = empties = 0
        async with thrust.SimpleConsumer(
            endpoints=engine2.endpoint, group=group, subscriptions={topic: "*"}, await_duration=5
        ) as consumer:
            while len(got) < count and empties <= 2:
                batch = await consumer.receive(32, 20)
                receives += 1
                empties += not batch
                got |= {m.message_id for m in batch}
                assert await consumer.ack_many(batch) == [None] * len(batch)
        assert len(got) == count
        # Each receive pops one broker's share (up to 32), so a drained broker is not asked again and
        # again: rotating over the 16 queues asked broker-a 8 times in a row (7 empty long polls). A
        # real broker may still answer one pop empty while it dispatches what it stored.
        assert empties <= 1, (receives, empties)

    run(scenario)


@pytest.mark.slow
def test_keepalive_pings_faster_than_the_proxy_permits_get_goaway_and_the_default_does_not(
    engine: Engine,
) -> None:
    """The proxy is a grpc-java server with the default permitKeepAliveTime (5 min, 2 strikes): a client
    pinging every second gets GOAWAY too_many_pings, which ends its Telemetry stream (reopened by the
    client). thrust's default keepalive (300 s, as Java) never does; a 10 s keepalive did within a minute
    of quiet on the real proxy, cutting the calls in flight."""
    topic = engine.topic()

    async def idle_producer(config: thrust.ClientConfig, *, goaway: bool) -> int:
        async with thrust.Producer(config, topics=[topic]) as producer:
            await producer.send(thrust.Message(topic=topic, body=b"x"))
            stream = producer.session.telemetry(producer.session.open_sessions()[0])
            assert stream is not None
            if goaway:
                # The GOAWAY ends the Telemetry stream and the client reopens it: wait for that.
                await until(
                    lambda: stream.opened >= 2, 40, "a client pinging every second was never sent GOAWAY"
                )
            else:
                # A negative check, so a fixed span: a GOAWAY would have reopened the stream within it.
                await asyncio.sleep(12)
            await producer.send(thrust.Message(topic=topic, body=b"still fine"))
            return stream.opened

    async def scenario() -> None:
        eager = thrust.ClientConfig(engine.endpoint, keepalive_interval=1.0, keepalive_timeout=5.0)
        default = thrust.ClientConfig(engine.endpoint)
        assert default.keepalive_interval >= 300  # grpc-java's permitKeepAliveTime default
        eager_opened, default_opened = await asyncio.gather(
            idle_producer(eager, goaway=True), idle_producer(default, goaway=False)
        )
        assert eager_opened >= 2, "a client pinging every second was never sent GOAWAY"
        assert default_opened == 1

    run(scenario)
