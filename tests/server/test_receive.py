"""ReceiveMessage: long polling, wake-ups, invisibility, FIFO, filters, DLQ (docs/protocol.md §6, §7)."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.server._wire import Wire, handles, message, messages_of, run, status_of, until_parked
from tests.support import TIMER_SLACK, until
from thrust._codec.status import Code
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.server.clock import ManualClock
from thrust.server.config import GroupSpec
from thrust.server.core.model import GroupRetryPolicy
from thrust.testing import embedded_server


def test_long_poll_returns_early_when_a_message_arrives() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv, Wire(srv.endpoints[0]) as w:
            await w.consumer("g", "t")
            polls = [asyncio.ensure_future(w.receive("g", "t", polling=20, rpc_timeout=25)) for _ in range(3)]
            await until(lambda: srv.pending_polls("g") == 3)
            await w.send_ok("t")
            # Woken by the send: answered long before the 20 s poll would have ended on its own.
            first = await asyncio.wait_for(
                asyncio.shield(asyncio.wait(polls, return_when="FIRST_COMPLETED")), 10
            )
            done = next(iter(first[0])).result()
            assert status_of(done).code == Code.OK and len(messages_of(done)) == 1
            # The other parked polls popped once each and went back to waiting; each send wakes them.
            for _ in range(2):
                await w.send_ok("t")
                pending = [p for p in polls if not p.done()]
                await asyncio.wait(pending, timeout=10, return_when="FIRST_COMPLETED")
            await asyncio.wait_for(asyncio.gather(*polls), 10)
            total = sum(len(messages_of(p.result())) for p in polls)
            assert total == 3
            assert srv.stats.calls["ReceiveMessage"] == 3

    run(scenario())


@pytest.mark.slow
def test_empty_long_poll_times_out_with_message_not_found() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv, Wire(srv.endpoints[0]) as w:
            await w.consumer("g", "t")
            started = time.monotonic()
            # 1 s asked: clamped up to the 5 s minimum (docs/protocol.md §6.2). It ends with an answer,
            # not at the 10 s deadline of the call (which would raise DEADLINE_EXCEEDED).
            stream = await w.receive("g", "t", polling=1, rpc_timeout=10)
            assert time.monotonic() - started >= 5.0 - TIMER_SLACK
            kinds = [r.WhichOneof("content") for r in stream]
            assert kinds == ["status", "delivery_timestamp"]
            assert status_of(stream).code == Code.MESSAGE_NOT_FOUND

    run(scenario())


def test_nack_wakes_parked_poll_via_the_timer() -> None:
    # On a manual clock: the redelivery is due when the test moves time past the nack's delay, so
    # nothing here waits for it (or asserts on wall-clock time).
    clock = ManualClock()

    async def scenario() -> None:
        async with (
            embedded_server(topics=["t"], groups=["g"], clock=clock) as srv,
            Wire(srv.endpoints[0]) as w,
        ):
            await w.consumer("g", "t")
            [mid] = await w.send_ok("t")
            [(_, handle)] = handles(await w.receive("g", "t"))
            parked = asyncio.ensure_future(w.receive("g", "t", polling=20, rpc_timeout=25))
            await until_parked(srv, "g")
            change = await w.change_invisible("g", "t", mid, handle, 0.5)
            assert change.status.code == Code.OK
            clock.advance(0.4)
            assert not parked.done()
            # Woken by the server's timer once the message is visible again, long before its 20 s poll ends.
            clock.advance(0.1)
            [again] = messages_of(await parked)
            assert again.system_properties.message_id == mid
            assert again.system_properties.delivery_attempt == 2

    run(scenario())


def test_batch_is_capped_at_32_and_auto_renew_uses_default_invisible_time() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv, Wire(srv.endpoints[0]) as w:
            await w.consumer("g", "t", kind=d.ClientType.PUSH_CONSUMER)
            for _ in range(4):
                await w.send_ok("t", 10)
            stream = await w.receive("g", "t", batch=100, auto_renew=True, invisible=None)
            assert len(messages_of(stream)) == 32
            stream2 = await w.receive("g", "t", batch=100, auto_renew=True, invisible=None)
            assert len(messages_of(stream2)) == 8
            assert srv.brokers[0].inflight("g", "t") == 40

    run(scenario())


def test_tag_and_sql_filters() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv, Wire(srv.endpoints[0]) as w:
            await w.consumer("tags", "t")
            await w.send(message("t", tag="A", message_id="MA"), message("t", tag="B", message_id="MB"))
            await w.send(message("t", tag="C", properties={"n": "5"}, message_id="MC"))
            got = messages_of(await w.receive("tags", "t", expression="A || C"))
            assert sorted(m.system_properties.message_id for m in got) == ["MA", "MC"]
            got = messages_of(await w.receive("sql", "t", expression="n > 3", filter_type=d.FilterType.SQL))
            assert [m.system_properties.message_id for m in got] == ["MC"]

    run(scenario())


def test_fifo_group_assignment_and_order() -> None:
    async def scenario() -> None:
        async with (
            embedded_server(topics=["f:2:FIFO"], groups=["fg:fifo"]) as srv,
            Wire(srv.endpoints[0]) as w,
        ):
            await w.consumer("fg", "f")
            for i in range(3):
                response = await w.send(
                    message("f", message_group="order-1", message_id=f"F{i}", message_type=d.MessageType.FIFO)
                )
                assert response.status.code == Code.OK
            first = messages_of(await w.receive("fg", "f", batch=1))
            assert [m.system_properties.message_id for m in first] == ["F0"]
            assert first[0].system_properties.message_group == "order-1"
            assert first[0].system_properties.message_type == d.MessageType.FIFO
            # F1 is blocked while F0 is in flight; acking F0 wakes a poll that then gets F1.
            parked = asyncio.ensure_future(w.receive("fg", "f", batch=1, polling=20, rpc_timeout=25))
            await until_parked(srv, "fg")
            assert not parked.done()
            await w.ack("fg", "f", handles([s.ReceiveMessageResponse(message=first[0])]))
            got = messages_of(await asyncio.wait_for(parked, 5))
            assert [m.system_properties.message_id for m in got] == ["F1"]

    run(scenario())


def test_max_attempts_exceeded_goes_to_dlq_with_dead_letter_queue_property() -> None:
    async def scenario() -> None:
        retry = GroupRetryPolicy(max_attempts=1, customized=(0.1,))
        async with (
            embedded_server(topics=["t"], groups=[GroupSpec("g", retry=retry)]) as srv,
            Wire(srv.endpoints[0]) as w,
        ):
            call = await w.consumer("g", "t")
            assert call is not None
            [mid] = await w.send_ok("t")
            [(_, handle)] = handles(await w.receive("g", "t"))
            await w.change_invisible("g", "t", mid, handle, 0)
            stream = await w.receive("g", "%DLQ%g")
            [dead] = messages_of(stream)
            assert dead.system_properties.dead_letter_queue.topic == "t"
            assert dead.system_properties.dead_letter_queue.message_id == mid

    run(scenario())


def test_forward_to_dead_letter_queue() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv, Wire(srv.endpoints[0]) as w:
            await w.consumer("g", "t")
            [mid] = await w.send_ok("t")
            [(_, handle)] = handles(await w.receive("g", "t"))
            response = await w.stub.ForwardMessageToDeadLetterQueue(
                s.ForwardMessageToDeadLetterQueueRequest(
                    group=d.Resource(name="g"),
                    topic=d.Resource(name="t"),
                    receipt_handle=handle,
                    message_id=mid,
                    delivery_attempt=1,
                    max_delivery_attempts=16,
                ),
                metadata=w.md,
            )
            assert response.status.code == Code.OK
            assert srv.brokers[0].inflight("g", "t") == 0
            [dead] = messages_of(await w.receive("g2", "%DLQ%g"))
            assert dead.system_properties.message_id == mid

    run(scenario())


def test_notify_client_termination_releases_in_flight_after_about_a_second() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            async with Wire(srv.endpoints[0], client_id="leaving") as w:
                await w.consumer("g", "t", kind=d.ClientType.PUSH_CONSUMER)
                [mid] = await w.send_ok("t")
                assert len(messages_of(await w.receive("g", "t", auto_renew=True, invisible=None))) == 1
                response = await w.stub.NotifyClientTermination(
                    s.NotifyClientTerminationRequest(group=d.Resource(name="g")), metadata=w.md
                )
                assert response.status.code == Code.OK
            async with Wire(srv.endpoints[0], client_id="staying") as w2:
                await w2.consumer("g", "t", kind=d.ClientType.PUSH_CONSUMER)
                started = time.monotonic()
                stream = await w2.receive(
                    "g", "t", auto_renew=True, invisible=None, polling=10, rpc_timeout=15
                )
                # Released by the termination, within the 10 s poll (the message itself was
                # invisible for far longer).
                assert time.monotonic() - started > 0.5
                [again] = messages_of(stream)
                assert again.system_properties.message_id == mid
                assert again.system_properties.delivery_attempt == 2

    run(scenario())


def test_delay_message_recall_and_delivery() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["d:1:DELAY"], groups=["g"]) as srv, Wire(srv.endpoints[0]) as w:
            await w.consumer("g", "d")
            due = time.time() + 0.5
            kept = message("d", delivery_timestamp=due, message_type=d.MessageType.DELAY)
            recalled = message("d", delivery_timestamp=time.time() + 30, message_type=d.MessageType.DELAY)
            r1, r2 = await w.send(kept), await w.send(recalled)
            assert r1.entries[0].recall_handle and r2.entries[0].recall_handle
            recall = await w.stub.RecallMessage(
                s.RecallMessageRequest(topic=d.Resource(name="d"), recall_handle=r2.entries[0].recall_handle),
                metadata=w.md,
            )
            assert recall.status.code == Code.OK
            assert recall.message_id == recalled.system_properties.message_id
            stream = await w.receive("g", "d", polling=10, rpc_timeout=15)
            assert time.time() >= due - 0.05
            [got] = messages_of(stream)
            assert got.system_properties.message_id == kept.system_properties.message_id
            assert got.system_properties.HasField("delivery_timestamp")

    run(scenario())


def test_client_gone_without_notice_releases_in_flight_after_expiry() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"], client_expiry=0.2) as srv:
            async with Wire(srv.endpoints[0], client_id="crashing") as w:
                await w.consumer("g", "t", kind=d.ClientType.PUSH_CONSUMER)
                [mid] = await w.send_ok("t")
                assert len(messages_of(await w.receive("g", "t", auto_renew=True, invisible=None))) == 1
            # The channel closed (telemetry cancelled): after client_expiry + ~1 s it is redelivered.
            async with Wire(srv.endpoints[0], client_id="other") as w2:
                await w2.consumer("g", "t", kind=d.ClientType.PUSH_CONSUMER)
                stream = await w2.receive(
                    "g", "t", auto_renew=True, invisible=None, polling=10, rpc_timeout=15
                )
                [again] = messages_of(stream)
                assert again.system_properties.message_id == mid

    run(scenario())
