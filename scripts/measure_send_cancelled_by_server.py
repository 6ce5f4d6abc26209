"""What a caller of `Producer.send` sees when the server cancels the send in flight (issue "Behaviour defects
found by trying thrust as a new user", item 3).

    .venv/bin/python scripts/measure_send_cancelled_by_server.py

A RocketMQ proxy going down answers the calls it has in flight CANCELLED; the embedded server answers a stop
with GOAWAY instead (UNAVAILABLE), so its SendMessage is wrapped: the first call is parked, then answered
gRPC CANCELLED. Two cases: the server stays up (the retry can succeed), and the server stops right after
the CANCELLED (the retries find nothing). Prints what the caller got and how many SendMessage calls the
server saw.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

import thrust
from thrust.server.service.producer import ProducerRpcs
from thrust.testing import embedded_server

calls = 0
parked = asyncio.Event()
die = asyncio.Event()
answered = asyncio.Event()
_original = ProducerRpcs.SendMessage


async def _send(self: Any, request: Any, context: Any) -> Any:
    global calls
    calls += 1
    if calls == 1:
        parked.set()
        await die.wait()
        try:
            await context.abort(grpc.StatusCode.CANCELLED, "server shutting down")
        finally:
            answered.set()
    return await _original(self, request, context)


ProducerRpcs.SendMessage = _send  # type: ignore[method-assign]


async def case(stop: bool) -> None:
    global calls
    calls = 0
    for event in (parked, die, answered):
        event.clear()
    async with embedded_server(topics=["t"]) as srv:
        producer = thrust.Producer(endpoints=srv.endpoints[0], topics=["t"])
        await producer.start()
        send = asyncio.create_task(producer.send(thrust.Message(topic="t", body=b"x")))
        await parked.wait()
        die.set()
        if stop:
            await answered.wait()
            await srv.stop(grace=None)
        try:
            got = f"SendReceipt({(await send).message_id})"
        except thrust.ThrustError as exc:
            got = f"{type(exc).__name__}(retriable={exc.retriable}): {exc}"
        what = "server stops after the CANCELLED" if stop else "server stays up"
        print(f"{what}: SendMessage calls seen by the server: {calls}; the caller got {got}")
        await producer.close(1.0)


async def main() -> None:
    await case(stop=False)
    await case(stop=True)


if __name__ == "__main__":
    asyncio.run(main())
