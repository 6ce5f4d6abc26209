"""Official PushConsumer against thrust: everything consumed, failures redelivered, then dead-lettered."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.interop.harness import run, run_driver
from thrust.server.core.model import RetryPolicy
from thrust.testing import GroupSpec, embedded_server

pytestmark = pytest.mark.interop

MAX_ATTEMPTS = 3


@pytest.mark.timeout(60, func_only=True)
def test_push_consumer_retries_and_dead_letters(official_python: Path, tmp_path: Path) -> None:
    bodies = [f"p{i}" for i in range(12)]
    # Listener failures per body: fail the first K deliveries (-1: always, so it must be dead-lettered).
    fail = {"p1": 1, "p2": 2, "p3": -1, "p4": -1}
    always = {b for b, k in fail.items() if k == -1}
    # A small max_attempts and 1 s backoffs keep the test short; the official client nacks with
    # ChangeInvisibleDuration(backoff[attempt-1]) in whole seconds (reference 6.2 step 3).
    group = GroupSpec("it-push-g", retry=RetryPolicy(max_attempts=MAX_ATTEMPTS, customized=(1.0, 1.0, 1.0)))

    async def scenario() -> None:
        async with embedded_server(topics=["it-push:2"], groups=[group]) as srv:
            ep = srv.endpoints[0]
            consumer, producer = await asyncio.gather(
                run_driver(
                    "push_consumer",
                    {
                        "endpoints": ep,
                        "group": "it-push-g",
                        "topic": "it-push",
                        "expect_ok": len(bodies) - len(always),
                        "fail": fail,
                        "max_attempts": MAX_ATTEMPTS,
                        "deadline_s": 35,
                        "settle_s": 3,
                    },
                    home=tmp_path / "consumer",
                    within=50,
                ),
                run_driver(
                    "producer",
                    {
                        "endpoints": ep,
                        "topics": ["it-push"],
                        "messages": [{"topic": "it-push", "body": b} for b in bodies],
                    },
                    home=tmp_path / "producer",
                    within=30,
                ),
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

            # Dead-lettered on the server after max attempts (reference 7.5 step 6): %DLQ%<group>.
            dlq = [m for b in srv.brokers for m in b.messages("%DLQ%it-push-g")]
            assert sorted(m.dead_letter_of[1] for m in dlq if m.dead_letter_of) == sorted(
                sent[b] for b in always
            )
            assert len(dlq) == len(always)
            for b in srv.brokers:
                assert b.inflight("it-push-g", "it-push") == 0
                assert b.backlog("it-push", "it-push-g") == 0

    run(scenario(), timeout=55)


@pytest.mark.timeout(60, func_only=True)
def test_fifo_push_consumer_local_retries_and_forward_to_dlq(official_python: Path, tmp_path: Path) -> None:
    groups = {"A": [f"A-{i}" for i in range(5)], "B": [f"B-{i}" for i in range(5)]}
    # FIFO: the official client retries locally (no redelivery) and, when attempts run out, calls
    # ForwardMessageToDeadLetterQueue itself (reference 6.2 step 8, 7.7).
    fail = {"A-1": 1, "B-2": -1}
    group = GroupSpec(
        "it-fifo-push-g", fifo=True, retry=RetryPolicy(max_attempts=MAX_ATTEMPTS, customized=(1.0, 1.0, 1.0))
    )
    messages = [{"topic": "it-fifo-push", "body": b, "group": g} for g, bs in groups.items() for b in bs]

    async def scenario() -> None:
        async with embedded_server(topics=["it-fifo-push:2:FIFO"], groups=[group]) as srv:
            ep = srv.endpoints[0]
            producer = await run_driver(
                "producer",
                {"endpoints": ep, "topics": ["it-fifo-push"], "messages": messages},
                home=tmp_path / "producer",
                within=30,
            )
            producer.check()
            consumer = await run_driver(
                "push_consumer",
                {
                    "endpoints": ep,
                    "group": "it-fifo-push-g",
                    "topic": "it-fifo-push",
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

            dlq = [m for b in srv.brokers for m in b.messages("%DLQ%it-fifo-push-g")]
            assert [m.dead_letter_of for m in dlq] == [("it-fifo-push", sent["B-2"])]
            for b in srv.brokers:
                assert b.inflight("it-fifo-push-g", "it-fifo-push") == 0
                assert b.backlog("it-fifo-push", "it-fifo-push-g") == 0

    run(scenario(), timeout=55)


@pytest.mark.timeout(60, func_only=True)
def test_messages_of_a_crashed_consumer_are_redelivered(official_python: Path, tmp_path: Path) -> None:
    bodies = [f"c{i}" for i in range(6)]
    hang = ["c1", "c4"]

    async def scenario() -> None:
        # client_expiry: how long after a client's Telemetry stream drops its auto-renewed messages are
        # released (the proxy's channel expiry is 120 s, reference 7.2); short to keep the test short.
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
