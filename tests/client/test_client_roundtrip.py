"""Producer and SimpleConsumer against the embedded server over real gRPC: every message type."""

from __future__ import annotations

import asyncio
import time

import pytest

import thrust
from tests.client._util import receive_n, run
from thrust.testing import embedded_server


def test_normal_round_trip_with_all_fields() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=5
                ) as c,
                thrust.Producer(endpoints=ep, topics=["t"]) as p,
            ):
                sent = thrust.Message(
                    topic="t", body=b"hello", tag="a", keys=["k1", "k2"], properties={"p": "v"}
                )
                receipt = await p.send(sent)
                assert len(receipt.message_id) == 34 and receipt.message_id == receipt.message_id.upper()
                [m] = await receive_n(c, 1)
                assert m.message_id == receipt.message_id
                assert (m.topic, m.body, m.tag, m.keys) == ("t", b"hello", "a", ("k1", "k2"))
                assert dict(m.properties) == {"p": "v"}
                assert m.delivery_attempt == 1
                assert m.message_type is thrust.MessageType.NORMAL
                assert m.born_timestamp is not None and abs(m.born_timestamp - time.time()) < 60
                await m.ack()

    run(scenario)


def test_batch_send_pipelined_and_iteration() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=5
                ) as c,
                thrust.Producer(endpoints=ep, topics=["t"], max_in_flight=8) as p,
            ):
                receipts = await p.send_batch([thrust.Message(topic="t", body=b"b%d" % i) for i in range(5)])
                assert len({r.message_id for r in receipts}) == 5
                assert srv.stats.calls["SendMessage"] == 1
                futures = [await p.send_async(thrust.Message(topic="t", body=b"p%d" % i)) for i in range(50)]
                ids = {r.message_id for r in await asyncio.gather(*futures)} | {
                    r.message_id for r in receipts
                }
                seen: set[str] = set()
                async for m in c:
                    seen.add(m.message_id)
                    await m.ack()
                    if len(seen) == len(ids):
                        break
                assert seen == ids

    run(scenario)


def test_fifo_order_per_message_group() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["f:4:FIFO"], groups=["fg:fifo"]) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.SimpleConsumer(
                    endpoints=ep, group="fg", subscriptions={"f": "*"}, await_duration=5
                ) as c,
                thrust.Producer(endpoints=ep, topics=["f"]) as p,
            ):
                for i in range(10):
                    for group in ("a", "b"):
                        await p.send(
                            thrust.Message(topic="f", body=f"{group}{i}".encode(), message_group=group)
                        )
                order: dict[str, list[int]] = {"a": [], "b": []}
                while sum(map(len, order.values())) < 20:
                    batch = await c.receive(32, 30)
                    for m in batch:
                        assert m.message_type is thrust.MessageType.FIFO
                        order[m.message_group or ""].append(int(m.body[1:]))
                    errors = await c.ack_many(batch)
                    assert errors == [None] * len(batch)
                assert order == {"a": list(range(10)), "b": list(range(10))}

    run(scenario)


def test_delay_is_honoured_and_recall() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["d:2:DELAY"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"d": "*"}, await_duration=5
                ) as c,
                thrust.Producer(endpoints=ep, topics=["d"]) as p,
            ):
                start = time.time()
                r = await p.send(thrust.Message(topic="d", body=b"later", delay=1.5))
                recalled = await p.send(thrust.Message(topic="d", body=b"never", delay=1.5))
                assert recalled.recall_handle
                assert await p.recall("d", recalled.recall_handle) == recalled.message_id
                [m] = await receive_n(c, 1)
                assert m.message_id == r.message_id
                assert time.time() - start >= 1.4
                assert m.message_type is thrust.MessageType.DELAY
                await m.ack()
                assert await c.receive(32) == []

    run(scenario)


def test_transaction_commit_rollback_and_check() -> None:
    async def scenario() -> None:
        decided: list[str] = []

        def checker(msg: thrust.ReceivedMessage) -> thrust.TransactionResolution:
            decided.append(msg.message_id)
            return thrust.TransactionResolution.COMMIT

        async with embedded_server(
            topics=["tx:2:TRANSACTION"],
            groups=["g"],
            transaction_check_after=0.5,
            transaction_check_interval=0.5,
        ) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"tx": "*"}, await_duration=5
                ) as c,
                thrust.Producer(endpoints=ep, topics=["tx"], transaction_checker=checker) as p,
            ):
                async with p.transaction() as t:
                    committed = await t.send(thrust.Message(topic="tx", body=b"commit"))
                with pytest.raises(RuntimeError):
                    async with p.transaction() as t:
                        await t.send(thrust.Message(topic="tx", body=b"rollback"))
                        raise RuntimeError("local work failed")
                # An orphan: never resolved by the client; the server asks the checker.
                orphan = await p.transaction().send(thrust.Message(topic="tx", body=b"orphan"))
                got = await receive_n(c, 2)
                assert {m.message_id for m in got} == {committed.message_id, orphan.message_id}
                assert orphan.message_id in decided
                assert all(m.message_type is thrust.MessageType.TRANSACTION for m in got)
                assert await c.ack_many(got) == [None, None]

    run(scenario)


def test_tag_and_sql_filters() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["gt", "gs"]) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.SimpleConsumer(
                    endpoints=ep, group="gt", subscriptions={"t": "a||b"}, await_duration=5
                ) as ct,
                thrust.SimpleConsumer(
                    endpoints=ep,
                    group="gs",
                    subscriptions={"t": thrust.FilterExpression.sql("price > 10")},
                    await_duration=5,
                ) as cs,
                thrust.Producer(endpoints=ep, topics=["t"]) as p,
            ):
                for tag, price in (("a", 5), ("b", 20), ("c", 30)):
                    await p.send(
                        thrust.Message(
                            topic="t", body=tag.encode(), tag=tag, properties={"price": str(price)}
                        )
                    )
                tags = sorted(m.tag or "" for m in await receive_n(ct, 2))
                prices = sorted(m.body for m in await receive_n(cs, 2))
                assert tags == ["a", "b"]
                assert prices == [b"b", b"c"]

    run(scenario)


def test_validation_before_io() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv:
            async with thrust.Producer(endpoints=srv.endpoints[0], topics=["t"]) as p:
                calls = srv.stats.calls["SendMessage"]
                bad = [
                    thrust.Message(topic="t", body=b""),
                    thrust.Message(topic="t", body=b"x", tag="a|b"),
                    thrust.Message(topic="bad topic", body=b"x"),
                    thrust.Message(topic="t", body=b"x", properties={"UNIQ_KEY": "x"}),
                    thrust.Message(topic="t", body=b"x", message_group="g", delay=5),
                    thrust.Message(topic="t", body=b"x", delay=3 * 86400),
                    thrust.Message(topic="t", body=b"x" * (4 * 1024 * 1024 + 1)),
                ]
                for m in bad:
                    with pytest.raises(thrust.ValidationError) as info:
                        await p.send(m)
                    assert info.value.code is not None and not info.value.retriable
                assert srv.stats.calls["SendMessage"] == calls

    run(scenario)
