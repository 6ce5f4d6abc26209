from __future__ import annotations

import random

import pytest

from thrust._core.backoff import (
    ACK_RETRY_BACKOFF,
    Backoff,
    BackoffPolicy,
    RetryPolicy,
    receive_retry_delay,
)


def test_exponential_java_formula() -> None:
    p = RetryPolicy.exponential(3, 0.010, 1.0, 2.0)
    assert [p.next_delay(a) for a in (1, 2, 3, 4)] == pytest.approx([0.01, 0.02, 0.04, 0.08])
    assert p.next_delay(8) == pytest.approx(1.0)  # 1.28 capped
    assert p.next_delay(10_000) == 1.0  # no overflow


def test_exponential_keeps_sub_second_precision() -> None:
    p = RetryPolicy.exponential(5, 0.0015, 0.25, 1.5)
    assert p.next_delay(1) == pytest.approx(0.0015)
    assert p.next_delay(2) == pytest.approx(0.00225)


def test_customized_java_formula() -> None:
    p = RetryPolicy.customized(17, [1, 5, 10, 0.5])
    assert p.is_customized
    assert [p.next_delay(a) for a in (1, 2, 3, 4, 5, 100)] == [1, 5, 10, 0.5, 0.5, 0.5]


def test_attempt_is_one_based() -> None:
    with pytest.raises(ValueError):
        RetryPolicy.customized(3, [1]).next_delay(0)
    with pytest.raises(ValueError):
        RetryPolicy.exponential(3, 1, 2, 2).next_delay(0)


@pytest.mark.parametrize(
    "make",
    [
        lambda: RetryPolicy.exponential(0, 1, 2, 2),
        lambda: RetryPolicy.exponential(1, 3, 2, 2),
        lambda: RetryPolicy.exponential(1, 1, 2, 0.5),
        lambda: RetryPolicy.customized(1, []),
        lambda: RetryPolicy.customized(1, [-1]),
    ],
)
def test_invalid_policies(make: object) -> None:
    with pytest.raises(ValueError):
        make()  # type: ignore[operator]


def test_with_max_attempts_keeps_backoff() -> None:
    p = RetryPolicy.exponential(3, 0.01, 1.0, 2.0).with_max_attempts(7)
    assert p.max_attempts == 7
    assert p.next_delay(2) == pytest.approx(0.02)


def test_backoff_policy_capped() -> None:
    b = BackoffPolicy(0.1, 1.0, 2.0)
    assert [b.delay(a) for a in (1, 2, 3, 4, 5, 6)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert b.delay(100_000) == 1.0


def test_backoff_full_jitter_deterministic_and_bounded() -> None:
    a = BackoffPolicy(0.1, 1.0, 2.0, random.Random(7))
    b = BackoffPolicy(0.1, 1.0, 2.0, random.Random(7))
    da = [a.delay(n) for n in range(1, 20)]
    assert da == [b.delay(n) for n in range(1, 20)]
    assert all(0 <= d <= min(0.1 * 2 ** (n - 1), 1.0) for n, d in zip(range(1, 20), da, strict=True))
    assert len(set(da)) > 1
    assert ACK_RETRY_BACKOFF.with_rng(random.Random(1)).rng is not None


def test_stateful_backoff_resets() -> None:
    b = Backoff(BackoffPolicy(1.0, 8.0))
    assert [b.next_delay() for _ in range(5)] == [1, 2, 4, 8, 8]
    assert b.failures == 5
    b.reset()
    assert b.next_delay() == 1


def test_receive_retry_delay_java_values() -> None:
    assert receive_retry_delay(True) == pytest.approx(0.02)
    assert receive_retry_delay(False) == pytest.approx(1.0)
