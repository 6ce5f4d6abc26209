"""Faults injected by the embedded server's hooks (docs/reliability.md §3): F10-F16, F18 and F22.

Each test records the messages it sends and receives in a `HistoryRecorder` and asserts the checker's
verdicts where the pass criteria are about loss, duplication or order.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import pytest

import thrust
from tests.reliability._util import (
    INDETERMINATE,
    assert_report,
    body,
    drain,
    first_delivery_times,
    pid_of,
    record_delivery,
    run,
    send_recorded,
    until,
)
from tests.support import TIMER_SLACK
from thrust._codec.status import Code
from thrust.reliability.history import HistoryRecorder, check
from thrust.server.config import GroupSpec
from thrust.server.core.model import GroupRetryPolicy
from thrust.server.faults import Faults, Rpc
from thrust.testing import embedded_server

DLQ_RPC = "ForwardMessageToDeadLetterQueue"


def _kill_telemetry(srv: object, client_id: str) -> int:
    """End every server side of the client's Telemetry streams (OK status), as a proxy restart would."""
    sessions = srv.clients.telemetry_sessions(client_id)  # type: ignore[attr-defined]
    for session in sessions:
        session.send(None)
    return len(sessions)


def _push_recorder(
    rec: HistoryRecorder, result: thrust.ConsumeResult = thrust.ConsumeResult.SUCCESS
) -> object:
    lock = threading.Lock()

    def listener(m: thrust.ReceivedMessage) -> thrust.ConsumeResult:
        with lock:
            ref = record_delivery(rec, m, "push")
            # The push consumer acks after SUCCESS; its own stats tell whether the ack went through.
            rec.acked(ref)
        return result

    return listener


# F10 ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("delay", [10.0, 3600.0], ids=["settings-10s", "settings-never"])
def test_f10_slow_or_missing_settings_reply_does_not_block_start(delay: float) -> None:
    """F10: the Settings answer on Telemetry is 10 s late or never comes. With a 1 s request timeout the
    client waits 1 + 3 s (Java's extra wait for the first Settings, docs/protocol.md §4.5), so `start()`
    fails typed (TimeoutError naming the missing answer) within that bound instead of hanging; the failed
    producer is closed, so a send is refused at once with ClientClosedError and reaches no server; close
    is bounded. Once the fault is gone a new producer starts and every OK send is delivered."""

    async def scenario() -> None:
        faults = Faults()
        faults.delay_settings(delay, broker=None)
        rec = HistoryRecorder()
        async with embedded_server(topics=["t"], groups=["g"], faults=faults) as srv:
            ep = srv.endpoints[0]
            started = time.monotonic()
            p = thrust.Producer(endpoints=ep, topics=["t"], request_timeout=1.0)
            with pytest.raises(thrust.TimeoutError) as info:
                await p.start()
            assert "no Settings answer" in info.value.message, info.value
            took = time.monotonic() - started
            # Bound: request timeout + Java's 3 s extra wait for the first Settings + 1 s.
            assert took <= 1.0 + 3.0 + 1.0, f"start took {took:.1f}s with a Settings reply {delay}s late"
            with pytest.raises(thrust.ClientClosedError):
                await p.send(thrust.Message(topic="t", body=body("refused")))
            assert srv.stats.calls["SendMessage"] == 0
            t0 = time.monotonic()
            await p.close()
            assert time.monotonic() - t0 <= 5.0 + 1.0
            srv.faults.clear()
            async with thrust.Producer(endpoints=ep, topics=["t"], request_timeout=1.0) as healed:
                for i in range(3):
                    await send_recorded(rec, healed, thrust.Message(topic="t", body=body(f"s{i}")), f"s{i}")
            async with thrust.SimpleConsumer(
                endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=1, request_timeout=1.0
            ) as c:
                await drain(rec, c, [f"s{i}" for i in range(3)], idle=0.5, budget=15)
        report = check(rec, call_bound=11.0)
        assert report.sends == 3 and report.sends_ok == 3 and report.sends_hung == 0, report.summary
        assert_report(report, "P1", "P2", "P3")

    run(scenario)


# F11 ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_f11_telemetry_aborted_and_reconnect_command_consumption_continues() -> None:
    """F11: the server ends the Telemetry streams every 2 s and sends ReconnectEndpointsCommand: the
    stream is back within 5 s each time, consumption continues, nothing is lost or duplicated."""
    n = 300

    async def scenario() -> None:
        rec = HistoryRecorder()
        async with embedded_server(topics=["t:2"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            consumer = thrust.PushConsumer(
                endpoints=ep, group="g", subscriptions={"t": "*"}, listener=_push_recorder(rec)
            )
            async with thrust.Producer(endpoints=ep, topics=["t"]) as p, consumer:
                await until(lambda: len(consumer.stats().queues) >= 1)
                cid = consumer.client_id
                assert cid is not None
                for cycle in range(4):
                    for i in range(cycle * n // 4, (cycle + 1) * n // 4):
                        await send_recorded(rec, p, thrust.Message(topic="t", body=body(f"m{i}")), f"m{i}")
                    rec.fault_started("telemetry-abort")
                    assert _kill_telemetry(srv, cid) >= 1
                    if cycle % 2:
                        srv.reconnect_endpoints(cid)
                    healed = time.monotonic()
                    await until(lambda: cid in srv.connected_clients(), 5.0)
                    rec.fault_healed("telemetry-abort")
                    assert time.monotonic() - healed <= 5.0
                    # This cycle's messages consumed over the new session before the next abort.
                    done = (cycle + 1) * n // 4
                    await until(
                        lambda: consumer.stats().acked >= done,  # noqa: B023 - awaited here, in this cycle
                        timeout=20,
                        what=f"cycle {cycle} acked",
                    )
                await until(lambda: consumer.stats().acked >= n, timeout=20)
                # Settings (subscriptions) were not duplicated: exactly one subscription on the server.
                settings = srv.client_settings(cid)
                assert settings is not None
                assert [s.topic.name for s in settings.merged.subscription.subscriptions] == ["t"]
                # A negative check, so a fixed span: a duplicate still on the wire or in the client's
                # buffer when the count was reached would be delivered within it.
                await asyncio.sleep(1.0)
        report = check(rec)
        assert_report(report, "P1", "P2", "P4")
        assert report.duplicates == 0, report.summary

    run(scenario)


# F12 ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["entry-internal", "rpc-unavailable", "rpc-dropped"])
def test_f12_ack_failures_are_retried_with_backoff_and_cause_no_redelivery(how: str) -> None:
    """F12: the first acks fail (entry status INTERNAL, whole RPC UNAVAILABLE, or the RPC never answered):
    the push consumer retries them with a backoff (not a tight loop) and, as the retry succeeds before the
    invisible time runs out, nothing is redelivered; P1."""
    n = 40

    async def scenario() -> None:
        faults = Faults()
        if how == "entry-internal":
            faults.fail_ack_entries(Code.INTERNAL_SERVER_ERROR, first_attempts=2)
        elif how == "rpc-unavailable":
            faults.fail_next(Rpc.ACK_MESSAGE, Code.INTERNAL_SERVER_ERROR, 3)
        else:
            faults.drop_next(Rpc.ACK_MESSAGE, 2, process=False)
        rec = HistoryRecorder()
        async with embedded_server(topics=["t:1"], groups=["g"], faults=faults) as srv:
            ep = srv.endpoints[0]
            consumer = thrust.PushConsumer(
                endpoints=ep,
                group="g",
                subscriptions={"t": "*"},
                listener=_push_recorder(rec),
                request_timeout=1.0,
                ack_batch_size=64,
                ack_linger=0.2,
            )
            async with thrust.Producer(endpoints=ep, topics=["t"]) as p:
                for i in range(n):
                    await send_recorded(rec, p, thrust.Message(topic="t", body=body(f"a{i}")), f"a{i}")
            started = time.monotonic()
            async with consumer:
                await until(lambda: consumer.stats().acked >= n, timeout=25)
                took = time.monotonic() - started
                s = consumer.stats()
                # A negative check, so a fixed span: a redelivery under way when the last ack landed
                # would reach the server's delivered count within it.
                await asyncio.sleep(0.5)
            # Not a tight loop: few ack RPCs over the seconds it took (anchor: retried after ~1 s).
            assert s.ack_rpcs <= 4 + 2 * took, (s.ack_rpcs, took)
            assert s.acks_dropped_invalid == s.acks_dropped_expired == 0
            assert srv.stats.entries["ReceiveMessage"] == n, "a message was redelivered"
        report = check(rec)
        assert_report(report, "P1", "P2")
        assert report.duplicates == 0

    run(scenario)


# F13 ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_f13_invalid_receipt_handles_answer_40013_typed_and_not_retried() -> None:
    """F13: ack after expiry, double ack, change-invisible after ack, a garbage handle and a handle of
    another group all answer INVALID_RECEIPT_HANDLE (40013, never 50001); the client raises the typed
    error without retrying; the expired message comes back and its next handle acks OK."""

    async def scenario() -> None:
        rec = HistoryRecorder()
        async with embedded_server(topics=["t:1", "u:1"], groups=["g", "h"]) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.Producer(endpoints=ep, topics=["t", "u"]) as p,
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=1
                ) as c,
                thrust.SimpleConsumer(
                    endpoints=ep, group="h", subscriptions={"t": "*"}, await_duration=1
                ) as h,
            ):
                for pid in ("e", "d", "x"):
                    await send_recorded(rec, p, thrust.Message(topic="t", body=body(pid)), pid)

                async def one_ack_call(coro: object) -> None:
                    calls = dict(srv.stats.calls)
                    with pytest.raises(thrust.InvalidReceiptHandleError) as info:
                        await coro  # type: ignore[misc]
                    assert info.value.code == Code.INVALID_RECEIPT_HANDLE
                    new = {k: v - calls.get(k, 0) for k, v in srv.stats.calls.items() if v != calls.get(k, 0)}
                    assert sum(new.values()) == 1, f"the client retried: {new}"

                got = []
                while len(got) < 3:
                    got += await c.receive(32, 10)
                by = {pid_of(m): m for m in got}
                refs = {pid: record_delivery(rec, m) for pid, m in by.items()}
                # Handle of another group: h's own delivery of "d" is acked with g's handle.
                other = []
                while not other:
                    other = [m for m in await h.receive(32, 30) if pid_of(m) == "d"]
                await one_ack_call(h.ack(by["d"]))
                await h.ack(other[0])
                # Ack after expiry (the hook expires every handle of "e").
                srv.faults.expire_messages(by["e"].message_id)
                await one_ack_call(c.ack(by["e"]))
                rec.ack_failed(refs["e"])
                srv.faults.clear()
                # Double ack, then change-invisible after ack.
                await c.ack(by["d"])
                rec.acked(refs["d"])
                await one_ack_call(c.ack(by["d"]))
                await one_ack_call(c.change_invisible_duration(by["d"], 20))
                # A garbage handle string.
                garbage = by["x"]
                real = garbage.receipt_handle
                object.__setattr__(garbage, "_receipt_handle", "not-a-receipt-handle")
                await one_ack_call(c.ack(garbage))
                object.__setattr__(garbage, "_receipt_handle", real)
                await c.ack(garbage)
                rec.acked(refs["x"])
                # The expired message is delivered again after its invisible time; its new handle works.
                await drain(rec, c, ["e", "d", "x"], budget=20, idle=0.5)
            # The server answered 40013 every time, never an internal error.
            assert srv.stats.injected["AckMessage"] <= 1
        report = check(rec)
        assert_report(report, "P1")
        # "e" came back once because its ack failed; nothing else was redelivered.
        assert report.duplicates <= 1, report.summary

    run(scenario)


# F14 / F15 ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_f14_long_poll_never_answered_returns_within_bound_and_push_repolls() -> None:
    """F14: a ReceiveMessage that the server holds forever: `receive()` returns (typed error or empty)
    within max(await, 5 s) + request_timeout + 1 s (the client never waits less than the 5 s a proxy
    clamps long polls to, docs/protocol.md §6.2); a push consumer's next poll gets the messages and carries
    the hung poll's attempt_id (seen by the server, `Stats.receives`), rotated after the messages came; P1."""

    async def scenario() -> None:
        faults = Faults()
        rec = HistoryRecorder()
        async with embedded_server(topics=["t:1"], groups=["g", "pg"], faults=faults) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.Producer(endpoints=ep, topics=["t"]) as p,
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=5, request_timeout=1.0
                ) as c,
            ):
                faults.drop_next(Rpc.RECEIVE_MESSAGE, 1, process=False)
                started = time.monotonic()
                # The fault bit (the server held this very call) and the client gave up at its own
                # deadline, max(await, 5 s) + request timeout: a TimeoutError, not an empty answer.
                with pytest.raises(thrust.TimeoutError):
                    await c.receive(32, 30)
                assert srv.stats.injected["ReceiveMessage"] == 1
                assert srv.stats.calls["ReceiveMessage"] == 1
                # The P3 bound (docs/reliability.md §1), with room for a loaded machine's loop.
                assert time.monotonic() - started <= 5 + 1.0 + 3.0
                for i in range(20):
                    await send_recorded(rec, p, thrust.Message(topic="t", body=body(f"h{i}")), f"h{i}")
                await drain(rec, c, [f"h{i}" for i in range(20)], idle=0.5, budget=15)
                # The push consumer: its first long polls are never answered.
                push_rec = HistoryRecorder()
                faults.drop_next(Rpc.RECEIVE_MESSAGE, 1, process=False)
                consumer = thrust.PushConsumer(
                    endpoints=ep,
                    group="pg",
                    subscriptions={"t": "*"},
                    listener=_push_recorder(push_rec),
                    request_timeout=1.0,
                )
                async with consumer:
                    # The held poll is abandoned at its deadline (long poll 20 s + request timeout + 5 s,
                    # `push_receive_deadline`) and the queue polled again at once: inside the watchdog's
                    # 3 x (poll + timeout).
                    deadline = consumer.session.settings.push_receive_deadline
                    await until(lambda: consumer.stats().acked >= 20, timeout=deadline + 5)
                # F14 (docs/reliability.md §3): the retry reuses the hung receive's attempt_id (Java
                # AttemptIdIntegrationTest; docs/protocol.md §6.1), so a broker can re-serve the batch
                # it popped for the lost call; the id is rotated once messages arrived.
                polls = [r for r in srv.stats.receives if r.group == "pg"]
                assert len(polls) >= 3, polls
                hung, retry, after = polls[0].attempt_id, polls[1].attempt_id, polls[2].attempt_id
                assert hung is not None and retry == hung, polls[:3]
                assert after is not None and after != hung, polls[:3]
        assert_report(check(rec), "P1", "P2")
        push_report = check(_sends_plus(rec, push_rec))
        assert_report(push_report, "P1", "P2")
        assert push_report.duplicates == 0

    run(scenario)


def _sends_plus(sends: HistoryRecorder, deliveries: HistoryRecorder) -> object:
    from thrust.reliability.history import History

    keep = ("invoke", "ok", "fail", "unknown")
    return History(tuple(e for e in sends.snapshot().events if e.kind in keep) + deliveries.snapshot().events)


@pytest.mark.slow
def test_f15_lost_receive_response_messages_come_back() -> None:
    """F15: the server pops messages and the reply is lost: each message is delivered again within
    invisible_duration + 5 s (or at once when the retry reuses the attempt id); P1."""

    async def scenario() -> None:
        faults = Faults()
        rec = HistoryRecorder()
        async with embedded_server(topics=["t:1"], groups=["g"], faults=faults) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.Producer(endpoints=ep, topics=["t"]) as p,
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=1, request_timeout=1.0
                ) as c,
            ):
                for i in range(10):
                    await send_recorded(rec, p, thrust.Message(topic="t", body=body(f"r{i}")), f"r{i}")
                faults.drop_next(Rpc.RECEIVE_MESSAGE, 1, process=True)
                started = time.monotonic()
                # The reply is lost: the client's deadline ends the call.
                with pytest.raises(thrust.TimeoutError):
                    await c.receive(32, 10)
                assert srv.stats.injected["ReceiveMessage"] == 1
                seen = await drain(rec, c, [f"r{i}" for i in range(10)], budget=25, idle=0.5, invisible=10)
                took = max(first_delivery_times(rec, seen).values()) - started
                assert seen == {f"r{i}" for i in range(10)}
                assert took <= 10 + 5 + 1.0, took
        report = check(rec)
        assert_report(report, "P1", "P2")

    run(scenario)


# F16 ------------------------------------------------------------------------------------------------

_CRASHING_CONSUMER = textwrap.dedent(
    """
    import sys, time
    import thrust.sync
    c = thrust.sync.SimpleConsumer(endpoints=sys.argv[1], group="g", subscriptions={"t": "*"},
                                   await_duration=1)
    held = []
    while len(held) < int(sys.argv[2]):
        held += c.receive(32, 10)
    print("holding", len(held), flush=True)
    time.sleep(3600)
    """
)


@pytest.mark.slow
def test_f16_crashed_consumer_messages_go_to_the_survivor() -> None:
    """F16: a consumer process holding un-acked messages is killed -9; the surviving consumer of the group
    gets them within invisible_duration + 5 s. A graceful close (NotifyClientTermination) hands them over
    within 3 s."""
    n = 10

    async def scenario() -> None:
        rec = HistoryRecorder()
        async with embedded_server(topics=["t:1"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.Producer(endpoints=ep, topics=["t"]) as p,
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=1
                ) as c,
            ):
                for i in range(n):
                    await send_recorded(rec, p, thrust.Message(topic="t", body=body(f"k{i}")), f"k{i}")
                child = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-c",
                    _CRASHING_CONSUMER,
                    ep,
                    str(n),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
                try:
                    assert child.stdout is not None
                    line = await asyncio.wait_for(child.stdout.readline(), 20)
                    assert line.startswith(b"holding"), line
                    rec.fault_started("consumer-kill-9")
                    child.kill()
                    await child.wait()
                    killed = time.monotonic()
                    rec.fault_healed("consumer-kill-9")
                finally:
                    if child.returncode is None:
                        child.kill()
                        await child.wait()
                seen = await drain(rec, c, [f"k{i}" for i in range(n)], budget=25, idle=0.2)
                assert seen == {f"k{i}" for i in range(n)}
                assert max(first_delivery_times(rec, seen).values()) - killed <= 10 + 5 + 1.0

                # Graceful: a push consumer closes while holding messages (its listener is stuck); the
                # session's NotifyClientTermination releases them (proxy: ChangeInvisible 1 s), so the
                # survivor gets them long before their invisible time would have run out.
                for i in range(n):
                    await send_recorded(rec, p, thrust.Message(topic="t", body=body(f"q{i}")), f"q{i}")
                held: list[str] = []

                async def stuck(m: thrust.ReceivedMessage) -> thrust.ConsumeResult:
                    held.append(pid_of(m))
                    record_delivery(rec, m, "leaver")  # never acked: the checker sees the redelivery
                    await asyncio.sleep(60)
                    return thrust.ConsumeResult.SUCCESS

                leaver = thrust.PushConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, listener=stuck, shutdown_grace=0.2
                )
                async with leaver:
                    await until(lambda: len(held) >= n, timeout=10)
                assert srv.stats.calls["NotifyClientTermination"] >= 1
                # Released by the termination: the leaver's messages stay invisible for the server's
                # default 60 s otherwise; a 15 s drain is a generous net below that.
                seen = await drain(rec, c, [f"q{i}" for i in range(n)], budget=15, idle=0.2)
                assert seen == {f"q{i}" for i in range(n)}
                survivor = [
                    e
                    for e in rec.snapshot().events
                    if e.kind == "deliver" and e.actor == "c" and e.payload_id in seen
                ]
                assert {e.attempt for e in survivor} == {2}, survivor  # each the leaver's delivery, released
        # Recovery here is the redelivery bound asserted above (the checker's P4 would time the next
        # send, which this test makes only after draining).
        report = check(rec)
        assert_report(report, "P1", "P2")

    run(scenario)


# F18 ------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_f18_flow_control_backs_off_within_max_attempts_without_spinning() -> None:
    """F18: TOO_MANY_REQUESTS on sends and receives for 10 s: each send makes exactly max_attempts (3)
    calls with the 10 ms and 20 ms backoffs between them, the push consumer's receives back off (far fewer
    calls than a loop without backoff); P1 after."""

    async def scenario() -> None:
        faults = Faults()
        rec = HistoryRecorder()
        async with embedded_server(topics=["t:1"], groups=["g"], faults=faults) as srv:
            ep = srv.endpoints[0]
            consumer = thrust.PushConsumer(
                endpoints=ep, group="g", subscriptions={"t": "*"}, listener=_push_recorder(rec)
            )
            async with thrust.Producer(endpoints=ep, topics=["t"]) as p, consumer:
                await until(lambda: len(consumer.stats().queues) >= 1)
                await send_recorded(rec, p, thrust.Message(topic="t", body=body("pre")), "pre")
                await until(lambda: consumer.stats().acked >= 1)
                faults.fail_fraction(Rpc.SEND_MESSAGE, Code.TOO_MANY_REQUESTS, 1.0)
                faults.fail_fraction(Rpc.RECEIVE_MESSAGE, Code.TOO_MANY_REQUESTS, 1.0)
                rec.fault_started("too-many-requests")
                srv.stats.reset()
                wall0 = time.monotonic()
                sends = 0
                while time.monotonic() - wall0 < 10.0:
                    before = srv.stats.calls["SendMessage"]
                    t0 = time.monotonic()
                    got = await send_recorded(
                        rec, p, thrust.Message(topic="t", body=body(f"f{sends}")), f"f{sends}"
                    )
                    took = time.monotonic() - t0
                    assert got is None
                    # Every attempt refused, each retried after the server's backoff (10 ms, then 20 ms:
                    # docs/protocol.md §4.3), never more than max_attempts.
                    assert srv.stats.calls["SendMessage"] - before == 3, "not exactly max_attempts calls"
                    assert took >= 0.010 + 0.020 - TIMER_SLACK, (
                        f"a refused send took {took:.3f} s: no backoff"
                    )
                    assert took <= 11.0  # the P3 bound (docs/reliability.md §1)
                    sends += 1
                receives = srv.stats.calls["ReceiveMessage"]
                assert srv.stats.injected["SendMessage"] == srv.stats.calls["SendMessage"] == 3 * sends
                faults.clear()
                rec.fault_healed("too-many-requests")
                # Receives back off too: far fewer than one per 20 ms (Java's flow-control backoff per
                # queue); a receive loop without backoff makes thousands of calls in 10 s on the loopback.
                assert receives <= 10.0 / 0.02, receives
                for i in range(20):
                    await send_recorded(
                        rec, p, thrust.Message(topic="t", body=body(f"after{i}")), f"after{i}"
                    )
                await until(lambda: consumer.stats().acked >= 21, timeout=20)
        report = check(rec, recovery_bound=15.0)
        assert report.sends_failed == sends
        assert_report(report, "P1", "P2", "P3", "P4")

    run(scenario)


# F22 ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fifo", [False, True], ids=["normal", "fifo"])
def test_f22_poison_message_dead_lettered_after_exactly_max_attempts(fifo: bool) -> None:
    """F22: a handler that always fails one message: after exactly max_attempts (17) deliveries it sits
    in %DLQ%<group> (FIFO through ForwardMessageToDeadLetterQueue); the other messages are not blocked.
    The FIFO group's order while the poison is being dead-lettered is checked separately (below)."""
    max_attempts = 17

    async def scenario() -> None:
        group = GroupSpec(
            "gp", fifo=fifo, retry=GroupRetryPolicy(max_attempts=max_attempts, customized=(0.02,))
        )
        topic = "pf:1:FIFO" if fifo else "pn:1"
        name = topic.split(":")[0]
        rec = HistoryRecorder()
        attempts: list[int] = []
        lock = threading.Lock()

        local: dict[str, int] = {}
        srv_box: list[Any] = []
        dlq_seen = [False]
        poison_id = [""]

        def listener(m: thrust.ReceivedMessage) -> thrust.ConsumeResult:
            with lock:
                # FIFO failures are retried by the client itself (the server's attempt stays 1); each
                # local retry is one delivery attempt, so the history numbers them 1, 2, 3 ...
                local[m.message_id] = local.get(m.message_id, 0) + 1
                attempt = local[m.message_id] if fifo else m.delivery_attempt
                if dlq_seen and not dlq_seen[0] and srv_box and srv_box[0].stats.entries[DLQ_RPC] >= 1:
                    # The server has it in %DLQ%: from here on the poison no longer blocks its group.
                    dlq_seen[0] = True
                    rec.dead_lettered("poison", poison_id[0], attempt=max_attempts)
                ref = rec.delivered(pid_of(m), m.message_id, group=m.message_group, attempt=attempt)
                if pid_of(m) == "poison":
                    poison_id[:] = [m.message_id]
                if pid_of(m) == "poison":
                    attempts.append(m.delivery_attempt)
                    rec.nacked(ref)
                    return thrust.ConsumeResult.FAILURE
                rec.acked(ref)
                return thrust.ConsumeResult.SUCCESS

        async with embedded_server(topics=[topic], groups=[group, "dlqreader"]) as srv:
            srv_box.append(srv)
            ep = srv.endpoints[0]
            consumer = thrust.PushConsumer(
                endpoints=ep, group="gp", subscriptions={name: "*"}, listener=listener
            )
            async with thrust.Producer(endpoints=ep, topics=[name]) as p, consumer:
                await until(lambda: len(consumer.stats().queues) >= 1)
                for pid in ("before", "poison", "after1", "after2"):
                    await send_recorded(
                        rec,
                        p,
                        thrust.Message(topic=name, body=body(pid), message_group="k" if fifo else None),
                        pid,
                    )
                await until(lambda: len(attempts) >= max_attempts, timeout=30)
                await until(lambda: consumer.stats().acked >= 3, timeout=30)
                # Once the poison is stored in %DLQ% no further attempt of it can come.
                await until(
                    lambda: srv.brokers[0].messages("%DLQ%gp"), timeout=30, what="poison dead-lettered"
                )
            # Exactly max_attempts deliveries (FIFO retries locally: the server attempt stays 1).
            assert len(attempts) == max_attempts, attempts
            if fifo:
                assert srv.stats.calls["ForwardMessageToDeadLetterQueue"] == 1
            async with thrust.SimpleConsumer(
                endpoints=ep, group="dlqreader", subscriptions={"%DLQ%gp": "*"}, await_duration=1
            ) as d:
                dead: list[thrust.ReceivedMessage] = []
                end = time.monotonic() + 10
                while not dead and time.monotonic() < end:
                    dead = await d.receive(32, 30)
                assert [pid_of(m) for m in dead] == ["poison"]
                if not dlq_seen[0]:
                    rec.dead_lettered("poison", dead[0].message_id, attempt=max_attempts)
                await d.ack(dead[0])
        report = check(rec, max_attempts=max_attempts)
        assert_report(report, "P1", "DLQ")

    run(scenario)


@pytest.mark.parametrize(
    "settle",
    ["ack", "dlq"],
)
def test_f22_fifo_group_stays_blocked_until_the_head_is_settled_on_the_server(settle: str) -> None:
    """F22 / L4 order rule: within a FIFO message group, the next message is not delivered while the
    previous one is unsettled (neither acked nor in the DLQ on the server). The settling RPC is made slow
    (300 ms, a loaded broker) so the window is observable; the checker's order verdict (overtakes) must
    hold."""

    async def scenario() -> None:
        faults = Faults()
        rpc = Rpc.ACK_MESSAGE if settle == "ack" else Rpc.FORWARD_MESSAGE_TO_DEAD_LETTER_QUEUE
        faults.add_latency(rpc, 0.3)
        group = GroupSpec("gs", fifo=True, retry=GroupRetryPolicy(max_attempts=2, customized=(0.02,)))
        rec = HistoryRecorder()
        lock = threading.Lock()
        local: dict[str, int] = {}
        settled_seen: dict[str, int] = {}
        box: list[Any] = []

        def listener(m: thrust.ReceivedMessage) -> thrust.ConsumeResult:
            with lock:
                srv = box[0]
                # Record what the server has settled so far, before this delivery (observed, not assumed).
                for pid, mid in list(sent_ids.items()):
                    if pid in settled_seen:
                        continue
                    if settle == "dlq" and pid == "head":
                        if srv.stats.entries[DLQ_RPC] >= 1:
                            settled_seen[pid] = 1
                            rec.dead_lettered(pid, mid, attempt=2)
                    elif pid in acked_refs and srv.stats.entries["AckMessage"] > sum(
                        1 for p in settled_seen if p in acked_refs
                    ):
                        settled_seen[pid] = 1
                        rec.acked(acked_refs[pid])
                local[m.message_id] = local.get(m.message_id, 0) + 1
                ref = rec.delivered(
                    pid_of(m), m.message_id, group=m.message_group, attempt=local[m.message_id]
                )
                if settle == "dlq" and pid_of(m) == "head":
                    rec.nacked(ref)
                    return thrust.ConsumeResult.FAILURE
                acked_refs[pid_of(m)] = ref
                return thrust.ConsumeResult.SUCCESS

        sent_ids: dict[str, str] = {}
        acked_refs: dict[str, int] = {}
        async with embedded_server(topics=["so:1:FIFO"], groups=[group], faults=faults) as srv:
            box.append(srv)
            ep = srv.endpoints[0]
            consumer = thrust.PushConsumer(
                endpoints=ep, group="gs", subscriptions={"so": "*"}, listener=listener
            )
            async with thrust.Producer(endpoints=ep, topics=["so"]) as p:
                for pid in ("head", "next1", "next2"):
                    r = await send_recorded(
                        rec, p, thrust.Message(topic="so", body=body(pid), message_group="k"), pid
                    )
                    assert r is not None
                    sent_ids[pid] = r.message_id
            async with consumer:
                await until(lambda: len(local) >= 3, timeout=15)
                # Every message settled on the server (through the latency): no redelivery can follow.
                if settle == "ack":
                    await until(lambda: srv.stats.entries["AckMessage"] >= 3, timeout=15, what="three acks")
                else:
                    await until(
                        lambda: srv.stats.entries[DLQ_RPC] >= 1 and srv.stats.entries["AckMessage"] >= 2,
                        timeout=15,
                        what="head dead-lettered, the others acked",
                    )
        report = check(rec, require_ack=False)
        assert_report(report, "order")

    run(scenario)


# F3, latency hook (the SIGSTOP half is in test_faults_net.py) --------------------------------------

# As the SIGSTOP half: a 1 s request timeout, so every 2-5 s delay outlasts it and the delayed call fails
# on the client while the server, whose handler is cancelled at the deadline, never processes it.
F3_REQUEST_TIMEOUT = 1.0
F3_INVISIBLE = 10.0
# P3 (docs/reliability.md §1): send <= request timeout x 3 attempts + backoff (<= 1 s per retry) + 1 s.
# Receives and acks are shown bounded by how they end (at their deadline), not by a clock.
F3_SEND_BOUND = F3_REQUEST_TIMEOUT * 3 + 2 * 1.0 + 1.0
F3_RPCS = (Rpc.SEND_MESSAGE, Rpc.RECEIVE_MESSAGE, Rpc.ACK_MESSAGE)


@pytest.mark.slow
def test_f3_slow_broker_delays_10_percent_of_calls_by_2_to_5s_bounded_nothing_lost() -> None:
    """F3 (hook half): 10 % of SendMessage, ReceiveMessage and AckMessage calls are delayed by 2-5 s
    (`Faults.delay_fraction`, seeded) while 6 producers send and a simple consumer receives and acks each
    message. Every send completes within its bound and every receive and ack within theirs (P3); a send
    that timed out on every attempt ends recovered or lost-unacked (allowed: not an OK send); every OK send
    is delivered and nothing unexpected is (P1); a message whose ack was delayed past its deadline comes
    back after its invisible time and is acked then (every delivery ends acked); duplicates stay within
    the at-risk window (P2)."""

    async def scenario() -> None:
        faults = Faults(seed=3)
        for rpc in F3_RPCS:
            faults.delay_fraction(rpc, 0.1, 2.0, 5.0)
        rec = HistoryRecorder()
        # A delayed call fails at its deadline (a TimeoutError), or as a ConnectionError when two such
        # timeouts in a row made the session replace the channel (docs/protocol.md §4.6); a delayed receive
        # may also be refused for the poll time it has left (below); nothing else.
        receive_errors: list[type[BaseException]] = []
        ack_errors: list[type[BaseException]] = []
        acks: set[asyncio.Task[None]] = set()
        stopping = False
        sent_ok = [0]
        async with embedded_server(topics=["t:4"], groups=["g"], faults=faults) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.Producer(endpoints=ep, topics=["t"], request_timeout=F3_REQUEST_TIMEOUT) as p,
                thrust.SimpleConsumer(
                    endpoints=ep,
                    group="g",
                    subscriptions={"t": "*"},
                    await_duration=1,
                    request_timeout=F3_REQUEST_TIMEOUT,
                ) as c,
            ):

                async def produce(name: str) -> None:
                    i = 0
                    while not stopping:
                        pid = f"{name}-{i}"
                        i += 1
                        if await send_recorded(rec, p, thrust.Message(topic="t", body=body(pid)), pid):
                            sent_ok[0] += 1
                        await asyncio.sleep(0.01)  # pacing the load

                async def ack(m: thrust.ReceivedMessage, ref: int) -> None:
                    try:
                        await c.ack(m)
                    except INDETERMINATE as exc:
                        ack_errors.append(type(exc))
                        rec.ack_failed(ref, error=type(exc).__name__)
                    else:
                        rec.acked(ref)

                async def consume() -> None:
                    while not stopping:
                        try:
                            # Small batches: more ReceiveMessage calls meet the 10 % fault.
                            batch = await c.receive(4, F3_INVISIBLE)
                        except INDETERMINATE as exc:
                            receive_errors.append(type(exc))
                            batch = []
                        except thrust.BadRequestError as exc:
                            # A receive delayed 2+ s before the server handles it has less than the 5 s
                            # minimum poll left of its deadline: the proxy's answer to that is
                            # ILLEGAL_POLLING_TIME (docs/protocol.md §6.2); nothing else is expected.
                            assert exc.code == Code.ILLEGAL_POLLING_TIME, exc
                            receive_errors.append(type(exc))
                            batch = []
                        for m in batch:
                            # One AckMessage per message, not awaited here: a slow ack must not hold
                            # back receiving, and many ack calls meet the 10 % fault.
                            task = asyncio.create_task(ack(m, record_delivery(rec, m)))
                            acks.add(task)
                            task.add_done_callback(acks.discard)

                rec.fault_started("slow-10pct")
                producers = [asyncio.create_task(produce(f"p{k}")) for k in range(6)]
                consumers = [asyncio.create_task(consume()) for _ in range(6)]
                # The load runs until the fault has met each RPC and enough sends went through.
                await until(
                    lambda: (
                        sent_ok[0] > 100
                        and all(srv.stats.delayed[rpc.value] > 0 for rpc in F3_RPCS)
                        and thrust.TimeoutError in ack_errors
                    ),
                    timeout=30,
                    what="every RPC delayed, an ack timed out, 100 sends",
                )
                stopping = True
                await asyncio.gather(*producers)
                await asyncio.gather(*consumers)
                await asyncio.gather(*list(acks))
                faults.clear()
                rec.fault_healed("slow-10pct")
                delayed = {rpc.value: srv.stats.delayed[rpc.value] for rpc in F3_RPCS}
                # OK sends not delivered yet, then deliveries whose ack failed: the server never applied
                # those acks (the handler was still in its delay at the deadline), so each message comes
                # back once its invisible time ends and is acked now.
                events = rec.snapshot().events
                invokes = {e.seq: e.payload_id for e in events if e.kind == "invoke"}
                delivered = {e.payload_id for e in events if e.kind == "deliver"}
                missing = [
                    invokes[e.ref] for e in events if e.kind == "ok" and invokes[e.ref] not in delivered
                ]
                acked = {e.ref for e in events if e.kind == "ack"}
                unacked = {e.payload_id for e in events if e.kind == "deliver" and e.seq not in acked}
                unacked -= {e.payload_id for e in events if e.kind == "deliver" and e.seq in acked}
                await drain(
                    rec, c, [*missing, *unacked], budget=F3_INVISIBLE + 6, idle=0.3, invisible=F3_INVISIBLE
                )
        report = check(rec, call_bound=F3_SEND_BOUND, copies_per_send=3)
        assert report.sends_ok > 100, report.summary
        assert all(n > 0 for n in delayed.values()), delayed
        assert report.sends_unknown + report.sends_failed >= report.recovered, report.summary
        assert_report(report, "P1", "P2", "P3")
        # Every receive and ack ended (none hung: the gathers above returned). Each delay (2-5 s) outlasts
        # the 1 s deadline, so the delayed acks failed at their deadline instead of waiting the delay out.
        assert ack_errors and thrust.TimeoutError in ack_errors, (ack_errors, delayed)
        assert set(ack_errors) <= set(INDETERMINATE), ack_errors
        assert set(receive_errors) <= {*INDETERMINATE, thrust.BadRequestError}, receive_errors

    run(scenario)
