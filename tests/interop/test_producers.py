"""Official Producer (normal, FIFO, delay, recall) -> thrust server -> official SimpleConsumers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.interop.conftest import Server
from tests.interop.harness import once_each, run, run_driver

pytestmark = pytest.mark.interop

NORMAL, FIFO, DELAY = 1, 2, 3  # apache.rocketmq.v2.MessageType


@pytest.mark.timeout(90, func_only=True)
def test_normal_fifo_delay_producers(server: Server, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with server.start(
            topics=["it-normal:1", "it-fifo:1:FIFO", "it-delay:1:DELAY"],
            groups=["it-plain", "it-ordered:fifo", "it-tagged", "it-sql"],
        ) as srv:
            ep, normal, fifo, delay = srv.endpoint, srv["it-normal"], srv["it-fifo"], srv["it-delay"]
            messages: list[dict[str, object]] = []
            for i in range(6):
                messages.append(
                    {
                        "topic": normal,
                        "body": f"normal-{i}",
                        "tag": "TagA" if i % 2 else "TagB",
                        "keys": [f"k{i}", "shared"],
                        "properties": {"seq": str(i)},
                    }
                )
            for i in range(5):
                for group in ("g-a", "g-b", "g-c"):
                    messages.append({"topic": fifo, "body": f"{group}-{i}", "group": group})
            for i in range(3):
                messages.append({"topic": delay, "body": f"delay-{i}", "delay_s": 2})
            # Recalled before it is due (RecallMessage): must never be delivered.
            messages.append({"topic": delay, "body": "recalled", "delay_s": 4, "recall": True})
            producer, plain, ordered, tagged, sql = await asyncio.gather(
                run_driver(
                    "producer",
                    {"endpoints": ep, "topics": [normal, fifo, delay], "messages": messages},
                    home=tmp_path / "producer",
                    within=55,
                ),
                run_driver(
                    "simple_consumer",
                    {
                        "endpoints": ep,
                        "group": srv["it-plain"],
                        "subscriptions": {normal: "*", delay: "*"},
                        "expect": 9,
                        "deadline_s": 35,
                    },
                    home=tmp_path / "plain",
                    within=55,
                ),
                run_driver(
                    "simple_consumer",
                    {"endpoints": ep, "group": srv["it-ordered"], "subscriptions": {fifo: "*"}, "expect": 15},
                    home=tmp_path / "ordered",
                    within=55,
                ),
                # Server-side filters (docs/protocol.md §6.5): a tag expression and an SQL92 one.
                run_driver(
                    "simple_consumer",
                    {
                        "endpoints": ep,
                        "group": srv["it-tagged"],
                        "subscriptions": {normal: "TagA"},
                        "expect": 3,
                    },
                    home=tmp_path / "tagged",
                    within=55,
                ),
                run_driver(
                    "simple_consumer",
                    {
                        "endpoints": ep,
                        "group": srv["it-sql"],
                        "subscriptions": {normal: "sql:seq = '0' OR seq = '4'"},
                        "expect": 2,
                    },
                    home=tmp_path / "sql",
                    within=55,
                ),
            )
            for d in (producer, plain, ordered, tagged, sql):
                d.check()

            sent = {e["index"]: e for e in producer.of("sent")}
            assert len(sent) == len(messages), producer.describe()
            by_body = {str(messages[i]["body"]): e for i, e in sent.items()}
            [recall] = producer.of("recalled")
            assert recall["recalled_id"] == by_body["recalled"]["id"]
            assert by_body["recalled"]["recall_handle"], "delay messages carry a recall handle"

            # Plain group: every normal and (non-recalled) delay message exactly once, nothing else.
            expected_plain = {e["id"] for b, e in by_body.items() if b.startswith(("normal-", "delay-"))}
            received = plain.of("received")
            assert {e["id"] for e in received} == expected_plain, plain.describe()
            assert once_each([e["id"] for e in received]) == {}, plain.describe()
            assert set(plain.ids("acked")) == expected_plain
            assert plain.of("received", drain=True) == []
            for e in received:
                assert e["attempt"] == 1 and not e["corrupted"], e
                src = messages[next(i for i, s in sent.items() if s["id"] == e["id"])]
                assert e["body"] == src["body"] and e["topic"] == src["topic"]
                if e["topic"] == normal:
                    assert e["type"] == NORMAL
                    assert e["tag"] == src["tag"] and e["keys"] == sorted(src["keys"])  # type: ignore[arg-type]
                    assert e["properties"] == src["properties"]
                else:
                    due = by_body[e["body"]]["delivery_timestamp"]
                    assert e["type"] == DELAY
                    assert e["delivery_timestamp"] == due * 1000  # the client reports milliseconds
                    assert e["t"] >= due, f"delay message delivered {due - e['t']:.2f}s early"

            # FIFO group: every message once, in send order within each message group.
            expected_fifo = {e["id"] for b, e in by_body.items() if b.startswith("g-")}
            received = ordered.of("received")
            assert {e["id"] for e in received} == expected_fifo, ordered.describe()
            assert once_each([e["id"] for e in received]) == {}, ordered.describe()
            assert ordered.of("received", drain=True) == []
            for group in ("g-a", "g-b", "g-c"):
                order = [e["body"] for e in received if e["group"] == group]
                assert order == [f"{group}-{i}" for i in range(5)], ordered.describe()
            assert all(e["type"] == FIFO and e["attempt"] == 1 for e in received)

            # Filtered groups get exactly the matching messages.
            for driver, wanted in (
                (tagged, {"normal-1", "normal-3", "normal-5"}),
                (sql, {"normal-0", "normal-4"}),
            ):
                received = driver.of("received")
                assert sorted(e["body"] for e in received) == sorted(wanted), driver.describe()
                assert {e["id"] for e in received} == {by_body[b]["id"] for b in wanted}

    run(scenario(), timeout=80)
