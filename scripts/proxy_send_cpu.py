"""The real proxy's CPU per SendMessage, thrust against bare grpc.aio, at the same send rate.

`thrust bench`'s produce scenario runs every client as fast as it can, so the proxy's CPU "per send" there
also holds the JVM's fixed cost (timers, GC, the broker's flush and scan threads) divided by a different
rate for each client. This script takes the rate out of it: it starts a real RocketMQ in local mode (one
JVM holds the proxy and its broker, `thrust.cluster`), then for each round and each client in turn sends
`--rate` messages per second (at most 128 in flight) for `--duration` seconds, and reads the JVMs' CPU
(/proc, namesrv included) over that window and over an idle window of the same length just before it.
It prints, per client, the JVM's CPU per send with and without the idle cost, and the sends' p50.

    .venv/bin/python scripts/proxy_send_cpu.py --rate 400 --duration 10 --rounds 3

Clients: `raw` (grpc.aio SendMessage with one message, the client id and language headers only, no
Telemetry stream: what `thrust bench`'s raw column does), `raw+settings` (the same with a Telemetry
stream that announced producer Settings, as every real client has), `thrust-grpcio` and
`thrust-native` (a `Producer`, awaited sends, on each transport).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import thrust
from thrust.cluster import RocketMQCluster

TOPIC = "sendcpu"
_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / _TICKS
    return total


Send = Callable[[bytes], Awaitable[None]]


@contextlib.asynccontextmanager
async def _raw(endpoint: str, settings: bool) -> AsyncIterator[Send]:
    import grpc

    from thrust._codec.ids import new_message_id
    from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
    from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
    from thrust._proto.apache.rocketmq.v2 import service_pb2_grpc as rpc

    metadata = (("x-mq-client-id", f"raw@{os.getpid()}@{time.monotonic_ns()}"), ("x-mq-language", "PYTHON"))
    channel = grpc.aio.insecure_channel(endpoint)
    stub = rpc.MessagingServiceStub(channel)
    done = asyncio.Event()
    call = None
    if settings:
        s = pb.Settings(client_type=pb.PRODUCER)
        s.publishing.topics.add(name=TOPIC)
        s.request_timeout.seconds = 3
        s.access_point.scheme = pb.IPv4
        host, _, port = endpoint.rpartition(":")
        s.access_point.addresses.add(host=host, port=int(port))

        async def requests() -> AsyncIterator[spb.TelemetryCommand]:
            yield spb.TelemetryCommand(settings=s)
            await done.wait()

        call = stub.Telemetry(requests(), metadata=metadata)
        await call.read()

    async def send(body: bytes) -> None:
        request = spb.SendMessageRequest()
        m = request.messages.add()
        m.topic.name = TOPIC
        m.body = body
        m.system_properties.message_id = new_message_id()
        m.system_properties.born_host = "bench"
        m.system_properties.born_timestamp.GetCurrentTime()
        m.system_properties.message_type = pb.NORMAL
        m.system_properties.body_encoding = pb.IDENTITY
        answer = await stub.SendMessage(request, metadata=metadata, timeout=10)
        if answer.status.code != pb.OK:
            raise RuntimeError(f"send failed: {answer.status}")

    try:
        yield send
    finally:
        done.set()
        if call is not None:
            call.cancel()
        await channel.close(None)


@contextlib.asynccontextmanager
async def _thrust(endpoint: str, transport: str) -> AsyncIterator[Send]:
    async with thrust.Producer(endpoints=endpoint, topics=[TOPIC], transport=transport) as producer:  # type: ignore[arg-type]
        assert producer.stats().transport == transport

        async def send(body: bytes) -> None:
            await producer.send(thrust.Message(topic=TOPIC, body=body))

        yield send


def _client(name: str, endpoint: str) -> contextlib.AbstractAsyncContextManager[Send]:
    if name == "raw":
        return _raw(endpoint, settings=False)
    if name == "raw+settings":
        return _raw(endpoint, settings=True)
    return _thrust(endpoint, name.removeprefix("thrust-"))


async def _window(send: Send, rate: float, duration: float, body: bytes) -> tuple[int, list[float]]:
    """Send at `rate` for `duration` (at most 128 in flight); (sends done, latencies in ms)."""
    slots = asyncio.Semaphore(128)
    latencies: list[float] = []
    tasks: set[asyncio.Task[None]] = set()

    async def one() -> None:
        t0 = time.perf_counter()
        try:
            await send(body)
            latencies.append((time.perf_counter() - t0) * 1000.0)
        finally:
            slots.release()

    start = time.monotonic()
    n = 0
    while True:
        due = start + n / rate
        now = time.monotonic()
        if due - start >= duration:
            break
        if due > now:
            await asyncio.sleep(due - now)
        await slots.acquire()
        task = asyncio.create_task(one())
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        n += 1
    if tasks:
        await asyncio.gather(*tasks)
    return len(latencies), latencies


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=400.0)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--clients", default="raw,raw+settings,thrust-grpcio,thrust-native")
    args = ap.parse_args()
    clients = args.clients.split(",")
    body = b"x" * args.size
    per: dict[str, list[tuple[float, float, float]]] = {c: [] for c in clients}
    with RocketMQCluster(mode="local", topics=[TOPIC]) as cluster:
        pids = [cluster.pid("proxy"), cluster.pid("namesrv")]
        print(
            f"RocketMQ {cluster.info.version} local mode at {cluster.endpoint}; JVM pids {pids}", flush=True
        )
        for r in range(args.rounds):
            for name in clients:
                async with _client(name, cluster.endpoint) as send:
                    await _window(send, args.rate, 2.0, body)  # warm-up: connections, JIT of this path
                    c0 = _cpu(pids)
                    await asyncio.sleep(args.duration)
                    idle = _cpu(pids) - c0
                    c1 = _cpu(pids)
                    sent, lat = await _window(send, args.rate, args.duration, body)
                    busy = _cpu(pids) - c1
                per[name].append((busy / sent * 1e6, (busy - idle) / sent * 1e6, statistics.median(lat)))
                print(
                    f"round {r + 1} {name:14s} sent {sent:6d}  JVM CPU per send {busy / sent * 1e6:7.1f} µs,"
                    f" less idle {(busy - idle) / sent * 1e6:7.1f} µs"
                    f" (idle {idle / args.duration * 100:.1f} % of a core),"
                    f" p50 {statistics.median(lat):.2f} ms; load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    print(f"\nmedians over {args.rounds} rounds at {args.rate:g} msg/s, {args.size} B:")
    for name, rows in per.items():
        print(
            f"  {name:14s} JVM CPU per send {statistics.median(r[0] for r in rows):7.1f} µs,"
            f" less idle {statistics.median(r[1] for r in rows):7.1f} µs,"
            f" p50 {statistics.median(r[2] for r in rows):.2f} ms"
        )


if __name__ == "__main__":
    asyncio.run(main())
