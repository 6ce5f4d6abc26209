"""ReceiveBalancer: which (topic, broker) a SimpleConsumer's next receive long-polls. No clock, no loop."""

from __future__ import annotations

import pytest

from thrust._core.receive_balancer import ReceiveBalancer

B = ("b0", "b1", "b2")


def _drive(balancer: ReceiveBalancer[str], backlog: dict[str, int], batch: int = 32) -> list[tuple[str, int]]:
    """Receive until every backlog is empty; (key, received) per receive."""
    log: list[tuple[str, int]] = []
    while any(backlog.values()):
        key = balancer.choose(list(backlog))
        got = min(batch, backlog[key])
        backlog[key] -= got
        balancer.record(key, got)
        log.append((key, got))
        assert len(log) < 1000
    return log


def test_fresh_keys_rotate_in_order() -> None:
    balancer: ReceiveBalancer[str] = ReceiveBalancer()
    picks = []
    for _ in range(6):
        key = balancer.choose(B)
        balancer.record(key, 1)
        picks.append(key)
    assert picks == ["b0", "b1", "b2", "b0", "b1", "b2"]


@pytest.mark.parametrize("per_broker", [10, 100, 1000])
def test_an_even_backlog_drains_without_an_empty_receive(per_broker: int) -> None:
    log = _drive(ReceiveBalancer(), dict.fromkeys(B, per_broker))
    assert [got for _, got in log if got == 0] == []
    assert len(log) == 3 * -(-per_broker // 32)


def test_an_uneven_backlog_is_drained_with_bounded_probes_of_the_drained_brokers() -> None:
    log = _drive(ReceiveBalancer(), {"b0": 5, "b1": 300, "b2": 40})
    assert sum(got for _, got in log) == 345
    assert [got for key, got in log if key == "b1"] == [32] * 9 + [12]  # every b1 receive is a full batch
    # b0 and b2 ran dry: each is asked once more (it was preferred), then every 4, 8, 16 choices.
    empties = [key for key, got in log if got == 0]
    assert empties.count("b0") <= 3 and empties.count("b2") <= 3
    assert len(log) - len(empties) == 1 + 10 + 2  # b0 once, b1 ten times, b2 twice


def test_an_idle_key_is_skipped_more_after_each_empty_receive_but_never_starved() -> None:
    balancer: ReceiveBalancer[str] = ReceiveBalancer(max_skips=8)
    gaps: list[int] = []
    since = 0
    for _ in range(200):
        key = balancer.choose(B)
        if key == "b2":
            gaps.append(since)
            since = 0
            balancer.record(key, 0)  # b2 never has anything
        else:
            since += 1
            balancer.record(key, 32)  # b0 and b1 always do
    # Plain rotation first (b2 untried), then 2 * 2**e others between visits, capped at max_skips.
    assert gaps[:5] == [2, 4, 8, 8, 8]
    assert max(gaps) == 8
    assert balancer.empties("b2") == len(gaps)


def test_the_cap_never_falls_below_a_plain_rotation() -> None:
    balancer: ReceiveBalancer[int] = ReceiveBalancer(max_skips=1)
    assert balancer.skip_bound(5, 10) == 9  # ten keys: a plain rotation passes a key over 9 times
    assert balancer.skip_bound(1, 1) == 0  # one key: always due


def test_when_nothing_is_preferred_it_is_a_round_robin() -> None:
    balancer: ReceiveBalancer[str] = ReceiveBalancer()
    picks = []
    for _ in range(9):
        key = balancer.choose(B)
        balancer.record(key, 0)
        picks.append(key)
    assert picks == ["b0", "b1", "b2"] * 3


def test_a_key_that_returns_messages_again_is_preferred_again() -> None:
    balancer: ReceiveBalancer[str] = ReceiveBalancer()
    for key in B:
        assert balancer.choose(B) == key
        balancer.record(key, 0 if key == "b1" else 32)
    # b1 came back empty: b0 and b2 are preferred, b1 is due after being passed over 2 * 2 = 4 times.
    picks = []
    for _ in range(5):
        key = balancer.choose(B)
        balancer.record(key, 32)  # this time b1 has messages when asked
        picks.append(key)
    assert picks == ["b0", "b2", "b0", "b1", "b2"]
    assert balancer.empties("b1") == 0
    assert [balancer.choose(B) for _ in range(3)] == ["b0", "b1", "b2"]


def test_keys_follow_the_route() -> None:
    balancer: ReceiveBalancer[str] = ReceiveBalancer()
    assert balancer.choose(B) == "b0"
    balancer.record("b0", 0)
    assert balancer.choose(("b0", "b1", "b2", "b3")) == "b1"  # a new broker joins the rotation
    assert balancer.choose(("b2", "b3")) == "b2"  # b0 and b1 gone: their state is forgotten
    balancer.record("b0", 5)  # an answer for a forgotten key is ignored
    assert balancer.empties("b0") == 0
    assert balancer.choose(B) == "b0"  # b0 comes back fresh, not idle
    with pytest.raises(ValueError):
        balancer.choose(())


def test_concurrent_receives_go_to_different_keys() -> None:
    balancer: ReceiveBalancer[str] = ReceiveBalancer()
    assert [balancer.choose(B) for _ in range(3)] == ["b0", "b1", "b2"]  # none answered yet


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        ReceiveBalancer(max_skips=0)
