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
