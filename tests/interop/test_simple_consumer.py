"""Official SimpleConsumer against thrust: receive, ack, change-invisible-duration, queue selection."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.interop.conftest import Server
from tests.interop.harness import once_each, run, run_driver

pytestmark = pytest.mark.interop


@pytest.mark.timeout(60, func_only=True)
def test_receive_ack_and_change_invisible_duration(server: Server, tmp_path: Path) -> None:
    bodies = [f"m{i}" for i in range(8)]
    actions = {
        "m1": "nack:1",  # back after ~1 s with delivery_attempt 2
        "m3": "nack:2",
        "m2": "extend:30",  # longer invisibility, then ack with the new handle: never redelivered
    }

    async def scenario() -> None:
        async with server.start(topics=["it-simple:1"], groups=["it-simple-g"]) as srv:
            ep, topic, group = srv.endpoint, srv["it-simple"], srv["it-simple-g"]
            producer, consumer = await asyncio.gather(
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
                run_driver(
                    "simple_consumer",
                    {
                        "endpoints": ep,
                        "group": group,
                        "subscriptions": {topic: "*"},
                        "expect": len(bodies),
                        "invisible_s": 10,  # the proxy's minimum for receive (docs/protocol.md §6.3)
                        "actions": actions,
                        "deadline_s": 30,
                    },
                    home=tmp_path / "consumer",
                    within=45,
                ),
            )
            producer.check()
            consumer.check()
            sent = {e["id"]: bodies[e["index"]] for e in producer.of("sent")}
            assert len(sent) == len(bodies)

            received = consumer.of("received")
            assert {e["id"] for e in received} == set(sent), consumer.describe()
            assert sorted(consumer.ids("acked")) == sorted(sent), "every message acked exactly once"
            assert consumer.of("received", drain=True) == [], consumer.describe()
            per_body: dict[str, list[dict[str, object]]] = {}
            for e in received:
                assert e["body"] == sent[e["id"]] and not e["corrupted"]
                per_body.setdefault(e["body"], []).append(e)
            for body in bodies:
                attempts = [e["attempt"] for e in per_body[body]]
                if actions.get(body, "").startswith("nack"):
                    assert attempts == [1, 2], (body, consumer.describe())
                else:
                    assert attempts == [1], (body, consumer.describe())
            changed = {e["id"]: e for e in consumer.of("changed")}
            assert {sent[i] for i in changed} == set(actions)
            # ChangeInvisibleDuration answers a new receipt handle (docs/protocol.md §7.4); the client keeps
            # it.
            assert all(e["new_handle"] for e in changed.values()), consumer.describe()
            for body in ("m1", "m3"):
                _, second = per_body[body]
                seconds = int(actions[body].split(":")[1])
                [change] = [e for e in changed.values() if sent[e["id"]] == body]
                assert second["t"] >= change["t"] + seconds - 0.2, f"{body} came back too early"
            if srv.embedded is not None:  # its broker state: nothing left in flight
                assert srv.embedded.brokers[0].inflight(group, topic) == 0

    run(scenario(), timeout=55)


def _spread_scenario(server: Server, tmp_path: Path, *, fifo: bool) -> None:
    # The official SimpleConsumer sends a randomly chosen *route* queue in every ReceiveMessage. Upstream
    # ignores that id and pops the broker's acting queue (-1) across all queues of the topic, FIFO groups
    # included (docs/protocol.md §3.3), so one receive returns the whole backlog (up to the batch of 32).
    topic, group = ("it-spread-fifo", "it-spread-fifo-g") if fifo else ("it-spread", "it-spread-g")

    async def scenario() -> None:
        async with server.start(
            topics=[f"{topic}:4:FIFO" if fifo else f"{topic}:4"], groups=[f"{group}:fifo" if fifo else group]
        ) as srv:
            ep, t, g = srv.endpoint, srv[topic], srv[group]
            if fifo:
                messages = [{"topic": t, "body": f"s{i}", "group": f"mg-{i % 4}"} for i in range(8)]
            else:
                messages = [{"topic": t, "body": f"s{i}"} for i in range(8)]
            producer = await run_driver(
                "producer",
                {"endpoints": ep, "topics": [t], "messages": messages},
                home=tmp_path / "producer",
                within=30,
            )
            producer.check()
            # Spread over queues: two messages at the same queue offset are on different queues (neither
            # server tells the client which queue it stored a message on; the proxy picks it itself).
            offsets = [e["offset"] for e in producer.of("sent")]
            assert len(set(offsets)) < len(offsets), ("all on one queue", offsets)
            consumer = await run_driver(
                "simple_consumer",
                {
                    "endpoints": ep,
                    "group": g,
                    "subscriptions": {t: "*"},
                    "expect": len(messages),
                    "batch": 32,
                    "deadline_s": 8,
                    "drain": False,
                },
                home=tmp_path / "consumer",
                within=30,
            )
            consumer.check()
            assert set(consumer.ids("acked")) == set(producer.ids("sent")), consumer.describe()
            assert once_each(consumer.ids("received")) == {}
            first = consumer.of("receive_returned")[0]
            assert first["count"] == len(messages), consumer.describe()

    run(scenario(), timeout=55)


@pytest.mark.timeout(60, func_only=True)
def test_receive_reads_every_queue_of_the_topic(server: Server, tmp_path: Path) -> None:
    # Interop finding I1 (docs/interop-findings.md; fixed in 9ca55df for non-FIFO groups).
    _spread_scenario(server, tmp_path, fifo=False)


@pytest.mark.timeout(60, func_only=True)
def test_fifo_group_receive_reads_every_queue_of_the_topic(server: Server, tmp_path: Path) -> None:
    _spread_scenario(server, tmp_path, fifo=True)
