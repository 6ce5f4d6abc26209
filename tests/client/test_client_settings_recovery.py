"""A server that lost the client's Settings (a restarted proxy; one that expired the client) gets them
again without user action: the reconnect backoff of the Telemetry stream that carries them is capped at
Java's 1 s, and a Heartbeat answered UNRECOGNIZED_CLIENT_TYPE reopens that stream at once."""

from __future__ import annotations

import asyncio
import time

import pytest

import thrust
from thrust._core.backoff import RECONNECT_BACKOFF, Backoff
from thrust.testing import embedded_server


def test_telemetry_reconnect_backoff_is_capped_at_javas_1s() -> None:
    """apache/rocketmq-clients ClientSessionImpl renews a failed stream after 1 s; with a 10 s cap a
    proxy down for 20 s left receives failing for up to 10 s after it was back."""
    backoff = Backoff(RECONNECT_BACKOFF)
    delays = [backoff.next_delay() for _ in range(12)]
    assert delays[0] <= 0.1 and max(delays) == 1.0 and delays[-1] == 1.0


@pytest.mark.slow
def test_settings_forgotten_by_the_server_come_back_after_the_next_heartbeat() -> None:
    async def scenario() -> None:
        async with (
            embedded_server(topics=["t"], groups=["g"]) as srv,
            thrust.SimpleConsumer(
                endpoints=srv.endpoints[0], group="g", subscriptions={"t": "*"}, await_duration=1
            ) as consumer,
        ):
            client_id = consumer.client_id
            assert client_id is not None
            assert srv.client_settings(client_id) is not None
            opened = srv.stats.calls["Telemetry"]
            # What a proxy restart leaves: the client's stream looks fine to it, the server knows nothing.
            srv.terminate_client(client_id)
            assert srv.client_settings(client_id) is None
            deadline = time.monotonic() + 40  # the heartbeat comes every 10 s
            # The server's settings table has no event to wait on: poll it.
            while srv.client_settings(client_id) is None and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.1)
            assert srv.client_settings(client_id) is not None, "the client never sent its Settings again"
            assert srv.stats.calls["Telemetry"] == opened + 1  # a new stream, opened once
            async with thrust.Producer(endpoints=srv.endpoints[0], topics=["t"]) as producer:
                receipt = await producer.send(thrust.Message(topic="t", body=b"after"))
            got = await consumer.receive(8)
            assert [m.message_id for m in got] == [receipt.message_id]

    asyncio.run(scenario())
