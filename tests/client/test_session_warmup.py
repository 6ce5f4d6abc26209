"""Sessions with the brokers of a route open when the route is fetched, before any call needs them.

Java's client does the same (`ClientImpl.onTopicRouteDataFetched`: every new endpoint of a fetched route
gets its telemetry session and settings sync at once), so the first call to a broker never pays the
handshake. Counted on the server: Telemetry streams per broker, and which RPCs reached each broker.
No timing assertions: `_until` only bounds how long a condition may take to become true.
"""

from __future__ import annotations

from typing import Any

import thrust
from tests.client._util import run
from tests.support import until
from thrust.testing import embedded_server


def _stream_brokers(srv: Any, client_id: str) -> list[int]:
    """Broker indexes with an open Telemetry stream of `client_id`, as the server sees them."""
    return sorted(s.broker for s in srv.clients.telemetry_sessions(client_id))


def _rpcs_on(srv: Any, broker: int) -> set[str]:
    return {rpc for (b, rpc), n in srv.stats.broker_calls.items() if b == broker and n}


def test_route_fetch_opens_a_session_with_every_broker_of_the_route() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t:2"], brokers=3) as srv:
            async with thrust.Producer(endpoints=srv.endpoints[0], topics=["t"]) as p:
                session = p.session
                cid = session.client_id
                route = session.cached_route("t")
                assert route is not None and len(route.endpoints) == 3
                # Nothing was sent, yet every broker of the route has a settled session.
                await until(lambda: _stream_brokers(srv, cid) == [0, 1, 2])
                await until(lambda: all(session.is_ready(ep) for ep in route.endpoints))
                for broker in (1, 2):
                    assert _rpcs_on(srv, broker) == {"Telemetry"}, srv.stats.broker_calls
                assert srv.client_settings(cid) is not None  # the settings handshake was answered

    run(scenario)


def test_a_broker_new_to_a_refreshed_route_gets_its_session_before_first_use() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t:2"], brokers=2) as srv:
            everyone = srv.route_brokers
            srv.route_brokers = lambda requested: everyone(requested)[:1]  # type: ignore[method-assign]
            async with thrust.Producer(endpoints=srv.endpoints[0], topics=["t"]) as p:
                session = p.session
                cid = session.client_id
                await until(lambda: _stream_brokers(srv, cid) == [0])
                telemetry_before = srv.stats.broker_calls[(1, "Telemetry")]
                assert telemetry_before == 0 and _rpcs_on(srv, 1) == set()
                srv.route_brokers = everyone  # type: ignore[method-assign]
                await session.refresh_routes()
                route = session.cached_route("t")
                assert route is not None and len(route.endpoints) == 2
                # The refresh alone opened the session with broker 1: no send has gone there.
                await until(lambda: _stream_brokers(srv, cid) == [0, 1])
                await until(lambda: all(session.is_ready(ep) for ep in route.endpoints))
                assert _rpcs_on(srv, 1) == {"Telemetry"}, srv.stats.broker_calls

    run(scenario)


def test_push_consumer_has_a_session_with_a_broker_before_it_is_assigned_a_queue_there() -> None:
    """Scenario 5a's situation: the route lists both brokers, the assignment only broker 0's queue. The
    session with broker 1 is ready anyway, so a later move to broker 1's queue starts receiving at once."""

    async def scenario() -> None:
        async with embedded_server(topics=["f:1"], groups=["g:fifo"], brokers=2) as srv:
            srv.faults.set_assignment("f", "g", [(0, 0)])
            consumer = thrust.PushConsumer(
                endpoints=srv.endpoints[0],
                group="g",
                subscriptions={"f": "*"},
                listener=lambda _m: thrust.ConsumeResult.SUCCESS,
            )
            async with consumer:
                session = consumer.session
                cid = session.client_id
                await until(lambda: srv.stats.broker_calls[(0, "ReceiveMessage")] >= 1)
                await until(lambda: _stream_brokers(srv, cid) == [0, 1])
                route = session.cached_route("f")
                assert route is not None
                await until(lambda: all(session.is_ready(ep) for ep in route.endpoints))
                assert _rpcs_on(srv, 1) == {"Telemetry"}, srv.stats.broker_calls

    run(scenario)
