from __future__ import annotations

import dataclasses

import pytest

from thrust._core.backoff import RetryPolicy
from thrust._core.settings import (
    CONSUMER_RETRY_POLICY,
    PRODUCER_RETRY_POLICY,
    ClientSettings,
    ServerSettings,
    merge,
    poll_on_grid,
    receive_after_connect,
    receive_connect_budget,
    receive_deadline,
)


def test_defaults_from_reference() -> None:
    c = ClientSettings.for_consumer()
    assert c.request_timeout == 3.0
    assert c.long_polling_timeout == 20.0
    assert c.receive_batch_size == 32
    assert c.receive_deadline == 23.0
    assert CONSUMER_RETRY_POLICY.max_attempts == 17
    assert CONSUMER_RETRY_POLICY.next_delay(1) == 1
    assert CONSUMER_RETRY_POLICY.next_delay(18) == 7200
    assert CONSUMER_RETRY_POLICY.next_delay(99) == 7200
    p = ClientSettings.for_producer()
    assert p.retry_policy == PRODUCER_RETRY_POLICY
    assert PRODUCER_RETRY_POLICY.max_attempts == 3
    assert PRODUCER_RETRY_POLICY.next_delay(1) == pytest.approx(0.01)
    assert PRODUCER_RETRY_POLICY.next_delay(20) == pytest.approx(1.0)


def test_empty_server_answer_keeps_local() -> None:
    local = ClientSettings.for_consumer()
    assert merge(local, ServerSettings()) == local


def test_server_wins_for_every_field_it_sets() -> None:
    local = ClientSettings.for_consumer()
    policy = RetryPolicy.exponential(5, 5.0, 7200.0, 2.0)
    server = ServerSettings(
        request_timeout=2.5,
        retry_policy=policy,
        fifo=True,
        receive_batch_size=16,
        long_polling_timeout=15.5,
        max_body_size=1024,
        validate_message_type=False,
        metric_on=True,
    )
    eff = merge(local, server)
    assert eff.request_timeout == 2.5
    assert eff.retry_policy == policy
    assert eff.fifo is True
    assert eff.receive_batch_size == 16
    assert eff.long_polling_timeout == 15.5
    assert eff.max_body_size == 1024
    assert eff.validate_message_type is False
    assert eff.metric_on is True


def test_merge_is_from_local_each_time_no_latching() -> None:
    local = ClientSettings.for_consumer()
    first = merge(local, ServerSettings(fifo=True, receive_batch_size=8))
    assert first.fifo and first.receive_batch_size == 8
    second = merge(local, ServerSettings(fifo=False))
    assert second.fifo is False
    assert second.receive_batch_size == 32


def test_zero_values_are_unset() -> None:
    local = ClientSettings.for_consumer()
    eff = merge(local, ServerSettings(request_timeout=0, receive_batch_size=0, long_polling_timeout=-1))
    assert eff == local


def test_producer_keeps_its_max_attempts_takes_server_backoff() -> None:
    local = dataclasses.replace(
        ClientSettings.for_producer(), retry_policy=PRODUCER_RETRY_POLICY.with_max_attempts(5)
    )
    server = ServerSettings(retry_policy=RetryPolicy.exponential(3, 0.02, 2.0, 3.0))
    eff = merge(local, server)
    assert eff.retry_policy.max_attempts == 5
    assert eff.retry_policy.next_delay(2) == pytest.approx(0.06)


def test_consumer_takes_server_max_attempts() -> None:
    eff = merge(ClientSettings.for_consumer(), ServerSettings(retry_policy=RetryPolicy.customized(4, [2.5])))
    assert eff.retry_policy.max_attempts == 4
    assert eff.retry_policy.next_delay(3) == 2.5


def test_a_push_consumers_deadline_leaves_the_server_more_than_a_request_timeout_after_its_poll() -> None:
    """A push receive asks for the whole long polling under a deadline 5 s longer than Java's (bug 11 in
    docs/reliability.md): 20 s settings -> 20 s asked, 28 s deadline; never below the proxy's 5 s."""
    c = ClientSettings.for_consumer()
    assert c.push_long_polling == 20.0 and c.push_receive_deadline == 28.0
    assert c.receive_deadline == 23.0  # Java's, and a simple consumer's
    short = merge(c, ServerSettings(long_polling_timeout=6))
    assert short.push_long_polling == 6.0 and short.push_receive_deadline == 14.0
    shorter = merge(c, ServerSettings(long_polling_timeout=2))
    assert shorter.push_long_polling == 5.0 and shorter.push_receive_deadline == 13.0
    # the server's margin after the poll: a request timeout and the headroom, whatever the poll
    for settings in (c, short, shorter):
        assert settings.push_receive_deadline - settings.push_long_polling == 3.0 + 5.0


def test_a_chains_first_push_poll_spreads_between_the_proxys_minimum_and_the_whole_long_polling() -> None:
    c = ClientSettings.for_consumer()
    assert c.push_spread_poll(0.0) == 5.0 and c.push_spread_poll(0.5) == 12.5
    assert c.push_spread_poll(0.999) < c.push_long_polling == 20.0
    assert c.push_spread_poll(1.5) == 20.0 and c.push_spread_poll(-1.0) == 5.0  # clamped to [0, 1]
    # a long polling at the minimum leaves nothing to spread
    shorter = merge(c, ServerSettings(long_polling_timeout=2))
    assert shorter.push_spread_poll(0.7) == 5.0


def test_a_poll_on_the_grid_ends_on_a_grid_point_less_than_a_step_short_of_what_it_asked() -> None:
    # begun at 1000.3 s, a 20 s poll would end at 1020.3: it ends at 1020.0
    assert poll_on_grid(20.0, 1000.3, 1.0) == pytest.approx(19.7)
    # on a 0.25 s grid: 1020.25
    assert poll_on_grid(20.0, 1000.3, 0.25) == pytest.approx(19.95)
    for now in (1_765_000_000.0, 1_765_000_000.999, 1_765_000_017.5, 1_765_000_020.001):
        poll = poll_on_grid(20.0, now, 1.0)
        assert 19.0 < poll <= 20.0
        end = now + poll
        assert abs(end - round(end)) < 1e-6
    # a poll begun on a grid point keeps all of it
    assert poll_on_grid(20.0, 1000.0, 1.0) == 20.0


def test_a_poll_on_the_grid_never_falls_below_the_proxys_minimum_and_no_grid_leaves_it_alone() -> None:
    # 5.4 s from 1000.8 would end at 1006.0 after 5.2 s: allowed
    assert poll_on_grid(5.4, 1000.8, 1.0) == pytest.approx(5.2)
    # 5.4 s from 1000.3 would end at 1005.0 after 4.7 s, below the 5 s minimum: it ends at 1006.0
    assert poll_on_grid(5.4, 1000.3, 1.0) == pytest.approx(5.7)
    assert poll_on_grid(5.0, 1000.3, 1.0) == pytest.approx(5.7)
    assert poll_on_grid(20.0, 1000.3, 0.0) == 20.0
    assert poll_on_grid(20.0, 1000.3, -1.0) == 20.0


def test_idle_push_polls_end_on_quarter_second_steps_fitting_the_long_polling_less_0_1_s() -> None:
    c = ClientSettings.for_consumer()
    grid = 19.9 / 80
    assert c.push_poll_grid == pytest.approx(grid)
    start = 4000 * grid  # a grid point
    # begun on a grid point, a 20 s poll ends 80 steps later: 19.9 s
    assert c.push_poll_on_grid(20.0, start) == pytest.approx(19.9)
    # renewed from an answer that came up to 0.1 s early, or late by most of a step, the next poll ends
    # on the grid point a whole long polling later
    answered = start + 19.9
    for arrived in (answered - 0.099, answered - 0.03, answered, answered + 0.1, answered + 0.14):
        assert arrived + c.push_poll_on_grid(20.0, arrived) == pytest.approx(answered + 19.9)
    # a long polling the server set to 6 s: 24 steps of (6 - 0.1) / 24 s
    six = merge(c, ServerSettings(long_polling_timeout=6))
    assert six.push_poll_grid == pytest.approx(5.9 / 24)


def test_a_receive_waits_for_its_connection_out_of_its_long_poll_never_below_the_minimum() -> None:
    # Defaults: 20 s poll + 3 s request timeout; the wait may take all but the 5 s minimum poll + 1 s.
    timeout = receive_deadline(20.0, 3.0)
    assert receive_connect_budget(20.0, timeout) == 17.0
    # After 4 s of waiting: the poll gives up those 4 s, the request timeout's 3 s stay.
    assert receive_after_connect(20.0, timeout, 4.0) == (16.0, 19.0)
    # After the whole budget: the proxy's minimum poll, answered 1 s before the deadline.
    assert receive_after_connect(20.0, timeout, 17.0) == (5.0, 6.0)
    # A 5 s poll has only the request timeout's slack minus the margin; a 1 s request timeout none.
    assert receive_connect_budget(5.0, receive_deadline(5.0, 3.0)) == 2.0
    assert receive_connect_budget(5.0, receive_deadline(5.0, 1.0)) == 0.0
    assert receive_connect_budget(1.0, receive_deadline(1.0, 0.5)) == 0.0
