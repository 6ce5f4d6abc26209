"""Fault injection (thrust.server.faults) seen over real gRPC, and the call counters."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest

from tests.server._wire import Wire, handles, message, run
from tests.support import TIMER_SLACK
from thrust._codec.status import Code
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.server.faults import RECENT_RECEIVES, Faults, Rpc, apply_fault_flag
from thrust.testing import embedded_server


def test_latency_per_rpc_kind() -> None:
    async def scenario() -> None:
        faults = Faults()
        faults.add_latency(Rpc.SEND_MESSAGE, 0.3)
        async with embedded_server(topics=["t"], faults=faults) as srv, Wire(srv.endpoints[0]) as w:
            await w.route("t")
            # The route was answered without the SendMessage latency: the server added none to it.
            assert srv.stats.calls["QueryRoute"] == 1
            assert not srv.stats.latency, srv.stats.latency
            started = time.monotonic()
            await w.send_ok("t")
            assert time.monotonic() - started >= 0.3 - TIMER_SLACK
            assert srv.stats.latency == {(0, "SendMessage"): 0.3}

    run(scenario())


def test_fail_next_n_calls_then_recover() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv, Wire(srv.endpoints[0]) as w:
            srv.faults.fail_next("SendMessage", Code.TOO_MANY_REQUESTS, 2)
            codes = [(await w.send(message("t"))).status.code for _ in range(3)]
            assert codes == [Code.TOO_MANY_REQUESTS, Code.TOO_MANY_REQUESTS, Code.OK]
            assert srv.stats.calls["SendMessage"] == 3
            assert srv.stats.injected["SendMessage"] == 2
            assert srv.stats.entries["SendMessage"] == 1
            # Streams carry the injected status then delivery_timestamp.
            srv.faults.fail_next(Rpc.RECEIVE_MESSAGE, "INTERNAL_SERVER_ERROR")
            stream = await w.receive("g", "t")
            assert [r.WhichOneof("content") for r in stream] == ["status", "delivery_timestamp"]
            assert stream[0].status.code == Code.INTERNAL_SERVER_ERROR

    run(scenario())


def test_fail_fraction_is_seeded() -> None:
    async def outcome(seed: int) -> list[int]:
        faults = Faults(seed=seed)
        faults.fail_fraction(Rpc.QUERY_ROUTE, Code.TOO_MANY_REQUESTS, 0.5)
        async with embedded_server(topics=["t"], faults=faults) as srv, Wire(srv.endpoints[0]) as w:
            return [(await w.route("t")).status.code for _ in range(20)]

    first, second = run(outcome(3)), run(outcome(3))
    assert first == second
    assert 0 < first.count(Code.TOO_MANY_REQUESTS) < 20


def test_dropped_response_is_held_until_the_deadline_but_processed() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv, Wire(srv.endpoints[0]) as w:
            srv.faults.drop_next(Rpc.SEND_MESSAGE)
            started = time.monotonic()
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await w.stub.SendMessage(
                    s.SendMessageRequest(messages=[message("t")]), metadata=w.md, timeout=0.5
                )
            assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            assert time.monotonic() - started >= 0.5 - TIMER_SLACK  # the call's deadline
            # The request was handled: the message is stored although the producer saw a timeout.
            assert len(srv.brokers[0].messages("t")) == 1
            assert (await w.send(message("t"))).status.code == Code.OK

    run(scenario())


def test_settings_reply_delayed_on_one_broker_only() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], brokers=2) as srv:
            srv.faults.delay_settings(0.6, broker=1)
            settings = d.Settings(client_type=d.ClientType.PRODUCER, publishing=d.Publishing())
            async with Wire(srv.endpoints[0]) as w0, Wire(srv.endpoints[1]) as w1:
                _, reply = await w0.handshake(settings)
                assert reply.status.code == Code.OK
                # Broker 0 answered without holding its reply.
                assert srv.stats.calls["Telemetry"] == 1 and not srv.stats.latency, srv.stats.latency
                started = time.monotonic()
                _, reply = await w1.handshake(settings)
                assert time.monotonic() - started >= 0.6 - TIMER_SLACK
                assert reply.status.code == Code.OK
                assert srv.stats.latency == {(1, "Telemetry"): 0.6}

    run(scenario())


def test_expired_receipt_handles() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv, Wire(srv.endpoints[0]) as w:
            await w.consumer("g", "t")
            await w.send_ok("t", 3)
            entries = handles(await w.receive("g", "t"))
            srv.faults.expire_receipt_handles(entries[0][1])
            srv.faults.expire_messages(entries[1][0])
            response = await w.ack("g", "t", entries)
            assert [e.status.code for e in response.entries] == [
                Code.INVALID_RECEIPT_HANDLE,
                Code.INVALID_RECEIPT_HANDLE,
                Code.OK,
            ]
            change = await w.change_invisible("g", "t", entries[0][0], entries[0][1], 1)
            assert change.status.code == Code.INVALID_RECEIPT_HANDLE

    run(scenario())


def test_first_ack_attempt_of_each_message_fails() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv, Wire(srv.endpoints[0]) as w:
            srv.faults.fail_ack_entries(Code.INTERNAL_SERVER_ERROR, first_attempts=1)
            await w.consumer("g", "t")
            await w.send_ok("t", 4)
            entries = handles(await w.receive("g", "t"))
            first = await w.ack("g", "t", entries[:2])
            assert first.status.code == Code.INTERNAL_SERVER_ERROR
            mixed = await w.ack("g", "t", entries)
            assert mixed.status.code == Code.MULTIPLE_RESULTS
            assert [e.status.code for e in mixed.entries] == [Code.OK, Code.OK] + [
                Code.INTERNAL_SERVER_ERROR
            ] * 2
            final = await w.ack("g", "t", entries[2:])
            assert final.status.code == Code.OK
            assert srv.stats.calls["AckMessage"] == 3
            assert srv.stats.entries["AckMessage"] == 4
            assert srv.brokers[0].inflight("g", "t") == 0

    run(scenario())


def test_fault_flags_parse() -> None:
    faults = Faults()
    apply_fault_flag(faults, "latency", "SendMessage:0.5")
    apply_fault_flag(faults, "fail", "ack_message:TOO_MANY_REQUESTS:2")
    apply_fault_flag(faults, "fail-fraction", "ReceiveMessage:50001:0.25")
    apply_fault_flag(faults, "drop", "QueryRoute:1")
    apply_fault_flag(faults, "settings-delay", "2:1")
    apply_fault_flag(faults, "ack-entry", "INTERNAL_SERVER_ERROR:1")
    action = faults.on_call("AckMessage", 0)
    assert action is not None and action.code == Code.TOO_MANY_REQUESTS
    send = faults.on_call("SendMessage", 0)
    assert send is not None and send.latency == 0.5 and send.code is None
    assert faults.settings_delay(1) == 2.0 and faults.settings_delay(0) == 0.0
    for bad in [("latency", "Nope:1"), ("fail", "SendMessage:NOT_A_CODE"), ("drop", "SendMessage:x")]:
        with pytest.raises(ValueError):
            apply_fault_flag(faults, *bad)


def test_stats_count_per_broker_and_reset() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], brokers=2) as srv:
            async with Wire(srv.endpoints[1]) as w:
                await asyncio.gather(*(w.route("t") for _ in range(3)))
            assert srv.stats.calls["QueryRoute"] == 3
            assert srv.stats.broker_calls[(1, "QueryRoute")] == 3
            srv.stats.reset()
            assert srv.stats.calls["QueryRoute"] == 0

    run(scenario())


def test_dropped_telemetry_never_answers_settings() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv, Wire(srv.endpoints[0]) as w:
            srv.faults.drop_next(Rpc.TELEMETRY)
            settings = d.Settings(client_type=d.ClientType.PRODUCER, publishing=d.Publishing())
            with pytest.raises(TimeoutError):
                call = w.open_telemetry()
                await call.write(s.TelemetryCommand(settings=settings))
                await asyncio.wait_for(call.read(), 0.5)
            _, reply = await w.handshake(settings)
            assert reply.status.code == Code.OK

    run(scenario())


def test_delay_fraction_is_seeded_bounded_and_per_rpc() -> None:
    """F3's hook (docs/reliability.md §3): a seeded fraction of the calls of one RPC gets a random delay in
    [low, high]."""

    def latencies(seed: int) -> list[float]:
        faults = Faults(seed=seed)
        faults.delay_fraction(Rpc.SEND_MESSAGE, 0.25, 2.0, 5.0)
        out = []
        for _ in range(400):
            action = faults.on_call("SendMessage", 0)
            out.append(action.latency if action is not None else 0.0)
            assert action is None or (action.code is None and not action.drop)
        assert faults.on_call("AckMessage", 0) is None  # other RPCs untouched
        assert faults.stats.delayed["SendMessage"] == sum(1 for x in out if x > 0)
        return out

    first = latencies(7)
    assert first == latencies(7)  # reproducible
    delayed = [x for x in first if x > 0]
    assert 60 <= len(delayed) <= 140  # ~25 % of 400
    assert all(2.0 <= x <= 5.0 for x in delayed)
    assert max(delayed) - min(delayed) > 2.0  # spread over the range, not a fixed latency


def test_delay_fraction_adds_to_latency_per_broker_and_is_removable() -> None:
    faults = Faults()
    faults.add_latency(Rpc.RECEIVE_MESSAGE, 0.5)
    faults.delay_fraction(Rpc.RECEIVE_MESSAGE, 1.0, 1.0, 1.0, broker=1)
    on_0 = faults.on_call("ReceiveMessage", 0)
    on_1 = faults.on_call("ReceiveMessage", 1)
    assert on_0 is not None and on_0.latency == 0.5
    assert on_1 is not None and on_1.latency == 1.5
    faults.delay_fraction(Rpc.RECEIVE_MESSAGE, 0.0, 1.0, broker=1)  # removed
    on_1 = faults.on_call("ReceiveMessage", 1)
    assert on_1 is not None and on_1.latency == 0.5
    # Every second of it is counted where it was added; an injected failure's latency too.
    faults.fail_next(Rpc.RECEIVE_MESSAGE, Code.INTERNAL_SERVER_ERROR)
    failed = faults.on_call("ReceiveMessage", 0)
    assert failed is not None and failed.code == Code.INTERNAL_SERVER_ERROR and failed.latency == 0.5
    assert faults.on_call("SendMessage", 0) is None
    assert faults.stats.latency == {(0, "ReceiveMessage"): 1.0, (1, "ReceiveMessage"): 2.0}
    faults.delay_settings(2.0, broker=1)
    assert faults.settings_delay(0) == 0.0 and faults.settings_delay(1) == 2.0
    assert faults.stats.latency.get((1, "Telemetry")) == 2.0 and (0, "Telemetry") not in faults.stats.latency
    faults.stats.reset()
    assert not faults.stats.latency
    faults.delay_fraction(Rpc.RECEIVE_MESSAGE, 1.0, 1.0)
    faults.clear()
    assert not faults.active and faults.on_call("ReceiveMessage", 1) is None
    for bad in [(1.5, 1.0, 2.0), (0.1, 3.0, 2.0), (0.1, -1.0, 1.0), (0.1, 1.0, float("inf"))]:
        with pytest.raises(ValueError):
            faults.delay_fraction(Rpc.SEND_MESSAGE, *bad)


def test_delay_fraction_over_grpc_and_as_a_flag() -> None:
    faults = Faults()
    apply_fault_flag(faults, "delay-fraction", "SendMessage:1:0.2:0.3")
    with pytest.raises(ValueError):
        apply_fault_flag(faults, "delay-fraction", "SendMessage:0.1:2")

    async def scenario() -> None:
        async with embedded_server(topics=["t"], faults=faults) as srv, Wire(srv.endpoints[0]) as w:
            started = time.monotonic()
            await w.send_ok("t")
            assert time.monotonic() - started >= 0.2 - TIMER_SLACK
            assert srv.stats.delayed["SendMessage"] == 1
            # The one delay drawn lies within [0.2, 0.3] s.
            [(key, added)] = srv.stats.latency.items()
            assert key == (0, "SendMessage") and 0.2 <= added <= 0.3, srv.stats.latency

    run(scenario())
    broker_only = Faults()
    apply_fault_flag(broker_only, "delay-fraction", "ack_message:1:1:1:2")
    assert broker_only.on_call("AckMessage", 0) is None
    action = broker_only.on_call("AckMessage", 2)
    assert action is not None and action.latency == 1.0


def test_receive_attempt_ids_are_recorded_bounded() -> None:
    """F14 (docs/reliability.md §3) needs to see the attempt id of each ReceiveMessage, hung or not."""

    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv, Wire(srv.endpoints[0]) as w:
            srv.faults.fail_next(Rpc.RECEIVE_MESSAGE, Code.INTERNAL_SERVER_ERROR)
            await w.receive("g", "t", attempt_id="attempt-1")  # answered with the injected failure
            await w.send_ok("t")  # so that the retry returns at once
            await w.receive("g", "t", attempt_id="attempt-1", polling=5)
            await w.receive("nope!", "t", polling=5)  # invalid group: still recorded
            assert [(r.group, r.topic, r.attempt_id) for r in srv.stats.receives] == [
                ("g", "t", "attempt-1"),
                ("g", "t", "attempt-1"),
                ("nope!", "t", None),
            ]
            assert srv.stats.receives[0].broker == 0
            assert [r.long_polling for r in srv.stats.receives] == [5.0, 5.0, 5.0]
            assert all(r.arrived > 0 for r in srv.stats.receives)
            srv.stats.reset()
            assert not srv.stats.receives

    run(scenario())
    stats = Faults().stats
    for i in range(RECENT_RECEIVES + 10):
        stats.record_receive(0, "g", "t", str(i))
    assert len(stats.receives) == RECENT_RECEIVES
    assert stats.receives[0].attempt_id == "10"
