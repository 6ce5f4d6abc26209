"""Official PushConsumer against thrust: everything consumed, failures redelivered, then dead-lettered."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.interop.conftest import Running, Server
from tests.interop.harness import DriverRun, run, run_driver
from thrust.server.core.model import GroupRetryPolicy
from thrust.testing import GroupSpec, embedded_server

pytestmark = pytest.mark.interop

MAX_ATTEMPTS = 3


async def read_dead_letters(srv: Running, group: str, expect: int, home: Path) -> DriverRun:
    """Receive `group`'s dead-letter topic `%DLQ%<group>` with an official SimpleConsumer (group
    `it-dlq-reader`, which the scenario declares): upstream creates it readable (PERM_READ | PERM_WRITE,
    `AbstractSendMessageProcessor`), one queue; the embedded server likewise.

    Upstream moves a message to the DLQ only when a receive of its group pops it after its last attempt
    (docs/interop-findings.md I2), so the group's consumer must still be running: it holds until
    `home/done` exists, which this writes when the reader is finished.
    """
    try:
        return await _read_dead_letters(srv, group, expect, home)
    finally:
        await asyncio.to_thread(home.mkdir, parents=True, exist_ok=True)
        await asyncio.to_thread((home / "done").touch)


async def _read_dead_letters(srv: Running, group: str, expect: int, home: Path) -> DriverRun:
    reader = await run_driver(
        "simple_consumer",
        {
            "endpoints": srv.endpoint,
            "group": srv["it-dlq-reader"],
            "subscriptions": {srv.dead_letter_topic(group): "*"},
            "expect": expect,
            "deadline_s": 30,
            "retry_startup_s": 25,
            "drain": False,
        },
        home=home,
        within=40,
    )
    return reader.check()


@pytest.mark.timeout(60, func_only=True)
def test_push_consumer_retries_and_dead_letters(server: Server, tmp_path: Path) -> None:
    bodies = [f"p{i}" for i in range(12)]
    # Listener failures per body: fail the first K deliveries (-1: always, so it must be dead-lettered).
    fail = {"p1": 1, "p2": 2, "p3": -1, "p4": -1}
    always = {b for b, k in fail.items() if k == -1}
    # A small max_attempts and 1 s backoffs keep the test short; the official client nacks with
    # ChangeInvisibleDuration(backoff[attempt-1]) in whole seconds (docs/protocol.md §9.1).
    group = GroupSpec(
        "it-push-g", retry=GroupRetryPolicy(max_attempts=MAX_ATTEMPTS, customized=(1.0, 1.0, 1.0))
    )

    async def scenario() -> None:
        async with server.start(topics=["it-push:2"], groups=[group, "it-dlq-reader"]) as srv:
            ep, topic = srv.endpoint, srv["it-push"]
            dlq_home = tmp_path / "dlq"
            consumer, producer, dlq = await asyncio.gather(
                run_driver(
                    "push_consumer",
                    {
                        "endpoints": ep,
                        "group": srv["it-push-g"],
                        "topic": topic,
                        "expect_ok": len(bodies) - len(always),
                        "fail": fail,
                        "max_attempts": MAX_ATTEMPTS,
                        "deadline_s": 40,
                        "settle_s": 1,
                        "hold_until": str(dlq_home / "done"),
                    },
                    home=tmp_path / "consumer",
                    within=50,
                ),
                run_driver(
                    "producer",
                    {
                        "endpoints": ep,
                        "topics": [topic],
                        "messages": [{"topic": topic, "body": b} for b in bodies],
                    },
                    home=tmp_path / "producer",
                    within=30,
                ),
                # Dead-lettered on the server after max attempts (broker `PopReviveService`): %DLQ%<group>.
                read_dead_letters(srv, "it-push-g", len(always), dlq_home),
            )
            producer.check()
            consumer.check()
            sent = {bodies[e["index"]]: e["id"] for e in producer.of("sent")}
            assert len(sent) == len(bodies)
            assert consumer.of("done")[0]["complete"], consumer.describe()

            calls = consumer.of("consumed")
            assert {e["id"] for e in calls} == set(sent.values()), consumer.describe()
            for body, message_id in sent.items():
                mine = [e for e in calls if e["id"] == message_id]
                attempts = [e["attempt"] for e in mine]
                results = [e["result"] for e in mine]
                k = fail.get(body, 0)
                if k == -1:
                    # Redelivered with delivery_attempt + 1 each time, never beyond max attempts.
                    assert attempts == list(range(1, MAX_ATTEMPTS + 1)), (body, consumer.describe())
                    assert results == ["FAILURE"] * MAX_ATTEMPTS
                else:
                    assert attempts == list(range(1, k + 2)), (body, consumer.describe())
                    assert results == ["FAILURE"] * k + ["SUCCESS"]

            # The always-failing messages, and only they, are in the DLQ, with their original ids.
            received = dlq.of("received")
            assert sorted(e["id"] for e in received) == sorted(sent[b] for b in always), dlq.describe()
            assert sorted(e["body"] for e in received) == sorted(always)
            if srv.embedded is not None:  # its broker state: nothing in flight or left to deliver
                for b in srv.embedded.brokers:
                    assert b.inflight(srv["it-push-g"], topic) == 0
                    assert b.backlog(topic, srv["it-push-g"]) == 0

    run(scenario(), timeout=55)


@pytest.mark.timeout(60, func_only=True)
def test_fifo_push_consumer_local_retries_and_forward_to_dlq(server: Server, tmp_path: Path) -> None:
    groups = {"A": [f"A-{i}" for i in range(5)], "B": [f"B-{i}" for i in range(5)]}
    # FIFO: the official client retries locally (no redelivery) and, when attempts run out, calls
    # ForwardMessageToDeadLetterQueue itself (docs/protocol.md §7.5).
    fail = {"A-1": 1, "B-2": -1}
    group = GroupSpec(
        "it-fifo-push-g",
        fifo=True,
        retry=GroupRetryPolicy(max_attempts=MAX_ATTEMPTS, customized=(1.0, 1.0, 1.0)),
    )

    async def scenario() -> None:
        async with server.start(topics=["it-fifo-push:2:FIFO"], groups=[group, "it-dlq-reader"]) as srv:
            ep, topic = srv.endpoint, srv["it-fifo-push"]
            messages = [{"topic": topic, "body": b, "group": g} for g, bs in groups.items() for b in bs]
            producer = await run_driver(
                "producer",
                {"endpoints": ep, "topics": [topic], "messages": messages},
                home=tmp_path / "producer",
                within=30,
            )
            producer.check()
            consumer = await run_driver(
                "push_consumer",
                {
                    "endpoints": ep,
                    "group": srv["it-fifo-push-g"],
                    "topic": topic,
                    "expect_ok": len(messages) - 1,
                    "fail": fail,
                    "max_attempts": MAX_ATTEMPTS,
                    "deadline_s": 30,
                    "settle_s": 2,
                },
                home=tmp_path / "consumer",
                within=45,
            )
            consumer.check()
            assert consumer.of("started")[0]["fifo"] is True, "Settings.subscription.fifo reached the client"
            assert consumer.of("done")[0]["complete"], consumer.describe()
            sent = {messages[e["index"]]["body"]: e["id"] for e in producer.of("sent")}
            calls = consumer.of("consumed")
            assert {e["id"] for e in calls} == set(sent.values()), consumer.describe()
            # Per message group, strictly sequential: a message is retried until it succeeds or is
            # dead-lettered before the next one of its group is consumed.
            expected_calls = {
                "A": ["A-0", "A-1", "A-1", "A-2", "A-3", "A-4"],
                "B": ["B-0", "B-1"] + ["B-2"] * MAX_ATTEMPTS + ["B-3", "B-4"],
            }
            for g, expected in expected_calls.items():
                assert [e["body"] for e in calls if e["group"] == g] == expected, consumer.describe()
            assert all(e["type"] == 2 for e in calls)  # FIFO

            dlq = await read_dead_letters(srv, "it-fifo-push-g", 1, tmp_path / "dlq")
            assert [e["id"] for e in dlq.of("received")] == [sent["B-2"]], dlq.describe()
            if srv.embedded is not None:  # its broker state: nothing in flight or left to deliver
                for b in srv.embedded.brokers:
                    assert b.inflight(srv["it-fifo-push-g"], topic) == 0
                    assert b.backlog(topic, srv["it-fifo-push-g"]) == 0

    run(scenario(), timeout=55)


@pytest.mark.timeout(60, func_only=True)
def test_messages_of_a_crashed_consumer_are_redelivered(official_python: Path, tmp_path: Path) -> None:
    """Embedded only: the scenario needs the server's channel expiry shortened (`client_expiry`).

    The real proxy releases a crashed consumer's auto-renewed messages only once the broker drops the
    client's channel (`ConsumerManager.scanNotActiveChannel`, `channelExpiredTimeout` 120 s, scanned
    every 10 s, then `DefaultReceiptHandleManager.clearGroup` makes them visible after 1 s), and reads
    that timeout once at start, so the shared cluster cannot shorten it: the scenario would take over
    two minutes there (docs/interop-findings.md).
    """
    bodies = [f"c{i}" for i in range(6)]
    hang = ["c1", "c4"]

    async def scenario() -> None:
        # client_expiry: how long after a client's Telemetry stream drops its auto-renewed messages are
        # released (the proxy's channel expiry is 120 s, docs/protocol.md §4.7); short to keep the test short.
        async with embedded_server(topics=["it-crash:1"], groups=["it-crash-g"], client_expiry=1.0) as srv:
            ep = srv.endpoints[0]
            producer = await run_driver(
                "producer",
                {
                    "endpoints": ep,
                    "topics": ["it-crash"],
                    "messages": [{"topic": "it-crash", "body": b} for b in bodies],
                },
                home=tmp_path / "producer",
                within=30,
            )
            producer.check()
            sent = {bodies[e["index"]]: e["id"] for e in producer.of("sent")}
            base = {"endpoints": ep, "group": "it-crash-g", "topic": "it-crash", "max_attempts": 1}
            crashed = await run_driver(
                "push_consumer",
                {**base, "expect_ok": len(bodies) - len(hang), "hang": hang, "crash": True, "settle_s": 0.5},
                home=tmp_path / "crashed",
                within=40,
            )
            crashed.check()
            assert sorted(crashed.ids("consumed")) == sorted(sent.values()), crashed.describe()
            assert sorted(e["body"] for e in crashed.of("hanging")) == hang
            successor = await run_driver(
                "push_consumer",
                {**base, "expect_ok": len(hang), "deadline_s": 30, "settle_s": 2},
                home=tmp_path / "successor",
                within=45,
            )
            successor.check()
            calls = successor.of("consumed")
            # Only the messages the crashed consumer held come back, each once, as a second delivery.
            assert sorted(e["body"] for e in calls) == hang, successor.describe()
            assert {e["id"] for e in calls} == {sent[b] for b in hang}
            assert all(e["attempt"] == 2 and e["result"] == "SUCCESS" for e in calls), successor.describe()
            assert srv.brokers[0].inflight("it-crash-g", "it-crash") == 0
            assert srv.brokers[0].backlog("it-crash", "it-crash-g") == 0

    run(scenario(), timeout=55)
