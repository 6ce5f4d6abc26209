"""Cache accounting and receive credit for one assigned queue of a push consumer (bench scenarios 5a, 6).

Java's `ProcessQueueImpl` (docs/protocol.md §8.1) runs one ReceiveMessage at a time per queue, polls a full
cache
every 1 s, and lets removed queues finish their long polls before new ones start (scenario 5a). Here:

- A queue may have up to `max_receives_in_flight` receives at once, while the cache has room for all of them:
  each receive reserves the count it asks for, so the cached count never exceeds its threshold.
- Thresholds are the client-wide `max_cache_count` / `max_cache_bytes` split by demand, not evenly (Java
  `cacheMessageCountThresholdPerQueue = max(1, max / #PQs)`): a queue is *idle* while its last receive came
  back empty and it caches nothing, else *active*. An idle queue runs one receive at a time asking for
  `QueueBudget.idle_batch` messages (at most a batch; together the idle queues reserve at most half the
  cache), and the active queues share the rest evenly. Split evenly, a consumer of 1,000 topics (2,000
  queues) gave each queue 2 messages, so a busy topic among quiet ones received 2 messages per round trip
  (docs/benchmarks.md, "A consumer of a thousand topics"). The split follows the counts in the one shared
  `QueueBudget`, which the queues keep up to date as they turn active or idle.
- A full cache is not polled: the io layer waits for an event (a consumption freeing room, a receive
  completing) instead of Java's 1 s re-check.
- `drop()` flips a flag that makes `receive_plan` answer 0 at once; the io layer cancels the queue's in-flight
  long polls immediately rather than waiting up to 20 s for them (scenario 5a).

Flow-control invariant: `cached_count <= count threshold` always; `cached_bytes <= byte threshold + one
batch`, given that messages are no larger than the largest already seen by this queue: a receive started while
another one is in flight must fit in the remaining bytes at that estimated size, and until a size is known
only one receive runs at a time (the Java bound: it starts a receive whenever the bytes are under threshold).

How the io layer drives one queue (one event per queue, set after every `on_*` call):

    while not pq.dropped:
        n = pq.receive_plan(now)                          # "what should I send now?"
        if n == 0:
            wait for the event, or until pq.wake_at(now) if that is not None
            continue
        ticket = pq.on_receive_started(n, now)            # put ticket.attempt_id / n in the request
        spawn: receive; as messages stream in: pq.on_partial(ticket, count, nbytes, now)   # optional
                 then pq.on_received(ticket, count, nbytes, now)   # "here is the rest of the result"
                   or delay = pq.on_receive_failed(ticket, too_many_requests, now)
    consumption path: pq.on_consumed(n, nbytes, now) when a message leaves the cache (after its ack settles)
    assignment scan: drop the queue when `pq.expired(now)`.

Partial results (`on_partial`, scenario 5a). Java acts on a ReceiveMessage only once its stream has
completed (docs/protocol.md §6.4): the messages are collected and handed to the process queue together.
thrust's push consumer hands the first message of an idle queue's stream (`ReceiveTicket.first_early`) to
the listener as soon as it arrives, while the server is still streaming the rest (reading 32 messages to
the end costs several ms; on an idle queue the listener would wait for all of it), and the rest together
when the stream ends; an active queue's stream is handed over once, at its end. Each such chunk is cached
as it is handed over: `on_partial` adds it to the cache and lowers the ticket's reservation by as much, so
`cached + reserved` never grows and the invariant above holds chunk by chunk; `on_received` /
`on_receive_failed` then settle only what the ticket still reserves. A stream that breaks after a chunk was
handed over does not take it back: those messages stay cached until they are consumed and settled, and the
ticket's attempt id is rotated rather than kept for the retry (a retry with it would have the broker serve
the same batch again, the handed-over messages included).
"""

from __future__ import annotations

from collections.abc import Callable

from thrust._core.backoff import receive_retry_delay
from thrust._core.settings import ClientSettings

__all__ = ["ProcessQueue", "QueueBudget", "ReceiveTicket"]

MiB = 1024 * 1024


class QueueBudget:
    """Client-wide limits and receive settings shared by every process queue of one push consumer.

    The consumer sets `queue_count` after each assignment change and calls `apply_settings` after each
    server Settings reply; all queues see the new values at their next call.
    """

    __slots__ = (
        "active_count",
        "batch_size",
        "long_polling_timeout",
        "max_bytes",
        "max_count",
        "max_receives_in_flight",
        "queue_count",
        "request_timeout",
    )

    def __init__(
        self,
        max_count: int = 4096,
        max_bytes: int = 64 * MiB,
        *,
        max_receives_in_flight: int = 2,
        batch_size: int = 32,
        long_polling_timeout: float = 20.0,
        request_timeout: float = 3.0,
    ) -> None:
        if max_count < 1 or max_bytes < 1 or max_receives_in_flight < 1 or batch_size < 1:
            raise ValueError("max_count, max_bytes, max_receives_in_flight and batch_size must be >= 1")
        self.max_count = max_count  # Java maxCacheMessageCount (4096, docs/protocol.md §8.5)
        self.max_bytes = max_bytes  # Java maxCacheMessageSizeInBytes (64 MiB)
        self.max_receives_in_flight = max_receives_in_flight
        self.batch_size = batch_size
        self.long_polling_timeout = long_polling_timeout
        self.request_timeout = request_timeout
        self.queue_count = 1
        # Queues with demand (see the module doc), counted by the queues themselves as they change.
        self.active_count = 0

    def set_queue_count(self, n: int) -> None:
        """Re-split the thresholds across `n` queues (0 is treated as 1)."""
        self.queue_count = max(1, n)

    def apply_settings(self, settings: ClientSettings) -> None:
        """Take the server-merged batch size, long polling and request timeout (docs/protocol.md §4.2)."""
        self.batch_size = max(1, settings.receive_batch_size)
        self.long_polling_timeout = settings.long_polling_timeout
        self.request_timeout = settings.request_timeout

    @property
    def idle_batch(self) -> int:
        """What an idle queue's one receive asks for: a batch, or less so that the idle queues together
        reserve at most half the cache (1 message each for a consumer of 2,000 queues and the Java cache)."""
        if self.queue_count <= 1:
            return max(1, min(self.batch_size, self.max_count))  # no other queue to leave room for
        return max(1, min(self.batch_size, self.max_count // (2 * self.queue_count)))

    def count_limit(self, active: bool) -> int:
        """A queue's count threshold: `idle_batch` when idle; when active, an even share of what the idle
        queues do not reserve."""
        if not active:
            return self.idle_batch
        active_count = max(1, self.active_count)
        idle = max(0, self.queue_count - active_count)
        return max(1, (self.max_count - idle * self.idle_batch) // active_count)

    def bytes_limit(self, active: bool) -> int:
        """A queue's byte threshold: an even share over the active queues (an idle queue caches nothing, and
        turns active with its first message); an idle queue's receives are bounded by `idle_batch`."""
        if not active:
            return max(1, self.max_bytes // self.queue_count)
        return max(1, self.max_bytes // max(1, self.active_count))

    @property
    def idle_limit(self) -> float:
        """A queue with no receive activity for this long is expired: (long polling + request timeout) x 3."""
        return (self.long_polling_timeout + self.request_timeout) * 3

    @property
    def renewal_window(self) -> float:
        """How long an idle queue's receive may renew its empty long polls by itself (`ReceiveTicket`s stay
        open meanwhile; the native transport's `Renewal`) before the loop sees it end: `RENEWAL_WINDOW`.
        The renewals count as receive activity (`on_renewed`), so the window is not bounded by the idle
        limit; it bounds how long a renewing receive keeps what it was started with (its batch size, the
        long polling of the Settings then)."""
        return RENEWAL_WINDOW


# `QueueBudget.renewal_window`: the Settings sync period (each Telemetry stream resends the client's
# Settings every 5 minutes, `ClientSession._sync_settings`), so a changed long polling reaches an idle
# queue within about one more of them. A consumer of 1,000 topics on 2 brokers then wakes its event loop
# for an idle queue about 6 times a second (2,000 queues every 300 s and a poll); a window that ended
# before the idle limit (43 s) made that 40 to 45.
RENEWAL_WINDOW = 300.0


class ReceiveTicket:
    """One in-flight ReceiveMessage: the attempt id to send, the count it reserved, and whether its first
    message is to be handed over as it arrives (`first_early`: the receive of an idle queue, whose listener
    would otherwise wait for the whole stream; an active queue's listener has the receives before it to
    work on, and one hand-off per receive costs it less)."""

    __slots__ = ("_open", "arrived", "attempt_id", "first_early", "handed_over", "requested", "started_at")

    def __init__(self, attempt_id: str, requested: int, started_at: float, first_early: bool = True) -> None:
        self.attempt_id = attempt_id
        self.requested = requested
        self.started_at = started_at
        self.first_early = first_early
        # Messages cached through `on_partial` so far, and whether any chunk was handed over at all (a chunk
        # may hold only corrupted messages, which are never cached but did arrive).
        self.arrived = 0
        self.handed_over = False
        self._open = True

    @property
    def reserved(self) -> int:
        """What this receive still reserves: the count it asked for less what arrived, 0 once closed."""
        return max(0, self.requested - self.arrived) if self._open else 0

    def __repr__(self) -> str:
        return f"ReceiveTicket({self.attempt_id!r}, requested={self.requested}, arrived={self.arrived})"


class ProcessQueue:
    """Receive credit and cache accounting of one assigned queue. See the module doc for the driving loop.

    `queue` is opaque here (the io layer passes its queue identity, e.g. `assignment.QueueId`).
    `attempt_id_factory` makes fresh attempt ids (the io layer passes `lambda: str(uuid.uuid4())`).
    """

    __slots__ = (
        "_cache_full_at",
        "_est_msg_bytes",
        "_last_activity",
        "_last_empty",
        "_new_attempt_id",
        "_reserved",
        "_retry_at",
        "_spare_attempt_ids",
        "active",
        "budget",
        "cached_bytes",
        "cached_count",
        "chained",
        "dropped",
        "in_flight",
        "queue",
    )

    def __init__(
        self, queue: object, budget: QueueBudget, attempt_id_factory: Callable[[], str], now: float
    ) -> None:
        self.queue = queue
        self.budget = budget
        self._new_attempt_id = attempt_id_factory
        self.cached_count = 0
        self.cached_bytes = 0
        self.in_flight = 0
        self.dropped = False
        self._reserved = 0  # messages asked for by in-flight receives
        self._est_msg_bytes = 0.0  # largest per-message size seen; 0 = unknown
        self._retry_at = 0.0
        self._last_activity = now
        self._cache_full_at = float("-inf")
        # Demand (module doc): a new queue is idle until a receive brings something.
        self.active = False
        self._last_empty = True
        # Whether the last receive ended empty (a long poll that ran out): the next idle receive then
        # continues a chain of polls, back to back; a new queue's, or one after a failure or after
        # messages, starts one (`ClientSettings.push_spread_poll`).
        self.chained = False
        # Ids of receives that failed or came back empty: reused by the next receive, so that the broker can
        # re-serve the same (FIFO) batch (docs/protocol.md §6.1). One per concurrent receive: concurrent
        # receives must not share an id, or the broker would treat the second as a retry of the first.
        self._spare_attempt_ids: list[str] = []

    @property
    def reserved(self) -> int:
        """Messages asked for by the in-flight receives and not arrived yet (see `on_partial`)."""
        return self._reserved

    # -- planning -----------------------------------------------------------------------------------------

    def has_room(self) -> bool:
        """The cache is under both thresholds (a receive could start if nothing else stops it)."""
        b = self.budget
        active = self.active
        return self.cached_count < b.count_limit(active) and self.cached_bytes < b.bytes_limit(active)

    def receive_plan(self, now: float) -> int:
        """How many messages the next ReceiveMessage may ask for now; 0 = do not start one now.

        0 when dropped, backing off after a failure (see `wake_at`), at `max_receives_in_flight`, or when the
        cache (counting what in-flight receives reserved) has no room. Otherwise
        `min(batch size, free count slots)`, reduced for a concurrent receive so that its estimated bytes fit.
        """
        if self.dropped or now < self._retry_at:
            return 0
        b = self.budget
        active = self.active
        # An idle queue keeps one long poll, not `max_receives_in_flight`: a second one would only wait
        # beside it (and count against the server's bound of parked polls).
        if self.in_flight >= (b.max_receives_in_flight if active else 1):
            return 0
        count_limit = b.count_limit(active)
        bytes_limit = b.bytes_limit(active)
        if self.cached_count >= count_limit or self.cached_bytes >= bytes_limit:
            self._cache_full_at = now
            return 0
        n = min(b.batch_size, count_limit - self.cached_count - self._reserved)
        if n <= 0:
            return 0
        if self.in_flight:
            est = self._est_msg_bytes
            if est <= 0:
                return 0  # sizes unknown yet: one receive at a time
            room = bytes_limit - self.cached_bytes - self._reserved * est
            n = min(n, int(room // est))
            if n <= 0:
                return 0
        return n

    def wake_at(self, now: float) -> float | None:
        """When `receive_plan` may change without any event: the end of a failure backoff, else None."""
        if not self.dropped and now < self._retry_at:
            return self._retry_at
        return None

    # -- receive lifecycle --------------------------------------------------------------------------------

    def on_receive_started(self, n: int, now: float) -> ReceiveTicket:
        """Reserve `n` (from `receive_plan`) for a receive the io layer starts right now."""
        if n < 1:
            raise ValueError("a receive must ask for at least one message")
        attempt_id = self._spare_attempt_ids.pop() if self._spare_attempt_ids else self._new_attempt_id()
        self.in_flight += 1
        self._reserved += n
        self._last_activity = now
        return ReceiveTicket(attempt_id, n, now, first_early=not self.active)

    def on_partial(
        self, ticket: ReceiveTicket, n: int, nbytes: int, now: float, largest: int | None = None
    ) -> bool:
        """`n` messages of `nbytes` body bytes arrived on the still-open receive `ticket` and are cached now,
        ahead of the rest of its stream (see the module doc). `n` may be 0 (a chunk of corrupted messages
        only): nothing is cached, but the attempt id will rotate.

        Lowers the ticket's reservation by `n` (never below 0, should a server send more than asked), so
        the cache plus the reservations stay within the thresholds. Returns False, doing nothing, when the
        ticket is already closed (its chunk then belongs to no receive this queue accounts for).
        """
        if not ticket._open:
            return False
        self._reserved -= min(n, ticket.reserved)
        ticket.arrived += n
        ticket.handed_over = True
        self._last_activity = now
        self._cache(n, nbytes, largest)
        if n > 0:
            self._last_empty = False
            self._set_active(True)
        return True

    def on_received(
        self, ticket: ReceiveTicket, n: int, nbytes: int, now: float, largest: int | None = None
    ) -> None:
        """The receive completed with `n` messages of `nbytes` body bytes in total, all now cached (after any
        `on_partial` chunks, `n` and `nbytes` count only the rest).

        `largest` (optional) is the largest body among them; otherwise the batch average is used to estimate
        message size. An empty result (MESSAGE_NOT_FOUND, or nothing after the chunks) is `n == 0` and keeps
        the attempt id for reuse unless a chunk was handed over; messages rotate it (Java,
        docs/protocol.md §6.1).
        """
        if not self._close(ticket, now):
            return
        self._cache(n, nbytes, largest)
        if n == 0 and not ticket.handed_over:
            self._spare_attempt_ids.append(ticket.attempt_id)
        if n > 0 or ticket.arrived > 0:
            self._last_empty = False
            self.chained = False
            self._set_active(True)
        else:
            self._last_empty = True
            self.chained = True
            if self.cached_count == 0:
                self._set_active(False)

    def on_receive_failed(self, ticket: ReceiveTicket, too_many_requests: bool, now: float) -> float:
        """The receive failed; returns the delay before this queue receives again (also seen by `wake_at`).

        20 ms after TOO_MANY_REQUESTS, 1 s after anything else (Java, docs/protocol.md §8.1). The attempt id
        is kept for the retry, unless a chunk of the stream was already handed over (`on_partial`): then the
        retry must not have the broker serve that batch again. What was handed over stays cached. A cancelled
        receive of a dropped queue may call this too; it only releases credit.
        """
        if not self._close(ticket, now):
            return 0.0
        self.chained = False
        if not ticket.handed_over:
            self._spare_attempt_ids.append(ticket.attempt_id)
        if self.dropped:
            return 0.0
        delay = receive_retry_delay(too_many_requests)
        self._retry_at = max(self._retry_at, now + delay)
        return delay

    def on_consumed(self, n: int, nbytes: int, now: float) -> bool:
        """`n` messages of `nbytes` left the cache. Returns True when this made room in a full cache."""
        was_full = not self.has_room()
        self.cached_count = max(0, self.cached_count - n)
        self.cached_bytes = max(0, self.cached_bytes - nbytes)
        if self.cached_count == 0 and self._last_empty:
            self._set_active(False)
        if was_full:
            self._cache_full_at = now
            return self.has_room()
        return False

    def on_renewed(self, now: float) -> None:
        """The receive in flight renewed an empty long poll by itself (the transport's `Renewal`, which the
        loop does not see poll by poll): receive activity, as a receive ending is (`expired`)."""
        self._last_activity = now

    def drop(self) -> None:
        """The queue is no longer assigned (or expired): no new receives; cancel the in-flight ones. It no
        longer counts as active in the budget's split."""
        self._set_active(False)
        self.dropped = True

    def expired(self, now: float) -> bool:
        """No receive activity for `budget.idle_limit` while the cache was not full (Java `expired()`,
        docs/protocol.md §8.1).

        A queue whose cache is full is waiting for consumption, not stuck, so it never expires while full or
        within the idle limit after it was last full.
        """
        if self.dropped or not self.has_room():
            return False
        limit = self.budget.idle_limit
        return now - self._last_activity >= limit and now - self._cache_full_at >= limit

    # -- internals ----------------------------------------------------------------------------------------

    def _set_active(self, active: bool) -> None:
        if active == self.active or (active and self.dropped):
            return
        self.active = active
        self.budget.active_count += 1 if active else -1

    def _cache(self, n: int, nbytes: int, largest: int | None) -> None:
        if n <= 0:
            return
        self.cached_count += n
        self.cached_bytes += nbytes
        size = float(largest) if largest is not None else nbytes / n
        if size > self._est_msg_bytes:
            self._est_msg_bytes = size

    def _close(self, ticket: ReceiveTicket, now: float) -> bool:
        if not ticket._open:
            return False
        self._reserved -= ticket.reserved  # what `on_partial` has not released yet
        ticket._open = False
        self.in_flight -= 1
        self._last_activity = now
        return True
