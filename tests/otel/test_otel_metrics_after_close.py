"""A closed client's counters stay in the metrics: a short job's one export (the last, at
`MeterProvider.shutdown()`, after its clients closed) carries what they counted. Its gauges (in flight,
cached) are no longer reported."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, PeriodicExportingMetricReader

import thrust
import thrust.otel
from tests.client._util import run
from tests.otel._util import Telemetry
from thrust.testing import embedded_server


class _Exports(MetricExporter):
    """Keeps what it is asked to export."""

    def __init__(self) -> None:
        super().__init__()
        self.exports: list[Any] = []

    def export(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> MetricExportResult:
        self.exports.append(metrics_data)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass


def _points(data: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                out.setdefault(metric.name, []).extend(metric.data.data_points)
    return out


def test_a_short_jobs_export_at_shutdown_has_the_closed_clients_counts() -> None:
    exporter = _Exports()
    # No export before shutdown (an hour's interval): the job ends first, as a short one does.
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(metric_readers=[reader])
    otel = thrust.otel.instrument(meter_provider=provider)
    ids: dict[str, str] = {}

    async def job() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with thrust.Producer(endpoints=ep, topics=["t"], instrumentation=otel) as p:
                for i in range(3):
                    await p.send(thrust.Message(topic="t", body=b"%d" % i))
                ids["producer"] = p.client_id
            async with thrust.SimpleConsumer(
                endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=5, instrumentation=otel
            ) as c:
                got: list[thrust.ReceivedMessage] = []
                while len(got) < 3:
                    got += await c.receive(8)
                for m in got:
                    await m.ack()
                ids["consumer"] = c.client_id

    run(job)
    provider.shutdown()
    [exported] = exporter.exports  # the one export, at shutdown
    points = _points(exported)
    [sent] = points["messaging.client.sent.messages"]
    assert sent.value == 3 and sent.attributes["messaging.client.id"] == ids["producer"]
    [consumed] = points["messaging.client.consumed.messages"]
    assert consumed.value == 3 and consumed.attributes["messaging.client.id"] == ids["consumer"]
    settled = {
        p.attributes["messaging.operation.name"]: p.value
        for p in points["messaging.rocketmq.consumer.settled.messages"]
    }
    assert settled["ack"] == 3


def test_a_closed_push_consumers_counters_stay_and_its_gauges_go() -> None:
    tel = Telemetry()

    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with thrust.Producer(endpoints=ep, topics=["t"], instrumentation=tel.instrumentation) as p:
                await p.send(thrust.Message(topic="t", body=b"x"))
                await p.send(thrust.Message(topic="t", body=b"y"))
            async with thrust.PushConsumer(
                endpoints=ep,
                group="g",
                subscriptions={"t": "*"},
                listener=lambda m: thrust.ConsumeResult.SUCCESS,
                instrumentation=tel.instrumentation,
            ) as consumer:
                deadline = asyncio.get_running_loop().time() + 20
                while consumer.stats().acked < 2:
                    assert asyncio.get_running_loop().time() < deadline, consumer.stats()
                    await asyncio.sleep(0.02)
                live = tel.metrics()
                assert [q.value for q in live["messaging.rocketmq.consumer.cached.messages"]] == [0]

    try:
        run(scenario)
        points = tel.metrics()
        # Counters: the final values, in this collection and the next.
        for _ in range(2):
            [sent] = points["messaging.client.sent.messages"]
            assert sent.value == 2
            [received] = points["messaging.client.consumed.messages"]
            assert received.value == 2
            acked = [
                q.value
                for q in points["messaging.rocketmq.consumer.settled.messages"]
                if q.attributes["messaging.operation.name"] == "ack"
            ]
            assert acked == [2]
            points = tel.metrics()
        # Gauges: a closed client holds nothing in flight or cached.
        for gauge in (
            "messaging.rocketmq.producer.sends.in_flight",
            "messaging.rocketmq.consumer.cached.messages",
            "messaging.rocketmq.consumer.cached.bytes",
        ):
            assert not points.get(gauge), gauge
    finally:
        tel.shutdown()


def test_only_the_most_recent_closed_clients_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    kept = 3
    monkeypatch.setattr(thrust.otel, "_CLOSED_KEPT", kept)
    tel = Telemetry()

    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv:
            ep = srv.endpoints[0]
            for _ in range(kept + 2):
                producer = thrust.Producer(endpoints=ep, topics=["t"], instrumentation=tel.instrumentation)
                await producer.start()
                await producer.close()

    try:
        run(scenario)
        assert len(tel.metrics()["messaging.client.sent.messages"]) == kept
    finally:
        tel.shutdown()
