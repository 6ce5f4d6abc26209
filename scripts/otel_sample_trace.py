"""Print the spans of one message, sent by a Producer and consumed by a PushConsumer, as the OpenTelemetry
SDK's in-memory exporter holds them (JSON): the sample trace of docs/observability.md.

    .venv/bin/python scripts/otel_sample_trace.py > trace.json

Both clients run against the embedded server in this process, each with an instrumentation of its own
(as two applications would be); the listener opens a span of its own, which nests under the process
span. Needs the `dev` extra (opentelemetry-sdk).
"""

from __future__ import annotations

import asyncio
import json
import threading

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import thrust
import thrust.otel
from thrust.testing import embedded_server


def _provider(service: str, exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


async def main() -> None:
    exporter = InMemorySpanExporter()
    orders = _provider("orders", exporter)
    billing = _provider("billing", exporter)
    user_tracer = billing.get_tracer("billing")
    done = threading.Event()

    def bill(message: thrust.ReceivedMessage) -> None:
        with user_tracer.start_as_current_span("charge card"):
            done.set()

    async with embedded_server(topics=["orders"], groups=["billing"]) as srv:
        ep = srv.endpoints[0]
        async with thrust.Producer(
            endpoints=ep, topics=["orders"], instrumentation=thrust.otel.instrument(tracer_provider=orders)
        ) as producer:
            await producer.send(
                thrust.Message(topic="orders", body=b'{"order": 42}', tag="paid", keys=["42"])
            )
        async with thrust.PushConsumer(
            endpoints=ep,
            group="billing",
            subscriptions={"orders": "*"},
            listener=bill,
            instrumentation=thrust.otel.instrument(tracer_provider=billing),
        ) as consumer:
            await asyncio.wait_for(asyncio.to_thread(done.wait), 30)
            for _ in range(3000):  # the ack is batched: wait (up to 30 s) for its span
                if consumer.stats().acked >= 1:
                    break
                await asyncio.sleep(0.01)
    spans = [json.loads(s.to_json()) for s in exporter.get_finished_spans()]
    print(json.dumps(spans, indent=2))


asyncio.run(main())
