"""A client whose server comes back works on its next call, even while its channel is in reconnect backoff.

`thrust serve` is killed (SIGKILL) under a Producer and a SimpleConsumer and restarted on the same port.
A channel that failed to reconnect while the server was down waits out gRPC's reconnect backoff (capped at
5 s, `thrust._io.rpc.channel_options`) before it tries again, and a call started in that backoff used to
fail at once with `ConnectionError: ... is unreachable` although the server was back. Each call now waits
for the connection within its own deadline (`RpcClient._connected`); a receive has most of its long poll
for that (`thrust._core.settings.receive_connect_budget`).
"""

from __future__ import annotations

import asyncio

import grpc
import pytest

import thrust
from tests.client._util import run
from tests.support import transport, until
from thrust._core.endpoints import parse_endpoint
from thrust.testing import ServerProcess

_TF = grpc.ChannelConnectivity.TRANSIENT_FAILURE


def _state(client: thrust.SimpleConsumer | thrust.Producer, endpoint: str) -> grpc.ChannelConnectivity:
    return client._session.rpc(parse_endpoint(endpoint))._channel.get_state()  # type: ignore[union-attr]


@pytest.mark.slow
def test_receive_and_send_after_restart_wait_for_a_channel_in_reconnect_backoff() -> None:
    async def scenario() -> None:
        with ServerProcess(topics=["t"], groups=["g"], auto_create=False) as proc:
            ep = proc.endpoints[0]
            async with (
                thrust.Producer(endpoints=ep, topics=["t"]) as producer,
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=20
                ) as consumer,
            ):
                await producer.send(thrust.Message(topic="t", body=b"before"))
                [first] = await consumer.receive(1)
                await consumer.ack(first)
                if transport() == "native":
                    # The native channel has no reconnect backoff to be caught in: it connects again on the
                    # next call (tonic's lazy reconnect). What must hold is the same: both old clients work
                    # once the server is back.
                    proc.kill()
                    await asyncio.sleep(1.0)
                    await asyncio.to_thread(proc.restart)
                    await producer.send(thrust.Message(topic="t", body=b"old producer"))
                    [old] = await consumer.receive(1)
                    assert old.body == b"old producer"
                    await consumer.ack(old)
                    return
                in_backoff = 0
                # Until a receive was started while the consumer's channel was in its backoff with the
                # server back (the restart takes a moment; on a very slow machine the channel may already
                # have reconnected by then, and the cycle is repeated).
                for cycle in range(3):
                    proc.kill()
                    await until(lambda: _state(consumer, ep) is _TF, 20.0, "the channel never failed")
                    # Stay down long enough for failed reconnect attempts to grow the backoff (1 s, 1.6 s,
                    # 2.6 s, ... up to 5 s), so that the channel is still backing off after the restart.
                    await asyncio.sleep(4.0)
                    await asyncio.to_thread(proc.restart)
                    body = f"after restart {cycle}".encode()
                    # A fresh producer (a fresh channel, no backoff) stores the message the receive gets.
                    async with thrust.Producer(endpoints=ep, topics=["t"]) as fresh:
                        await fresh.send(thrust.Message(topic="t", body=body))
                    backing_off = _state(consumer, ep) is _TF
                    got = await consumer.receive(1)  # raised ConnectionError in the backoff before
                    assert [m.body for m in got] == [body]
                    await consumer.ack(got[0])
                    # The producer of before the kill recovers too (its single broker: it waits as well).
                    await producer.send(thrust.Message(topic="t", body=b"old producer"))
                    [old] = await consumer.receive(1)
                    assert old.body == b"old producer"
                    await consumer.ack(old)
                    if backing_off:
                        in_backoff += 1
                        break
                assert in_backoff == 1, "no receive was started while the channel was in its backoff"

    run(scenario, timeout=80.0)
