"""A malformed SQL92 filter is refused as the consumer is built, before any I/O, with the same typed error
on both servers (ValidationError, ILLEGAL_FILTER_EXPRESSION). Without the client's check, `thrust serve`
answered each receive BAD_REQUEST-family ILLEGAL_FILTER_EXPRESSION and the real proxy INTERNAL_SERVER_ERROR
(D6 in docs/interop-findings.md), while a push consumer started and consumed nothing."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

import thrust
import thrust.sync
from tests.client._util import run
from tests.engines import Engine
from tests.push._util import until
from thrust._codec.status import Code
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb

BAD = ["a >", "price >> 1", "(a = 1", "a = 'x", "a BETWEEN 1", "a = NULL", "a IN ()"]


def _builders(engine: Engine, group: str) -> list[Callable[[dict[str, Any]], object]]:
    common = {"endpoints": engine.endpoint, "group": group}
    return [
        lambda subs: thrust.SimpleConsumer(**common, subscriptions=subs),
        lambda subs: thrust.PushConsumer(**common, subscriptions=subs, listener=lambda m: None),
        lambda subs: thrust.sync.SimpleConsumer(**common, subscriptions=subs),
        lambda subs: thrust.sync.PushConsumer(**common, subscriptions=subs, listener=lambda m: None),
    ]


def test_a_malformed_sql92_filter_is_one_validation_error_before_any_io_and_a_good_one_consumes(
    engine: Engine,
) -> None:
    topic, group = engine.topic(), engine.group()
    for expression in BAD:
        for build in _builders(engine, group):
            with pytest.raises(thrust.ValidationError) as info:
                build({topic: thrust.FilterExpression.sql(expression)})
            assert info.value.code == Code.ILLEGAL_FILTER_EXPRESSION, (expression, info.value)
            assert not info.value.retriable

    async def scenario() -> None:
        got: list[bytes] = []
        lock = threading.Lock()

        def listener(m: thrust.ReceivedMessage) -> None:
            with lock:
                got.append(m.body)

        good = thrust.FilterExpression.sql("price > 10 AND region IN ('eu', 'us')")
        consumer = thrust.PushConsumer(
            endpoints=engine.endpoint, group=group, subscriptions={topic: good}, listener=listener
        )
        simple = thrust.SimpleConsumer(
            endpoints=engine.endpoint, group=engine.group(), subscriptions={topic: "*"}
        )
        async with thrust.Producer(endpoints=engine.endpoint, topics=[topic]) as p, consumer, simple:
            # A started consumer refuses it too, before the route lookup; its subscriptions stay as they were.
            with pytest.raises(thrust.ValidationError) as info:
                await simple.subscribe(topic, thrust.FilterExpression.sql(BAD[0]))
            assert info.value.code == Code.ILLEGAL_FILTER_EXPRESSION
            assert simple.subscriptions == {topic: thrust.FilterExpression.all()}
            for body, price, region in ((b"cheap", 5, "eu"), (b"far", 20, "ap"), (b"match", 20, "eu")):
                props = {"price": str(price), "region": region}
                await p.send(thrust.Message(topic=topic, body=body, properties=props))
            await until(lambda: consumer.stats().acked >= 1, timeout=40)
            assert consumer.stats().receive_failures == 0  # the real broker compiles it too
        assert got == [b"match"]

    run(scenario, timeout=80)


# What thrust's parser accepts on purpose and RocketMQ's broker cannot compile (`check_filter` in
# thrust._codec.filter): the client refuses these too, so that what it lets through works on both servers.
UPSTREAM_ONLY = ["NOT price > 10", "NOT price IN ('5')", "price != 10", "price > 0.0"]


@pytest.mark.slow
def test_forms_only_the_real_broker_refuses_are_refused_by_the_client_too(engine: Engine) -> None:
    """Each is a ValidationError when the consumer is built, on both servers. Bypassing the client's check
    shows why: the real proxy fails the receive (INTERNAL_SERVER_ERROR, D6 in docs/interop-findings.md),
    while the embedded server's parser takes the form (a deliberate deviation of thrust._codec.filter)."""
    topic, group = engine.topic(), engine.group()
    for expression in UPSTREAM_ONLY:
        for build in _builders(engine, group):
            with pytest.raises(thrust.ValidationError) as info:
                build({topic: thrust.FilterExpression.sql(expression)})
            assert info.value.code == Code.ILLEGAL_FILTER_EXPRESSION, (expression, info.value)

    async def scenario() -> None:
        async with (
            thrust.Producer(endpoints=engine.endpoint, topics=[topic]) as p,
            thrust.SimpleConsumer(
                endpoints=engine.endpoint, group=group, subscriptions={topic: "*"}, await_duration=5
            ) as c,
        ):
            for _ in UPSTREAM_ONLY:  # each form matches price 7 (in thrust's reading)
                await p.send(thrust.Message(topic=topic, body=b"x", properties={"price": "7"}))
            for expression in UPSTREAM_ONLY:
                c._filters[topic] = pb.FilterExpression(
                    type=pb.SQL, expression=expression
                )  # bypass the check
                if engine.real:
                    with pytest.raises(thrust.InternalError) as failed:
                        await c.receive(1, engine.min_invisible)
                    assert failed.value.code == Code.INTERNAL_SERVER_ERROR, (expression, failed.value)
                else:  # the embedded server takes it and filters with it
                    got = await c.receive(1, engine.min_invisible)
                    assert [m.properties["price"] for m in got] == ["7"], expression

    run(scenario, timeout=80)


@pytest.mark.slow
def test_a_filter_the_server_refuses_shows_in_push_stats(engine: Engine) -> None:
    """A push consumer whose receives a server refuses (here a malformed filter that bypassed the client's
    check) shows the typed error in `stats().last_receive_error` instead of looking idle: the embedded
    server's ILLEGAL_FILTER_EXPRESSION, not retriable, or the real proxy's INTERNAL_SERVER_ERROR (D6)."""
    topic, group = engine.topic(), engine.group()

    async def scenario() -> None:
        consumer = thrust.PushConsumer(
            endpoints=engine.endpoint, group=group, subscriptions={topic: "*"}, listener=lambda m: None
        )
        consumer._filter_pb[topic] = pb.FilterExpression(type=pb.SQL, expression="a >")  # bypass the check
        async with thrust.Producer(endpoints=engine.endpoint, topics=[topic]) as p, consumer:
            await p.send(thrust.Message(topic=topic, body=b"x"))
            await until(lambda: consumer.stats().receive_failures >= 2, timeout=40)
            error = consumer.stats().last_receive_error
            if engine.real:
                assert isinstance(error, thrust.InternalError), error
            else:
                assert isinstance(error, thrust.BadRequestError) and not error.retriable, error
                assert error.code == Code.ILLEGAL_FILTER_EXPRESSION
            assert consumer.stats().received == 0

    run(scenario, timeout=80)
