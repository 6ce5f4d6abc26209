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


@pytest.mark.slow
def test_a_filter_only_the_real_broker_refuses_shows_in_push_stats(engine: Engine) -> None:
    """`NOT price > 10` compiles with thrust's parser (NOT binds looser than a comparison, as in standard
    SQL: a deliberate deviation, `thrust._codec.filter`), so the client lets it through; upstream's grammar
    binds NOT to `price` and the broker cannot compile it, so the real proxy answers every receive
    INTERNAL_SERVER_ERROR (D6 in docs/interop-findings.md). A push consumer shows that failure in
    `stats().last_receive_error` instead of looking idle; on the embedded server the filter consumes."""
    topic, group = engine.topic(), engine.group()

    async def scenario() -> None:
        got: list[bytes] = []
        consumer = thrust.PushConsumer(
            endpoints=engine.endpoint,
            group=group,
            subscriptions={topic: thrust.FilterExpression.sql("NOT price > 10")},
            listener=lambda m: got.append(m.body),
        )
        async with thrust.Producer(endpoints=engine.endpoint, topics=[topic]) as p, consumer:
            await p.send(thrust.Message(topic=topic, body=b"cheap", properties={"price": "5"}))
            if engine.real:
                await until(lambda: consumer.stats().receive_failures >= 1, timeout=40)
                error = consumer.stats().last_receive_error
                assert isinstance(error, thrust.InternalError), error
                assert error.code == Code.INTERNAL_SERVER_ERROR
            else:
                await until(lambda: consumer.stats().acked == 1, timeout=40)
                assert got == [b"cheap"] and consumer.stats().last_receive_error is None

    run(scenario, timeout=80)
