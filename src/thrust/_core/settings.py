"""Client settings: local defaults, what the server pushes in Telemetry, and their merge.

The client writes its Settings on every telemetry stream and the server answers with the authoritative
Settings (docs/protocol.md §4.1, §4.2). The codec turns that answer into a `ServerSettings` (None = the server
did not set the field); `merge(local, server)` gives the effective `ClientSettings` that producers and
consumers read. Every server answer is merged again from the local settings, so a field the server stops
sending falls back to the local value instead of latching (the official Python client latches `fifo`,
docs/protocol.md §9.1).

Who calls what: the io layer's telemetry owner calls `merge` on each Settings reply and publishes the result;
nothing else mutates settings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from thrust._codec.validation import MIN_POLLING_SECONDS
from thrust._core.backoff import RetryPolicy

__all__ = [
    "CONSUMER_RETRY_POLICY",
    "PRODUCER_RETRY_POLICY",
    "PUSH_POLL_EARLY",
    "PUSH_POLL_STEP",
    "ClientSettings",
    "ServerSettings",
    "merge",
    "poll_on_grid",
    "receive_after_connect",
    "receive_connect_budget",
    "receive_deadline",
]

MiB = 1024 * 1024

# Producer: max 3 attempts, exponential 10 ms -> 1 s, x2 (docs/protocol.md §4.3).
PRODUCER_RETRY_POLICY = RetryPolicy.exponential(3, 0.010, 1.0, 2.0)

# Consumer: retryMaxTimes 16 + 1 = 17 attempts, the proxy's customized delays (docs/protocol.md §4.3).
CONSUMER_RETRY_POLICY = RetryPolicy.customized(
    17,
    (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200),
)


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """Settings as the client uses them; the local defaults, and after `merge` the effective values.

    Durations are seconds (float, sub-second precision kept).

    Attributes:
        request_timeout: deadline of unary RPCs (Java 3 s, docs/protocol.md §8.5).
        retry_policy: producer send retries, or consumer nack delays / FIFO local retries.
        keep_local_max_attempts: True for producers: the user's `max_attempts` survives the server's answer,
            only the backoff is taken from the server (Java `PublishingSettings.sync` -> `inheritBackoff`).
        fifo: the group consumes orderly; decided by the server (docs/protocol.md §4.2).
        receive_batch_size: ReceiveMessage `batch_size` (32; the proxy caps at 32).
        long_polling_timeout: ReceiveMessage long-poll wait. Java's local default is 30 s, but the proxy
            clamps to [5 s, 20 s] and answers 20 s (docs/protocol.md §4.2), so 20 s is the value that is
            actually used.
        max_body_size: producer-side body limit (proxy: 4 MiB).
        validate_message_type: the producer checks a queue's accepted message types before sending.
        metric_on: the server asks for client metrics (proxy default off).
        lite_subscription_quota: lite topics a lite consumer may subscribe to (RocketMQ 5.5; None until a
            server sent one).
        max_lite_topic_size: the longest lite topic name, UTF-8 bytes (the 5.5 proxy's 64 until a server
            sent one).
    """

    request_timeout: float = 3.0
    retry_policy: RetryPolicy = CONSUMER_RETRY_POLICY
    keep_local_max_attempts: bool = False
    fifo: bool = False
    receive_batch_size: int = 32
    long_polling_timeout: float = 20.0
    max_body_size: int = 4 * MiB
    validate_message_type: bool = True
    metric_on: bool = False
    lite_subscription_quota: int | None = None
    max_lite_topic_size: int = 64

    @classmethod
    def for_producer(cls) -> ClientSettings:
        """Producer defaults: the producer retry policy, the user's max_attempts kept across merges.

        Adjust with `dataclasses.replace(ClientSettings.for_producer(), request_timeout=...)`."""
        return cls(retry_policy=PRODUCER_RETRY_POLICY, keep_local_max_attempts=True)

    @classmethod
    def for_consumer(cls) -> ClientSettings:
        """Consumer defaults: the server decides max_attempts and backoff (Java PushSubscriptionSettings)."""
        return cls()

    @property
    def receive_deadline(self) -> float:
        """Deadline of one ReceiveMessage call: see `receive_deadline()`."""
        return receive_deadline(self.long_polling_timeout, self.request_timeout)

    @property
    def push_long_polling(self) -> float:
        """The long polling a push consumer asks the proxy for: the whole `long_polling_timeout`, as Java
        asks, raised to the proxy's 5 s minimum."""
        return max(MIN_POLLING_SECONDS, self.long_polling_timeout)

    def push_spread_poll(self, phase: float) -> float:
        """The long polling of a push consumer's idle poll that starts a chain (`ProcessQueue.chained`): at
        `phase` (in [0, 1)) between the proxy's 5 s minimum and `push_long_polling`.

        An idle queue polls back to back, each empty answer at the end of its long polling, so a chain keeps
        the phase it started with. Queues created together (a consumer of 1,000 topics starts 2,000 polls
        within a second or two), or retried together after their channel failed, would otherwise be
        answered together, every long polling, for as long as they stay idle: a burst of thousands of
        answers and new polls on client and server that a busy topic's receives wait behind. A chain's
        first poll of a random length spreads them over the long polling instead."""
        full = self.push_long_polling
        return MIN_POLLING_SECONDS + min(max(phase, 0.0), 1.0) * (full - MIN_POLLING_SECONDS)

    @property
    def push_poll_grid(self) -> float:
        """The grid on which a push consumer's idle polls end (`poll_on_grid`): steps of about
        `PUSH_POLL_STEP`, a whole number of them in the long polling less `PUSH_POLL_EARLY` (80 steps of
        0.24875 s for the 20 s long polling).

        A broker answers an empty long poll up to 70 ms before its polling time ends (`PopRequest.isTimeout`
        in apache/rocketmq's broker: 50 ms early, and `PopLongPollingService` checks every 20 ms). On a grid
        whose steps fit the long polling exactly, the renewal of a poll answered early would reach only the
        grid point a step short of a whole long polling, every time (with 1 s steps, polls of 19 s instead
        of 20 s: 5 % more calls, measured). With steps that fit the long polling less 0.1 s, an answer up to
        0.1 s early (or late by most of a step) is renewed to the grid point a whole long polling later:
        polls of 19.9 s."""
        full = self.push_long_polling
        return (full - PUSH_POLL_EARLY) / max(1, round(full / PUSH_POLL_STEP))

    def push_poll_on_grid(self, poll: float, now: float) -> float:
        """`poll` shortened so that an idle push poll begun at `now` (the wall clock, seconds) ends on
        `push_poll_grid`: see `poll_on_grid`."""
        return poll_on_grid(poll, now, self.push_poll_grid)

    @property
    def push_receive_deadline(self) -> float:
        """Deadline of one push ReceiveMessage: `receive_deadline` and `PUSH_POLL_HEADROOM` more.

        Java asks for the whole long polling under a deadline of long polling + request timeout, so a proxy
        and broker slower than one request timeout to answer an empty poll (a loaded machine, a GC pause)
        meet the client's deadline. A batch popped at that instant is lost to a push consumer until it
        closes: the proxy registered its auto-renewed receipt handles before writing it, and renews them
        while the client stays connected (docs/reliability.md, bug 11). The push deadline leaves the
        server `PUSH_POLL_HEADROOM` more. (A poll 5 s shorter under Java's deadline leaves the same margin
        and costs one more empty poll per idle queue every minute: 33 calls a second for a consumer of
        1,000 topics on 2 brokers.)"""
        return receive_deadline(self.long_polling_timeout, self.request_timeout) + PUSH_POLL_HEADROOM


# How much longer than Java's receive deadline a push consumer waits for the answer to a long poll
# (`ClientSettings.push_receive_deadline`).
PUSH_POLL_HEADROOM = 5.0


# The grid on the wall clock on which a push consumer's idle long polls end (`poll_on_grid`,
# `ClientSettings.push_poll_grid`): steps of about this many seconds (a consumer of 1,000 topics on 2
# brokers has about 25 polls answered on each grid point; steps of 1 s, 100 a point, cost the client a
# little less CPU, but made a hot topic's messages wait behind each point's answers on the embedded
# server: docs/benchmarks.md, "Idle polls on a grid")...
PUSH_POLL_STEP = 0.25
# ...a whole number of them in the long polling less this, the most a poll's answer may come early.
PUSH_POLL_EARLY = 0.1


def poll_on_grid(poll: float, now: float, grid: float) -> float:
    """The long polling of a poll begun at `now` (seconds of the wall clock) that asked for `poll`,
    shortened by less than `grid` so that it ends on a multiple of `grid`, or lengthened by less than
    `grid` to the next multiple when shortening would take it below the proxy's 5 s minimum; `poll` itself
    when `grid` is not positive.

    The proxy answers an empty long poll when its polling time ends (the broker's `PopLongPollingService`
    checks for ended polls every 20 ms), and an idle queue polls again as soon as the answer comes, so the
    idle polls of a consumer of many topics end at random instants, each answer and each new poll waking
    the client (and the proxy) on its own. Polls that end on a common grid are answered together, once a
    grid step, and their renewals go out together: one wake-up of each side for the answers of a whole
    step, while the calls stay spread over the long polling (a step holds about its share of them, not a
    burst). Each poll is computed when it is sent, from the client's clock alone (the broker times a poll
    from when it reaches it), so the grid holds whatever the server's clock says; a chain's polls after
    its first are as long as the long polling less what the grid needs (`ClientSettings.push_poll_grid`:
    19.9 s of 20 s), and an answer earlier than the grid allows for only makes the next poll a step
    shorter."""
    if grid <= 0:
        return poll
    aligned = math.floor((now + poll) / grid) * grid - now
    return aligned if aligned >= MIN_POLLING_SECONDS else aligned + grid


def receive_deadline(long_polling_timeout: float, request_timeout: float) -> float:
    """Deadline of one ReceiveMessage call: long polling + request timeout (Java, docs/protocol.md §6.2), with
    the long polling raised to the proxy's 5 s minimum first.

    The proxy clamps the polling time to [5 s, 20 s] and refuses with ILLEGAL_POLLING_TIME a call whose
    remaining deadline is below the clamped time and below 5 s (docs/protocol.md §6.2). A 1 s wait with a
    1 s + 3 s deadline was therefore refused; with max(wait, 5 s) + request timeout the proxy may hold the
    call for its full 5 s minimum and still answer before the deadline."""
    return max(long_polling_timeout, MIN_POLLING_SECONDS) + request_timeout


# What a receive keeps between the server's answer to an empty poll and its own deadline after it waited
# for its channel to connect: enough for the answer to travel on a loaded machine.
RECEIVE_CONNECT_MARGIN = 1.0


def receive_connect_budget(long_polling_timeout: float, timeout: float) -> float:
    """How long a ReceiveMessage with this long polling and deadline may wait for its channel to connect.

    What the deadline leaves beyond the proxy's 5 s minimum poll and a margin: after waiting that long
    the call still holds a poll the proxy accepts (docs/protocol.md §6.2), shortened by
    `receive_after_connect`. With the defaults (20 s poll, 3 s request timeout) that is 17 s."""
    slack = timeout - max(long_polling_timeout, MIN_POLLING_SECONDS)
    return max(0.0, timeout - MIN_POLLING_SECONDS - min(max(slack, 0.0), RECEIVE_CONNECT_MARGIN))


def receive_after_connect(long_polling_timeout: float, timeout: float, waited: float) -> tuple[float, float]:
    """The (long polling, deadline) of a receive that waited `waited` seconds of its deadline `timeout`
    for a connection: the deadline is what is left of it, and the poll shrinks so that the time the
    deadline kept beyond the poll (the request timeout) stays, but never below the proxy's 5 s minimum
    (`receive_connect_budget` leaves room for that)."""
    remaining = timeout - waited
    slack = timeout - max(long_polling_timeout, MIN_POLLING_SECONDS)
    poll = max(MIN_POLLING_SECONDS, min(long_polling_timeout, remaining - slack))
    return poll, remaining


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """The fields of a server Settings reply that the client acts on; None = not set by the server.

    The codec maps proto3 zero values of non-optional fields (e.g. `Publishing.max_body_size`) to None.
    """

    request_timeout: float | None = None
    retry_policy: RetryPolicy | None = None
    fifo: bool | None = None
    receive_batch_size: int | None = None
    long_polling_timeout: float | None = None
    max_body_size: int | None = None
    validate_message_type: bool | None = None
    metric_on: bool | None = None
    lite_subscription_quota: int | None = None
    max_lite_topic_size: int | None = None


def merge(local: ClientSettings, server: ServerSettings) -> ClientSettings:
    """The effective settings: each field the server set wins, every other field keeps the local value.

    Non-positive sizes and durations from the server are treated as unset: they are proto3 defaults of a
    message the server did not fill in, and using them would stall receives or reject every send.
    The one deliberate exception to "server wins": with `keep_local_max_attempts` the producer keeps its own
    `max_attempts` and takes only the backoff from the server, as the Java producer does.
    """
    retry = local.retry_policy
    if server.retry_policy is not None:
        retry = server.retry_policy
        if local.keep_local_max_attempts:
            retry = retry.with_max_attempts(local.retry_policy.max_attempts)
    return ClientSettings(
        request_timeout=_positive(server.request_timeout, local.request_timeout),
        retry_policy=retry,
        keep_local_max_attempts=local.keep_local_max_attempts,
        fifo=local.fifo if server.fifo is None else server.fifo,
        receive_batch_size=int(_positive(server.receive_batch_size, local.receive_batch_size)),
        long_polling_timeout=_positive(server.long_polling_timeout, local.long_polling_timeout),
        max_body_size=int(_positive(server.max_body_size, local.max_body_size)),
        validate_message_type=(
            local.validate_message_type
            if server.validate_message_type is None
            else server.validate_message_type
        ),
        metric_on=local.metric_on if server.metric_on is None else server.metric_on,
        lite_subscription_quota=(
            local.lite_subscription_quota
            if server.lite_subscription_quota is None
            else max(0, server.lite_subscription_quota)
        ),
        max_lite_topic_size=int(_positive(server.max_lite_topic_size, local.max_lite_topic_size)),
    )


def _positive(value: float | None, default: float) -> float:
    return default if value is None or value <= 0 else value
