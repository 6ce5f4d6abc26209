"""Faults on a real Apache RocketMQ (two brokers behind a cluster-mode proxy): brokers killed, the proxy
terminated or killed and restarted, the client's link black-holed or slowed, a transaction orphaned, a
consumer joining and leaving. Nothing acknowledged may be lost.

The module starts its OWN `RocketMQCluster(mode="cluster")` (it kills processes, so it cannot share the
session's), once, and every test gets fresh topics and groups on it. Each fault runs under the same load
(`_Load`): a producer at a steady rate (one task per send, so a slow send never slows the rate), one
PushConsumer group and one SimpleConsumer group, every send and delivery recorded in one history per group
and judged by `thrust.reliability.history.check` (P1 lost = 0 for acknowledged sends, P2 duplicates
within the at-risk window, P3 every send within its bound, P4 recovery after the heal). Recovery times
are taken from the recorded events (history timestamps), never from the sleeps of the test, and each test
first proves that its fault happened (the JVM's exit status, a failed call, a proxy statistic), so a test
whose fault never bit fails.

Recovery figures are printed (`-s` shows them) and collected in `docs/reliability.md`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import os
import statistics
import threading
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field

import pytest

import thrust
from tests.engines import unique
from tests.reliability._util import assert_report, body, pid_of, run
from thrust.cluster import RocketMQCluster
from thrust.errors import ConnectionError, ThrustError, TimeoutError
from thrust.reliability.history import HistoryRecorder, Report, check
from thrust.reliability.proxy import PASS, Blackhole, FaultProxy, Latency

# `realfaults`: run by `make faults`, not by `make test` (5 min 20 s on a quiet machine, over the 3 min the
# issue allows CI; docs/reliability.md has the figures).
pytestmark = [pytest.mark.slow, pytest.mark.realfaults, pytest.mark.xdist_group("real-cluster-faults")]

NAMES = ("namesrv", "broker-a", "broker-b", "proxy")
REQUEST_TIMEOUT = 2.0
# P3: request timeout x 3 attempts + the server's backoff between them + slack for a loaded machine.
SEND_BOUND = REQUEST_TIMEOUT * 3 + 2 * 1.0 + 2.0
INVISIBLE = 10.0  # the proxy's minInvisibleTimeMillsForRecv: the shortest a simple receive may ask
RATE = 20.0  # sends per second
# A JVM restart is most of a test: 5-15 s on an idle machine, 2-4 min at a load average of 70 on two
# cores (measured: the proxy's two TLS contexts alone took 75 s there). The bounds the tests check are
# taken from the history around the restart, so only these outer timeouts depend on the machine.
RESTART_TIMEOUT = 400.0
TEST_TIMEOUT = 900


# The proxy holds a push consumer's messages invisible for `defaultInvisibleTimeMills` (60 s upstream) and
# renews them while the client is connected; a receive reply that a fault swallowed (or a proxy that died
# with them) leaves them invisible for that long. 15 s keeps that wait inside the CI budget; the renew
# (10 s ahead of expiry, every 5 s) still runs.
PUSH_INVISIBLE = 15.0
# The proxy answers QueryRoute with the host the client dialled and its own gRPC port, unless
# `useEndpointPortFromRequest` (RouteActivity.convertToAddressList): with it, a client that dials the
# FaultProxy's port gets routes through the FaultProxy too (the proxy listens on every address, so the
# embedded-server trick of 127.0.0.2 with the server's port is not available).
PROXY_CONFIG = {"defaultInvisibleTimeMills": int(PUSH_INVISIBLE * 1000), "useEndpointPortFromRequest": True}


@pytest.fixture(scope="module")
def cluster() -> Iterator[RocketMQCluster]:
    with RocketMQCluster("cluster", proxy_config=PROXY_CONFIG, startup_timeout=300) as c:
        yield c


@pytest.fixture
def real(cluster: RocketMQCluster) -> Iterator[RocketMQCluster]:
    """The module's cluster, with every JVM running again after the test (whatever it killed)."""
    yield cluster
    for name in NAMES:
        if cluster.process(name).poll() is not None:
            cluster.restart(name, timeout=RESTART_TIMEOUT)


def _broker_of(m: thrust.ReceivedMessage) -> str:
    """The broker that stored `m`, from the proxy's receipt handle (upstream `ReceiptHandle.encode`:
    startOffset retrieveTime invisibleTime reviveQueueId topicType brokerName queueId offset ...)."""
    parts = m._receipt_handle.split(" ")
    return parts[5] if len(parts) > 6 and parts[5] in ("broker-a", "broker-b") else "?"


@dataclass
class _Names:
    topic: str
    push_group: str
    simple_group: str


def _fresh(cluster: RocketMQCluster, queues: int = 4) -> _Names:
    names = _Names(unique("rt"), unique("rpush"), unique("rsimple"))
    cluster.create_topic(names.topic, "NORMAL", queues=queues)
    cluster.create_group(names.push_group)
    cluster.create_group(names.simple_group)
    return names


@dataclass
class _Load:
    """A steady producer, a PushConsumer group and a SimpleConsumer group, all recorded."""

    endpoint: str
    names: _Names
    rate: float = RATE
    request_timeout: float = REQUEST_TIMEOUT
    push_rec: HistoryRecorder = field(default_factory=HistoryRecorder)
    simple_rec: HistoryRecorder = field(default_factory=HistoryRecorder)
    # payload -> broker of its first delivery, per group ("push" / "simple")
    brokers: dict[str, dict[str, str]] = field(default_factory=lambda: {"push": {}, "simple": {}})
    send_errors: dict[str, int] = field(default_factory=dict)
    receive_errors: dict[str, int] = field(default_factory=dict)
    receive_calls: list[float] = field(default_factory=list)  # seconds each receive() took
    simple_paused: bool = False
    push_restarted: int = 0  # messages the push group missed when `finish` restarted its consumer
    stopping: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _sends: set[asyncio.Task[None]] = field(default_factory=set)
    _stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    async def __aenter__(self) -> _Load:
        t = self.names.topic
        self.producer = thrust.Producer(
            endpoints=self.endpoint, topics=[t], request_timeout=self.request_timeout
        )
        self.simple = thrust.SimpleConsumer(
            endpoints=self.endpoint,
            group=self.names.simple_group,
            subscriptions={t: "*"},
            await_duration=2,
            request_timeout=self.request_timeout,
        )
        self.push = self.new_push()
        for client in (self.producer, self.simple, self.push):
            await self._stack.enter_async_context(client)
        self._tasks = [
            asyncio.create_task(self._produce(), name="rt-produce"),
            asyncio.create_task(self._consume(), name="rt-simple"),
        ]
        return self

    def new_push(self) -> thrust.PushConsumer:
        return thrust.PushConsumer(
            endpoints=self.endpoint,
            group=self.names.push_group,
            subscriptions={self.names.topic: "*"},
            listener=self.on_push,
            request_timeout=self.request_timeout,
        )

    def on_push(self, m: thrust.ReceivedMessage, consumer: str = "push") -> thrust.ConsumeResult:
        with self._lock:
            ref = self.push_rec.delivered(
                pid_of(m), m.message_id, attempt=m.delivery_attempt, consumer=consumer
            )
            # SUCCESS: the consumer acks it (as the soak: an ack the server lost shows as a redelivery).
            self.push_rec.acked(ref)
            self.brokers["push"].setdefault(pid_of(m), _broker_of(m))
        return thrust.ConsumeResult.SUCCESS

    async def _produce(self) -> None:
        i = 0
        next_at = time.monotonic()
        while not self.stopping:
            task = asyncio.create_task(self._send_one(f"m{i}"), name="rt-send")
            i += 1
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)
            next_at += 1.0 / self.rate
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    async def _send_one(self, pid: str) -> None:
        ops = [(rec, rec.invoke(pid)) for rec in (self.push_rec, self.simple_rec)]
        try:
            receipt = await self.producer.send(thrust.Message(topic=self.names.topic, body=body(pid, 256)))
        except (TimeoutError, ConnectionError) as exc:
            self.send_errors[type(exc).__name__] = self.send_errors.get(type(exc).__name__, 0) + 1
            for rec, op in ops:
                rec.unknown(op, error=type(exc).__name__)
        except ThrustError as exc:
            self.send_errors[type(exc).__name__] = self.send_errors.get(type(exc).__name__, 0) + 1
            for rec, op in ops:
                rec.fail(op, error=type(exc).__name__)
        else:
            for rec, op in ops:
                rec.ok(op, receipt.message_id)

    async def _consume(self) -> None:
        while True:
            if self.simple_paused:
                await asyncio.sleep(0.05)
                continue
            await self.receive_once()

    async def receive_once(self) -> int:
        t0 = time.monotonic()
        try:
            batch = await self.simple.receive(32, INVISIBLE)
        except ThrustError as exc:
            self.receive_calls.append(time.monotonic() - t0)
            self.receive_errors[type(exc).__name__] = self.receive_errors.get(type(exc).__name__, 0) + 1
            await asyncio.sleep(0.2)
            return 0
        self.receive_calls.append(time.monotonic() - t0)
        refs = []
        for m in batch:
            refs.append(self.simple_rec.delivered(pid_of(m), m.message_id, attempt=m.delivery_attempt))
            self.brokers["simple"].setdefault(pid_of(m), _broker_of(m))
        for ref, err in zip(refs, await self.simple.ack_many(batch), strict=True):
            if err is None:
                self.simple_rec.acked(ref)
            else:
                self.simple_rec.ack_failed(ref, error=type(err).__name__)
        return len(batch)

    def fault(self, name: str) -> float:
        for rec in (self.push_rec, self.simple_rec):
            rec.fault_started(name)
        return time.monotonic()

    def heal(self, name: str) -> float:
        for rec in (self.push_rec, self.simple_rec):
            rec.fault_healed(name)
        return time.monotonic()

    def missing(self, rec: HistoryRecorder) -> set[str]:
        """Payloads sent OK and not delivered yet in `rec`'s group."""
        events = rec.snapshot().events
        invokes = {e.seq: e.payload_id for e in events if e.kind == "invoke"}
        ok = {invokes[e.ref] for e in events if e.kind == "ok"}
        return ok - {e.payload_id for e in events if e.kind == "deliver"}

    async def finish(
        self, budget: float = 45.0, restart_push_after: float | None = PUSH_INVISIBLE + 5.0
    ) -> None:
        """Stop sending, wait for the sends in flight, then let both groups drain until every acked send
        was delivered in each (or `budget` runs out: the checker then reports what is lost).

        `restart_push_after`: if the push group still misses messages after that many seconds, close the
        push consumer and start a successor in the same group. A receive reply that a black hole swallowed
        leaves its messages popped for the live push client, and the proxy renews them for as long as that
        client is connected (proxy `DefaultReceiptHandleManager`: up to 3 h); neither Java nor
        thrust can nack messages it never saw. Closing unregisters the client, and the proxy then makes
        them visible after `invisibleTimeMillisWhenClear` (1 s). The soak's drain does the same. Not only
        black holes do it: a receive the client cancels (a channel replaced after two timeouts in a row,
        the proxy killed after it popped) leaves the proxy renewing what it popped for it
        (`ReceiveMessageResponseStreamWriter` nacks only when its own write fails)."""
        self.stopping = True
        self._tasks[0].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._tasks[0]
        if self._sends:
            await asyncio.wait(set(self._sends), timeout=SEND_BOUND + 5)
        self.simple_paused = False
        start = time.monotonic()
        end = start + budget
        restarted = False
        while time.monotonic() < end and (self.missing(self.push_rec) or self.missing(self.simple_rec)):
            await asyncio.sleep(0.2)
            if (
                not restarted
                and restart_push_after is not None
                and time.monotonic() - start > restart_push_after
                and self.missing(self.push_rec)
            ):
                restarted = True
                self.push_restarted = len(self.missing(self.push_rec))
                await self.push.close()
                self.push = self.new_push()
                await self._stack.enter_async_context(self.push)

    async def __aexit__(self, *exc: object) -> None:
        self.stopping = True
        for t in self._tasks:
            t.cancel()
        for t in [*self._tasks, *self._sends]:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError, ThrustError):
                await t
        await self._stack.aclose()


def _ok_times(rec: HistoryRecorder) -> list[tuple[float, float]]:
    """(invoke time, completion time) of every OK send."""
    events = rec.snapshot().events
    invokes = {e.seq: e.t for e in events if e.kind == "invoke"}
    return sorted((invokes[e.ref], e.t) for e in events if e.kind == "ok")


def _first_ok_after(rec: HistoryRecorder, t: float) -> float:
    """Seconds from `t` until the first OK send that was invoked at or after `t`."""
    after = [done for inv, done in _ok_times(rec) if inv >= t]
    assert after, "no send invoked after the fault succeeded"
    return min(after) - t


def _longest_gap(rec: HistoryRecorder, t: float) -> float:
    """The longest time after `t` without an OK send completion: the outage the producer saw."""
    done = sorted(d for _, d in _ok_times(rec) if d >= t)
    points = [t, *done]
    return max((b - a for a, b in itertools.pairwise(points)), default=0.0)


def _first_delivery_after(rec: HistoryRecorder, t: float) -> float:
    after = [e.t for e in rec.snapshot().events if e.kind == "deliver" and e.t >= t]
    assert after, "nothing was delivered after the fault"
    return min(after) - t


# The broker keeps consumer offsets in memory and writes them every `flushConsumerOffsetInterval` (5 s):
# after a kill -9 it starts from the last written offsets, so what it popped (and was acked) in the last
# seconds before the crash is popped again, as a first delivery (reconsume times 0) of the same message id.
OFFSET_FLUSH = 5.0


def _crash_duplicates(load: _Load, group: str, rec: HistoryRecorder, broker: str, killed: float) -> int:
    """Extra deliveries of payloads whose first delivery came from `broker` in the offset-flush interval
    before it was killed: the at-least-once cost of a broker crash, not a client fault."""
    firsts: dict[str, float] = {}
    counts: dict[str, int] = {}
    for e in rec.snapshot().events:
        if e.kind == "deliver":
            firsts.setdefault(e.payload_id, e.t)
            counts[e.payload_id] = counts.get(e.payload_id, 0) + 1
    return sum(
        n - 1
        for p, n in counts.items()
        if n > 1
        and load.brokers[group].get(p) == broker
        and killed - OFFSET_FLUSH - 1.0 <= firsts[p] <= killed
    )


def _when(rec: HistoryRecorder, pids: Iterable[str]) -> str:
    """Where the OK sends of `pids` fall against the history's fault and heal marks (a lost message's
    diagnosis: sent before the fault, during it, or after the heal)."""
    events = rec.snapshot().events
    marks = [(e.kind, e.t) for e in events if e.kind in ("fault", "heal")]
    invokes = {e.seq: e for e in events if e.kind == "invoke"}
    oks = {invokes[e.ref].payload_id: e.t for e in events if e.kind == "ok"}
    t0 = marks[0][1] if marks else 0.0
    return ", ".join(f"{p} ok at {oks.get(p, float('nan')) - t0:+.1f}s" for p in pids) + (
        " (marks: " + ", ".join(f"{k} {t - t0:+.1f}s" for k, t in marks) + ")"
    )


def _judge(
    load: _Load,
    *,
    recovery_bound: float,
    call_bound: float = SEND_BOUND,
    crash: tuple[str, float] | None = None,
) -> dict[str, Report]:
    """P1-P4 of both groups. With `crash` (broker, kill time), P2 also explains the duplicates a broker's
    unflushed consumer offsets cause (`_crash_duplicates`): the rest must fit the at-risk window."""
    reports = {}
    for name, rec in (("push", load.push_rec), ("simple", load.simple_rec)):
        report = check(
            rec, require_ack=False, call_bound=call_bound, recovery_bound=recovery_bound, copies_per_send=3
        )
        print(f"[{name}] {report.summary}")
        if report.lost_examples:
            print(f"[{name}] lost: {_when(rec, report.lost_examples)}")
        assert report.sends_ok > 0, report.summary
        assert_report(report, "P1", "P3", "P4")
        if crash is None:
            assert_report(report, "P2")
        else:
            explained = _crash_duplicates(load, name, rec, *crash)
            print(f"[{name}] duplicates explained by {crash[0]}'s unflushed offsets: {explained}")
            assert report.duplicates - explained <= report.duplicate_window, report.summary
        reports[name] = report
    return reports


def _figure(label: str, **values: float | int | str) -> None:
    text = " ".join(f"{k}={v:.2f}s" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())
    print(f"RECOVERY {label}: {text}")


# R2 / R3: the proxy terminated or killed, restarted on the same port ----------------------------------


@pytest.mark.timeout(TEST_TIMEOUT, func_only=True)
@pytest.mark.parametrize("how", ["terminate", "kill"], ids=["R2-sigterm", "R3-kill-9"])
def test_r2_r3_proxy_restarted_sessions_recover_without_user_action(real: RocketMQCluster, how: str) -> None:
    """R2 (SIGTERM: the proxy sends GOAWAY and closes its streams) and R3 (kill -9: no GOAWAY, the kernel
    resets the connections) of the cluster-mode proxy under load, then a restart on the same port. The
    clients are never touched: sends, the Telemetry sessions, the push consumer's long polls and the simple
    consumer's receives come back on their own. Nothing acknowledged is lost (P1; the brokers kept every
    message), duplicates are within the window (P2), sends end within their bound (P3), and traffic is
    back within 15 s of the proxy's readiness (P4)."""
    names = _fresh(real)

    async def scenario() -> None:
        async with _Load(real.endpoint, names) as load:
            await asyncio.sleep(3.0)
            pid = real.process("proxy").pid
            down = load.fault(f"proxy-{how}")
            await asyncio.to_thread(real.terminate if how == "terminate" else real.kill, "proxy")
            status = real.process("proxy").returncode
            stopped = time.monotonic()
            boot = await asyncio.to_thread(real.restart, "proxy", timeout=RESTART_TIMEOUT)
            up = load.heal(f"proxy-{how}")
            assert real.process("proxy").pid != pid
            await asyncio.sleep(4.0)
            await load.finish()
            failed_during = sum(load.send_errors.values())
        # The fault happened: the JVM ended by our signal and sends failed while it was down.
        if how == "kill":
            assert status == -9, status
        else:
            assert status is not None, status
        assert failed_during > 0, "no send failed: the proxy was never down"
        reports = _judge(load, recovery_bound=15.0)
        _figure(
            f"R{2 if how == 'terminate' else 3} proxy {how}",
            stop=stopped - down,
            boot=boot,
            outage=_longest_gap(load.push_rec, down),
            send_after_ready=_first_ok_after(load.push_rec, up),
            push_delivery_after_ready=_first_delivery_after(load.push_rec, up),
            simple_delivery_after_ready=_first_delivery_after(load.simple_rec, up),
            p4_worst=max(max(r.recovery_times, default=0.0) for r in reports.values()),
            send_errors=str(load.send_errors),
        )

    run(scenario, timeout=TEST_TIMEOUT - 20)


# R1: a broker killed under load, restarted with its store ---------------------------------------------


@pytest.mark.timeout(TEST_TIMEOUT, func_only=True)
def test_r1_broker_b_killed_sends_move_to_broker_a_and_its_backlog_drains_after_restart(
    real: RocketMQCluster,
) -> None:
    """R1: kill -9 broker-b under load. Sends that meet it fail over to broker-a (the producer retries on
    another broker, and the proxy's route drops broker-b once the namesrv has seen its connection close);
    consumption from broker-a goes on. The simple group pauses 1.5 s before the kill, so broker-b holds a
    backlog of that group's messages that nobody can read while it is down; after `restart("broker-b")`
    (same store) every one of them is consumed, and nothing acknowledged is lost in either group (P1)."""
    names = _fresh(real)

    async def scenario() -> dict[str, float]:
        async with _Load(real.endpoint, names) as load:
            await asyncio.sleep(3.0)
            load.simple_paused = True
            await asyncio.sleep(1.5)
            killed = load.fault("kill-9 broker-b")
            await asyncio.to_thread(real.kill, "broker-b")
            status = real.process("broker-b").returncode
            load.simple_paused = False
            await asyncio.sleep(6.0)
            # What was sent before broker-b died (whatever the send's outcome: under load an "unknown"
            # send is often stored) and not consumed by the simple group since.
            events = load.simple_rec.snapshot().events
            stranded = {e.payload_id for e in events if e.kind == "invoke" and e.t < killed} - {
                e.payload_id for e in events if e.kind == "deliver"
            }
            boot = await asyncio.to_thread(real.restart, "broker-b", timeout=RESTART_TIMEOUT)
            up = load.heal("kill-9 broker-b")
            await asyncio.sleep(3.0)
            await load.finish()
        assert status == -9, status
        reports = _judge(load, recovery_bound=15.0, crash=("broker-b", killed))
        # Failover: the sends invoked after the kill; the last one that did not succeed at once (a
        # failure, or a success slower than one request timeout) marks when sends were normal again.
        events = load.push_rec.snapshot().events
        invokes = {e.seq: e for e in events if e.kind == "invoke"}
        after = [(invokes[e.ref].t, e) for e in events if e.kind in ("ok", "fail", "unknown")]
        after = [(t, e) for t, e in after if t >= killed]
        bad = [e.t for t, e in after if e.kind != "ok" or e.t - t > REQUEST_TIMEOUT]
        ok_after = [e.t - t for t, e in after if e.kind == "ok"]
        # broker-b's backlog for the simple group: stranded payloads first delivered from broker-b.
        from_b = {p for p in stranded if load.brokers["simple"].get(p) == "broker-b"}
        seen = collections.Counter(load.brokers["simple"].values())
        assert from_b, f"broker-b held no backlog of the simple group ({len(stranded)} stranded; {seen})"
        times = {
            e.payload_id: e.t for e in reversed(load.simple_rec.snapshot().events) if e.kind == "deliver"
        }
        drained = max(times[p] for p in from_b) - up
        first_b = min(times[p] for p in from_b) - up
        figures = {
            "failover": (max(bad) - killed) if bad else 0.0,
            "worst_send_after_kill": max(ok_after),
            "median_send_after_kill": statistics.median(ok_after),
            "boot": boot,
            "backlog": float(len(from_b)),
            "first_backlog_delivery_after_restart": first_b,
            "backlog_drained_after_restart": drained,
        }
        _figure(
            "R1 kill -9 broker-b",
            **figures,
            send_errors=str(load.send_errors),
            duplicates=str({k: r.duplicates for k, r in reports.items()}),
        )
        return figures

    run(scenario, timeout=TEST_TIMEOUT - 20)


# R4 / R5: the client's link to the proxy, through the FaultProxy --------------------------------------


@contextlib.asynccontextmanager
async def _through_fault_proxy(cluster: RocketMQCluster) -> AsyncIterator[FaultProxy]:
    """A FaultProxy on a port of its own in front of the real proxy; with `useEndpointPortFromRequest`
    the proxy's routes name the address the client dialled, so every call of the client, routes
    included, goes through the FaultProxy."""
    host, _, port = cluster.endpoint.rpartition(":")
    async with FaultProxy(target=(host, int(port))) as proxy:
        yield proxy


BLACKHOLE = 8.0  # CI window (the 30 s by hand: THRUST_BLACKHOLE_S=30); the bound checked is the same
RECONNECT_BOUND = 30.0


@pytest.mark.timeout(TEST_TIMEOUT, func_only=True)
def test_r4_black_hole_connection_replaced_within_30s_and_receipts_settle(real: RocketMQCluster) -> None:
    """R4: every byte between the clients and the real proxy is dropped (live connections and new ones, no
    FIN, no RST) for BLACKHOLE seconds, then the network heals for new connections only: the black-holed
    connections stay dead, so the client must notice (keepalive 10 s + 10 s, or two request timeouts in a
    row) and replace them. A send succeeds over a new connection within 30 s of the heal (P4), the
    connections the black hole held are closed by the client, and the messages whose acks or receive
    replies the black hole swallowed are acked or redelivered (P1 lost = 0, P2 within the window)."""
    names = _fresh(real)
    window = float(os.environ.get("THRUST_BLACKHOLE_S", BLACKHOLE))

    async def scenario() -> None:
        async with _through_fault_proxy(real) as proxy, _Load(proxy.endpoint, names) as load:
            await asyncio.sleep(3.0)
            before = proxy.stats()
            start = load.fault("blackhole")
            proxy.set_mode(Blackhole())
            await asyncio.sleep(window)
            ok_during = [d for i, d in _ok_times(load.push_rec) if i >= start + REQUEST_TIMEOUT * 3 + 3]
            proxy.set_mode(PASS, scope="new")
            healed = load.heal("blackhole")
            await asyncio.sleep(4.0)
            await load.finish()
            after = proxy.stats()
        # The fault bit: nothing got through while it lasted, and the client opened new connections.
        assert not [t for t in ok_during if t < healed], "sends succeeded through the black hole"
        assert after.accepted > before.accepted, (before, after)
        reports = _judge(load, recovery_bound=RECONNECT_BOUND)
        _figure(
            "R4 black hole",
            window=window,
            send_after_heal=_first_ok_after(load.push_rec, healed),
            push_delivery_after_heal=_first_delivery_after(load.push_rec, healed),
            simple_delivery_after_heal=_first_delivery_after(load.simple_rec, healed),
            p4_worst=max(max(r.recovery_times, default=0.0) for r in reports.values()),
            connections=f"{before.accepted}->{after.accepted}",
            push_restart_released=load.push_restarted,
            redelivered_simple=reports["simple"].duplicates,
            redelivered_push=reports["push"].duplicates,
        )

    run(scenario, timeout=TEST_TIMEOUT - 20)


LATENCY = 0.2


@pytest.mark.timeout(TEST_TIMEOUT, func_only=True)
def test_r5_slow_path_200ms_each_way_degrades_gracefully_calls_within_deadline(real: RocketMQCluster) -> None:
    """R5: 200 ms added to every chunk in both directions between the clients and the real proxy, under
    the same load. Sends still succeed (slower), both groups keep consuming, nothing is lost (P1, P2), and
    no call outlives its deadline + 1 s: a send ends within request timeout x attempts + backoff + 1 s
    (P3), a receive within its long-poll wait + request timeout + 1 s."""
    names = _fresh(real)

    async def scenario() -> None:
        async with _through_fault_proxy(real) as proxy, _Load(proxy.endpoint, names) as load:
            await asyncio.sleep(3.0)
            fast = [d - i for i, d in _ok_times(load.push_rec)]
            start = load.fault("latency")
            proxy.set_mode(Latency(LATENCY))
            await asyncio.sleep(8.0)
            healed = load.heal("latency")
            proxy.set_mode(PASS)
            await asyncio.sleep(2.0)
            await load.finish()
        slow = [d - i for i, d in _ok_times(load.push_rec) if start + 1 <= i and d <= healed]
        assert slow, "no send succeeded on the slow path"
        # The fault bit: a send over the slow path takes at least one round trip (2 x 200 ms).
        assert statistics.median(slow) >= 2 * LATENCY, statistics.median(slow)
        delivered = [e.t for e in load.simple_rec.snapshot().events if e.kind == "deliver"]
        assert any(start + 1 <= t <= healed for t in delivered), "the simple group stalled on the slow path"
        receive_bound = 2 + REQUEST_TIMEOUT + 1.0
        assert max(load.receive_calls) <= receive_bound, max(load.receive_calls)
        send_bound = REQUEST_TIMEOUT * 3 + 2 * 1.0 + 1.0
        reports = _judge(load, recovery_bound=15.0, call_bound=send_bound)
        _figure(
            "R5 200 ms each way",
            send_median_before=statistics.median(fast),
            send_median_slow=statistics.median(slow),
            send_worst_slow=max(slow),
            receive_worst=max(load.receive_calls),
            sends_ok=reports["push"].sends_ok,
            send_errors=str(load.send_errors),
        )

    run(scenario, timeout=TEST_TIMEOUT - 20)


# R6: a transaction orphaned by its producer, resolved by another producer's checker ---------------------


@pytest.mark.timeout(TEST_TIMEOUT, func_only=True)
def test_r6_orphaned_half_messages_resolved_by_another_producers_checker(real: RocketMQCluster) -> None:
    """R6: a producer sends half messages (one transaction each) and is closed without resolving them: its
    process died as far as the transactions are concerned. Under the usual load, a second producer on the
    same topic, started after the first one is gone, gets the broker's checks (RecoverOrphanedTransaction,
    after `transactionTimeOut` 3 s, every `transactionCheckInterval` 3 s) and commits every orphan; each
    one is then delivered to a consumer exactly once (P1), and nothing else (no rollback delivered). The
    same history also judges the load's normal messages."""
    names = _fresh(real)
    tx_topic = unique("rtx")
    real.create_topic(tx_topic, "TRANSACTION", queues=2)
    tx_group = unique("rtxg")
    real.create_group(tx_group)
    count = 6

    async def scenario() -> None:
        tx_rec = HistoryRecorder()
        asked: dict[str, float] = {}

        def checker(m: thrust.ReceivedMessage) -> thrust.TransactionResolution:
            asked.setdefault(m.message_id, time.monotonic())
            return thrust.TransactionResolution.COMMIT

        async with _Load(real.endpoint, names) as load:
            orphaned = thrust.Producer(
                endpoints=real.endpoint, topics=[tx_topic], request_timeout=REQUEST_TIMEOUT
            )
            await orphaned.start()
            for i in range(count):
                op = tx_rec.invoke(f"tx{i}")
                receipt = await orphaned.transaction().send(
                    thrust.Message(topic=tx_topic, body=body(f"tx{i}"))
                )
                tx_rec.ok(op, receipt.message_id)
            # The producer goes away with every transaction open (no EndTransaction is ever sent).
            await orphaned.close()
            died = load.fault("orphaned")
            async with (
                thrust.Producer(
                    endpoints=real.endpoint,
                    topics=[tx_topic],
                    request_timeout=REQUEST_TIMEOUT,
                    transaction_checker=checker,
                ) as rescuer,
                thrust.SimpleConsumer(
                    endpoints=real.endpoint,
                    group=tx_group,
                    subscriptions={tx_topic: "*"},
                    await_duration=2,
                    request_timeout=REQUEST_TIMEOUT,
                ) as consumer,
            ):
                assert rescuer.client_id
                load.heal("orphaned")
                seen: set[str] = set()
                end = time.monotonic() + 60
                while len(seen) < count and time.monotonic() < end:
                    batch = await consumer.receive(32, INVISIBLE)
                    for m in batch:
                        ref = tx_rec.delivered(pid_of(m), m.message_id, attempt=m.delivery_attempt)
                        seen.add(pid_of(m))
                        await consumer.ack(m)
                        tx_rec.acked(ref)
            await load.finish()
        report = check(tx_rec)
        print(f"[tx] {report.summary}")
        assert_report(report, "P1", "P2")
        assert report.duplicates == 0, report.summary
        assert len(asked) >= count, f"the checker was asked about {len(asked)} of {count} orphans"
        delivered = {e.payload_id: e.t for e in tx_rec.snapshot().events if e.kind == "deliver"}
        _judge(load, recovery_bound=15.0)
        _figure(
            "R6 orphaned transaction",
            first_check_after_death=min(asked.values()) - died,
            last_check_after_death=max(asked.values()) - died,
            all_delivered_after_death=max(delivered.values()) - died,
        )

    run(scenario, timeout=TEST_TIMEOUT - 20)


# R7: a second push consumer joins the group and leaves again -------------------------------------------


@pytest.mark.timeout(TEST_TIMEOUT, func_only=True)
def test_r7_second_push_consumer_joins_and_leaves_nothing_lost(real: RocketMQCluster) -> None:
    """R7: under load, a second PushConsumer joins the push group, takes part of the traffic, and is
    closed again (NotifyClientTermination: the proxy makes what it held visible again after 1 s). The
    group as a whole gets every acknowledged send (P1), the duplicates stay within the window of what was
    in flight when a member joined or left (P2), and the newcomer really consumed while it was in."""
    names = _fresh(real)

    async def scenario() -> None:
        async with _Load(real.endpoint, names) as load:
            await asyncio.sleep(3.0)
            joined = load.fault("join")
            second = thrust.PushConsumer(
                endpoints=real.endpoint,
                group=names.push_group,
                subscriptions={names.topic: "*"},
                listener=lambda m: load.on_push(m, consumer="push2"),
                request_timeout=REQUEST_TIMEOUT,
            )
            await second.start()
            load.heal("join")
            await asyncio.sleep(8.0)
            left = load.fault("leave")
            await second.close()
            load.heal("leave")
            await asyncio.sleep(4.0)
            await load.finish()
        events = load.push_rec.snapshot().events
        by = {"push": 0, "push2": 0}
        for e in events:
            if e.kind == "deliver" and joined <= e.t <= left:
                by[e.actor] += 1
        assert by["push2"] > 0, f"the second consumer got nothing while it was in: {by}"
        assert by["push"] > 0, f"the first consumer got nothing while the second was in: {by}"
        after = [e.t for e in events if e.kind == "deliver" and e.actor == "push" and e.t > left]
        assert after, "the first consumer got nothing after the second left"
        reports = _judge(load, recovery_bound=15.0)
        _figure(
            "R7 rebalance",
            first_delivery_to_newcomer=min(e.t for e in events if e.actor == "push2" and e.kind == "deliver")
            - joined,
            deliveries_while_both=str(by),
            push_duplicates=reports["push"].duplicates,
        )

    run(scenario, timeout=TEST_TIMEOUT - 20)
