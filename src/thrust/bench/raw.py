"""The "raw" column of `thrust bench`: bare grpc.aio stubs, no client library, against any server.

The consumer opens a Telemetry stream with its settings (the real proxy reads a consumer's settings on
every ReceiveMessage: `ReceiveMessageActivity`), asks QueryAssignment for its queues and runs
`loops` ReceiveMessage(32) + AckMessage(32 entries) loops over them; the producer runs `in_flight`
loops of SendMessage with one message each. Both run in the bench process, so their CPU time is that
process's (`resource.getrusage`). This is what a Python gRPC client costs at the least: every client
library is measured against it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from thrust.bench.cpu import self_cpu_seconds

__all__ = ["Window", "raw_consume", "raw_produce", "receive_and_ack"]

Probe = Callable[[], None]


async def receive_and_ack(
    stub: Any, request: Any, metadata: Any, stop: asyncio.Event, acked: Callable[[int], None]
) -> None:
    """The bare consume loop of the raw rows (the bench's ceiling and the `raw` column): one
    ReceiveMessage of `request`, read to the end of its stream, then one AckMessage of everything it
    brought; `acked(n)` after each ack; until `stop` is set."""
    from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb

    while not stop.is_set():
        entries = []
        async for response in stub.ReceiveMessage(request, metadata=metadata, timeout=10):
            if response.WhichOneof("content") == "message":
                m = response.message
                entries.append(
                    spb.AckMessageEntry(
                        message_id=m.system_properties.message_id,
                        receipt_handle=m.system_properties.receipt_handle,
                    )
                )
        if entries:
            await stub.AckMessage(
                spb.AckMessageRequest(
                    group=request.group, topic=request.message_queue.topic, entries=entries
                ),
                metadata=metadata,
                timeout=10,
            )
            acked(len(entries))


class Window:
    """What a client measured over its window (the same fields for every client and driver)."""

    def __init__(self) -> None:
        self.count = 0  # messages consumed (or produced) inside the window
        self.seconds = 0.0
        self.cpu = 0.0  # the client process's CPU seconds inside the window
        self.total = 0  # messages consumed since the start, at the window's end
        self.latencies_ms: list[float] = []  # produce: send -> receipt of each message in the window
        self.errors = 0


def _endpoints_pb(endpoint: str) -> Any:
    from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb

    host, _, port = endpoint.rpartition(":")
    return pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=host, port=int(port))])


def _metadata(name: str) -> tuple[tuple[str, str], ...]:
    return (("x-mq-client-id", f"{name}@{os.getpid()}@{time.monotonic_ns()}"), ("x-mq-language", "PYTHON"))


@contextlib.asynccontextmanager
async def _telemetry(stub: Any, settings: Any, metadata: Any) -> AsyncIterator[None]:
    """A Telemetry stream that sends `settings` and stays open until the block ends."""
    from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb

    done = asyncio.Event()

    async def requests() -> AsyncIterator[Any]:
        yield spb.TelemetryCommand(settings=settings)
        await done.wait()

    call = stub.Telemetry(requests(), metadata=metadata)
    try:
        async with asyncio.timeout(10):
            await call.read()  # the server's settings answer
        yield
    finally:
        done.set()
        call.cancel()


async def raw_consume(
    endpoint: str,
    topic: str,
    group: str,
    *,
    loops: int,
    warmup: float,
    window: float,
    on_start: Probe,
    on_end: Probe,
    first_timeout: float = 30.0,
) -> Window:
    """ReceiveMessage(32) + AckMessage loops, `loops` of them over the assigned queues; `on_start` and
    `on_end` run right at the window's edges (the caller reads the server's counters there)."""
    import grpc

    from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
    from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
    from thrust._proto.apache.rocketmq.v2 import service_pb2_grpc as rpc

    metadata = _metadata("raw")
    resource = pb.Resource(name=topic)
    group_pb = pb.Resource(name=group)
    settings = pb.Settings(client_type=pb.SIMPLE_CONSUMER)
    settings.access_point.CopyFrom(_endpoints_pb(endpoint))
    settings.request_timeout.seconds = 3
    settings.user_agent.language = pb.PYTHON
    settings.user_agent.version = "raw"
    settings.subscription.group.CopyFrom(group_pb)
    settings.subscription.subscriptions.add(
        topic=resource, expression=pb.FilterExpression(type=pb.TAG, expression="*")
    )
    settings.subscription.long_polling_timeout.seconds = 5
    out = Window()
    received = 0
    stop = asyncio.Event()
    channel = grpc.aio.insecure_channel(endpoint)
    try:
        stub = rpc.MessagingServiceStub(channel)
        async with _telemetry(stub, settings, metadata):
            answer = await stub.QueryAssignment(
                spb.QueryAssignmentRequest(topic=resource, group=group_pb, endpoints=_endpoints_pb(endpoint)),
                metadata=metadata,
                timeout=10,
            )
            queues = [a.message_queue for a in answer.assignments]
            if not queues:
                raise RuntimeError(f"QueryAssignment gave no queue: {answer.status}")

            def acked(n: int) -> None:
                nonlocal received
                received += n

            def loop(i: int) -> Coroutine[Any, Any, None]:
                request = spb.ReceiveMessageRequest(
                    group=group_pb,
                    message_queue=queues[i % len(queues)],
                    filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"),
                    batch_size=32,
                    auto_renew=False,
                )
                request.invisible_duration.seconds = 30
                request.long_polling_timeout.seconds = 5
                return receive_and_ack(stub, request, metadata, stop, acked)

            tasks = [asyncio.create_task(loop(i)) for i in range(loops)]
            try:
                deadline = time.monotonic() + first_timeout
                while received == 0:
                    failed = [t for t in tasks if t.done()]
                    if failed:
                        failed[0].result()
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"no message within {first_timeout:.0f} s")
                    await asyncio.sleep(0.01)
                await asyncio.sleep(warmup)
                on_start()
                n0, cpu0, t0 = received, self_cpu_seconds(), time.monotonic()
                await asyncio.sleep(window)
                n1, cpu1, t1 = received, self_cpu_seconds(), time.monotonic()
                on_end()
            finally:
                stop.set()
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await channel.close(None)
    out.count, out.seconds, out.cpu, out.total = n1 - n0, t1 - t0, cpu1 - cpu0, n1
    return out


async def raw_produce(
    endpoint: str,
    topic: str,
    *,
    size: int,
    in_flight: int,
    warmup: float,
    window: float,
    on_start: Probe,
    on_end: Probe,
) -> Window:
    """`in_flight` loops of SendMessage with one message each."""
    import grpc

    from thrust._codec.ids import new_message_id
    from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
    from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
    from thrust._proto.apache.rocketmq.v2 import service_pb2_grpc as rpc

    metadata = _metadata("raw-send")
    template = pb.Message(topic=pb.Resource(name=topic), body=b"x" * max(1, size))
    template.system_properties.born_host = "bench"
    template.system_properties.message_type = pb.NORMAL
    template.system_properties.body_encoding = pb.IDENTITY
    out = Window()
    measuring = False
    stop = asyncio.Event()
    perf = time.perf_counter
    channel = grpc.aio.insecure_channel(endpoint)
    try:
        stub = rpc.MessagingServiceStub(channel)

        async def loop() -> None:
            while not stop.is_set():
                request = spb.SendMessageRequest()
                m = request.messages.add()
                m.CopyFrom(template)
                m.system_properties.message_id = new_message_id()
                m.system_properties.born_timestamp.GetCurrentTime()
                t0 = perf()
                try:
                    answer = await stub.SendMessage(request, metadata=metadata, timeout=10)
                    ok = answer.status.code == pb.OK
                except grpc.aio.AioRpcError:
                    ok = False
                if not measuring:
                    continue
                if ok:
                    out.count += 1
                    out.latencies_ms.append((perf() - t0) * 1000.0)
                else:
                    out.errors += 1

        tasks = [asyncio.create_task(loop()) for _ in range(in_flight)]
        try:
            await asyncio.sleep(warmup)
            on_start()
            measuring = True
            cpu0, t0 = self_cpu_seconds(), time.monotonic()
            await asyncio.sleep(window)
            cpu1, t1 = self_cpu_seconds(), time.monotonic()
            measuring = False
            on_end()
        finally:
            stop.set()
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await channel.close(None)
    out.seconds, out.cpu, out.total = t1 - t0, cpu1 - cpu0, out.count
    return out
