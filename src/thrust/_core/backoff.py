"""Retry delays: the server's `RetryPolicy` and the client's local backoffs.

Two different things, kept apart on purpose:

- `RetryPolicy` is the protocol value `apache.rocketmq.v2.RetryPolicy` (docs/protocol.md §4.3): the producer
uses it
  between send attempts, the push consumer uses it for nack delays and FIFO local retries. The server
  pushes it in Settings; delays keep sub-second precision because the wire carries `Duration` with nanos
  (the official Python client truncates them to whole seconds, docs/protocol.md §9.1).
- `BackoffPolicy` / `Backoff` are local decisions for transport-level retries that the protocol does not
  specify: reconnecting a channel or the telemetry stream and retrying acks per entry. Optional full jitter
  takes an injected `random.Random`, so tests stay deterministic.

All functions are pure; the io layer sleeps for the returned number of seconds on a loop timer.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

__all__ = [
    "ACK_RETRY_BACKOFF",
    "RECEIVE_BACKOFF_DEFAULT",
    "RECEIVE_BACKOFF_TOO_MANY_REQUESTS",
    "RECONNECT_BACKOFF",
    "Backoff",
    "BackoffPolicy",
    "RetryPolicy",
    "receive_retry_delay",
]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """`RetryPolicy{max_attempts, exponential_backoff | customized_backoff}` with delays in seconds.

    Build one with `RetryPolicy.exponential(...)` or `RetryPolicy.customized(...)`. `customized_delays` is
    None for the exponential strategy.
    """

    max_attempts: int
    initial_backoff: float = 0.0
    max_backoff: float = 0.0
    multiplier: float = 1.0
    customized_delays: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.customized_delays is not None:
            if not self.customized_delays:
                raise ValueError("a customized backoff needs at least one delay")
            if any(d < 0 or not math.isfinite(d) for d in self.customized_delays):
                raise ValueError("customized delays must be finite and >= 0")
        else:
            if not (0 <= self.initial_backoff <= self.max_backoff) or not math.isfinite(self.max_backoff):
                raise ValueError("need 0 <= initial_backoff <= max_backoff < inf")
            if not (self.multiplier >= 1 and math.isfinite(self.multiplier)):
                raise ValueError("multiplier must be finite and >= 1")

    @classmethod
    def exponential(cls, max_attempts: int, initial: float, maximum: float, multiplier: float) -> RetryPolicy:
        """`ExponentialBackoff{initial, max, multiplier}`."""
        return cls(max_attempts, initial, maximum, multiplier, None)

    @classmethod
    def customized(cls, max_attempts: int, delays: tuple[float, ...] | list[float]) -> RetryPolicy:
        """`CustomizedBackoff{next}`: the n-th retry waits `delays[n-1]`, the last one repeating."""
        return cls(max_attempts, customized_delays=tuple(float(d) for d in delays))

    @property
    def is_customized(self) -> bool:
        return self.customized_delays is not None

    def next_delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based), as the Java client computes it.

        Exponential: `min(initial * multiplier**(attempt-1), max)`; customized: `next[min(attempt, len)-1]`
        (Java `ExponentialBackoffRetryPolicy`, `CustomizedBackoffRetryPolicy`, docs/protocol.md §4.3).
        """
        if attempt < 1:
            raise ValueError(f"attempt is 1-based, got {attempt}")
        delays = self.customized_delays
        if delays is not None:
            return delays[min(attempt, len(delays)) - 1]
        try:
            delay = self.initial_backoff * self.multiplier ** (attempt - 1)
        except OverflowError:
            return self.max_backoff
        return min(delay, self.max_backoff)

    def with_max_attempts(self, max_attempts: int) -> RetryPolicy:
        """The same backoff with another attempt budget (Java `inheritBackoff`, used by the producer)."""
        return RetryPolicy(
            max_attempts, self.initial_backoff, self.max_backoff, self.multiplier, self.customized_delays
        )


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """Capped exponential backoff for local retries: `min(initial * multiplier**(attempt-1), maximum)`.

    With `rng` set, the delay is drawn uniformly from `[0, that]` ("full jitter"), so that many clients or
    many entries failing together do not retry in lockstep.
    """

    initial: float
    maximum: float
    multiplier: float = 2.0
    rng: random.Random | None = None

    def __post_init__(self) -> None:
        if not (0 <= self.initial <= self.maximum) or not math.isfinite(self.maximum):
            raise ValueError("need 0 <= initial <= maximum < inf")
        if not (self.multiplier >= 1 and math.isfinite(self.multiplier)):
            raise ValueError("multiplier must be finite and >= 1")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        if attempt < 1:
            raise ValueError(f"attempt is 1-based, got {attempt}")
        try:
            delay = min(self.initial * self.multiplier ** (attempt - 1), self.maximum)
        except OverflowError:
            delay = self.maximum
        if self.rng is not None:
            return self.rng.uniform(0.0, delay)
        return delay

    def with_rng(self, rng: random.Random | None) -> BackoffPolicy:
        return BackoffPolicy(self.initial, self.maximum, self.multiplier, rng)


class Backoff:
    """A stateful backoff for one retrying activity (a reconnect loop, a telemetry stream).

    The io layer calls `next_delay()` after each failure and sleeps that long, and `reset()` after a
    success so that the next failure starts from the initial delay again.
    """

    __slots__ = ("_failures", "policy")

    def __init__(self, policy: BackoffPolicy) -> None:
        self.policy = policy
        self._failures = 0

    @property
    def failures(self) -> int:
        """Consecutive failures since the last `reset()`."""
        return self._failures

    def next_delay(self) -> float:
        """Record one more failure and return the delay before the next try."""
        self._failures += 1
        return self.policy.delay(self._failures)

    def reset(self) -> None:
        self._failures = 0


# Java renews a broken telemetry stream 1 s after it failed, every time (apache/rocketmq-clients
# java/.../impl/ClientSessionImpl.java, REQUEST_OBSERVER_RENEW_BACKOFF_DELAY). We start faster and cap at
# that 1 s: the stream carries the Settings the proxy needs for every receive, and a restarted proxy knows
# none (its ReceiveMessageActivity fails every receive until they arrive). With a 10 s cap, a proxy down
# for 20 s left the simple consumer failing for up to 10 s after it was back (docs/reliability.md, R2).
RECONNECT_BACKOFF = BackoffPolicy(initial=0.1, maximum=1.0, multiplier=2.0)

# Java retries a failed ack every 1 s forever (docs/protocol.md §8.3); per-entry capped exponential backoff
# keeps a transient failure cheap (first retry after 100 ms) while a dead broker is not hammered (cap 2 s).
# Every entry is bounded by its own deadline anyway (see thrust._core.ack).
ACK_RETRY_BACKOFF = BackoffPolicy(initial=0.1, maximum=2.0, multiplier=2.0)

# EndTransaction is not retried by Java (a failed commit is left to the server's transaction check, which
# takes 6 s or more and needs a checker). A transient failure (INTERNAL_SERVER_ERROR, a timeout, a broken
# connection) is retried here a few times instead, quickly: the half message is already stored, and the
# server's check stays the fallback when every attempt fails.
END_TRANSACTION_ATTEMPTS = 4
END_TRANSACTION_BACKOFF = BackoffPolicy(initial=0.05, maximum=1.0, multiplier=3.0)

# Java ProcessQueueImpl: a failed receive is retried after 20 ms on TooManyRequests (broker POLLING_FULL) and
# after 1 s on any other error (docs/protocol.md §6.4, §8.1).
RECEIVE_BACKOFF_TOO_MANY_REQUESTS = 0.02
RECEIVE_BACKOFF_DEFAULT = 1.0


def receive_retry_delay(too_many_requests: bool) -> float:
    """Seconds before a push consumer retries a failed ReceiveMessage (Java values, docs/protocol.md §8.1)."""
    return RECEIVE_BACKOFF_TOO_MANY_REQUESTS if too_many_requests else RECEIVE_BACKOFF_DEFAULT
