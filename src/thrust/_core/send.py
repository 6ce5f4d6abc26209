"""The decisions of one send: which queues, in which order, how many attempts, retry or give up, how long
to wait; and the same for EndTransaction.

`SendPlan` is pure (no I/O, no clock: time is passed in). The producer (`thrust.producer`) drives it:

    plan = SendPlan.for_send(selector, route, policy, isolation, now, message_type=..., message_group=...,
                             transactional=..., validate_message_type=...)
    if plan.refusal is not None: raise the typed error it names            # nothing to send to
    wait = plan.prefer_ready(session.is_ready)                             # "which brokers can take it?"
    if wait: await session.wait_any_ready(wait); plan.prefer_ready(session.is_ready)
    loop:
        attempt = plan.next_attempt()                                      # "where does attempt n go?"
        call SendMessage on attempt.endpoint (wait_for_connection=attempt.wait_for_connection)
        success -> plan.on_success(attempt)                                # un-isolates the endpoint
        failure -> delay = plan.on_failure(attempt, retriable=..., transport=..., closing=..., now=...)
                   None: raise the error (final); else sleep `delay` and loop    # "retry or give up?"

The rules (docs/protocol.md §4.3, §5.6, the Java client's `ProducerImpl.send0`):

- attempts: the retry policy's `max_attempts`, except a transactional message, which is sent once: its
  half message may already be stored, and the Java client does not retry it either;
- queues: `QueueSelector.candidates` (thrust._core.routes): round robin, another broker on each attempt,
  isolated endpoints last; a FIFO message's group hashes to one queue, kept across every attempt;
- no writable queue -> `Refusal.NO_WRITABLE_QUEUE`; with `validate_message_type`, the candidates that
  accept the message's type, or, when none does, `Refusal.TYPE_NOT_ACCEPTED` (Java validateMessageType);
- readiness: queues on brokers whose session is up go first (a broker still connecting must not hold
  sends a healthy broker can take: bench scenario 3), except for a FIFO message, whose queue is fixed;
  when none is up, the producer waits for the first to come up;
- connection: with one endpoint among the candidates, an attempt waits for its channel's connection
  within its deadline; with more, a channel that cannot connect fails the attempt at once, so that the
  retry goes elsewhere;
- failure: a transport failure (connection, deadline) isolates the endpoint (`Isolation`); a success
  un-isolates it. A failure is final when it is not retriable, the attempt budget is spent, or the
  producer is closing; otherwise the next attempt follows the policy's `next_delay(attempt)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from thrust._core.backoff import END_TRANSACTION_ATTEMPTS, END_TRANSACTION_BACKOFF, RetryPolicy
from thrust._core.endpoints import Endpoint
from thrust._core.routes import Isolation, QueueSelector, RouteQueue, TopicRoute

__all__ = ["Attempt", "Refusal", "SendPlan", "end_transaction_retry_delay"]


_NONE: frozenset[Endpoint] = frozenset()


class Refusal(IntEnum):
    """Why a send cannot start at all (the producer raises the matching typed error)."""

    NO_WRITABLE_QUEUE = 1  # ForbiddenError, FORBIDDEN
    TYPE_NOT_ACCEPTED = 2  # ValidationError, MESSAGE_PROPERTY_CONFLICT_WITH_TYPE


@dataclass(frozen=True, slots=True)
class Attempt:
    """Attempt `number` (1-based) of a send: to `queue`'s endpoint, waiting for its connection or not."""

    number: int
    queue: RouteQueue
    wait_for_connection: bool

    @property
    def endpoint(self) -> Endpoint:
        return self.queue.endpoint


class SendPlan:
    """The attempts of one send (one SendMessage request, retried). One per request, owned by the task
    that sends it; see the module docstring for the rules and how the producer drives it."""

    __slots__ = ("_attempt", "_candidates", "_isolation", "_policy", "fifo", "max_attempts", "refusal")

    def __init__(
        self,
        candidates: tuple[RouteQueue, ...],
        policy: RetryPolicy,
        isolation: Isolation,
        *,
        max_attempts: int,
        fifo: bool,
        refusal: Refusal | None = None,
    ) -> None:
        self._candidates = candidates
        self._policy = policy
        self._isolation = isolation
        self.max_attempts = max_attempts
        self.fifo = fifo
        self.refusal = refusal
        self._attempt = 0

    @classmethod
    def for_send(
        cls,
        selector: QueueSelector,
        route: TopicRoute,
        policy: RetryPolicy,
        isolation: Isolation,
        now: float,
        *,
        message_type: int,
        message_group: str | None,
        transactional: bool,
        validate_message_type: bool,
    ) -> SendPlan:
        """The plan of one send of `route`'s topic at monotonic time `now`; check `refusal` first."""
        attempts = 1 if transactional else policy.max_attempts
        candidates = selector.candidates(route, attempts, isolation, now, message_group)
        fifo = message_group is not None
        if not candidates:
            return cls(
                (), policy, isolation, max_attempts=attempts, fifo=fifo, refusal=Refusal.NO_WRITABLE_QUEUE
            )
        if validate_message_type and not route.all_writable_accept(message_type):
            candidates = tuple(q for q in candidates if q.accepts(message_type)) or candidates
            if not candidates[0].accepts(message_type):
                return cls(
                    candidates,
                    policy,
                    isolation,
                    max_attempts=attempts,
                    fifo=fifo,
                    refusal=Refusal.TYPE_NOT_ACCEPTED,
                )
        return cls(candidates, policy, isolation, max_attempts=attempts, fifo=fifo)

    @property
    def candidates(self) -> tuple[RouteQueue, ...]:
        """The queues of attempts 1, 2, ... (attempt n uses `candidates[(n - 1) % len(candidates)]`)."""
        return self._candidates

    @property
    def attempts_made(self) -> int:
        return self._attempt

    def prefer_ready(self, is_ready: Callable[[Endpoint], bool]) -> frozenset[Endpoint]:
        """Put the queues of endpoints that are ready first (not for a FIFO message: its queue is fixed).

        Returns the endpoints to wait for when none is ready (then call this again once one is), and an
        empty set otherwise."""
        candidates = self._candidates
        checked = None  # the queues of a route mostly share endpoints: ask once per run of the same one
        for q in candidates:  # a plain loop: this runs on every send, and all() over a generator costs more
            endpoint = q.endpoint
            if endpoint is checked:
                continue
            if not is_ready(endpoint):
                break
            checked = endpoint
        else:
            return _NONE
        ready = tuple(q for q in candidates if is_ready(q.endpoint))
        if not ready:
            return frozenset(q.endpoint for q in candidates)
        if not self.fifo:
            self._candidates = ready + tuple(q for q in candidates if q not in ready)
        return frozenset()

    def next_attempt(self) -> Attempt:
        """The next attempt; call it once per attempt, after `prefer_ready`."""
        candidates = self._candidates
        if self.refusal is not None or not candidates:
            raise RuntimeError("a refused send has no attempt")
        if self._attempt >= self.max_attempts:
            raise RuntimeError("the attempt budget is spent")
        self._attempt += 1
        queue = candidates[(self._attempt - 1) % len(candidates)]
        endpoint = queue.endpoint
        single_endpoint = True
        for q in candidates:  # a plain loop, as in prefer_ready; `is` first spares the dataclass __eq__
            other = q.endpoint
            if other is not endpoint and other != endpoint:
                single_endpoint = False
                break
        return Attempt(self._attempt, queue, single_endpoint)

    def on_success(self, attempt: Attempt) -> None:
        """The attempt's endpoint answered: it is healthy again."""
        self._isolation.on_success(attempt.endpoint)

    def on_failure(
        self, attempt: Attempt, *, retriable: bool, transport: bool, closing: bool, now: float
    ) -> float | None:
        """The attempt failed; None when that failure is final, else the seconds to wait before the next.

        `retriable`: the error says trying again may help; `transport`: it failed at the transport level
        (connection, deadline); `closing`: the producer is closing."""
        if transport:
            # Skip an endpoint that fails at the transport level for a while (docs/protocol.md §5.6).
            self._isolation.isolate(attempt.endpoint, now)
        if not retriable or attempt.number >= self.max_attempts or closing:
            return None
        return self._policy.next_delay(attempt.number)


def end_transaction_retry_delay(attempt: int, *, retriable: bool, closed: bool) -> float | None:
    """After EndTransaction attempt `attempt` (1-based) failed: None when the failure is final, else the
    seconds before the next attempt.

    Retried on retriable failures, `END_TRANSACTION_ATTEMPTS` in all, with a capped backoff
    (thrust._core.backoff says why); a refusal such as INVALID_TRANSACTION_ID is final, and so is any
    failure once the session is closed. The server's transaction check remains the last resort."""
    if not retriable or attempt >= END_TRANSACTION_ATTEMPTS or closed:
        return None
    return END_TRANSACTION_BACKOFF.delay(attempt)
