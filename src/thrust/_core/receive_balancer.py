"""Where a SimpleConsumer's next receive goes: which (topic, broker) to long-poll.

A receive of a non-FIFO *or* FIFO group pops the whole of one broker's share of a topic whatever queue
it names: the proxy maps the request to the broker's acting queue, queue id -1
(`ReceiveMessageActivity.ReceiveMessageQueueSelector` -> `MessageQueueSelector.getQueueByBrokerName`;
the broker's `PopMessageProcessor` then reads every queue of the topic, FIFO groups with its per-queue
order locks). So the unit to rotate over is the broker, not the queue. Rotating over the route's queues,
as the Java client's `SubscriptionLoadBalancer` does, names the same broker for `queues per broker`
receives in a row: once that broker is drained, each of them is an empty long poll held for the whole
await duration while the other brokers' backlog waits.

`ReceiveBalancer` rotates over the keys it is given (the consumer passes one per subscribed topic and
broker) and prefers those whose last receive returned messages. A key whose last receive came back empty
(or failed) is not dropped: it is due again once it has been passed over `skip_bound(empties)` times, a
number that doubles with each consecutive empty receive up to `max_skips`; a due key goes before the
preferred ones. When no key is preferred (nothing anywhere, or every key just came back empty) it is a
plain round robin. So no key waits more than `max(max_skips, keys - 1) + keys` choices, and a backlog
spread over N brokers is drained without an empty receive while every broker still has messages.

The bound is in choices, not seconds, on purpose. An empty receive itself lasts the whole await duration,
so a rule "try an idle key again after T seconds" makes idle keys due again by the time spent probing
the *other* idle keys: with one broker holding the backlog and two idle ones, every other receive became
an empty probe. Counting choices has no such feedback, and still bounds the wait in time: a preferred
receive lasts at most the await duration (a longer one comes back empty and is no longer preferred).

Pure: no I/O, no clock, no decision depends on time.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Generic, TypeVar

__all__ = ["DEFAULT_MAX_SKIPS", "ReceiveBalancer"]

K = TypeVar("K", bound=Hashable)

#: The most choices an idle key is passed over before it is tried again (with more keys than this,
#: `keys - 1`: a plain rotation passes each key over that often anyway).
DEFAULT_MAX_SKIPS = 16
_MAX_EXPONENT = 16  # 2**16 is far above any sensible max_skips; keeps the shift small


class _State:
    __slots__ = ("empties", "waited")

    def __init__(self) -> None:
        self.waited = 0  # choices since this key was last chosen
        self.empties = 0  # consecutive empty (or failed) receives; 0: preferred (or never tried)


class ReceiveBalancer(Generic[K]):
    """Chooses the key (topic, broker) of each receive; told what each receive returned.

    Args:
        max_skips: at most this many choices pass over a key that came back empty before it is tried
            again (at least `keys - 1` are always allowed).
    """

    __slots__ = ("_cursor", "_keys", "_max_skips", "_states")

    def __init__(self, *, max_skips: int = DEFAULT_MAX_SKIPS) -> None:
        if max_skips < 1:
            raise ValueError("max_skips must be at least 1")
        self._max_skips = max_skips
        self._states: dict[K, _State] = {}
        self._keys: tuple[K, ...] = ()
        self._cursor = -1  # index in _keys of the last choice

    def skip_bound(self, empties: int, keys: int) -> int:
        """How many choices pass over a key with `empties` consecutive empty receives among `keys` keys.

        `(keys - 1) * 2**empties` (a plain rotation already passes a key over `keys - 1` times, so less
        would be no preference at all), capped at `max(max_skips, keys - 1)`."""
        others = max(keys - 1, 0)
        return min(max(self._max_skips, others), others << min(empties, _MAX_EXPONENT))

    def choose(self, keys: Sequence[K]) -> K:
        """The key for the next receive, among `keys` (in the order to rotate in; not empty).

        Keys not seen before start preferred; keys no longer listed are forgotten."""
        if not keys:
            raise ValueError("no keys to choose from")
        self._sync(keys)
        n = len(self._keys)
        bound_cache: dict[int, int] = {}
        best_due: tuple[int, int] | None = None  # (waited, index)
        best_preferred: tuple[int, int] | None = None
        best_any: tuple[int, int] | None = None
        for step in range(n):
            i = (self._cursor + 1 + step) % n
            state = self._states[self._keys[i]]
            w = state.waited
            # Strict ">" keeps the first in rotation order among equals.
            if best_any is None or w > best_any[0]:
                best_any = (w, i)
            if state.empties == 0:
                if best_preferred is None or w > best_preferred[0]:
                    best_preferred = (w, i)
                continue
            bound = bound_cache.get(state.empties)
            if bound is None:
                bound = bound_cache[state.empties] = self.skip_bound(state.empties, n)
            if w >= bound and (best_due is None or w > best_due[0]):
                best_due = (w, i)
        pick = best_due or best_preferred or best_any
        assert pick is not None
        index = pick[1]
        for state in self._states.values():
            state.waited += 1
        chosen = self._keys[index]
        self._states[chosen].waited = 0
        self._cursor = index
        return chosen

    def record(self, key: K, received: int) -> None:
        """What a receive on `key` returned: `received` messages (0 for an empty or failed receive)."""
        state = self._states.get(key)
        if state is None:  # forgotten meanwhile (route or subscriptions changed)
            return
        if received > 0:
            state.empties = 0
        else:
            state.empties += 1

    def empties(self, key: K) -> int:
        """Consecutive empty receives of `key` (0 when preferred or unknown); for tests and tools."""
        state = self._states.get(key)
        return 0 if state is None else state.empties

    def _sync(self, keys: Sequence[K]) -> None:
        if tuple(keys) == self._keys:
            return
        previous = self._keys[self._cursor] if 0 <= self._cursor < len(self._keys) else None
        self._keys = tuple(keys)
        states = {k: self._states.get(k) or _State() for k in self._keys}
        self._states = states
        self._cursor = self._keys.index(previous) if previous in states else -1
