"""OpenTelemetry traces and metrics for thrust clients (the `otel` extra: `pip install 'thrust[otel]'`).

```
import thrust, thrust.otel
otel = thrust.otel.instrument()                       # the global tracer and meter providers
async with thrust.Producer(endpoints=..., instrumentation=otel) as producer: ...
```

Spans follow the OpenTelemetry messaging semantic conventions: a PRODUCER span `send {topic}` per
SendMessage request (its retries included), whose W3C `traceparent` travels in each message's
`trace_context` system property; consumer spans `receive {topic}` (CLIENT), `process {topic}` (CONSUMER,
current in the listener's thread or task) and `ack` / `change_invisible_duration` /
`forward_to_dead_letter_queue {topic}` (CLIENT, operation type settle), each linked to the producer's
context of its messages. Metrics: the operation, process and await durations are histograms recorded
when an operation ends; everything else is read from the clients' `stats()` when the meter provider
collects (observable instruments), so nothing else is done per message. docs/observability.md lists the
names, attributes and a sample trace.

This module is the only one that imports OpenTelemetry, and `import thrust` does not import it.
"""

from __future__ import annotations

import collections
import threading
import time
import weakref
from collections.abc import Iterable, Iterator, Sequence
from types import TracebackType
from typing import Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics, trace
    from opentelemetry.metrics import CallbackOptions, Observation
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError as exc:  # pragma: no cover - run in a child process (tests/otel/test_otel_import.py)
    raise ImportError(
        "thrust.otel needs the OpenTelemetry API: pip install 'thrust[otel]' (opentelemetry-api)"
    ) from exc

from thrust._core.endpoints import Endpoint
from thrust.message import Message, MessageType, ReceivedMessage
from thrust.producer import Producer
from thrust.push_consumer import PushConsumer
from thrust.simple_consumer import SimpleConsumer

__all__ = ["OpenTelemetryInstrumentation", "instrument"]

SYSTEM = "rocketmq"
_SCOPE = "thrust"

# The messaging semantic conventions' advice for duration histograms (seconds).
_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
# Await and process times of a listener can be much longer (Java's rocketmq_await_time and
# rocketmq_process_time buckets reach 10 s and 60 s: apache/rocketmq-clients HistogramEnum).
_LONG_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0)

_PROPAGATOR = TraceContextTextMapPropagator()

# Closed clients whose final counts are still reported (the most recent ones; see `detach`).
_CLOSED_KEPT = 256


def instrument(
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
) -> OpenTelemetryInstrumentation:
    """An instrumentation for clients: pass it as `instrumentation=` to `Producer`, `SimpleConsumer`,
    `PushConsumer` (or their `thrust.sync` twins), or set it in `ClientConfig(instrumentation=...)`.

    Without providers, OpenTelemetry's global ones are used (`trace.set_tracer_provider`,
    `metrics.set_meter_provider`), as they are when this is called. One instrumentation serves any
    number of clients; its observable instruments read every attached client."""
    return OpenTelemetryInstrumentation(tracer_provider, meter_provider)


def _error_type(exc: BaseException) -> str:
    cls = type(exc)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _link(trace_context: str | None) -> Link | None:
    """A link to the producer's send span, from a message's `trace_context` (None if absent or bad)."""
    if not trace_context:
        return None
    ctx = _PROPAGATOR.extract({"traceparent": trace_context})
    sc = trace.get_current_span(ctx).get_span_context()
    return Link(sc) if sc.is_valid else None


def _links(messages: Iterable[ReceivedMessage]) -> list[Link]:
    out = []
    for m in messages:
        link = _link(m.trace_context)
        if link is not None:
            out.append(link)
    return out


def _server(span: trace.Span, endpoint: Endpoint | None) -> dict[str, Any]:
    if endpoint is None or not endpoint.addresses:
        return {}
    host, port = endpoint.addresses[0]
    attrs: dict[str, Any] = {"server.address": host, "server.port": port}
    span.set_attributes(attrs)
    return attrs


def _message_attributes(attrs: dict[str, Any], m: Message | ReceivedMessage, message_id: str) -> None:
    attrs["messaging.message.id"] = message_id
    attrs["messaging.message.body.size"] = len(m.body)
    if m.tag:
        attrs["messaging.rocketmq.message.tag"] = m.tag
    if m.keys:
        attrs["messaging.rocketmq.message.keys"] = list(m.keys)
    if m.message_group is not None:
        attrs["messaging.rocketmq.message.group"] = m.message_group
    if m.delivery_timestamp is not None:
        attrs["messaging.rocketmq.message.delivery_timestamp"] = int(m.delivery_timestamp * 1000)


class _Client:
    """The attributes of one client that every span and observation carries."""

    __slots__ = ("attributes", "group")

    def __init__(self, client: Any) -> None:
        attrs: dict[str, Any] = {"messaging.system": SYSTEM}
        namespace = client.config.namespace
        if namespace:
            attrs["messaging.rocketmq.namespace"] = namespace
        client_id = client.client_id
        if client_id:
            attrs["messaging.client.id"] = client_id
        self.group: str | None = getattr(client, "group", None)
        if self.group is not None:
            attrs["messaging.consumer.group.name"] = self.group
        self.attributes = attrs


class _Timed:
    """A send, receive or settle span; records `messaging.client.operation.duration` when it ends."""

    __slots__ = ("_base", "_owner", "_span", "_started", "traceparent")

    def __init__(
        self, owner: OpenTelemetryInstrumentation, span: trace.Span, base: dict[str, Any], started: float
    ) -> None:
        self._owner = owner
        self._span = span
        self._base = base
        self._started = started
        self.traceparent: str | None = None
        if span.get_span_context().is_valid:
            carrier: dict[str, str] = {}
            _PROPAGATOR.inject(carrier, trace.set_span_in_context(span))
            self.traceparent = carrier.get("traceparent")

    def _finish(self, endpoint: Endpoint | None, error: BaseException | None) -> None:
        span = self._span
        attrs = dict(self._base)
        attrs.update(_server(span, endpoint))
        if error is not None:
            kind = _error_type(error)
            attrs["error.type"] = kind
            span.set_attribute("error.type", kind)
            span.set_status(Status(StatusCode.ERROR, str(error)))
            span.record_exception(error)
        span.end()
        self._owner._operation_duration.record(time.monotonic() - self._started, attrs)


class _Span(_Timed):
    """A send span (its `traceparent` goes into the messages) or a settle span."""

    __slots__ = ()

    def end(self, endpoint: Endpoint | None, error: BaseException | None) -> None:
        self._finish(endpoint, error)


class _ReceiveSpan(_Timed):
    __slots__ = ()

    def end(
        self, endpoint: Endpoint | None, messages: Sequence[ReceivedMessage], error: BaseException | None
    ) -> None:
        span = self._span
        span.set_attribute("messaging.batch.message_count", len(messages))
        if len(messages) == 1:
            m = messages[0]
            attrs: dict[str, Any] = {}
            _message_attributes(attrs, m, m.message_id)
            span.set_attributes(attrs)
        for link in _links(messages):
            span.add_link(link.context)
        self._finish(endpoint, error)


class _ProcessScope:
    """The process span of one listener call, current between enter and exit on the caller's thread."""

    __slots__ = ("_attrs", "_owner", "_span", "_started", "_token")

    def __init__(self, owner: OpenTelemetryInstrumentation, span: trace.Span, attrs: dict[str, Any]) -> None:
        self._owner = owner
        self._span = span
        self._attrs = attrs
        self._started = 0.0
        self._token: object = None

    def __enter__(self) -> _ProcessScope:
        self._token = otel_context.attach(trace.set_span_in_context(self._span))
        self._started = time.monotonic()
        return self

    def result(self, ok: bool, error: BaseException | None) -> None:
        if ok:
            return
        kind = _error_type(error) if error is not None else "failure"
        self._attrs["error.type"] = kind
        span = self._span
        span.set_attribute("error.type", kind)
        span.set_status(
            Status(StatusCode.ERROR, str(error) if error is not None else "ConsumeResult.FAILURE")
        )
        if error is not None:
            span.record_exception(error)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        elapsed = time.monotonic() - self._started
        otel_context.detach(self._token)  # type: ignore[arg-type]
        self._span.end()
        self._owner._process_duration.record(elapsed, self._attrs)


class OpenTelemetryInstrumentation:
    """The `thrust._instrument.Instrumentation` that reports to OpenTelemetry (see `instrument()`)."""

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            own = version("thrust")
        except PackageNotFoundError:  # pragma: no cover - a source tree never installed
            own = ""
        self._tracer = trace.get_tracer(_SCOPE, own, tracer_provider)
        meter = metrics.get_meter(_SCOPE, own, meter_provider)
        self._lock = threading.Lock()
        # Clients attached and not closed; weak, so that a client dropped without close() is not kept.
        self._clients: weakref.WeakKeyDictionary[Any, _Client] = weakref.WeakKeyDictionary()
        # The last stats() of clients that closed, with their class: their counters stay observed.
        self._closed: collections.deque[tuple[type, _Client, Any]] = collections.deque(maxlen=_CLOSED_KEPT)
        self._operation_duration = meter.create_histogram(
            "messaging.client.operation.duration",
            unit="s",
            description="Duration of a messaging operation (send, receive, settle) initiated by the client",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self._process_duration = meter.create_histogram(
            "messaging.process.duration",
            unit="s",
            description="Duration of the push consumer's listener call for one message",
            explicit_bucket_boundaries_advisory=_LONG_BUCKETS,
        )
        self._await_duration = meter.create_histogram(
            "messaging.rocketmq.consumer.await.duration",
            unit="s",
            description="Time a received message waited in the push consumer before its listener call",
            explicit_bucket_boundaries_advisory=_LONG_BUCKETS,
        )
        meter.create_observable_counter(
            "messaging.client.sent.messages",
            callbacks=[self._observe_sent],
            unit="{message}",
            description="Messages the producer sent (with error.type: that failed)",
        )
        meter.create_observable_counter(
            "messaging.client.consumed.messages",
            callbacks=[self._observe_consumed],
            unit="{message}",
            description="Messages a consumer received",
        )
        meter.create_observable_counter(
            "messaging.rocketmq.producer.send.retries",
            callbacks=[self._observe_retries],
            unit="{attempt}",
            description="SendMessage attempts after a request's first",
        )
        meter.create_observable_up_down_counter(
            "messaging.rocketmq.producer.sends.in_flight",
            callbacks=[self._observe_in_flight],
            unit="{request}",
            description="SendMessage requests begun and not answered yet",
        )
        meter.create_observable_counter(
            "messaging.rocketmq.consumer.settled.messages",
            callbacks=[self._observe_settled],
            unit="{message}",
            description="Messages a consumer acked, changed the invisible duration of, or dead-lettered",
        )
        meter.create_observable_up_down_counter(
            "messaging.rocketmq.consumer.cached.messages",
            callbacks=[self._observe_cached_messages],
            unit="{message}",
            description="Messages in the push consumer's cache: received, not settled yet",
        )
        meter.create_observable_up_down_counter(
            "messaging.rocketmq.consumer.cached.bytes",
            callbacks=[self._observe_cached_bytes],
            unit="By",
            description="Body bytes in the push consumer's cache",
        )

    # -- the hooks (thrust._instrument.Instrumentation) ------------------------------------------------

    def attach(self, client: Any) -> None:
        with self._lock:
            self._clients[client] = _Client(client)

    def detach(self, client: Any) -> None:
        # A closed client's counters keep their final values in every later collection: a cumulative
        # counter that disappears loses what it counted from the export, and the one export of a short
        # job is often the last, at MeterProvider.shutdown(), after its clients closed. The stats are
        # taken now, once the client has stopped counting. Only the most recent closed clients are kept,
        # so that an application making clients in a loop does not grow without bound; their gauges
        # (in flight, cached) are no longer reported, as a closed client holds nothing.
        with self._lock:
            info = self._clients.pop(client, None)
        if info is None:
            return
        for _ in range(3):
            try:
                final = client.stats()
            except RuntimeError:
                continue
            with self._lock:
                self._closed.append((type(client), info, final))
            break

    def _client(self, client: Any) -> _Client:
        known = self._clients.get(client)
        if known is None or ("messaging.client.id" not in known.attributes and client.client_id):
            known = _Client(client)  # started after attach: its client id is known now
            with self._lock:
                self._clients[client] = known
        return known

    def send(
        self,
        client: Any,
        topic: str,
        message_type: MessageType,
        messages: Sequence[Message],
        message_ids: Sequence[str],
    ) -> _Span:
        c = self._client(client)
        base = dict(c.attributes)
        base["messaging.operation.name"] = "send"
        base["messaging.operation.type"] = "send"
        base["messaging.destination.name"] = topic
        attrs = dict(base)
        attrs["messaging.rocketmq.message.type"] = message_type.name.lower()
        if len(message_ids) == 1 and len(messages) == 1:
            _message_attributes(attrs, messages[0], message_ids[0])
        else:
            attrs["messaging.batch.message_count"] = len(message_ids)
        span = self._tracer.start_span(f"send {topic}", kind=SpanKind.PRODUCER, attributes=attrs)
        return _Span(self, span, base, time.monotonic())

    def receive(self, client: Any, topic: str, start: float | None = None) -> _ReceiveSpan:
        c = self._client(client)
        base = dict(c.attributes)
        base["messaging.operation.name"] = "receive"
        base["messaging.operation.type"] = "receive"
        base["messaging.destination.name"] = topic
        started = time.monotonic()
        start_ns = None
        if start is not None:
            start_ns = int(start * 1e9)
            started -= max(0.0, time.time() - start)
        span = self._tracer.start_span(
            f"receive {topic}", kind=SpanKind.CLIENT, attributes=base, start_time=start_ns
        )
        return _ReceiveSpan(self, span, base, started)

    def process(self, client: Any, message: ReceivedMessage, waited: float) -> _ProcessScope:
        c = self._client(client)
        topic = message.topic
        base = dict(c.attributes)
        base["messaging.operation.name"] = "process"
        base["messaging.operation.type"] = "process"
        base["messaging.destination.name"] = topic
        self._await_duration.record(max(0.0, waited), base)
        attrs = dict(base)
        _message_attributes(attrs, message, message.message_id)
        attrs["messaging.rocketmq.message.type"] = message.message_type.name.lower()
        link = _link(message.trace_context)
        # A new trace, linked to the producer's (the messaging conventions' advice for consumers); the
        # listener's own spans nest under it. The root context: a listener thread may carry a context
        # left by whatever ran on it before.
        span = self._tracer.start_span(
            f"process {topic}",
            context=otel_context.Context(),
            kind=SpanKind.CONSUMER,
            attributes=attrs,
            links=[link] if link is not None else None,
        )
        return _ProcessScope(self, span, base)

    def settle(self, client: Any, operation: str, topic: str, messages: Sequence[ReceivedMessage]) -> _Span:
        c = self._client(client)
        base = dict(c.attributes)
        base["messaging.operation.name"] = operation
        base["messaging.operation.type"] = "settle"
        base["messaging.destination.name"] = topic
        attrs = dict(base)
        if len(messages) == 1:
            attrs["messaging.message.id"] = messages[0].message_id
        else:
            attrs["messaging.batch.message_count"] = len(messages)
        span = self._tracer.start_span(
            f"{operation} {topic}", kind=SpanKind.CLIENT, attributes=attrs, links=_links(messages)
        )
        return _Span(self, span, base, time.monotonic())

    # -- observable instruments: read the clients' stats() when the provider collects -------------------

    def _stats(
        self, kind: type[Producer | SimpleConsumer | PushConsumer], closed: bool = True
    ) -> Iterator[tuple[_Client, Any]]:
        """(client attributes, stats) of every attached client of `kind`, then (with `closed`) the final
        stats of the closed ones."""
        with self._lock:
            clients = list(self._clients.items())
            final = [(info, stats) for cls, info, stats in self._closed if issubclass(cls, kind)]
        for client, info in clients:
            if not isinstance(client, kind):
                continue
            assert isinstance(client, Producer | SimpleConsumer | PushConsumer)
            # Collected on the reader's thread while the client's loop runs: a snapshot that met a
            # change of the push consumer's queue table is taken again.
            for _ in range(3):
                try:
                    stats = client.stats()
                except RuntimeError:
                    continue
                yield info, stats
                break
        if closed:
            yield from final

    @staticmethod
    def _with(info: _Client, **extra: Any) -> dict[str, Any]:
        attrs = dict(info.attributes)
        attrs.update(extra)
        return attrs

    def _observe_sent(self, options: CallbackOptions) -> Iterable[Observation]:
        out = []
        for info, s in self._stats(Producer):
            out.append(Observation(s.messages_sent, self._with(info, **{"messaging.operation.name": "send"})))
            if s.messages_failed:
                attrs = self._with(info, **{"messaging.operation.name": "send", "error.type": "_OTHER"})
                out.append(Observation(s.messages_failed, attrs))
        return out

    def _observe_retries(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(s.retries, self._with(info)) for info, s in self._stats(Producer)]

    def _observe_in_flight(self, options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(s.in_flight, self._with(info)) for info, s in self._stats(Producer, closed=False)]

    def _observe_consumed(self, options: CallbackOptions) -> Iterable[Observation]:
        op = {"messaging.operation.name": "receive"}
        out = [
            Observation(s.messages_received, self._with(info, **op))
            for info, s in self._stats(SimpleConsumer)
        ]
        out += [Observation(s.received, self._with(info, **op)) for info, s in self._stats(PushConsumer)]
        return out

    def _observe_settled(self, options: CallbackOptions) -> Iterable[Observation]:
        out = []
        name = "messaging.operation.name"
        for info, s in self._stats(SimpleConsumer):
            out.append(Observation(s.acks, self._with(info, **{name: "ack"})))
            out.append(Observation(s.renewals, self._with(info, **{name: "change_invisible_duration"})))
        for info, s in self._stats(PushConsumer):
            out.append(Observation(s.acked, self._with(info, **{name: "ack"})))
            out.append(Observation(s.nacked, self._with(info, **{name: "change_invisible_duration"})))
            out.append(
                Observation(s.dead_lettered, self._with(info, **{name: "forward_to_dead_letter_queue"}))
            )
        return out

    def _observe_cached_messages(self, options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(s.cached_messages, self._with(info))
            for info, s in self._stats(PushConsumer, closed=False)
        ]

    def _observe_cached_bytes(self, options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(s.cached_bytes, self._with(info))
            for info, s in self._stats(PushConsumer, closed=False)
        ]
