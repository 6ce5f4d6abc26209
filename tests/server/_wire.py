"""Raw-gRPC helpers for the embedded server's integration tests (generated stubs + grpc.aio only).

Tests are plain sync functions that call `run(coro)`; no pytest-asyncio.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

import grpc

# Re-exported: the suite's tests import them from here (tests/support.py has the one definition).
from tests.support import run as run
from thrust._codec.status import Code
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust._proto.apache.rocketmq.v2 import service_pb2_grpc as g
from thrust.server.service import EmbeddedServer

T = TypeVar("T")
_ids = itertools.count(1)


def message(
    topic: str,
    body: bytes = b"body",
    *,
    message_id: str | None = None,
    tag: str | None = None,
    keys: Sequence[str] = (),
    properties: dict[str, str] | None = None,
    message_group: str | None = None,
    delivery_timestamp: float | None = None,
    message_type: int | None = None,
) -> d.Message:
    m = d.Message(topic=d.Resource(name=topic), body=body)
    sp = m.system_properties
    sp.message_id = message_id if message_id is not None else f"MSG{next(_ids):08d}"
    if tag is not None:
        sp.tag = tag
    sp.keys.extend(keys)
    if properties:
        m.user_properties.update(properties)
    if message_group is not None:
        sp.message_group = message_group
    if delivery_timestamp is not None:
        sec = int(delivery_timestamp)
        sp.delivery_timestamp.seconds = sec
        sp.delivery_timestamp.nanos = int((delivery_timestamp - sec) * 1e9)
    if message_type is not None:
        sp.message_type = message_type  # type: ignore[assignment]
    sp.born_host = "test-host"
    sp.born_timestamp.GetCurrentTime()
    return m


class Wire:
    """One client connection to one broker endpoint."""

    def __init__(
        self,
        endpoint: str,
        client_id: str | None = "test-client",
        *,
        extra_metadata: Iterable[tuple[str, str]] = (),
        metadata_fn: Callable[[], Sequence[tuple[str, str]]] | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        self.endpoint = endpoint
        host, _, port = endpoint.rpartition(":")
        self.host, self.port = host, int(port)
        base: list[tuple[str, str]] = [("x-mq-client-version", "5.1.2"), ("x-mq-language", "PYTHON")]
        if client_id is not None:
            base.append(("x-mq-client-id", client_id))
        base.extend(extra_metadata)
        self._base = tuple(base)
        self._metadata_fn = metadata_fn
        if credentials is None:
            self.channel = grpc.aio.insecure_channel(endpoint, options=list(options))
        else:
            self.channel = grpc.aio.secure_channel(endpoint, credentials, options=list(options))
        self.stub = g.MessagingServiceStub(self.channel)
        self._telemetry: list[Any] = []

    @property
    def md(self) -> tuple[tuple[str, str], ...]:
        if self._metadata_fn is not None:
            return self._base + tuple(self._metadata_fn())
        return self._base

    async def __aenter__(self) -> Wire:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for call in self._telemetry:
            call.cancel()
        await self.channel.close(None)

    def endpoints(self) -> d.Endpoints:
        return d.Endpoints(scheme=d.AddressScheme.IPv4, addresses=[d.Address(host=self.host, port=self.port)])

    async def route(self, topic: str) -> s.QueryRouteResponse:
        return await self.stub.QueryRoute(
            s.QueryRouteRequest(topic=d.Resource(name=topic), endpoints=self.endpoints()),
            metadata=self.md,
            timeout=5,
        )

    async def assignment(self, topic: str, group: str) -> s.QueryAssignmentResponse:
        return await self.stub.QueryAssignment(
            s.QueryAssignmentRequest(
                topic=d.Resource(name=topic), group=d.Resource(name=group), endpoints=self.endpoints()
            ),
            metadata=self.md,
            timeout=5,
        )

    def open_telemetry(self) -> Any:
        call = self.stub.Telemetry(metadata=self.md)
        self._telemetry.append(call)
        return call

    async def handshake(self, settings: d.Settings) -> tuple[Any, s.TelemetryCommand]:
        call = self.open_telemetry()
        await call.write(s.TelemetryCommand(settings=settings))
        reply = await asyncio.wait_for(call.read(), 10)
        return call, reply

    async def consumer(self, group: str, *topics: str, kind: int = d.ClientType.SIMPLE_CONSUMER) -> Any:
        settings = d.Settings(
            client_type=kind,  # type: ignore[arg-type]
            subscription=d.Subscription(
                group=d.Resource(name=group),
                subscriptions=[
                    d.SubscriptionEntry(
                        topic=d.Resource(name=t),
                        expression=d.FilterExpression(type=d.FilterType.TAG, expression="*"),
                    )
                    for t in topics
                ],
            ),
        )
        settings.request_timeout.seconds = 3
        call, reply = await self.handshake(settings)
        assert reply.status.code == Code.OK, reply
        return call

    async def producer(self, *topics: str) -> Any:
        settings = d.Settings(
            client_type=d.ClientType.PRODUCER,
            publishing=d.Publishing(topics=[d.Resource(name=t) for t in topics]),
        )
        settings.request_timeout.seconds = 3
        call, reply = await self.handshake(settings)
        assert reply.status.code == Code.OK, reply
        return call

    async def send(self, *messages: d.Message) -> s.SendMessageResponse:
        return await self.stub.SendMessage(
            s.SendMessageRequest(messages=messages), metadata=self.md, timeout=10
        )

    async def send_ok(self, topic: str, count: int = 1, **kwargs: Any) -> list[str]:
        msgs = [message(topic, **kwargs) for _ in range(count)]
        response = await self.send(*msgs)
        assert response.status.code == Code.OK, response
        return [m.system_properties.message_id for m in msgs]

    async def receive(
        self,
        group: str,
        topic: str,
        *,
        batch: int = 32,
        invisible: float | None = 30.0,
        auto_renew: bool = False,
        polling: float | None = 5.0,
        rpc_timeout: float | None = 10.0,
        expression: str = "*",
        filter_type: int = d.FilterType.TAG,
        queue_id: int = -1,
        attempt_id: str | None = None,
    ) -> list[s.ReceiveMessageResponse]:
        request = s.ReceiveMessageRequest(
            group=d.Resource(name=group),
            message_queue=d.MessageQueue(topic=d.Resource(name=topic), id=queue_id),
            filter_expression=d.FilterExpression(type=filter_type, expression=expression),  # type: ignore[arg-type]
            batch_size=batch,
            auto_renew=auto_renew,
        )
        if invisible is not None:
            sec = int(invisible)
            request.invisible_duration.seconds = sec
            request.invisible_duration.nanos = int((invisible - sec) * 1e9)
        if polling is not None:
            sec = int(polling)
            request.long_polling_timeout.seconds = sec
            request.long_polling_timeout.nanos = int((polling - sec) * 1e9)
        if attempt_id is not None:
            request.attempt_id = attempt_id
        call = self.stub.ReceiveMessage(request, metadata=self.md, timeout=rpc_timeout)
        return [response async for response in call]

    async def ack(self, group: str, topic: str, entries: Sequence[tuple[str, str]]) -> s.AckMessageResponse:
        return await self.stub.AckMessage(
            s.AckMessageRequest(
                group=d.Resource(name=group),
                topic=d.Resource(name=topic),
                entries=[s.AckMessageEntry(message_id=m, receipt_handle=h) for m, h in entries],
            ),
            metadata=self.md,
            timeout=5,
        )

    async def change_invisible(
        self, group: str, topic: str, message_id: str, handle: str, seconds: float
    ) -> s.ChangeInvisibleDurationResponse:
        request = s.ChangeInvisibleDurationRequest(
            group=d.Resource(name=group),
            topic=d.Resource(name=topic),
            receipt_handle=handle,
            message_id=message_id,
        )
        sec = int(seconds)
        request.invisible_duration.seconds = sec
        request.invisible_duration.nanos = int((seconds - sec) * 1e9)
        return await self.stub.ChangeInvisibleDuration(request, metadata=self.md, timeout=5)


def messages_of(stream: Sequence[s.ReceiveMessageResponse]) -> list[d.Message]:
    return [r.message for r in stream if r.WhichOneof("content") == "message"]


def status_of(stream: Sequence[s.ReceiveMessageResponse]) -> d.Status:
    statuses = [r.status for r in stream if r.WhichOneof("content") == "status"]
    assert len(statuses) == 1, stream
    return statuses[0]


def handles(stream: Sequence[s.ReceiveMessageResponse]) -> list[tuple[str, str]]:
    return [(m.system_properties.message_id, m.system_properties.receipt_handle) for m in messages_of(stream)]


async def eventually(check: Callable[[], Awaitable[bool] | bool], within: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


async def until_parked(srv: EmbeddedServer, group: str) -> None:
    """Until a ReceiveMessage of `group` waits on the server (a condition polled, not a fixed delay)."""
    for _ in range(1000):
        if srv.pending_polls(group):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"no ReceiveMessage of {group!r} parked")
