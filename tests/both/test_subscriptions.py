"""SimpleConsumer subscriptions changed at run time (`subscribe`, `unsubscribe`) and `messages()`, against
both servers (tests/engines.py), same code."""

from __future__ import annotations

import asyncio

import pytest

import thrust
from tests.both.test_roundtrip import consumer
from tests.client._util import receive_n, run
from tests.engines import Engine, unique


async def _bodies_until(c: thrust.SimpleConsumer, want: set[bytes], invisible: float) -> list[bytes]:
    """Receive (and ack) until every body of `want` came; every body received, in order."""
    got: list[bytes] = []
    while not want <= set(got):
        batch = await c.receive(32, invisible)
        got += [m.body for m in batch]
        assert await c.ack_many(batch) == [None] * len(batch)
    return got


@pytest.mark.slow
def test_subscribe_adds_a_topic_with_its_filter_and_unsubscribe_stops_it(engine: Engine) -> None:
    a, b, group = engine.topic(), engine.topic(), engine.group()
    invisible = engine.min_invisible + 5

    async def scenario() -> None:
        async with (
            consumer(engine, group, {a: "*"}) as c,
            thrust.Producer(endpoints=engine.endpoint, topics=[a, b]) as p,
        ):
            # The route is fetched by subscribe: an unknown topic fails there, and is not subscribed.
            with pytest.raises(thrust.NotFoundError):
                await c.subscribe(unique("missing"))
            assert list(c.subscriptions) == [a]
            await c.subscribe(b, "keep")
            assert c.subscriptions == {
                a: thrust.FilterExpression.all(),
                b: thrust.FilterExpression.tag("keep"),
            }

            await p.send(thrust.Message(topic=a, body=b"a1"))
            await p.send(thrust.Message(topic=b, body=b"b-keep", tag="keep"))
            await p.send(thrust.Message(topic=b, body=b"b-drop", tag="drop"))
            got = await _bodies_until(c, {b"a1", b"b-keep"}, invisible)
            assert sorted(got) == [b"a1", b"b-keep"]  # the tag filter of the added subscription held
            # Each topic polled once more comes back empty: "b-drop" is not for this subscription.
            assert await c.receive(32, invisible) == [] and await c.receive(32, invisible) == []

            c.unsubscribe(b)
            assert list(c.subscriptions) == [a]
            await p.send(thrust.Message(topic=b, body=b"b-later", tag="keep"))
            await p.send(thrust.Message(topic=a, body=b"a2"))
            # Every receive now goes to `a`: "a2" comes, then nothing, never "b-later".
            [m] = await receive_n(c, 1, invisible_duration=invisible)
            assert m.body == b"a2" and m.topic == a
            await m.ack()
            assert await c.receive(32, invisible) == [] and await c.receive(32, invisible) == []

            c.unsubscribe(a)
            c.unsubscribe(a)  # unsubscribing twice is harmless
            assert c.subscriptions == {}
            with pytest.raises(thrust.ValidationError, match="no subscriptions"):
                await c.receive(32, invisible)

            # Subscribed again, the group gets what was sent to `b` meanwhile.
            await c.subscribe(b, "keep")
            got = await _bodies_until(c, {b"b-later"}, invisible)
            assert got == [b"b-later"]

    run(scenario, timeout=80)


@pytest.mark.slow
def test_messages_yields_with_its_options_and_ends_when_the_consumer_closes(engine: Engine) -> None:
    topic, group = engine.topic(), engine.group()
    invisible = engine.min_invisible + 5

    async def scenario() -> None:
        async with thrust.Producer(endpoints=engine.endpoint, topics=[topic]) as p:
            sent = [(await p.send(thrust.Message(topic=topic, body=b"%d" % i))).message_id for i in range(5)]
        c = consumer(engine, group, {topic: "*"})
        await c.start()
        calls: list[tuple[int, float | None, int]] = []
        receive = c.receive

        async def spy(max_messages: int = 32, invisible_duration: float | None = None) -> list[object]:
            batch = await receive(max_messages, invisible_duration)
            calls.append((max_messages, invisible_duration, len(batch)))
            return batch  # type: ignore[return-value]

        c.receive = spy  # type: ignore[method-assign,assignment]
        seen: list[str] = []
        closing: asyncio.Task[None] | None = None
        async for m in c.messages(max_messages=2, invisible_duration=invisible):
            seen.append(m.message_id)
            await m.ack()
            if len(seen) == len(sent):
                # Closed from elsewhere: the iteration ends on its own, without an error.
                closing = asyncio.create_task(c.close())
        assert closing is not None
        await closing
        assert sorted(seen) == sorted(sent) and len(set(seen)) == len(seen)
        # Every receive carried the iteration's options, and no batch was larger than asked.
        assert calls and all(n == 2 and inv == invisible and size <= 2 for n, inv, size in calls), calls
        assert sum(size for _, _, size in calls) == len(sent)

    run(scenario, timeout=80)
