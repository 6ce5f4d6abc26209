"""A round trip through every client against `thrust serve`, run by the python of the venv to check.

`make compat` runs it in venvs holding the oldest and the newest protobuf and grpcio that pyproject.toml
allows; tests/packaging/test_wheel.py runs it in a venv where only the built wheel is installed. It starts
the `thrust` console script beside its interpreter (`thrust serve --port 0 --auto-create`), then sends and
receives through `thrust.Producer`, `thrust.SimpleConsumer`, `thrust.PushConsumer` and the `thrust.sync`
facade, and prints one line `roundtrip ok ...` with the versions it ran on. Any failure exits non-zero.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import subprocess
import sys
import threading
import time
from pathlib import Path

import thrust
import thrust.sync

DEADLINE = 60.0  # seconds for the whole round trip; a healthy one takes about two


def serve() -> tuple[subprocess.Popen[str], threading.Thread, str]:
    """`thrust serve` from this venv's bin folder; returns the process, its stdout drain and its endpoint."""
    command = [str(Path(sys.executable).parent / "thrust"), "serve", "--port", "0", "--auto-create"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("listening on "):
            # Keep draining, so the server never blocks on a full pipe.
            drain = threading.Thread(target=process.stdout.read, daemon=True)
            drain.start()
            return process, drain, line.split()[-1]
    process.kill()
    raise SystemExit(f"thrust serve exited {process.wait()} before listening")


async def asyncio_clients(endpoint: str) -> None:
    async with thrust.Producer(endpoints=endpoint, topics=["compat"]) as producer:
        for i in range(3):
            await producer.send(thrust.Message(topic="compat", body=f"async-{i}".encode(), tag="a"))

    got: set[bytes] = set()
    async with thrust.SimpleConsumer(
        endpoints=endpoint, group="compat-simple", subscriptions={"compat": "a"}, await_duration=5
    ) as consumer:
        while len(got) < 3:
            for message in await consumer.receive(max_messages=8, invisible_duration=10):
                got.add(message.body)
                await consumer.ack(message)
    assert got == {b"async-0", b"async-1", b"async-2"}, got

    pushed: asyncio.Queue[bytes] = asyncio.Queue()

    async def listener(message: thrust.ReceivedMessage) -> thrust.ConsumeResult:
        await pushed.put(message.body)
        return thrust.ConsumeResult.SUCCESS

    async with thrust.PushConsumer(
        endpoints=endpoint, group="compat-push", subscriptions={"compat": "*"}, listener=listener
    ):
        bodies = {await pushed.get() for _ in range(3)}
    assert bodies == {b"async-0", b"async-1", b"async-2"}, bodies


def sync_clients(endpoint: str) -> None:
    with thrust.sync.Producer(endpoints=endpoint, topics=["compat-sync"]) as producer:
        producer.send(thrust.Message(topic="compat-sync", body=b"sync"))
    with thrust.sync.SimpleConsumer(
        endpoints=endpoint, group="compat-sync", subscriptions={"compat-sync": "*"}, await_duration=5
    ) as consumer:
        deadline = time.monotonic() + DEADLINE
        received: list[bytes] = []
        while not received and time.monotonic() < deadline:
            for message in consumer.receive(max_messages=4, invisible_duration=10):
                received.append(message.body)
                message.ack()
    assert received == [b"sync"], received


def main() -> int:
    from google.protobuf.internal import api_implementation

    process, drain, endpoint = serve()
    try:
        asyncio.run(asyncio.wait_for(asyncio_clients(endpoint), DEADLINE))
        sync_clients(endpoint)
    finally:
        process.terminate()
        process.wait(10)
        drain.join(10)
        assert process.stdout is not None
        process.stdout.close()
    versions = " ".join(
        f"{name}={importlib.metadata.version(name)}" for name in ("thrust", "protobuf", "grpcio")
    )
    print(f"roundtrip ok: {versions} (protobuf implementation {api_implementation.Type()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
