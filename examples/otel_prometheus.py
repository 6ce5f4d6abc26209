"""Client statistics exported to Prometheus through OpenTelemetry (docs/observability.md).

Needs `pip install 'thrust[otel]' opentelemetry-sdk opentelemetry-exporter-prometheus`. The clients get
`instrumentation=`; the OpenTelemetry SDK's Prometheus reader serves every thrust metric on
http://127.0.0.1:$METRICS_PORT/metrics (0, the default here, picks a free port), which this script then
scrapes itself, as Prometheus would, and prints the thrust lines.
"""

import asyncio
import os
import threading
import urllib.request

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import start_http_server

import thrust
import thrust.otel

ENDPOINTS = os.environ.get("ROCKETMQ_ENDPOINTS", "127.0.0.1:8081")
TOPIC = os.environ.get("TOPIC", "orders")
GROUP = os.environ.get("GROUP", "billing")
METRICS_PORT = int(os.environ.get("METRICS_PORT", "0"))

# 1. OpenTelemetry: a meter provider whose reader is the Prometheus exporter, and an HTTP endpoint for it.
resource = Resource.create({"service.name": "billing"})
meter_provider = MeterProvider(resource=resource, metric_readers=[PrometheusMetricReader()])
server, _ = start_http_server(port=METRICS_PORT, addr="127.0.0.1")
# 2. One instrumentation for every client (spans go to this tracer provider: add an exporter to see them).
otel = thrust.otel.instrument(
    tracer_provider=TracerProvider(resource=resource), meter_provider=meter_provider
)

done = threading.Event()
seen: set[str] = set()
lock = threading.Lock()


def handle(message: thrust.ReceivedMessage) -> None:
    with lock:
        seen.add(message.message_id)
        if len(seen) == 10:
            done.set()


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


async def main() -> None:
    async with (
        thrust.PushConsumer(
            endpoints=ENDPOINTS,
            group=GROUP,
            subscriptions={TOPIC: "*"},
            listener=handle,
            instrumentation=otel,
        ) as consumer,
        thrust.Producer(endpoints=ENDPOINTS, topics=[TOPIC], instrumentation=otel) as producer,
    ):
        for i in range(10):
            await producer.send(thrust.Message(topic=TOPIC, body=f"event {i}".encode()))
        await asyncio.wait_for(asyncio.to_thread(done.wait), 60)
        for _ in range(600):  # acks are batched: wait (up to 30 s) until they settled
            if consumer.stats().acked >= 10:
                break
            await asyncio.sleep(0.05)
        # 3. What Prometheus scrapes.
        text = await asyncio.to_thread(scrape, f"http://127.0.0.1:{server.server_port}/metrics")
    lines = [line for line in text.splitlines() if line.startswith("messaging_")]
    print("\n".join(line for line in lines if "_bucket{" not in line))
    sent = [line for line in lines if line.startswith("messaging_client_sent_messages_total{")]
    consumed = [line for line in lines if line.startswith("messaging_client_consumed_messages_total{")]
    assert sent and float(sent[0].rsplit(" ", 1)[1]) == 10, sent
    assert consumed and float(consumed[0].rsplit(" ", 1)[1]) >= 10, consumed
    assert any(line.startswith("messaging_client_operation_duration_seconds_bucket{") for line in lines)


asyncio.run(main())
server.shutdown()
