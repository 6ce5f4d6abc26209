"""thrust.otel against the embedded server over real gRPC, read back from the OpenTelemetry SDK's in-memory
exporters: a message sent by one client and consumed by another yields linked spans with the messaging
conventions' attributes, the producer's W3C context travels in `trace_context`, and the metrics come out
of the clients' counters."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

import thrust
from tests.client._util import run
from tests.otel._util import Telemetry
from thrust._codec.status import Code
from thrust.server.faults import Rpc
from thrust.testing import embedded_server


def _traceparent(span: Any) -> str:
    ctx = span.context
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def _linked_to(span: Any, producer_span: Any) -> bool:
    return any(
        link.context.trace_id == producer_span.context.trace_id
        and link.context.span_id == producer_span.context.span_id
        for link in span.links
    )


def _points(tel: Telemetry, name: str, **attrs: Any) -> list[Any]:
    return [p for p in tel.metrics().get(name, []) if all(p.attributes.get(k) == v for k, v in attrs.items())]


def test_send_receive_ack_spans_are_linked_and_carry_the_conventions_attributes() -> None:
    sender, receiver = Telemetry(), Telemetry()

    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            host, port = ep.rsplit(":", 1)
            async with (
                thrust.Producer(endpoints=ep, topics=["t"], instrumentation=sender.instrumentation) as p,
                thrust.SimpleConsumer(
                    endpoints=ep,
                    group="g",
                    subscriptions={"t": "*"},
                    await_duration=5,
                    instrumentation=receiver.instrumentation,
                ) as c,
            ):
                receipt = await p.send(thrust.Message(topic="t", body=b"hello", tag="a", keys=["k1", "k2"]))
                [send] = sender.finished("send t")
                assert send.kind is SpanKind.PRODUCER
                assert dict(send.attributes or {}) == {
                    "messaging.system": "rocketmq",
                    "messaging.client.id": p.client_id,
                    "messaging.operation.name": "send",
                    "messaging.operation.type": "send",
                    "messaging.destination.name": "t",
                    "messaging.rocketmq.message.type": "normal",
                    "messaging.message.id": receipt.message_id,
                    "messaging.message.body.size": 5,
                    "messaging.rocketmq.message.tag": "a",
                    "messaging.rocketmq.message.keys": ("k1", "k2"),
                    "server.address": host,
                    "server.port": int(port),
                }

                got: list[thrust.ReceivedMessage] = []
                while not got:
                    got = await c.receive(32)
                [m] = got
                # The producer's context travelled in the trace_context system property.
                assert m.trace_context == _traceparent(send)
                await m.change_invisible_duration(15)
                await m.ack()

                [receive] = [s for s in receiver.finished("receive t") if s.links]
                assert receive.kind is SpanKind.CLIENT and _linked_to(receive, send)
                attrs = dict(receive.attributes or {})
                assert attrs["messaging.operation.type"] == "receive"
                assert attrs["messaging.consumer.group.name"] == "g"
                assert attrs["messaging.batch.message_count"] == 1
                assert attrs["messaging.message.id"] == receipt.message_id
                assert attrs["messaging.client.id"] == c.client_id
                [ack] = receiver.finished("ack t")
                [renew] = receiver.finished("change_invisible_duration t")
                for span, name in ((ack, "ack"), (renew, "change_invisible_duration")):
                    assert span.kind is SpanKind.CLIENT and _linked_to(span, send)
                    a = dict(span.attributes or {})
                    assert a["messaging.operation.name"] == name
                    assert a["messaging.operation.type"] == "settle"
                    assert a["messaging.message.id"] == receipt.message_id
                    assert a["server.port"] == int(port)
                # The two clients' spans are in different traces, tied by the links only.
                assert receive.context.trace_id != send.context.trace_id

                # Metrics: durations recorded as operations end, counts read from stats().
                [sent] = _points(sender, "messaging.client.sent.messages")
                assert sent.value == 1 and sent.attributes["messaging.client.id"] == p.client_id
                [dur] = _points(
                    sender, "messaging.client.operation.duration", **{"messaging.operation.name": "send"}
                )
                assert dur.count == 1 and dur.attributes["messaging.destination.name"] == "t"
                [consumed] = _points(receiver, "messaging.client.consumed.messages")
                assert consumed.value == 1 and consumed.attributes["messaging.consumer.group.name"] == "g"
                settled = {
                    q.attributes["messaging.operation.name"]: q.value
                    for q in _points(receiver, "messaging.rocketmq.consumer.settled.messages")
                }
                assert settled == {"ack": 1, "change_invisible_duration": 1}
                [acks] = _points(
                    receiver, "messaging.client.operation.duration", **{"messaging.operation.name": "ack"}
                )
                assert acks.count == 1
                assert _points(sender, "messaging.rocketmq.producer.sends.in_flight")[0].value == 0

        # A closed client's counters keep their final values (tests/otel/test_otel_metrics_after_close.py);
        # its gauges are no longer reported.
        assert [q.value for q in _points(sender, "messaging.client.sent.messages")] == [1]
        assert not _points(sender, "messaging.rocketmq.producer.sends.in_flight")

    try:
        run(scenario)
    finally:
        sender.shutdown()
        receiver.shutdown()


def test_a_failed_send_span_has_error_type_and_a_batch_span_counts_its_messages() -> None:
    tel = Telemetry()

    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv:
            async with thrust.Producer(
                endpoints=srv.endpoints[0], topics=["t"], max_attempts=1, instrumentation=tel.instrumentation
            ) as p:
                srv.faults.fail_next(Rpc.SEND_MESSAGE, Code.FORBIDDEN)
                with pytest.raises(thrust.ForbiddenError):
                    await p.send(thrust.Message(topic="t", body=b"x"))
                receipts = await p.send_batch([thrust.Message(topic="t", body=b"b%d" % i) for i in range(3)])
        failed, batch = tel.finished("send t")
        assert failed.status.status_code is StatusCode.ERROR
        assert (failed.attributes or {})["error.type"] == "thrust.errors.ForbiddenError"
        attrs = dict(batch.attributes or {})
        assert attrs["messaging.batch.message_count"] == 3 and "messaging.message.id" not in attrs
        [dur] = _points(
            tel,
            "messaging.client.operation.duration",
            **{"error.type": "thrust.errors.ForbiddenError"},
        )
        assert dur.count == 1
        assert len(receipts) == 3

    try:
        run(scenario)
    finally:
        tel.shutdown()


@pytest.mark.parametrize("kind", ["thread", "async"])
def test_push_process_span_is_current_in_the_listener_and_links_to_the_send(kind: str) -> None:
    sender, receiver = Telemetry(), Telemetry()
    user_tracer = receiver.tracer_provider.get_tracer("user-code")
    seen: list[tuple[str, int, int]] = []  # (thread name, current span id at entry, user span's parent id)

    def work(m: thrust.ReceivedMessage) -> thrust.ConsumeResult:
        current = trace.get_current_span().get_span_context().span_id
        with user_tracer.start_as_current_span("user work") as mine:
            parent = mine.parent  # type: ignore[attr-defined]
            seen.append((threading.current_thread().name, current, parent.span_id if parent else 0))
        if m.body == b"bad":
            if kind == "async":
                raise ValueError("bad message")  # an exception: its type and the exception are recorded
            return thrust.ConsumeResult.FAILURE
        return thrust.ConsumeResult.SUCCESS

    async def alistener(m: thrust.ReceivedMessage) -> thrust.ConsumeResult:
        await asyncio.sleep(0)
        return work(m)

    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with thrust.Producer(
                endpoints=ep, topics=["t"], instrumentation=sender.instrumentation
            ) as p:
                good = await p.send(thrust.Message(topic="t", body=b"good"))
                bad = await p.send(thrust.Message(topic="t", body=b"bad"))
            async with thrust.PushConsumer(
                endpoints=ep,
                group="g",
                subscriptions={"t": "*"},
                listener=alistener if kind == "async" else work,
                consumption_thread_count=2,
                instrumentation=receiver.instrumentation,
            ) as consumer:
                deadline = asyncio.get_running_loop().time() + 20
                while not (
                    consumer.stats().acked >= 1
                    and consumer.stats().nacked >= 1
                    and receiver.finished("change_invisible_duration t")
                    and receiver.finished("ack t")
                ):
                    assert asyncio.get_running_loop().time() < deadline, consumer.stats()
                    await asyncio.sleep(0.02)
                points = receiver.metrics()
        sends = {(s.attributes or {})["messaging.message.id"]: s for s in sender.finished("send t")}
        processes = {(s.attributes or {})["messaging.message.id"]: s for s in receiver.finished("process t")}
        assert {good.message_id, bad.message_id} <= set(processes)
        for message_id in (good.message_id, bad.message_id):
            span = processes[message_id]
            assert span.kind is SpanKind.CONSUMER and _linked_to(span, sends[message_id])
            attrs = dict(span.attributes or {})
            assert attrs["messaging.consumer.group.name"] == "g"
            assert attrs["messaging.operation.type"] == "process"
            assert attrs["messaging.message.body.size"] == len(
                b"good" if message_id == good.message_id else b"bad"
            )
        # The listener ran with its process span current, on the consumer's threads (or the loop's task)...
        by_span = {s.context.span_id: s for s in processes.values()}
        for thread_name, current, parent in seen:
            assert current in by_span and parent == current
            assert thread_name.startswith("thrust-consume") == (kind == "thread")
        # ...and its own span is a child of that process span, in the process span's trace.
        users = receiver.finished("user work")
        assert {u.parent.span_id for u in users if u.parent} <= set(by_span)
        failed = processes[bad.message_id]
        assert failed.status.status_code is StatusCode.ERROR
        if kind == "async":
            assert (failed.attributes or {})["error.type"] == "ValueError"
            assert [e.name for e in failed.events] == ["exception"]
        else:
            assert (failed.attributes or {})["error.type"] == "failure" and not failed.events
        # The nack of the failed message and the ack of the good one, linked to their sends.
        assert any(
            _linked_to(s, sends[bad.message_id]) for s in receiver.finished("change_invisible_duration t")
        )
        assert any(_linked_to(s, sends[good.message_id]) for s in receiver.finished("ack t"))
        # Receive spans are reported for receives that returned messages, linked to the sends.
        receives = receiver.finished("receive t")
        assert receives and all((s.attributes or {})["messaging.batch.message_count"] >= 1 for s in receives)
        assert any(_linked_to(s, sends[good.message_id]) for s in receives)
        # Await and process durations per listener call; the push cache's gauges from stats().
        assert sum(q.count for q in points["messaging.process.duration"]) >= 2
        assert sum(q.count for q in points["messaging.rocketmq.consumer.await.duration"]) >= 2
        assert "messaging.rocketmq.consumer.cached.messages" in points
        assert "messaging.rocketmq.consumer.cached.bytes" in points

    try:
        run(scenario)
    finally:
        sender.shutdown()
        receiver.shutdown()
