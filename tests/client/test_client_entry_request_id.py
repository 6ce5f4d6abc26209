"""A refused entry's error keeps the request id of the call that answered it (`thrust._io.rpc.status_error`):
a SendMessage entry of a linger batch, an AckMessage entry through `ack()` and `ack_many()`."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import thrust
from tests.client._util import run
from thrust._codec.status import Code
from thrust._io.rpc import OK_OR_MULTIPLE, status_error
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust.errors import InternalError, InvalidReceiptHandleError, PayloadTooLargeError, ThrustError
from thrust.testing import embedded_server


def test_status_error_maps_a_status_and_keeps_the_request_id() -> None:
    assert status_error(pb.Status(code=Code.OK), "r-1") is None
    assert status_error(pb.Status(code=Code.MULTIPLE_RESULTS), "r-1") is not None
    assert status_error(pb.Status(code=Code.MULTIPLE_RESULTS), "r-1", OK_OR_MULTIPLE) is None
    error = status_error(pb.Status(code=Code.INVALID_RECEIPT_HANDLE, message="expired"), "r-2")
    assert type(error) is InvalidReceiptHandleError
    assert (error.code, error.message, error.request_id) == (Code.INVALID_RECEIPT_HANDLE, "expired", "r-2")
    assert "request_id=r-2" in str(error)
    unnamed = status_error(pb.Status(code=Code.INTERNAL_SERVER_ERROR), None)
    assert type(unnamed) is InternalError and unnamed.request_id is None and unnamed.retriable


def _spy(session: Any, rpc: str, edit: Any = None) -> list[str | None]:
    """The request ids of `session`'s `rpc` calls, in order; `edit(response)` may change each answer."""
    ids: list[str | None] = []
    original = session.call

    async def call(endpoint: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        answer = await original(endpoint, name, *args, **kwargs)
        if name == rpc and kwargs.get("with_request_id"):
            response, request_id = answer
            ids.append(request_id)
            if edit is not None:
                edit(response)
        return answer

    session.call = call
    return ids


def test_a_refused_entry_of_a_linger_batch_carries_its_calls_request_id() -> None:
    def refuse_second(response: Any) -> None:
        # The embedded server answers a batch with one entry, as the proxy does; rewritten into one entry
        # per message with the second refused, the answer of a server that stores them one by one.
        [entry] = response.entries
        refused = response.entries.add()
        refused.status.code = Code.MESSAGE_BODY_TOO_LARGE
        refused.status.message = "refused"
        refused.message_id = entry.message_id
        response.status.code = Code.MULTIPLE_RESULTS

    async def scenario() -> None:
        async with (
            embedded_server(topics=["t"]) as srv,
            thrust.Producer(
                endpoints=srv.endpoints[0], topics=["t"], batch_max_messages=2, batch_linger=30.0
            ) as p,
        ):
            ids = _spy(p.session, "SendMessage", refuse_second)
            first, second = await asyncio.gather(
                p.send(thrust.Message(topic="t", body=b"a")),
                p.send(thrust.Message(topic="t", body=b"b")),
                return_exceptions=True,
            )
            assert isinstance(first, thrust.SendReceipt)
            assert isinstance(second, PayloadTooLargeError), repr(second)
            assert len(ids) == 1 and ids[0]
            assert second.request_id == ids[0]
            assert p.stats().messages_failed == 1

    run(scenario)


def test_a_refused_ack_entry_carries_its_calls_request_id() -> None:
    async def scenario() -> None:
        async with (
            embedded_server(topics=["t"], groups=["g"]) as srv,
            thrust.Producer(endpoints=srv.endpoints[0], topics=["t"]) as p,
            thrust.SimpleConsumer(
                endpoints=srv.endpoints[0], group="g", subscriptions={"t": "*"}, await_duration=5
            ) as c,
        ):
            for body in (b"a", b"b"):
                await p.send(thrust.Message(topic="t", body=body))
            got: list[thrust.ReceivedMessage] = []
            while len(got) < 2:
                got += await c.receive(32, 30)
            ids = _spy(c.session, "AckMessage")
            srv.faults.fail_ack_entries(Code.INTERNAL_SERVER_ERROR, first_attempts=1)
            with pytest.raises(ThrustError) as info:
                await c.ack(got[0])
            [error] = await c.ack_many([got[1]])
            assert len(ids) == 2 and all(ids) and ids[0] != ids[1]
            assert info.value.code is Code.INTERNAL_SERVER_ERROR and info.value.request_id == ids[0]
            assert error is not None and error.request_id == ids[1]

    run(scenario)
