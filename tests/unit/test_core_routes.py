from __future__ import annotations

import zlib
from collections import Counter

import pytest

from thrust._core.assignment import QueueId
from thrust._core.endpoints import parse_endpoint
from thrust._core.routes import (
    AssignmentEndpointSelector,
    Isolation,
    Permission,
    QueueSelector,
    RouteCache,
    RouteQueue,
    TopicRoute,
)

EA = parse_endpoint("10.0.0.1:8081")
EB = parse_endpoint("10.0.0.2:8081")
EC = parse_endpoint("10.0.0.3:8081")
ACCESS = parse_endpoint("proxy.local:8081")
RW = Permission.READ_WRITE


def q(
    broker: str, qid: int, ep: object, perm: Permission = RW, topic: str = "t", broker_id: int = 0
) -> RouteQueue:
    return RouteQueue(topic, broker, qid, perm, ep, broker_id)  # type: ignore[arg-type]


def route(*queues: RouteQueue, topic: str = "t") -> TopicRoute:
    return TopicRoute(topic, queues, 0.0)


def test_route_queue_properties() -> None:
    rq = RouteQueue("t", "b", 3, Permission.READ, EA, 1, frozenset({1}))
    assert rq.readable and not rq.writable and not rq.is_master
    assert rq.id == QueueId("t", "b", 3)
    assert rq.accepts(1) and not rq.accepts(2)
    assert q("b", 0, EA).accepts(4)
    assert route(q("a", 0, EA), q("a", 1, EA, Permission.READ)).writable == (q("a", 0, EA),)


def test_route_missing_a_recent_broker_is_refetched_every_5s_until_it_returns() -> None:
    """A broker that crashed drops out of the proxy's route; the route is then re-fetched every 5 s (not
    30 s), so the restarted broker's backlog is consumed seconds after it is back."""
    cache = RouteCache(refresh_period=30.0, degraded_refresh_period=5.0, degraded_memory=600.0)
    cache.update("t", [q("a", 0, EA), q("b", 0, EB)], now=0.0)
    assert not cache.degraded("t", 0.0) and cache.period("t", 0.0) == 30.0
    assert cache.due(29.0) == [] and cache.next_refresh_at(1.0) == 30.0
    cache.update("t", [q("a", 0, EA)], now=30.0)  # broker b is gone from the route
    assert cache.degraded("t", 30.0)
    assert cache.due(34.9) == [] and cache.due(35.0) == ["t"] and cache.next_refresh_at(31.0) == 35.0
    cache.update("t", [q("a", 0, EA), q("b", 0, EB)], now=35.0)  # back
    assert not cache.degraded("t", 35.0) and cache.due(64.0) == [] and cache.due(65.0) == ["t"]
    # Gone for longer than the memory: taken as removed from the cluster, back to the normal period.
    cache.update("t", [q("a", 0, EA)], now=100.0)
    assert cache.due(105.0) == ["t"]
    # b was last listed at 35: degraded until 635, without another update
    assert cache.degraded("t", 635.0) and not cache.degraded("t", 635.5)
    assert cache.period("t", 635.5) == 30.0 and cache.next_refresh_at(635.5) == 130.0
    cache.update("t", [q("a", 0, EA)], now=700.0)
    assert not cache.degraded("t", 700.0) and cache.due(705.0) == [] and cache.due(730.0) == ["t"]
    # A topic's memory goes with it.
    cache.remove("t")
    cache.update("t", [q("a", 0, EA)], now=800.0)
    assert not cache.degraded("t", 800.0)


def test_cache_staleness_and_endpoint_changes() -> None:
    cache = RouteCache(refresh_period=30.0)
    u = cache.update("t", [q("a", 0, EA), q("b", 0, EB), q("x", 0, EC, topic="other")], now=0.0)
    assert u.added_endpoints == {EA, EB} and u.removed_endpoints == set()
    assert len(u.route.queues) == 2  # a queue of another topic is not part of this route
    u = cache.update("u", [q("a", 0, EA, topic="u")], now=10.0)
    assert u.added_endpoints == set()
    assert cache.endpoints() == {EA, EB}
    assert not cache.stale("t", 29.9) and cache.stale("t", 30.0) and cache.stale("nope", 0.0)
    assert cache.due(35.0) == ["t"]
    assert cache.next_refresh_at(10.0) == 30.0
    u = cache.update("t", [q("c", 0, EC)], now=35.0)
    assert u.added_endpoints == {EC} and u.removed_endpoints == {EB}  # EA still used by "u"
    assert cache.remove("u") == {EA}
    assert cache.remove("u") == frozenset()
    assert cache.endpoints() == {EC}
    assert cache.get("t") is not None and cache.topics() == ["t"]


def test_round_robin_over_writable_queues() -> None:
    r = route(q("a", 0, EA), q("a", 1, EA, Permission.READ), q("b", 0, EB), q("b", 1, EB))
    sel = QueueSelector()
    firsts = [sel.candidates(r, 1)[0] for _ in range(6)]
    assert [(x.broker_name, x.queue_id) for x in firsts] == [("a", 0), ("b", 0), ("b", 1)] * 2


def test_retry_moves_to_another_broker() -> None:
    r = route(q("a", 0, EA), q("a", 1, EA), q("b", 0, EB), q("c", 0, EC))
    cands = QueueSelector().candidates(r, max_attempts=3)
    assert [c.broker_name for c in cands] == ["a", "b", "c"]
    cands = QueueSelector().candidates(route(q("a", 0, EA), q("a", 1, EA)), max_attempts=3)
    assert [(c.broker_name, c.queue_id) for c in cands] == [("a", 0), ("a", 1)]  # another queue at least


def test_candidates_follow_a_new_route_and_budget_at_once() -> None:
    """The selector keeps each topic's candidates per round-robin start while nothing is isolated; a new
    route of the topic, another attempt budget, or an isolated endpoint must be seen on the next send."""
    sel = QueueSelector()
    first = route(q("a", 0, EA), q("b", 0, EB))
    assert [sel.candidates(first, 2)[0].broker_name for _ in range(4)] == ["a", "b", "a", "b"]
    assert [c.broker_name for c in sel.candidates(first, 2)] == ["a", "b"]
    assert [c.broker_name for c in sel.candidates(first, 1)] == ["b"]  # another budget, at once
    # Broker a left the route: its queue is never a candidate again.
    second = route(q("b", 0, EB), q("c", 0, EC))
    picks = [sel.candidates(second, 3) for _ in range(4)]
    assert all(c.broker_name in ("b", "c") for p in picks for c in p)
    assert {p[0].broker_name for p in picks} == {"b", "c"}
    iso = Isolation(cooldown=10.0)
    iso.isolate(EB, now=0.0)
    assert [sel.candidates(second, 1, iso, now=1.0)[0].broker_name for _ in range(3)] == ["c"] * 3
    assert {sel.candidates(second, 1, iso, now=11.0)[0].broker_name for _ in range(2)} == {"b", "c"}
    # Its cooldown elapsed above: nothing is isolated any more.
    assert not iso.has_entries()


def test_isolated_endpoints_skipped_then_restored() -> None:
    r = route(q("a", 0, EA), q("b", 0, EB))
    iso = Isolation(cooldown=10.0)
    iso.isolate(EA, now=0.0)
    sel = QueueSelector()
    for _ in range(4):
        assert sel.candidates(r, 1, iso, now=1.0)[0].endpoint == EB
    assert [c.endpoint for c in sel.candidates(r, 2, iso, now=1.0)] == [EB, EA]  # isolated ones last
    assert iso.isolated(1.0) == {EA}
    iso.on_success(EA)
    assert not iso.is_isolated(EA, 1.0)
    iso.isolate(EB, now=2.0)
    assert iso.is_isolated(EB, 11.9) and not iso.is_isolated(EB, 12.0)  # cooldown
    iso.isolate(EA, 0.0)
    iso.isolate(EB, 0.0)
    assert len(sel.candidates(r, 1, iso, now=1.0)) == 1  # all isolated: still send somewhere
    assert iso.isolated(100.0) == frozenset()


def test_fifo_sticks_to_hashed_queue() -> None:
    r = route(q("a", 0, EA), q("a", 1, EA), q("b", 0, EB))
    sel = QueueSelector()
    iso = Isolation()
    iso.isolate(EA, 0.0)
    for group in ("g1", "order-42", "ü"):
        expected = r.writable[zlib.crc32(group.encode()) % 3]
        for _ in range(3):
            assert sel.candidates(r, 3, iso, 0.0, message_group=group) == (expected,)
    spread = Counter(sel.candidates(r, 1, message_group=f"g{i}")[0].id for i in range(300))
    assert len(spread) == 3


def test_no_writable_queue() -> None:
    assert QueueSelector().candidates(route(q("a", 0, EA, Permission.READ)), 3) == ()
    assert QueueSelector().candidates(route(), 3, message_group="g") == ()


def test_assignment_endpoint_prefers_access_point() -> None:
    r = route(q("a", 0, ACCESS), q("b", 0, EB))
    assert AssignmentEndpointSelector().pick(r, ACCESS) == ACCESS


def test_assignment_endpoint_round_robin_over_masters() -> None:
    r = route(
        q("a", 0, EA),
        q("s", 0, EC, broker_id=1),  # slave: never
        q("n", 0, EC, Permission.NONE),  # no permission: never
        q("b", 0, EB, Permission.READ),
    )
    sel = AssignmentEndpointSelector()
    picks = [sel.pick(r, ACCESS) for _ in range(4)]
    assert picks == [EA, EB, EA, EB]
    assert sel.pick(route(q("n", 0, EC, Permission.NONE))) is None
    assert sel.pick(route()) is None


def test_route_cache_endpoints_kept_by_count_match_the_union_of_routes() -> None:
    """The set of all endpoints is kept by counting the routes that list each (storing one route of a
    consumer of 1,000 topics used to re-union every route): it always equals the union, and each update
    reports exactly what that union gained and lost."""
    import random

    rng = random.Random(7)
    eps = [parse_endpoint(f"10.0.0.{i}:8081") for i in range(4)]
    cache = RouteCache()
    changes = 0
    for step in range(500):
        topic = f"t{rng.randrange(6)}"
        before = cache.endpoints()
        if rng.random() < 0.15:
            removed = cache.remove(topic)
            added: frozenset[object] = frozenset()
        else:
            chosen = rng.sample(range(4), rng.randrange(0, 3))
            upd = cache.update(topic, [q(f"b{i}", 0, eps[i], topic=topic) for i in chosen], step)
            added, removed = upd.added_endpoints, upd.removed_endpoints
        union = frozenset().union(*(r.endpoints for t in cache.topics() if (r := cache.get(t))))
        assert cache.endpoints() == union
        assert (added, removed) == (union - before, before - union)
        changes += bool(added or removed)
    assert changes > 50  # the walk did add and remove endpoints, not only store empty routes


def test_a_refresh_round_takes_the_routes_due_soon() -> None:
    """Routes fetched one after another are refreshed in one round (`due(now, ahead)`), not one each."""
    cache = RouteCache(refresh_period=30.0)
    for i in range(5):
        cache.update(f"t{i}", [q("a", 0, EA, topic=f"t{i}")], now=i * 0.2)
    assert cache.next_refresh_at(0.0) == 30.0
    assert cache.due(30.0) == ["t0"]
    assert cache.due(30.0, ahead=1.0) == ["t0", "t1", "t2", "t3", "t4"]
    assert cache.due(29.0, ahead=0.5) == []


def test_more_routes_than_the_rate_allows_in_the_period_are_refreshed_less_often_unless_degraded() -> None:
    cache = RouteCache(30.0, degraded_refresh_period=5.0, max_refresh_rate=10.0)

    def both(topic: str) -> list[RouteQueue]:
        return [q("a", 0, EA, topic=topic), q("b", 0, EB, topic=topic)]

    for i in range(300):
        cache.update(f"t{i}", both(f"t{i}"), 0.0)
    assert cache.refresh_every() == 30.0  # 300 routes in 30 s: 10 a second
    assert cache.next_refresh_at(0.0) == 30.0
    for i in range(300, 1000):
        cache.update(f"t{i}", both(f"t{i}"), 0.0)
    assert cache.refresh_every() == 100.0  # 1,000 routes at 10 a second
    assert cache.due(99.0) == [] and len(cache.due(100.0)) == 1000
    assert cache.next_refresh_at(0.0) == 100.0 and not cache.stale("t0", 99.9) and cache.stale("t0", 100.0)
    # a route that lost a broker is re-fetched after the degraded period, however many routes there are
    cache.update("t0", [q("a", 0, EA, topic="t0")], 10.0)  # broker b is gone from its route
    assert cache.period("t0", 10.0) == 5.0 and cache.due(15.0) == ["t0"]
    with pytest.raises(ValueError):
        RouteCache(max_refresh_rate=0.0)
