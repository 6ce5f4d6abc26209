"""`thrust._core.send`: the decisions of one send and of EndTransaction's retries, without an event loop."""

from __future__ import annotations

import zlib

import pytest

from thrust._core.backoff import END_TRANSACTION_ATTEMPTS, END_TRANSACTION_BACKOFF, RetryPolicy
from thrust._core.endpoints import Endpoint, parse_endpoint
from thrust._core.routes import Isolation, Permission, QueueSelector, RouteQueue, TopicRoute
from thrust._core.send import Attempt, Refusal, SendPlan, end_transaction_retry_delay

EA = parse_endpoint("10.0.0.1:8081")
EB = parse_endpoint("10.0.0.2:8081")
EC = parse_endpoint("10.0.0.3:8081")
NORMAL, FIFO, DELAY, TRANSACTION = 1, 2, 3, 4  # MessageType values
POLICY = RetryPolicy.exponential(3, 0.01, 1.0, 2.0)


def q(
    broker: str,
    qid: int,
    ep: Endpoint,
    perm: Permission = Permission.READ_WRITE,
    types: frozenset[int] = frozenset(),
) -> RouteQueue:
    return RouteQueue("t", broker, qid, perm, ep, 0, types)


def route(*queues: RouteQueue) -> TopicRoute:
    return TopicRoute("t", queues, 0.0)


THREE = route(q("a", 0, EA), q("b", 0, EB), q("c", 0, EC))


def plan(
    r: TopicRoute = THREE,
    *,
    policy: RetryPolicy = POLICY,
    isolation: Isolation | None = None,
    selector: QueueSelector | None = None,
    kind: int = NORMAL,
    group: str | None = None,
    transactional: bool = False,
    validate: bool = True,
    now: float = 0.0,
) -> SendPlan:
    return SendPlan.for_send(
        selector or QueueSelector(),
        r,
        policy,
        isolation or Isolation(),
        now,
        message_type=kind,
        message_group=group,
        transactional=transactional,
        validate_message_type=validate,
    )


def fail(
    p: SendPlan, a: Attempt, *, retriable: bool = True, transport: bool = False, closing: bool = False
) -> float | None:
    return p.on_failure(a, retriable=retriable, transport=transport, closing=closing, now=1.0)


def test_each_attempt_goes_to_another_broker_until_the_budget_is_spent() -> None:
    p = plan()
    assert p.refusal is None and p.max_attempts == 3
    seen = []
    delays = []
    while True:
        a = p.next_attempt()
        seen.append((a.number, a.endpoint))
        delay = fail(p, a)
        if delay is None:
            break
        delays.append(delay)
    assert seen == [(1, EA), (2, EB), (3, EC)]
    assert delays == [POLICY.next_delay(1), POLICY.next_delay(2)] == [0.01, 0.02]
    with pytest.raises(RuntimeError):
        p.next_attempt()


def test_round_robin_start_moves_per_send_of_one_selector() -> None:
    selector = QueueSelector()
    firsts = [plan(selector=selector).next_attempt().endpoint for _ in range(4)]
    assert firsts == [EA, EB, EC, EA]


def test_fewer_queues_than_attempts_wrap_around() -> None:
    p = plan(route(q("a", 0, EA), q("b", 0, EB)))
    endpoints = []
    for _ in range(3):
        a = p.next_attempt()
        endpoints.append(a.endpoint)
        fail(p, a)
    assert endpoints == [EA, EB, EA]


def test_the_budget_is_the_policys_max_attempts() -> None:
    p = plan(policy=POLICY.with_max_attempts(5))
    assert p.max_attempts == 5
    for n in range(1, 5):
        assert fail(p, p.next_attempt()) == POLICY.next_delay(n)
    assert fail(p, p.next_attempt()) is None


def test_customized_backoff_delays() -> None:
    policy = RetryPolicy.customized(4, [0.5, 0.0])
    p = plan(policy=policy)
    assert [fail(p, p.next_attempt()) for _ in range(4)] == [0.5, 0.0, 0.0, None]


def test_a_transactional_message_is_sent_once() -> None:
    p = plan(transactional=True, kind=TRANSACTION)
    assert p.max_attempts == 1
    assert len(p.candidates) == 1
    assert fail(p, p.next_attempt()) is None


def test_non_retriable_and_closing_failures_are_final() -> None:
    p = plan()
    assert fail(p, p.next_attempt(), retriable=False) is None
    p = plan()
    assert fail(p, p.next_attempt(), closing=True) is None


def test_a_transport_failure_isolates_the_endpoint_and_a_success_restores_it() -> None:
    iso = Isolation(cooldown=10.0)
    p = plan(isolation=iso)
    a = p.next_attempt()
    fail(p, a, retriable=False)  # a status failure: no isolation
    assert not iso.is_isolated(a.endpoint, 1.0)
    fail(p, a, transport=True)
    assert iso.is_isolated(a.endpoint, 1.0)
    # The next send's plan puts the isolated endpoint last.
    later = plan(isolation=iso, now=2.0)
    assert later.candidates[-1].endpoint == a.endpoint
    b = later.next_attempt()
    later.on_success(Attempt(1, a.queue, False))
    assert not iso.is_isolated(a.endpoint, 2.0)
    assert b.endpoint != a.endpoint


def test_fifo_pins_one_queue_for_every_attempt_even_when_isolated() -> None:
    r = route(q("a", 0, EA), q("a", 1, EA), q("b", 0, EB))
    iso = Isolation()
    iso.isolate(EA, 0.0)
    expected = r.writable[zlib.crc32(b"g1") % 3]
    p = plan(r, isolation=iso, group="g1", kind=FIFO)
    queues = []
    for _ in range(3):
        a = p.next_attempt()
        queues.append(a.queue)
        fail(p, a)
    assert queues == [expected] * 3


def test_no_writable_queue_is_a_refusal() -> None:
    p = plan(route(q("a", 0, EA, Permission.READ)))
    assert p.refusal is Refusal.NO_WRITABLE_QUEUE
    with pytest.raises(RuntimeError):
        p.next_attempt()


def test_message_type_validation() -> None:
    r = route(q("a", 0, EA, types=frozenset({FIFO})), q("b", 0, EB, types=frozenset({NORMAL})), q("c", 0, EC))
    # Only the queues that accept the type remain (an unrestricted queue accepts every type).
    assert [x.endpoint for x in plan(r, kind=NORMAL).candidates] == [EB, EC]
    only_fifo = route(q("a", 0, EA, types=frozenset({FIFO})))
    assert plan(only_fifo, kind=NORMAL).refusal is Refusal.TYPE_NOT_ACCEPTED
    assert plan(only_fifo, kind=NORMAL, validate=False).refusal is None
    assert plan(only_fifo, kind=FIFO, group="g").refusal is None


def test_a_type_all_writable_queues_accept_needs_no_check_per_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    restricted = route(
        q("a", 0, EA, types=frozenset({NORMAL, FIFO})),
        q("b", 0, EB, types=frozenset({NORMAL, DELAY})),
        q("c", 0, EC),  # unrestricted: accepts every type
        q("d", 0, EC, Permission.READ, types=frozenset({FIFO})),  # not writable: never a candidate
    )
    assert THREE.writable_accept is None
    assert all(THREE.all_writable_accept(kind) for kind in (NORMAL, FIFO, DELAY, TRANSACTION))
    assert restricted.writable_accept == frozenset({NORMAL})
    assert restricted.all_writable_accept(NORMAL)
    assert not restricted.all_writable_accept(FIFO)

    checked: list[int] = []
    accepts = RouteQueue.accepts

    def counting(self: RouteQueue, message_type: int) -> bool:
        checked.append(message_type)
        return accepts(self, message_type)

    monkeypatch.setattr(RouteQueue, "accepts", counting)
    assert [x.endpoint for x in plan(restricted, kind=NORMAL).candidates] == [EA, EB, EC]
    assert checked == []  # every writable queue takes NORMAL: the candidates are not filtered
    assert [x.endpoint for x in plan(restricted, kind=DELAY).candidates] == [EB, EC]
    assert checked  # one queue refuses DELAY: filtered queue by queue


def test_ready_endpoints_go_first() -> None:
    p = plan()
    assert p.prefer_ready(lambda ep: ep == EC) == frozenset()
    assert [x.endpoint for x in p.candidates] == [EC, EA, EB]


def test_all_ready_keeps_the_order() -> None:
    p = plan()
    assert p.prefer_ready(lambda ep: True) == frozenset()
    assert [x.endpoint for x in p.candidates] == [EA, EB, EC]


def test_none_ready_names_the_endpoints_to_wait_for() -> None:
    p = plan()
    assert p.prefer_ready(lambda ep: False) == {EA, EB, EC}
    assert [x.endpoint for x in p.candidates] == [EA, EB, EC]
    assert p.prefer_ready(lambda ep: ep == EB) == frozenset()  # once one is up, it goes first
    assert p.next_attempt().endpoint == EB


def test_fifo_queue_stays_when_its_broker_is_not_ready() -> None:
    r = route(q("a", 0, EA), q("b", 0, EB))
    p = plan(r, group="g", kind=FIFO)
    (pinned,) = p.candidates
    assert p.prefer_ready(lambda ep: False) == {pinned.endpoint}
    assert p.candidates == (pinned,)
    # Even given several queues, a FIFO plan never reorders them by readiness.
    queues = (q("a", 0, EA), q("b", 0, EB))
    fifo = SendPlan(queues, POLICY, Isolation(), max_attempts=3, fifo=True)
    assert fifo.prefer_ready(lambda ep: ep == EB) == frozenset()
    assert fifo.candidates == queues


def test_an_attempt_waits_for_its_connection_only_with_no_other_endpoint() -> None:
    assert plan().next_attempt().wait_for_connection is False
    assert plan(route(q("a", 0, EA), q("a", 1, EA))).next_attempt().wait_for_connection is True
    assert plan(group="g", kind=FIFO).next_attempt().wait_for_connection is True
    assert plan(transactional=True).next_attempt().wait_for_connection is True


def test_end_transaction_retries() -> None:
    delays = [
        end_transaction_retry_delay(n, retriable=True, closed=False)
        for n in range(1, END_TRANSACTION_ATTEMPTS + 1)
    ]
    assert delays == [END_TRANSACTION_BACKOFF.delay(n) for n in range(1, END_TRANSACTION_ATTEMPTS)] + [None]
    assert end_transaction_retry_delay(1, retriable=False, closed=False) is None
    assert end_transaction_retry_delay(1, retriable=True, closed=True) is None
