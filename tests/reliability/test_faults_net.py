"""Process and network faults (docs/reliability.md §3): F1-F3 against `thrust serve` in a subprocess (kill -9,
SIGTERM, SIGSTOP/SIGCONT) and F4-F6 through the in-process TCP FaultProxy (reset, blackhole, refuse).

A producer sends continuously and a simple consumer consumes continuously while the fault is applied;
everything goes into a `HistoryRecorder`, and the checker's verdicts are asserted at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import pytest

import thrust
from tests.reliability._util import assert_report, body, drain, record_delivery, run, send_recorded
from tests.support import until
from thrust.reliability.history import HistoryRecorder, Report, check
from thrust.reliability.proxy import PASS, Blackhole, FaultProxy, Refuse
from thrust.testing import ServerProcess, embedded_server

REQUEST_TIMEOUT = 1.0
INVISIBLE = 10.0  # the minimum: messages of a lost receive reply come back soon
# P3 bound of one send: request timeout x 3 attempts + backoff (<= 1 s per retry) + 1 s slack.
SEND_BOUND = REQUEST_TIMEOUT * 3 + 2 * 1.0 + 1.0


class _Load:
    """A producer sending every `interval` and a simple consumer acking everything, both recording."""

    def __init__(self, rec: HistoryRecorder, endpoint: str, topic: str = "t", group: str = "g") -> None:
        self.rec = rec
        self.topic = topic
        self.producer = thrust.Producer(endpoints=endpoint, topics=[topic], request_timeout=REQUEST_TIMEOUT)
        self.consumer = thrust.SimpleConsumer(
            endpoints=endpoint,
            group=group,
            subscriptions={topic: "*"},
            await_duration=1,
            request_timeout=REQUEST_TIMEOUT,
        )
        self.sent: list[str] = []
        self.acked = 0
        self.stopping = False
        self.tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> _Load:
        await self.producer.start()
        await self.consumer.start()
        self.tasks = [asyncio.create_task(self._produce()), asyncio.create_task(self._consume())]
        return self

    async def _produce(self) -> None:
        i = 0
        while not self.stopping:
            pid = f"m{i}"
            i += 1
            self.sent.append(pid)
            await send_recorded(
                self.rec, self.producer, thrust.Message(topic=self.topic, body=body(pid)), pid
            )
            await asyncio.sleep(0.01)

    async def _consume(self) -> None:
        while not self.stopping:
            try:
                batch = await self.consumer.receive(32, INVISIBLE)
            except thrust.ThrustError:
                await asyncio.sleep(0.1)
                continue
            refs = [record_delivery(self.rec, m) for m in batch]
            errors = await self.consumer.ack_many(batch)
            for ref, err in zip(refs, errors, strict=True):
                if err is None:
                    self.rec.acked(ref)
                    self.acked += 1
                else:
                    self.rec.ack_failed(ref, error=type(err).__name__)

    async def flowing(self, more: int = 60) -> None:
        """Wait until `more` further messages were sent, received and acked: the load runs (before a
        fault) or runs again (after a heal). An event to wait for, where a fixed sleep would only hope;
        60 keeps the volume the tests assert (more than 100 sends in all) at two such waits."""
        start = self.acked
        await until(lambda: self.acked >= start + more, what=f"{more} more acked messages")

    async def finish(self, drain_budget: float = 25.0) -> None:
        """Stop sending, let the background consumer finish its last receive and acks, then drain until
        every acked send arrived: a receive whose reply was lost (a reset, a deadline) leaves its
        messages invisible for INVISIBLE seconds, after which they must come back."""
        self.stopping = True
        await self.tasks[0]
        await asyncio.wait_for(self.tasks[1], 15.0)
        events = self.rec.snapshot().events
        invokes = {e.seq: e.payload_id for e in events if e.kind == "invoke"}
        delivered = {e.payload_id for e in events if e.kind == "deliver"}
        missing = [invokes[e.ref] for e in events if e.kind == "ok" and invokes[e.ref] not in delivered]
        await drain(self.rec, self.consumer, missing, budget=drain_budget, idle=1.0, invisible=INVISIBLE)
        # An ack whose reply a fault swallowed has an unknown outcome. Wait one invisible time: if the
        # server did not apply it the message comes back and is acked now; if it never comes back, the
        # server had applied it. Checks then use require_ack=False (P1 is lost = 0, unexpected = 0).
        events = self.rec.snapshot().events
        ack_ok = {e.ref for e in events if e.kind == "ack"}
        unsure = {e.payload_id for e in events if e.kind == "deliver" and e.seq not in ack_ok}
        unsure -= {e.payload_id for e in events if e.kind == "deliver" and e.seq in ack_ok}
        if unsure:
            await drain(self.rec, self.consumer, [], budget=INVISIBLE + 3.0, idle=INVISIBLE + 2.0)

    async def __aexit__(self, *exc: object) -> None:
        self.stopping = True
        for t in self.tasks:
            t.cancel()
        for t in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, thrust.ThrustError):
                await t
        await self.producer.close()
        await self.consumer.close()


async def _faulted(
    rec: HistoryRecorder,
    load: _Load,
    name: str,
    inject: Callable[[], Awaitable[None]],
    heal: Callable[[], Awaitable[None]],
    *,
    hold: float,
) -> None:
    rec.fault_started(name)
    await inject()
    await asyncio.sleep(hold)
    await heal()
    rec.fault_healed(name)


def _lost_only_to_the_memory_store(report: Report, rec: HistoryRecorder) -> None:
    """The in-memory server forgets everything on a restart: a lost payload is allowed only when its
    send was acked before a restart completed (by the instance that died) and it was not consumed."""
    events = rec.snapshot().events
    # A send acked before a restart finished was acked by the instance that died (the kill follows the
    # fault mark by a few ms, so a send can still be acked by the old server after the mark).
    faults = [e.t for e in events if e.kind == "heal"]
    ok_at: dict[str, float] = {}
    invokes = {e.seq: e for e in events if e.kind == "invoke"}
    for e in events:
        if e.kind == "ok":
            ok_at.setdefault(invokes[e.ref].payload_id, e.t)
    assert report.unexpected == 0, report.summary
    for pid in report.lost_examples:
        assert any(ok_at[pid] <= f for f in faults), f"{pid} was acked after every restart and lost"


# F1 / F2 / F3: the server process ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kill", [True, False], ids=["F1-kill-9", "F2-sigterm"])
def test_f1_f2_server_killed_or_terminated_and_restarted_under_load(kill: bool) -> None:
    """F1 (kill -9, 3 cycles) / F2 (SIGTERM) against the in-memory server, which loses its state by
    design: every call returns within its bound (P3), sends and consumption resume within 15 s of each
    restart (P4), nothing unexpected is delivered, and only messages the dead server held are lost."""

    async def scenario() -> None:
        rec = HistoryRecorder()
        with ServerProcess(["--topic", "t:4", "--group", "g"]) as proc:
            async with _Load(rec, proc.endpoints[0]) as load:
                await load.flowing()
                for _ in range(3 if kill else 2):

                    async def restart() -> None:
                        await asyncio.to_thread(proc.restart, kill=kill)

                    async def nothing() -> None:
                        return None

                    await _faulted(rec, load, "kill-9" if kill else "sigterm", restart, nothing, hold=0.0)
                    await load.flowing()
                # Messages the dead server held never come back: wait one invisible time, not more.
                await load.finish(drain_budget=INVISIBLE + 3.0)
        report = check(rec, require_ack=False, call_bound=SEND_BOUND, recovery_bound=15.0)
        assert report.sends_ok > 100, report.summary
        assert_report(report, "P3", "P4")
        _lost_only_to_the_memory_store(report, rec)

    run(scenario, timeout=58)


@pytest.mark.slow
def test_f3_server_paused_10s_then_resumed_nothing_lost() -> None:
    """F3: SIGSTOP for 10 s then SIGCONT (a GC-like pause, state kept): calls time out within their bound
    (P3), sends that timed out end up recovered or lost-unacked (allowed), every acked send is consumed
    (P1), duplicates stay within the at-risk window (P2), and traffic resumes within 15 s (P4)."""

    async def scenario() -> None:
        rec = HistoryRecorder()
        with ServerProcess(["--topic", "t:4", "--group", "g"]) as proc:
            async with _Load(rec, proc.endpoints[0]) as load:
                await load.flowing()

                async def stop() -> None:
                    proc.stop()

                async def cont() -> None:
                    proc.cont()

                await _faulted(rec, load, "sigstop", stop, cont, hold=10.0)
                await load.flowing()
                await load.finish(drain_budget=25)
        report = check(rec, require_ack=False, call_bound=SEND_BOUND, recovery_bound=15.0, copies_per_send=3)
        assert report.sends_ok > 100, report.summary
        assert_report(report, "P1", "P2", "P3", "P4")

    run(scenario, timeout=58)


def _established_to(host: str, port: int) -> int:
    """ESTABLISHED TCP sockets of this host whose remote end is host:port (from /proc/net/tcp)."""
    a, b, c, d = (int(x) for x in host.split("."))
    remote = f"{d:02X}{c:02X}{b:02X}{a:02X}:{port:04X}"
    with open("/proc/net/tcp") as f:
        rows = [line.split() for line in f.readlines()[1:]]
    return sum(1 for r in rows if r[2] == remote and r[3] == "01")


# F4 / F5 / F6: the network, through the fault proxy ---------------------------------------------------


@contextlib.asynccontextmanager
async def _proxied() -> object:  # type: ignore[misc]
    """Embedded server plus a FaultProxy on 127.0.0.2 with the server's port, so the routes the server
    hands out (the dialled host, the broker's port) lead through the proxy too."""
    async with embedded_server(topics=["t:4"], groups=["g"]) as srv:
        port = srv.ports[0]
        async with FaultProxy(target=("127.0.0.1", port), host="127.0.0.2", port=port) as proxy:
            yield srv, proxy, f"127.0.0.2:{port}"


@pytest.mark.slow
def test_f4_connection_reset_mid_call_sends_retried_or_unknown_nothing_lost() -> None:
    """F4: every live connection is reset (RST both ways) three times under load: in-flight sends are
    retried or reported unknown, the client reconnects within 5 s, P1/P2/P3/P4."""

    async def scenario() -> None:
        rec = HistoryRecorder()
        async with _proxied() as (_srv, proxy, ep):  # type: ignore[misc]
            async with _Load(rec, ep) as load:
                await load.flowing()
                for _ in range(3):
                    rec.fault_started("reset")
                    assert proxy.reset_connections() >= 1
                    rec.fault_healed("reset")
                    await load.flowing()
                await load.finish()
        report = check(rec, require_ack=False, call_bound=SEND_BOUND, recovery_bound=5.0, copies_per_send=3)
        assert report.sends_ok > 100, report.summary
        assert_report(report, "P1", "P2", "P3", "P4")

    run(scenario)


@pytest.mark.slow
def test_f5_half_open_connection_detected_and_replaced() -> None:
    """F5: the live connections turn into a black hole (no FIN/RST); the network heals for new
    connections only. Sends fail within their bound, a new connection carries a send within 30 s, the
    old one is closed by the client (the proxy sees it go), and P1/P2 hold."""

    async def scenario() -> None:
        rec = HistoryRecorder()
        async with _proxied() as (_srv, proxy, ep):  # type: ignore[misc]
            async with _Load(rec, ep) as load:
                await load.flowing()
                before = proxy.stats().accepted
                rec.fault_started("blackhole")
                proxy.set_mode(Blackhole())
                await asyncio.sleep(4.0)
                proxy.set_mode(PASS, scope="new")
                rec.fault_healed("blackhole")
                healed = time.monotonic()
                ok_before = load.rec.snapshot().events
                n_ok = sum(1 for e in ok_before if e.kind == "ok")
                while sum(1 for e in load.rec.snapshot().events if e.kind == "ok") == n_ok:
                    assert time.monotonic() - healed < 30.0, "no send succeeded within 30 s of the heal"
                    await asyncio.sleep(0.1)
                assert proxy.stats().accepted > before
                await load.flowing()
                await load.finish()
                # The black-holed connections were given up by the client, not kept open for ever: only
                # the producer's and the consumer's current connections are still established.
                port = int(ep.rsplit(":", 1)[1])
                assert _established_to("127.0.0.2", port) <= 2, proxy.stats()
        report = check(rec, require_ack=False, call_bound=SEND_BOUND, recovery_bound=30.0, copies_per_send=3)
        assert_report(report, "P1", "P2", "P3", "P4")

    run(scenario)


@pytest.mark.slow
def test_f6_partition_refused_sends_fail_fast_start_fails_bounded_then_recovers() -> None:
    """F6 (scaled from 30 s to 8 s): connections refused. Sends fail within their bound and never hang;
    a client started inside the partition fails within its bound; after the heal P4 and P1 hold."""

    async def scenario() -> None:
        rec = HistoryRecorder()
        async with _proxied() as (_srv, proxy, ep):  # type: ignore[misc]
            async with _Load(rec, ep) as load:
                await load.flowing()
                rec.fault_started("partition")
                proxy.set_mode(Refuse())
                started = time.monotonic()
                # Refused connections: a transport failure (UNAVAILABLE), not a timeout.
                with pytest.raises(thrust.ConnectionError) as info:
                    async with thrust.Producer(endpoints=ep, topics=["t"], request_timeout=REQUEST_TIMEOUT):
                        pass
                assert "UNAVAILABLE" in str(info.value), info.value
                # start(): route query (3 attempts) plus the Settings wait, each bounded.
                assert time.monotonic() - started <= REQUEST_TIMEOUT * 3 + 3.0 + 1.0
                await asyncio.sleep(max(0.0, 8.0 - (time.monotonic() - started)))
                proxy.set_mode(PASS)
                rec.fault_healed("partition")
                await load.flowing()
                await load.finish()
        report = check(rec, require_ack=False, call_bound=SEND_BOUND, recovery_bound=15.0, copies_per_send=3)
        assert report.sends_failed + report.sends_unknown > 0, "the partition did not bite"
        assert_report(report, "P1", "P2", "P3", "P4")

    run(scenario)
