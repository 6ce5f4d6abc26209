"""A call the *server* cancels is a transport failure, retried like UNAVAILABLE; not ClientClosedError.

A RocketMQ proxy going down resets the streams it has in flight, and the client reads CANCELLED (grpc-java
cancels them; an HTTP/2 RST_STREAM(CANCEL) reads the same). thrust once translated every gRPC CANCELLED into
ClientClosedError, so a send in flight when the server died failed at once, unretried, with "the client was
closed" while the client was open. The embedded server (grpc.aio) answers a stop with GOAWAY instead, which
reads UNAVAILABLE; so the server's SendMessage is wrapped here: the first call is parked until the test lets
the server "die", then answered gRPC CANCELLED, as the proxy does. Real embedded server, real gRPC.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

import thrust
from tests.client._util import run
from tests.push._util import until
from thrust.server.service.producer import ProducerRpcs
from thrust.testing import embedded_server


class _DyingSend:
    """Wraps `ProducerRpcs.SendMessage`: the first call waits for `die`, then ends gRPC CANCELLED."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        self.parked = asyncio.Event()
        self.die = asyncio.Event()
        self.answered = asyncio.Event()
        original = ProducerRpcs.SendMessage
        hook = self

        async def send(self: Any, request: Any, context: Any) -> Any:
            hook.calls += 1
            if hook.calls == 1:
                hook.parked.set()
                await hook.die.wait()
                try:
                    await context.abort(grpc.StatusCode.CANCELLED, "server shutting down")
                finally:
                    hook.answered.set()
            return await original(self, request, context)

        monkeypatch.setattr(ProducerRpcs, "SendMessage", send)


def test_a_send_the_server_cancels_is_retried_and_succeeds(monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        hook = _DyingSend(monkeypatch)
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with thrust.Producer(endpoints=ep, topics=["t"]) as p:
                send = asyncio.create_task(p.send(thrust.Message(topic="t", body=b"x")))
                await hook.parked.wait()
                hook.die.set()
                receipt = await send  # before: ClientClosedError("SendMessage cancelled: CANCELLED")
            assert hook.calls == 2  # the cancelled attempt and its retry (same message id)
            assert srv.stats.calls["SendMessage"] == 1  # only the retry reached the broker
            async with thrust.SimpleConsumer(endpoints=ep, group="g", subscriptions={"t": "*"}) as c:
                got = await c.receive(32)
            assert [(m.message_id, m.body) for m in got] == [(receipt.message_id, b"x")]

    run(scenario)


def test_a_send_in_flight_when_the_server_dies_fails_retriable_and_works_after_a_restart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server cancels the send in flight and stops: the producer's retries (3 attempts, 10 ms and 20 ms
    apart: the proxy's producer backoff) find it gone, so the caller gets the retriable ConnectionError of
    the last attempt. Once the server is back on the same port, the same producer sends again."""

    async def scenario() -> None:
        hook = _DyingSend(monkeypatch)
        async with embedded_server(topics=["t"]) as srv:
            ep = srv.endpoints[0]
            port = srv.ports[0]
            p = thrust.Producer(endpoints=ep, topics=["t"])
            await p.start()
            try:
                send = asyncio.create_task(p.send(thrust.Message(topic="t", body=b"x")))
                await hook.parked.wait()
                hook.die.set()
                await hook.answered.wait()  # CANCELLED first, then the server goes (else: GOAWAY)
                await srv.stop(grace=None)
                with pytest.raises(thrust.ThrustError) as info:
                    await send
                assert type(info.value) is thrust.ConnectionError, repr(info.value)
                assert info.value.retriable
                assert hook.calls == 1  # the retries found no server
                async with embedded_server(topics=["t"], port=port) as again:
                    receipt = None
                    for _ in range(400):  # the channel reconnects within its 1-5 s backoff
                        try:
                            receipt = await p.send(thrust.Message(topic="t", body=b"y"))
                            break
                        except thrust.ConnectionError:
                            await asyncio.sleep(0.05)
                    assert receipt is not None
                    assert again.stats.calls["SendMessage"] >= 1
            finally:
                await p.close()

    run(scenario)


def test_a_send_the_server_cancels_while_the_client_closes_is_client_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Closing is the one case where the CANCELLED still means "the client closed": close waits for the
    send in flight, the server cancels it meanwhile, and the caller gets ClientClosedError, unretried."""

    async def scenario() -> None:
        hook = _DyingSend(monkeypatch)
        async with embedded_server(topics=["t"]) as srv:
            p = thrust.Producer(endpoints=srv.endpoints[0], topics=["t"])
            await p.start()
            send = asyncio.create_task(p.send(thrust.Message(topic="t", body=b"x")))
            await hook.parked.wait()
            session = p.session
            closing = asyncio.create_task(p.close(timeout=20))
            await until(lambda: session.closed)
            hook.die.set()
            with pytest.raises(thrust.ClientClosedError):
                await send
            await closing
            assert hook.calls == 1

    run(scenario)
