"""Producer and SimpleConsumer against both servers (tests/engines.py): every message type, same code."""

from __future__ import annotations

import time

import thrust
from tests.client._util import receive_n, run
from tests.engines import Engine


def test_normal_round_trip_with_all_fields(engine: Engine) -> None:
    topic, group = engine.topic(), engine.group()

    async def scenario() -> None:
        async with (
            thrust.SimpleConsumer(
                endpoints=engine.endpoint, group=group, subscriptions={topic: "*"}, await_duration=5
            ) as c,
            thrust.Producer(endpoints=engine.endpoint, topics=[topic]) as p,
        ):
            sent = thrust.Message(
                topic=topic, body=b"hello", tag="a", keys=["k1", "k2"], properties={"p": "v"}
            )
            receipt = await p.send(sent)
            [m] = await receive_n(c, 1)
            assert m.message_id == receipt.message_id
            assert (m.topic, m.body, m.tag, m.keys) == (topic, b"hello", "a", ("k1", "k2"))
            assert dict(m.properties) == {"p": "v"}
            assert m.delivery_attempt == 1
            assert m.message_type is thrust.MessageType.NORMAL
            assert m.born_timestamp is not None and abs(m.born_timestamp - time.time()) < 60
            await m.ack()

    run(scenario)
