"""Route changes: sessions with brokers that left every route are closed (embedded server, real gRPC)."""

from __future__ import annotations

from typing import Any

import thrust
from tests.client._util import run
from tests.support import until
from thrust._codec.status import Code
from thrust._io.session import ROUTE_REFRESH_CONCURRENCY
from thrust.server.faults import Rpc
from thrust.testing import embedded_server


def _server_streams(srv: Any, client_id: str) -> int:
    return len(srv.clients.telemetry_sessions(client_id))


def drop_second_broker(srv: Any) -> None:
    """From now on QueryRoute (and QueryAssignment) list only the first broker: a route update."""
    everyone = srv.route_brokers
    srv.route_brokers = lambda requested: everyone(requested)[:1]


def test_session_of_a_broker_that_left_every_route_is_closed() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], brokers=2) as srv:
            async with thrust.Producer(endpoints=srv.endpoints[0], topics=["t"]) as p:
                session = p.session
                cid = session.client_id
                await until(lambda: len(session.open_sessions()) == 2 and _server_streams(srv, cid) == 2)
                changes: list[tuple[str, int]] = []
                session.add_route_listener(lambda topic, route: changes.append((topic, len(route.endpoints))))
                [first, second] = sorted(session.open_sessions(), key=lambda ep: ep.target)
                stream = session.telemetry(second)
                assert stream is not None
                await session.refresh_routes()  # same route: nothing changes, nobody is told
                assert changes == [] and len(session.open_sessions()) == 2
                drop_second_broker(srv)
                await session.refresh_routes()
                assert changes == [("t", 1)]
                assert session.open_sessions() == [first]
                # The broker's telemetry stream ends, on both sides.
                await until(lambda: stream._closed and _server_streams(srv, cid) == 1)
                receipts = [await p.send(thrust.Message(topic="t", body=b"x")) for _ in range(4)]
                assert len(receipts) == 4
                assert session.open_sessions() == [first]

    run(scenario)


def test_a_refresh_round_fetches_its_routes_together_bounded_and_reports_a_failure() -> None:
    """The routes of a refresh round are fetched concurrently, ROUTE_REFRESH_CONCURRENCY at a time (so the
    loop wakes a few times a round, not twice a route); a fetch that fails keeps its old route, is reported,
    and does not stop the others."""
    topics = [f"t{i}" for i in range(40)]

    async def scenario() -> None:
        async with embedded_server(topics=topics) as srv:
            async with thrust.Producer(endpoints=srv.endpoints[0], topics=topics) as p:
                session = p.session
                fetch = session._fetch_route
                in_flight = 0
                most = 0
                fetched: list[str] = []

                async def counting(topic: str) -> Any:
                    nonlocal in_flight, most
                    in_flight += 1
                    most = max(most, in_flight)
                    try:
                        return await fetch(topic)
                    finally:
                        in_flight -= 1
                        fetched.append(topic)

                session._fetch_route = counting  # type: ignore[method-assign]
                before = {t: session.routes.get(t) for t in topics}
                srv.faults.fail_next(Rpc.QUERY_ROUTE, Code.INTERNAL_ERROR)
                assert await session._refresh(topics) is True
                assert sorted(fetched) == sorted(topics)
                assert most == ROUTE_REFRESH_CONCURRENCY  # 32 together, then the other 8
                for t in topics:  # the failed topic kept its route, the others got the same queues again
                    old, new = before[t], session.routes.get(t)
                    assert old is not None and new is not None and new.queues == old.queues
                fetched.clear()
                most = 0
                assert await session._refresh(topics) is False
                assert most == ROUTE_REFRESH_CONCURRENCY and len(fetched) == len(topics)

    run(scenario)
