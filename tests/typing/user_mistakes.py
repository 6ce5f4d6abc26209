"""Mistakes a type checker must catch in a user's program (tests/typing/test_public_types.py).

Each line marked `# expect: <mypy error code>` must get exactly that error from `mypy --strict`, and no
other line any error. An argument typed Any (as `**options: Any` was) would let the call through.
"""

from __future__ import annotations

import thrust
import thrust.sync


def listener(message: thrust.ReceivedMessage) -> thrust.ConsumeResult:
    return thrust.ConsumeResult.SUCCESS


def returns_a_string(message: thrust.ReceivedMessage) -> str:
    return "done"


async def asyncio_clients() -> None:
    thrust.Producer(endpoints="127.0.0.1:8081", topic=["orders"])  # expect: call-arg
    async with thrust.Producer(endpoints="127.0.0.1:8081") as producer:
        await producer.send(b"raw bytes")  # expect: arg-type
        await producer.send(thrust.Message(topic="orders", body="text"))  # expect: arg-type
    consumer = thrust.SimpleConsumer(endpoints="127.0.0.1:8081", group="g", subscriptions={"t": "*"})
    await consumer.receive(max_messages="32")  # expect: arg-type
    thrust.PushConsumer(endpoints="127.0.0.1:8081", group="g", subscriptions={"t": "*"})  # expect: call-arg
    thrust.PushConsumer(
        endpoints="127.0.0.1:8081",
        group="g",
        subscriptions={"t": "*"},
        listener=returns_a_string,  # expect: arg-type
    )
    thrust.ClientConfig("127.0.0.1:8081").replace(request_timout=3.0)  # expect: call-arg


def sync_clients() -> None:
    thrust.sync.PushConsumer(endpoints="127.0.0.1:8081", group="g", listener=listener)  # expect: call-arg
    thrust.sync.PushConsumer(
        endpoints="127.0.0.1:8081",
        group="g",
        subscriptions={"t": "*"},
        listener=listener,
        consumption_thread_count="20",  # expect: arg-type
    )
    # mypy reports an unknown keyword at the line the call starts on.
    thrust.sync.PushConsumer(  # expect: call-arg
        endpoints="127.0.0.1:8081",
        group="g",
        subscriptions={"t": "*"},
        listener=listener,
        threads=4,
    )
    thrust.sync.SimpleConsumer(
        endpoints="127.0.0.1:8081",
        group=7,  # expect: arg-type
        subscriptions={"t": "*"},
    )
    thrust.sync.Producer(endpoints="127.0.0.1:8081").send(thrust.Message(topic="t"))  # expect: call-arg
