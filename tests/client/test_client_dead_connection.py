"""A dead (black-holed) connection is replaced: FaultProxy between the client and the embedded server.

The proxy listens on 127.0.0.2 with the server's port, so the routes the server hands out (the host the
client dialed, with the broker's port) lead through the proxy as well.
"""

from __future__ import annotations

import asyncio
import time

import pytest

import thrust
from tests.client._util import run
from thrust.reliability.proxy import PASS, Blackhole, FaultProxy
from thrust.testing import embedded_server


async def _send_until_ok(p: thrust.Producer, budget: float) -> float:
    """Send until one send succeeds; seconds it took (fails past `budget`)."""
    started = time.monotonic()
    while True:
        try:
            await p.send(thrust.Message(topic="t", body=b"after"))
            return time.monotonic() - started
        except thrust.errors.ThrustError:
            assert time.monotonic() - started < budget, "the dead connection was not replaced in time"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("keepalive", "budget"),
    [
        # Keepalive as long as Java's (300 s) cannot help: only the failures of the sends can tell the
        # connection is dead (recoverTransport after 2 consecutive DEADLINE_EXCEEDED, docs/protocol.md §4.6).
        (300.0, 15.0),
        # Default keepalive: a dead connection is replaced within 30 s whatever the traffic.
        (10.0, 30.0),
    ],
)
def test_black_holed_connection_is_replaced_after_the_network_heals(keepalive: float, budget: float) -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv:
            port = srv.ports[0]
            async with FaultProxy(target=("127.0.0.1", port), host="127.0.0.2", port=port) as proxy:
                config = thrust.ClientConfig(
                    f"127.0.0.2:{port}",
                    request_timeout=1.0,
                    keepalive_interval=keepalive,
                    keepalive_timeout=keepalive,
                )
                async with thrust.Producer(config=config, topics=["t"], max_attempts=1) as p:
                    await p.send(thrust.Message(topic="t", body=b"before"))
                    assert p.session.open_sessions() == [
                        thrust.ClientConfig(f"127.0.0.2:{port}").access_point
                    ]
                    connections = proxy.stats().accepted
                    # Packets vanish both ways; nothing is closed or reset (a half-open TCP connection).
                    proxy.set_mode(Blackhole())
                    # Four sends time out: the first two replace the channel, but its new connection is
                    # black-holed too, and the next two fall inside the recovery cooldown.
                    for _ in range(4):
                        with pytest.raises((thrust.errors.TimeoutError, thrust.errors.ConnectionError)):
                            await p.send(thrust.Message(topic="t", body=b"lost"))
                    assert p.session.transport_recoveries == 1
                    # The network heals for new connections only: the old one stays a black hole for ever.
                    proxy.set_mode(PASS, scope="new")
                    took = await _send_until_ok(p, budget)
                    assert took < budget
                    assert proxy.stats().accepted > connections  # a fresh connection carried the send
                    assert p.session.transport_recoveries >= 1
                    await p.send(thrust.Message(topic="t", body=b"again"))

    run(scenario, timeout=55.0)


def test_keepalive_alone_finds_a_black_holed_idle_connection() -> None:
    # No calls while the network is down, so only keepalive can notice: with a 1 s interval and timeout
    # the dead connection is closed within ~2 s, which ends the Telemetry stream (it has no deadline) and
    # makes it reopen. Once the network heals, sends go through a fresh connection.
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv:
            port = srv.ports[0]
            async with FaultProxy(target=("127.0.0.1", port), host="127.0.0.2", port=port) as proxy:
                config = thrust.ClientConfig(
                    f"127.0.0.2:{port}", request_timeout=1.0, keepalive_interval=1.0, keepalive_timeout=1.0
                )
                async with thrust.Producer(config=config, topics=["t"], max_attempts=1) as p:
                    await p.send(thrust.Message(topic="t", body=b"before"))
                    [ep] = p.session.open_sessions()
                    stream = p.session.telemetry(ep)
                    assert stream is not None and stream.opened == 1
                    connections = proxy.stats().accepted
                    proxy.set_mode(Blackhole())
                    deadline = time.monotonic() + 5.0
                    while stream.opened < 2:
                        assert time.monotonic() < deadline, "keepalive did not find the dead connection"
                        await asyncio.sleep(0.05)
                    proxy.set_mode(PASS, scope="new")
                    await _send_until_ok(p, 30.0)
                    assert proxy.stats().accepted > connections

    run(scenario)
