"""The thrust-native wheel, installed with thrust in a fresh venv, against `thrust serve` (`make native`).

Sends with every producer path the native transport carries (awaited, pipelined, `send_batch`, the linger
batch), receives and acks them with a SimpleConsumer, consumes a second batch with a PushConsumer, and
checks that every client says it used the native transport. Exits non-zero on any shortfall.
"""

from __future__ import annotations

import asyncio
import sys

import thrust
from thrust.testing import ServerProcess

N = 50


async def main(endpoint: str) -> None:
    bodies: set[bytes] = set()
    async with thrust.Producer(endpoints=endpoint, topics=["smoke"], transport="native") as producer:
        for i in range(N):
            bodies.add(b"awaited %d" % i)
            await producer.send(thrust.Message(topic="smoke", body=b"awaited %d" % i, tag="a"))
        futures = []
        for i in range(N):
            bodies.add(b"pipelined %d" % i)
            futures.append(await producer.send_async(thrust.Message(topic="smoke", body=b"pipelined %d" % i)))
        await asyncio.gather(*futures)
        batch = [thrust.Message(topic="smoke", body=b"batch %d" % i) for i in range(N)]
        bodies.update(m.body for m in batch)
        await producer.send_batch(batch)
        assert producer.stats().transport == "native", producer.stats()
    async with thrust.Producer(
        endpoints=endpoint, topics=["smoke"], transport="native", batch_max_messages=16
    ) as lingering:
        lingered = [b"lingered %d" % i for i in range(N)]
        bodies.update(lingered)
        await asyncio.gather(*(lingering.send(thrust.Message(topic="smoke", body=b)) for b in lingered))

    got: set[bytes] = set()
    async with thrust.SimpleConsumer(
        endpoints=endpoint,
        group="smoke-simple",
        subscriptions={"smoke": "*"},
        transport="native",
        await_duration=5,
    ) as consumer:
        while got != bodies:
            received = await consumer.receive(32, 30)
            assert received, f"nothing more to receive: {len(got)} of {len(bodies)}"
            await consumer.ack_many(received)
            got.update(m.body for m in received)
        assert consumer.stats().transport == "native"

    consumed: set[bytes] = set()
    done = asyncio.Event()

    def listener(message: thrust.ReceivedMessage) -> thrust.ConsumeResult:
        consumed.add(message.body)
        if consumed >= bodies:
            done.set()
        return thrust.ConsumeResult.SUCCESS

    async with thrust.PushConsumer(
        endpoints=endpoint,
        group="smoke-push",
        subscriptions={"smoke": "*"},
        listener=listener,
        transport="native",
    ) as push:
        await asyncio.wait_for(done.wait(), 60)
        assert push.stats().transport == "native"
    print(
        f"native smoke: {len(bodies)} sent, received and acked by a SimpleConsumer, "
        "consumed by a PushConsumer"
    )


if __name__ == "__main__":
    with ServerProcess(topics=["smoke:4"], groups=["smoke-simple", "smoke-push"]) as server:
        asyncio.run(main(server.endpoints[0]))
    sys.exit(0)
