"""Session layer against the embedded server: telemetry, slow brokers, close, auth, TLS, redelivery."""

from __future__ import annotations

import asyncio
import time

import pytest

import thrust
from tests.client._util import receive_n, run
from tests.push._util import until
from tests.support import self_signed
from thrust._codec.status import Code
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.server.clock import ManualClock
from thrust.testing import embedded_server


def _kill_streams(srv: object, client_id: str) -> int:
    sessions = srv.clients.telemetry_sessions(client_id)  # type: ignore[attr-defined]
    for session in sessions:
        session.send(None)  # ends the server side of the stream (OK status)
    return len(sessions)


def _only_new_streams(srv: object, client_id: str, killed: list[object]) -> bool:
    """The server registered the client's new stream and dropped the ones `_kill_streams` ended (until
    then a command the server pushes may go to an ended stream and be lost)."""
    sessions = srv.clients.telemetry_sessions(client_id)  # type: ignore[attr-defined]
    return bool(sessions) and not any(s in killed for s in sessions)


def test_invisible_duration_expiry_redelivers_and_old_handle_is_refused() -> None:
    # On a manual clock: the invisible duration runs out when the test moves time past it.
    clock = ManualClock()

    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"], clock=clock) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=5
                ) as c,
                thrust.Producer(endpoints=ep, topics=["t"]) as p,
            ):
                r = await p.send(thrust.Message(topic="t", body=b"x"))
                [first] = await receive_n(c, 1, invisible_duration=10)
                assert first.delivery_attempt == 1
                clock.advance(10.3)
                [again] = await receive_n(c, 1, invisible_duration=10)
                assert again.message_id == r.message_id
                assert again.delivery_attempt == 2
                with pytest.raises(thrust.InvalidReceiptHandleError) as info:
                    await c.ack(first)
                assert info.value.code == Code.INVALID_RECEIPT_HANDLE and not info.value.retriable
                await c.ack(again)

    run(scenario)


def test_change_invisible_duration_keeps_the_new_handle() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=5
                ) as c,
                thrust.Producer(endpoints=ep, topics=["t"]) as p,
            ):
                await p.send(thrust.Message(topic="t", body=b"x"))
                await p.send(thrust.Message(topic="t", body=b"y"))
                a, b = await receive_n(c, 2)
                old = a.receipt_handle
                await a.change_invisible_duration(60)
                assert a.receipt_handle != old
                await a.ack()  # works with the new handle
                srv.faults.expire_messages(b.message_id)
                with pytest.raises(thrust.InvalidReceiptHandleError):
                    await c.ack(b)
                # Short invisibility: the message comes back with the next attempt number.
                srv.faults.clear()
                await c.change_invisible_duration(b, 0.5)
                [b2] = await receive_n(c, 1)
                assert b2.message_id == b.message_id and b2.delivery_attempt == 2
                await b2.ack()

    run(scenario)


def test_telemetry_reestablished_and_server_settings_applied() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            async with thrust.Producer(endpoints=srv.endpoints[0], topics=["t"]) as p:
                session = p.session
                [ep] = session.open_sessions()
                stream = session.telemetry(ep)
                assert stream is not None and stream.opened == 1
                killed = srv.clients.telemetry_sessions(session.client_id)
                answered = session.settings_version
                assert _kill_streams(srv, session.client_id) == 1
                # Re-established, and the new stream's own handshake answer is in: pushed before it, our
                # settings would be overwritten by that answer when it lands after them (1 run in 10).
                await until(
                    lambda: (
                        stream.opened >= 2
                        and _only_new_streams(srv, session.client_id, killed)
                        and session.settings_version > answered
                    ),
                    timeout=40,
                )
                # The server pushes new settings: every field is applied, durations with nanos.
                settings = d.Settings()
                settings.request_timeout.seconds, settings.request_timeout.nanos = 1, 500_000_000
                bp = settings.backoff_policy
                bp.max_attempts = 5
                bp.exponential_backoff.initial.nanos = 20_000_000
                bp.exponential_backoff.max.seconds = 2
                bp.exponential_backoff.multiplier = 3
                settings.publishing.max_body_size = 1024
                settings.publishing.validate_message_type = False
                version = session.settings_version
                assert srv.send_command(
                    session.client_id, s.TelemetryCommand(status=d.Status(code=d.OK), settings=settings)
                )
                await until(
                    lambda: session.settings_version != version and session.settings.request_timeout == 1.5,
                    timeout=40,
                )
                eff = session.settings
                assert eff.request_timeout == 1.5
                assert eff.max_body_size == 1024 and eff.validate_message_type is False
                # The producer keeps its own max_attempts, the backoff comes from the server (Java).
                assert eff.retry_policy.max_attempts == 3
                assert eff.retry_policy.initial_backoff == pytest.approx(0.02)
                assert eff.retry_policy.multiplier == 3
                with pytest.raises(thrust.ValidationError):
                    await p.send(thrust.Message(topic="t", body=b"x" * 2000))
                await p.send(thrust.Message(topic="t", body=b"x" * 1000))

    run(scenario)


def test_telemetry_commands_answered() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv:
            async with thrust.Producer(endpoints=srv.endpoints[0], topics=["t"]) as p:
                cid = p.session.client_id
                reply = await srv.print_thread_stack_trace(cid)
                dump = reply.thread_stack_trace.thread_stack_trace
                assert "MainThread" in dump and "test_client_session.py" in dump
                verify = await srv.verify_message(cid, d.Message())
                assert verify.status.code == Code.NOT_IMPLEMENTED
                [ep] = p.session.open_sessions()
                stream = p.session.telemetry(ep)
                assert stream is not None
                assert srv.reconnect_endpoints(cid) == 1
                await until(lambda: stream.opened >= 2)
                await p.send(thrust.Message(topic="t", body=b"after reconnect"))

    run(scenario)


@pytest.mark.slow
def test_slow_new_broker_does_not_delay_sends_to_a_healthy_one() -> None:
    """Broker 1 holds its Settings answer 10 s (below the 10 + 3 s a client with a 10 s request timeout
    waits for it; a window that wide leaves a loaded machine time to start and send): start returns while
    that answer is still held, and sends go on to broker 0, each finishing before broker 1's session is
    up; then broker 1 gets its share."""

    async def scenario() -> None:
        async with embedded_server(topics=["t"], brokers=2) as srv:
            srv.faults.delay_settings(10.0, broker=1)
            async with thrust.Producer(endpoints=srv.endpoints[0], topics=["t"], request_timeout=10.0) as p:
                session = p.session
                slow = [ep for ep in session.routes.get("t").endpoints if not session.is_ready(ep)]  # type: ignore[union-attr]
                # start did not wait for the slow broker: its Settings answer is still held.
                assert len(slow) == 1, "start waited for the slow broker's Settings answer"
                # The server records the hold when it reads the client's Settings on the stream, which may
                # come just after start returned: wait for that event, then the answer is being held.
                await until(lambda: srv.stats.latency.get((1, "Telemetry")) == 10.0)
                assert not session.is_ready(slow[0])
                done_while_slow = 0
                while not session.is_ready(slow[0]):
                    await p.send(thrust.Message(topic="t", body=b"x"))
                    done_while_slow += not session.is_ready(slow[0])
                    await asyncio.sleep(0.01)
                # Sends completed while the slow broker's session was still opening: none waited for it,
                # and none went to it.
                assert done_while_slow >= 5, done_while_slow
                assert srv.stats.broker_calls[(0, "SendMessage")] >= done_while_slow
                assert srv.stats.broker_calls[(1, "SendMessage")] == 0, srv.stats.broker_calls
                # And once it is up, the slow broker gets its share.
                before = srv.stats.calls["SendMessage"]
                for _ in range(10):
                    await p.send(thrust.Message(topic="t", body=b"y"))
                assert srv.stats.calls["SendMessage"] - before == 10

    run(scenario)


def test_close_under_load_is_bounded_and_leaves_nothing_running() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t", "empty"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            srv.faults.add_latency("SendMessage", 0.05)
            p = thrust.Producer(endpoints=ep, topics=["t"], max_in_flight=64)
            c = thrust.SimpleConsumer(
                endpoints=ep, group="g", subscriptions={"empty": "*"}, await_duration=20
            )
            await p.start()
            await c.start()
            futures = [await p.send_async(thrust.Message(topic="t", body=b"x")) for _ in range(200)]
            polling = asyncio.create_task(c.receive(32))  # a 20 s long poll in flight
            await until(lambda: srv.pending_polls("g") == 1)
            t0 = time.monotonic()
            await asyncio.gather(p.close(timeout=1.0), c.close(timeout=1.0))
            # Close did not wait out the 20 s long poll (a loose net: it is bounded by its 1 s timeout).
            assert time.monotonic() - t0 < 10.0
            # Nothing is left pending: every send settles, the poll ends (without anyone waiting on them).
            await until(lambda: all(f.done() for f in futures) and polling.done(), 5)
            await asyncio.gather(p.close(), c.close())  # idempotent
            results = await asyncio.gather(*futures, return_exceptions=True)
            assert all(isinstance(r, thrust.SendReceipt | thrust.ThrustError) for r in results)
            with pytest.raises((thrust.ClientClosedError, asyncio.CancelledError)):
                await polling
            with pytest.raises(thrust.ClientClosedError):
                await p.send(thrust.Message(topic="t", body=b"x"))

    run(scenario)


def test_close_cancels_a_pending_long_poll_at_once_but_lets_an_ack_in_flight_finish() -> None:
    """A receive long-polling an empty topic ends with ClientClosedError as soon as close begins; an ack in
    flight (held 1 s by the server) still completes, and close waits for it, not for the poll."""

    async def scenario() -> None:
        async with embedded_server(topics=["t", "empty"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            events: list[str] = []
            async with thrust.Producer(endpoints=ep, topics=["t"]) as p:
                await p.send(thrust.Message(topic="t", body=b"x"))
            c = thrust.SimpleConsumer(
                endpoints=ep, group="g", subscriptions={"t": "*", "empty": "*"}, await_duration=30
            )
            await c.start()
            (msg,) = await receive_n(c, 1)

            async def poll() -> None:
                try:
                    await c.receive(32)
                except thrust.ClientClosedError:
                    events.append("receive: ClientClosedError")

            async def ack() -> None:
                await c.ack(msg)
                events.append("ack: done")

            srv.faults.add_latency("AckMessage", 1.0)
            receives = srv.stats.calls["ReceiveMessage"]
            polling = asyncio.create_task(poll())  # nothing left to receive: a 30 s long poll
            acking = asyncio.create_task(ack())
            await until(lambda: srv.stats.calls["ReceiveMessage"] > receives)
            await until(lambda: srv.stats.calls["AckMessage"] == 1)
            t0 = time.monotonic()
            await c.close(timeout=20)
            closed_after = time.monotonic() - t0
            # Close returned after the server had handled the ack (held 1 s before it is handled).
            assert srv.stats.entries["AckMessage"] == 1
            await asyncio.gather(polling, acking)
            # The poll ended first, the ack (1 s on the server) after it, and close waited for the ack.
            assert events == ["receive: ClientClosedError", "ack: done"]
            # Only a fail-safe: before, close waited out the poll up to its own bound (20 s here).
            assert closed_after < 10.0

    run(scenario)


def test_credentials_accepted_and_refused() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], credentials={"ak": "sk"}) as srv:
            ep = srv.endpoints[0]
            good = thrust.Credentials(access_key="ak", secret_key="sk", session_token="t0ken")
            assert "secret_key=***" in repr(good) and "t0ken" not in repr(good)
            async with thrust.Producer(endpoints=ep, topics=["t"], credentials=good) as p:
                await p.send(thrust.Message(topic="t", body=b"x"))
            bad = thrust.Credentials(access_key="ak", secret_key="wrong")
            with pytest.raises(thrust.UnauthorizedError):
                async with thrust.Producer(endpoints=ep, topics=["t"], credentials=bad):
                    pass
            with pytest.raises(thrust.UnauthorizedError):
                async with thrust.Producer(endpoints=ep, topics=["t"]):
                    pass

    run(scenario)


def test_tls_with_a_self_signed_certificate(tmp_path: object) -> None:
    cert, key = self_signed("thrust-test", dns=["thrust.test"], ca=True)
    ca_file = f"{tmp_path}/ca.pem"
    with open(ca_file, "wb") as f:
        f.write(cert)

    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"], tls_cert=cert, tls_key=key) as srv:
            ep = srv.endpoints[0]
            tls = thrust.TlsConfig(ca_file=ca_file, server_name="thrust.test")
            async with (
                thrust.Producer(endpoints=ep, topics=["t"], tls=tls) as p,
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, tls=tls, await_duration=5
                ) as c,
            ):
                await p.send(thrust.Message(topic="t", body=b"secret"))
                [m] = await receive_n(c, 1)
                assert m.body == b"secret"
                await m.ack()
            # Plaintext against a TLS port fails with a typed error, never hangs: the server closes the
            # socket at the first plaintext byte, a transport failure (UNAVAILABLE), not a timeout.
            with pytest.raises(thrust.ConnectionError) as info:
                async with thrust.Producer(endpoints=ep, topics=["t"], request_timeout=10.0):
                    pass
            assert "UNAVAILABLE" in str(info.value) and info.value.retriable

    run(scenario)
