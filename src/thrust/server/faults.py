"""Fault injection and call counters for the embedded server (tests and benchmarks).

Pure and synchronous: the service asks `Faults.on_call(rpc, broker)` once per call and gets an `Action`
(added latency, a status code to answer with instead of doing the work, or "drop the response"), or
None on the fast path when nothing is configured. Randomised faults use a seeded `random.Random`, so a
run is reproducible.

    faults = Faults(seed=7)
    faults.add_latency(Rpc.SEND_MESSAGE, 0.05)                 # every SendMessage 50 ms slower
    faults.fail_next(Rpc.ACK_MESSAGE, Code.TOO_MANY_REQUESTS, 3)  # the next 3 AckMessage calls
    faults.fail_fraction(Rpc.RECEIVE_MESSAGE, Code.INTERNAL_SERVER_ERROR, 0.1)
    faults.drop_next(Rpc.SEND_MESSAGE)                         # stored, but never answered
    faults.delay_fraction(Rpc.SEND_MESSAGE, 0.1, 2.0, 5.0)     # 10 % of SendMessage 2-5 s slower
    faults.delay_settings(2.0, broker=1)                       # Telemetry settings reply on broker 1
    faults.hold_popped_next(5.0)                               # the next receive that pops answers 5 s late
    faults.expire_messages("01AB...")                          # its handles -> INVALID_RECEIPT_HANDLE
    faults.fail_ack_entries(first_attempts=1)                  # each message's first ack entry fails
    faults.set_assignment("t", "g", [(1, 0)])                  # QueryAssignment: broker 1's queue 0 only
    faults.set_permission("t", readable=False)                 # routes say topic t's queues are write-only

`Stats` counts calls per RPC and entries (Ack entries, sent messages, delivered messages), so tests can
assert which calls a client made, and keeps the last `RECENT_RECEIVES` ReceiveMessage calls (group, topic,
`attempt_id`), so a test can see whether a client reused an attempt id on a retry.
"""

from __future__ import annotations

import math
import random
import time
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final, NamedTuple

from thrust._codec.status import Code

__all__ = [
    "RECENT_RECEIVES",
    "Action",
    "Faults",
    "ReceiveCall",
    "Rpc",
    "Stats",
    "apply_fault_flag",
    "parse_code",
    "parse_rpc",
]


class Rpc(StrEnum):
    """The `MessagingService` methods, by their gRPC method name."""

    QUERY_ROUTE = "QueryRoute"
    HEARTBEAT = "Heartbeat"
    SEND_MESSAGE = "SendMessage"
    QUERY_ASSIGNMENT = "QueryAssignment"
    RECEIVE_MESSAGE = "ReceiveMessage"
    ACK_MESSAGE = "AckMessage"
    FORWARD_MESSAGE_TO_DEAD_LETTER_QUEUE = "ForwardMessageToDeadLetterQueue"
    PULL_MESSAGE = "PullMessage"
    UPDATE_OFFSET = "UpdateOffset"
    GET_OFFSET = "GetOffset"
    QUERY_OFFSET = "QueryOffset"
    END_TRANSACTION = "EndTransaction"
    TELEMETRY = "Telemetry"
    NOTIFY_CLIENT_TERMINATION = "NotifyClientTermination"
    CHANGE_INVISIBLE_DURATION = "ChangeInvisibleDuration"
    RECALL_MESSAGE = "RecallMessage"
    SYNC_LITE_SUBSCRIPTION = "SyncLiteSubscription"


@dataclass(frozen=True, slots=True)
class Action:
    """What to do to one call.

    Attributes:
        latency: seconds to wait before handling the call.
        code: answer with this status instead of handling the call (None: handle it).
        message: the status message for `code`.
        drop: never answer: hold the call until the client gives up (deadline or cancel).
        process: with `drop`, whether the request is handled first (the response is lost) or not at all.
    """

    latency: float = 0.0
    code: Code | None = None
    message: str = ""
    drop: bool = False
    process: bool = True


@dataclass(slots=True)
class _Rule:
    code: Code | None  # None: a drop rule
    remaining: int | None  # calls left, None for a fraction rule
    fraction: float
    message: str
    broker: int | None
    process: bool = True


@dataclass(slots=True)
class _Delay:
    fraction: float
    low: float
    high: float
    broker: int | None


RECENT_RECEIVES: Final = 1024
"""How many ReceiveMessage calls `Stats.receives` remembers (the oldest are forgotten first)."""


class ReceiveCall(NamedTuple):
    """One ReceiveMessage call as it arrived (before any fault or validation)."""

    broker: int
    group: str
    topic: str
    attempt_id: str | None  # None: the request left `attempt_id` unset
    long_polling: float | None = None  # seconds; None: the request left `long_polling_timeout` unset
    arrived: float = 0.0  # the wall clock (`time.time()`) when it arrived, whatever the brokers' clock


def _recent_receives() -> deque[ReceiveCall]:
    return deque(maxlen=RECENT_RECEIVES)


@dataclass(slots=True)
class Stats:
    """Counters of what clients asked for.

    Attributes:
        calls: calls per RPC name (e.g. `stats.calls["AckMessage"]`), every broker, including calls
            answered with an error or an injected fault.
        broker_calls: calls per `(broker index, RPC name)`.
        entries: `"AckMessage"` acked entries, `"SendMessage"` messages sent, `"ReceiveMessage"`
            messages delivered, `"ChangeInvisibleDuration"` / `"ForwardMessageToDeadLetterQueue"` calls
            that succeeded.
        injected: injected faults per RPC name.
        delayed: calls per RPC name that `Faults.delay_fraction` delayed.
        latency: seconds of injected latency per `(broker index, RPC name)`, from `add_latency` and
            `delay_fraction`; under `"Telemetry"`, the seconds `delay_settings` held Settings replies. A
            test proves a call was (or was not) slowed by the fault from this, not from a clock.
        receives: the last `RECENT_RECEIVES` ReceiveMessage calls, oldest first, with their `attempt_id`
            (F14, docs/reliability.md §3: a retried receive should reuse the attempt id of the one that
            failed), the long polling each asked for and when it arrived.
        stalled_streams: ReceiveMessage calls that wrote part of their batch and then stalled
            (`Faults.stall_stream_next`).
        held_pops: ReceiveMessage calls that popped messages and then held their answer
            (`Faults.hold_popped_next`); a test waits on it to know the messages are popped and unwritten.
    """

    calls: Counter[str] = field(default_factory=Counter)
    broker_calls: Counter[tuple[int, str]] = field(default_factory=Counter)
    entries: Counter[str] = field(default_factory=Counter)
    injected: Counter[str] = field(default_factory=Counter)
    delayed: Counter[str] = field(default_factory=Counter)
    latency: dict[tuple[int, str], float] = field(default_factory=dict)
    receives: deque[ReceiveCall] = field(default_factory=_recent_receives)
    held_pops: int = 0
    stalled_streams: int = 0

    def record_receive(
        self,
        broker: int,
        group: str,
        topic: str,
        attempt_id: str | None,
        long_polling: float | None = None,
    ) -> None:
        """Remember one ReceiveMessage call (bounded: the oldest beyond `RECENT_RECEIVES` is dropped)."""
        self.receives.append(ReceiveCall(broker, group, topic, attempt_id, long_polling, time.time()))

    def add_latency(self, broker: int, rpc: str, seconds: float) -> None:
        """Count `seconds` of latency injected into a call of `rpc` on `broker`."""
        key = (broker, rpc)
        self.latency[key] = self.latency.get(key, 0.0) + seconds

    def reset(self) -> None:
        """Zero every counter and forget the recorded receives."""
        self.calls.clear()
        self.broker_calls.clear()
        self.entries.clear()
        self.injected.clear()
        self.delayed.clear()
        self.latency.clear()
        self.receives.clear()
        self.held_pops = 0
        self.stalled_streams = 0


_ACK_ATTEMPTS_LIMIT: Final = 1 << 20  # bound on remembered per-message ack attempts


class Faults:
    """Configured faults of one embedded server. Not thread-safe: use it from the server's event loop
    (or before the server starts)."""

    def __init__(self, seed: int | None = 0) -> None:
        self._rng = random.Random(seed)
        self._latency: dict[tuple[str, int | None], float] = {}
        self._delays: dict[str, list[_Delay]] = {}
        self._rules: dict[str, list[_Rule]] = {}
        self._settings_delay: dict[int | None, float] = {}
        self._expired_handles: set[str] = set()
        self._expired_messages: set[str] = set()
        self._ack_code: Code | None = None
        self._ack_message = ""
        self._ack_first_attempts = 0
        self._ack_fraction = 0.0
        self._ack_attempts: OrderedDict[str, int] = OrderedDict()
        self._assignments: dict[tuple[str, str], tuple[tuple[int, int], ...]] = {}
        # [seconds, calls left] of `hold_popped_next`.
        self._hold_popped: list[float] = []
        self._stall_after: list[int] = []  # [messages written before the stall, calls left]
        self._permissions: dict[str, tuple[bool, bool]] = {}
        self._active = False
        self.stats = Stats()

    # ----------------------------------------------------------------------------------------------
    # configuration

    def add_latency(self, rpc: Rpc | str, seconds: float, *, broker: int | None = None) -> None:
        """Delay every call of `rpc` (on `broker`, or every broker) by `seconds` (0 removes it)."""
        key = (str(Rpc(rpc)), broker)
        if seconds > 0:
            self._latency[key] = float(seconds)
        else:
            self._latency.pop(key, None)
        self._refresh()

    def delay_fraction(
        self,
        rpc: Rpc | str,
        fraction: float,
        low: float,
        high: float | None = None,
        *,
        broker: int | None = None,
    ) -> None:
        """Delay a `fraction` (0..1) of the calls of `rpc` (on `broker`, or every broker) by a duration drawn
        uniformly from [`low`, `high`] seconds (`high` defaults to `low`), on top of any `add_latency`. Both
        draws use the seeded RNG, so a run is reproducible for a given call order. F3's "2-5 s
        delay on 10 % of calls" (docs/reliability.md §3): a slow broker, not a dead one (a call slower than
        the client's deadline is cancelled before it is handled). A fraction of 0 removes the delays of `rpc`
        on `broker`."""
        high = low if high is None else high
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"fraction must be within [0, 1], got {fraction}")
        if not (math.isfinite(low) and math.isfinite(high) and 0.0 <= low <= high):
            raise ValueError(f"need 0 <= low <= high (finite seconds), got [{low}, {high}]")
        name = str(Rpc(rpc))
        kept = [d for d in self._delays.get(name, ()) if d.broker != broker]
        if fraction > 0 and high > 0:
            kept.append(_Delay(fraction, float(low), float(high), broker))
        if kept:
            self._delays[name] = kept
        else:
            self._delays.pop(name, None)
        self._refresh()

    def fail_next(
        self,
        rpc: Rpc | str,
        code: Code | int | str,
        count: int = 1,
        *,
        message: str | None = None,
        broker: int | None = None,
    ) -> None:
        """Answer the next `count` calls of `rpc` with status `code` without handling them."""
        status = parse_code(code)
        self._add_rule(rpc, _Rule(status, count, 1.0, message or f"injected {status.name}", broker))

    def fail_fraction(
        self,
        rpc: Rpc | str,
        code: Code | int | str,
        fraction: float,
        *,
        message: str | None = None,
        broker: int | None = None,
    ) -> None:
        """Answer a `fraction` (0..1, seeded RNG) of the calls of `rpc` with status `code`."""
        status = parse_code(code)
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"fraction must be within [0, 1], got {fraction}")
        self._add_rule(rpc, _Rule(status, None, fraction, message or f"injected {status.name}", broker))

    def drop_next(
        self, rpc: Rpc | str, count: int = 1, *, process: bool = True, broker: int | None = None
    ) -> None:
        """Never answer the next `count` calls of `rpc`: they are held until the client's deadline (or
        cancellation). With `process` the request is handled first, so only the response is lost (a
        SendMessage is stored, a ReceiveMessage's messages stay invisible)."""
        self._add_rule(rpc, _Rule(None, count, 1.0, "", broker, process))

    def drop_fraction(
        self, rpc: Rpc | str, fraction: float, *, process: bool = True, broker: int | None = None
    ) -> None:
        """Never answer a `fraction` of the calls of `rpc` (see `drop_next`)."""
        self._add_rule(rpc, _Rule(None, None, fraction, "", broker, process))

    def delay_settings(self, seconds: float, *, broker: int | None = 0) -> None:
        """Delay the Telemetry reply to each Settings on `broker` (None: every broker) by `seconds`."""
        if seconds > 0:
            self._settings_delay[broker] = float(seconds)
        else:
            self._settings_delay.pop(broker, None)

    def hold_popped_next(self, seconds: float, count: int = 1) -> None:
        """The next `count` ReceiveMessage calls that pop messages answer `seconds` after the pop instead of
        at once: a proxy that has popped a batch and is slow to write it, or a batch still in transit, when
        the client gives up on the call. Messages of a call the client cancels meanwhile stay popped for
        that client (auto-renewed ones for as long as it stays connected), as the real proxy's do when it
        wrote them into a stream the client no longer reads (apache/rocketmq proxy
        `ReceiveMessageActivity` registers the receipt handles before `ReceiveMessageResponseStreamWriter`
        writes them; docs/reliability.md, bug 11)."""
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(f"need finite seconds >= 0, got {seconds}")
        self._hold_popped = [float(seconds), float(count)] if count > 0 and seconds > 0 else []

    def popped_hold(self) -> float:
        """Called by ReceiveMessage once it has popped messages: how long to hold the answer (0: none)."""
        hold = self._hold_popped
        if not hold:
            return 0.0
        hold[1] -= 1
        seconds = hold[0]
        if hold[1] <= 0:
            self._hold_popped = []
        self.stats.held_pops += 1
        return seconds

    def stall_stream_next(self, after: int, count: int = 1) -> None:
        """The next `count` ReceiveMessage calls that pop more than `after` messages write their OK status
        and their first `after` messages, then write nothing more until the client gives up on the call
        (its deadline): a stream stalled in transit after the server took its whole batch. The rest of the
        batch stays popped for that client, auto-renewed ones for as long as it stays registered, as the
        real proxy's receipt handles are (`ReceiveMessageActivity` registers them before
        `ReceiveMessageResponseStreamWriter` writes the stream; docs/reliability.md, bug 12)."""
        if after < 0:
            raise ValueError(f"need after >= 0, got {after}")
        self._stall_after = [int(after), int(count)] if count > 0 else []

    def stream_stall(self, popped: int) -> int | None:
        """Called by ReceiveMessage with how many messages it popped: after how many of them to stall
        the stream, or None to write them all."""
        stall = self._stall_after
        if not stall or popped <= stall[0]:
            return None
        stall[1] -= 1
        after = stall[0]
        if stall[1] <= 0:
            self._stall_after = []
        self.stats.stalled_streams += 1
        return after

    def expire_receipt_handles(self, *handles: str) -> None:
        """Ack / ChangeInvisibleDuration / ForwardToDLQ with these handles answer INVALID_RECEIPT_HANDLE."""
        self._expired_handles.update(handles)
        self._refresh()

    def expire_messages(self, *message_ids: str) -> None:
        """Every receipt handle of these messages is treated as expired (INVALID_RECEIPT_HANDLE)."""
        self._expired_messages.update(message_ids)
        self._refresh()

    def fail_ack_entries(
        self,
        code: Code | int | str = Code.INTERNAL_SERVER_ERROR,
        *,
        first_attempts: int = 1,
        fraction: float = 0.0,
        message: str | None = None,
    ) -> None:
        """Fail AckMessage entries with `code` (per entry; the rest of the request succeeds): the first
        `first_attempts` ack attempts of each message id, and/or a `fraction` of all entries."""
        status = parse_code(code)
        self._ack_code = status
        self._ack_message = message or "ack failed: status is abnormal"
        self._ack_first_attempts = max(0, first_attempts)
        self._ack_fraction = fraction
        self._ack_attempts.clear()
        self._refresh()

    def set_assignment(self, topic: str, group: str, queues: Iterable[tuple[int, int]] | None) -> None:
        """Make QueryAssignment for (`topic`, `group`) answer exactly `queues`, each a
        `(broker index, queue id)` (queue id -1: the broker's acting queue), in that order, on every
        port; None removes the override. An empty list is an empty assignment. Lets a test stage
        "the assignment moves from queue 0 to queue 1" (bench scenario 5a, docs/benchmarks.md#scenarios),
        which a real proxy does on rebalance. Entries naming a broker the server does not have are left
        out of the answer."""
        key = (topic, group)
        if queues is None:
            self._assignments.pop(key, None)
            return
        entries = tuple((int(b), int(q)) for b, q in queues)
        for broker, queue in entries:
            if broker < 0 or queue < -1:
                raise ValueError(f"bad assignment entry ({broker}, {queue})")
        self._assignments[key] = entries

    def assignment(self, topic: str, group: str) -> tuple[tuple[int, int], ...] | None:
        """The override set by `set_assignment` for (`topic`, `group`), or None."""
        if not self._assignments:
            return None
        return self._assignments.get((topic, group))

    def set_permission(self, topic: str, *, readable: bool = True, writable: bool = True) -> None:
        """Make QueryRoute and QueryAssignment describe every queue of `topic` with this permission,
        as a real broker does for a topic whose `perm` was changed (`mqadmin updateTopicPerm`: the
        proxy copies QueueData.perm into each queue's Permission, RouteActivity in apache/rocketmq).
        Only the answers change; sends and receives are still served, so a test sees what the client
        decides from the route alone. Both True removes the override."""
        if readable and writable:
            self._permissions.pop(topic, None)
        else:
            self._permissions[topic] = (readable, writable)

    def permission(self, topic: str) -> tuple[bool, bool] | None:
        """The (readable, writable) override set by `set_permission` for `topic`, or None."""
        if not self._permissions:
            return None
        return self._permissions.get(topic)

    def clear(self) -> None:
        """Remove every fault, assignment and permission override (the counters are kept; see
        `stats.reset()`)."""
        self._assignments.clear()
        self._permissions.clear()
        self._latency.clear()
        self._delays.clear()
        self._rules.clear()
        self._settings_delay.clear()
        self._expired_handles.clear()
        self._expired_messages.clear()
        self._ack_code = None
        self._ack_attempts.clear()
        self._hold_popped = []
        self._stall_after = []
        self._refresh()

    def _add_rule(self, rpc: Rpc | str, rule: _Rule) -> None:
        if rule.remaining is not None and rule.remaining < 1:
            return
        self._rules.setdefault(str(Rpc(rpc)), []).append(rule)
        self._refresh()

    def _refresh(self) -> None:
        self._active = bool(
            self._latency
            or self._delays
            or self._rules
            or self._expired_handles
            or self._expired_messages
            or self._ack_code is not None
        )

    # ----------------------------------------------------------------------------------------------
    # decisions (called by the service)

    @property
    def active(self) -> bool:
        """False when no per-call fault is configured (the service's fast path)."""
        return self._active

    def on_call(self, rpc: str, broker: int) -> Action | None:
        """Count the call and decide its fault, if any."""
        rpc = str(rpc)  # an `Rpc` member counts under its method name
        stats = self.stats
        stats.calls[rpc] += 1
        stats.broker_calls[(broker, rpc)] += 1
        if not self._active:
            return None
        latency = self._latency.get((rpc, broker), 0.0) or self._latency.get((rpc, None), 0.0)
        delays = self._delays.get(rpc)
        if delays:
            for delay in delays:
                if delay.broker is not None and delay.broker != broker:
                    continue
                if self._rng.random() < delay.fraction:
                    latency += self._rng.uniform(delay.low, delay.high)
                    stats.delayed[rpc] += 1
        rules = self._rules.get(rpc)
        if rules:
            for rule in rules:
                if rule.broker is not None and rule.broker != broker:
                    continue
                if rule.remaining is not None:
                    rule.remaining -= 1
                    if rule.remaining <= 0:
                        rules.remove(rule)
                        if not rules:
                            del self._rules[rpc]
                            self._refresh()
                elif self._rng.random() >= rule.fraction:
                    continue
                stats.injected[rpc] += 1
                if latency:
                    stats.add_latency(broker, rpc, latency)
                if rule.code is None:
                    return Action(latency=latency, drop=True, process=rule.process)
                return Action(latency=latency, code=rule.code, message=rule.message)
        if latency:
            stats.add_latency(broker, rpc, latency)
            return Action(latency=latency)
        return None

    def settings_delay(self, broker: int) -> float:
        """Seconds to hold the Telemetry settings reply on `broker` (added up in `Stats.latency`)."""
        if not self._settings_delay:
            return 0.0
        delay = self._settings_delay.get(broker, 0.0) or self._settings_delay.get(None, 0.0)
        if delay:
            self.stats.add_latency(broker, Rpc.TELEMETRY.value, delay)
        return delay

    def handle_expired(self, receipt_handle: str, message_id: str) -> bool:
        """True when this handle was expired by `expire_receipt_handles` / `expire_messages`."""
        if not self._active:
            return False
        return receipt_handle in self._expired_handles or message_id in self._expired_messages

    def ack_entry_fault(self, message_id: str) -> tuple[Code, str] | None:
        """The injected failure for one AckMessage entry, or None to ack it normally."""
        code = self._ack_code
        if code is None:
            return None
        if self._ack_first_attempts:
            attempts = self._ack_attempts.get(message_id, 0) + 1
            if attempts <= self._ack_first_attempts:
                self._ack_attempts[message_id] = attempts
                if len(self._ack_attempts) > _ACK_ATTEMPTS_LIMIT:
                    self._ack_attempts.popitem(last=False)
                self.stats.injected[Rpc.ACK_MESSAGE.value + ".entry"] += 1
                return code, self._ack_message
            self._ack_attempts.pop(message_id, None)
        if self._ack_fraction and self._rng.random() < self._ack_fraction:
            self.stats.injected[Rpc.ACK_MESSAGE.value + ".entry"] += 1
            return code, self._ack_message
        return None


# --------------------------------------------------------------------------------------------------
# parsing (thrust serve flags, thrust.testing)

_RPC_BY_LOWER: Final = {rpc.value.lower(): rpc for rpc in Rpc} | {rpc.name.lower(): rpc for rpc in Rpc}


def parse_rpc(text: str) -> Rpc:
    """An RPC by its method name (`SendMessage`) or enum name (`SEND_MESSAGE`), case-insensitive."""
    try:
        return _RPC_BY_LOWER[text.strip().lower()]
    except KeyError:
        raise ValueError(f"unknown RPC {text!r}; one of {', '.join(r.value for r in Rpc)}") from None


def parse_code(code: Code | int | str) -> Code:
    """A status code by enum member, number (`42900`) or name (`TOO_MANY_REQUESTS`)."""
    if isinstance(code, Code):
        return code
    if isinstance(code, int):
        return Code(code)
    text = code.strip()
    if text.isdigit():
        return Code(int(text))
    try:
        return Code[text.upper()]
    except KeyError:
        raise ValueError(f"unknown status code {code!r}") from None


def apply_fault_flag(faults: Faults, kind: str, spec: str) -> None:
    """Apply one `thrust serve` fault flag to `faults`.

    Kinds and formats (`RPC` is a method name like `SendMessage`, `CODE` a status name or number):

    - `latency`: `RPC:SECONDS[:BROKER]`
    - `delay-fraction`: `RPC:FRACTION:LOW:HIGH[:BROKER]` (a FRACTION of the calls, LOW..HIGH seconds)
    - `fail`: `RPC:CODE[:COUNT]` (the next COUNT calls, default 1)
    - `fail-fraction`: `RPC:CODE:FRACTION`
    - `drop`: `RPC[:COUNT]`
    - `settings-delay`: `SECONDS[:BROKER]`
    - `ack-entry`: `CODE[:FIRST_ATTEMPTS[:FRACTION]]`
    - `assignment`: `TOPIC:GROUP:B.Q[+B.Q...]` (broker index.queue id; empty after the last `:`: no
      queues; `TOPIC:GROUP` alone removes the override)
    """
    parts = spec.split(":")
    try:
        if kind == "latency" and len(parts) in (2, 3):
            broker = int(parts[2]) if len(parts) == 3 else None
            faults.add_latency(parse_rpc(parts[0]), float(parts[1]), broker=broker)
        elif kind == "delay-fraction" and len(parts) in (4, 5):
            broker = int(parts[4]) if len(parts) == 5 else None
            faults.delay_fraction(
                parse_rpc(parts[0]), float(parts[1]), float(parts[2]), float(parts[3]), broker=broker
            )
        elif kind == "fail" and len(parts) in (2, 3):
            count = int(parts[2]) if len(parts) == 3 else 1
            faults.fail_next(parse_rpc(parts[0]), parse_code(parts[1]), count)
        elif kind == "fail-fraction" and len(parts) == 3:
            faults.fail_fraction(parse_rpc(parts[0]), parse_code(parts[1]), float(parts[2]))
        elif kind == "drop" and len(parts) in (1, 2):
            faults.drop_next(parse_rpc(parts[0]), int(parts[1]) if len(parts) == 2 else 1)
        elif kind == "settings-delay" and len(parts) in (1, 2):
            faults.delay_settings(float(parts[0]), broker=int(parts[1]) if len(parts) == 2 else None)
        elif kind == "ack-entry" and 1 <= len(parts) <= 3:
            first = int(parts[1]) if len(parts) >= 2 else 1
            fraction = float(parts[2]) if len(parts) == 3 else 0.0
            faults.fail_ack_entries(parse_code(parts[0]), first_attempts=first, fraction=fraction)
        elif kind == "assignment" and len(parts) in (2, 3):
            if len(parts) == 2:
                faults.set_assignment(parts[0], parts[1], None)
            else:
                pairs = [item.split(".") for item in parts[2].split("+") if item]
                if any(len(p) != 2 for p in pairs):
                    raise ValueError("each queue is BROKER.QUEUE")
                faults.set_assignment(parts[0], parts[1], [(int(b), int(q)) for b, q in pairs])
        else:
            raise ValueError(f"malformed --fault-{kind} value {spec!r}")
    except ValueError as exc:
        raise ValueError(f"--fault-{kind} {spec!r}: {exc}") from None
