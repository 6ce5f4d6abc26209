"""Which exception a status code becomes: every `Code` through `error_for_status` (thrust.errors), every gRPC
status through `translate_grpc_error` (thrust._io.rpc), and the same codes reaching user code over real gRPC
from the embedded server, in a unary answer, a ReceiveMessage stream and an AckMessage entry.

The mapping follows the Java client's `StatusChecker` (docs/protocol.md §2.3), with thrust's own refinements
named in thrust.errors (MESSAGE_CORRUPTED and NOT_IMPLEMENTED have classes of their own)."""

from __future__ import annotations

import grpc
import pytest

import thrust
from tests.client._util import run
from thrust._codec.status import Code
from thrust._io.rpc import translate_grpc_error
from thrust.errors import (
    BadRequestError,
    ForbiddenError,
    InternalError,
    InvalidReceiptHandleError,
    LiteSubscriptionQuotaExceededError,
    LiteTopicQuotaExceededError,
    MessageCorruptedError,
    NotFoundError,
    PayloadTooLargeError,
    ThrustError,
    TimeoutError,
    TooManyRequestsError,
    UnauthorizedError,
    UnsupportedError,
    error_for_status,
)
from thrust.server.faults import Rpc
from thrust.testing import embedded_server

# Every code of definition.proto but OK and MULTIPLE_RESULTS (never errors), with the class it must become.
EXPECTED: dict[Code, type[ThrustError]] = {
    Code.CODE_UNSPECIFIED: UnsupportedError,
    Code.BAD_REQUEST: BadRequestError,
    Code.ILLEGAL_ACCESS_POINT: BadRequestError,
    Code.ILLEGAL_TOPIC: BadRequestError,
    Code.ILLEGAL_CONSUMER_GROUP: BadRequestError,
    Code.ILLEGAL_MESSAGE_TAG: BadRequestError,
    Code.ILLEGAL_MESSAGE_KEY: BadRequestError,
    Code.ILLEGAL_MESSAGE_GROUP: BadRequestError,
    Code.ILLEGAL_MESSAGE_PROPERTY_KEY: BadRequestError,
    Code.INVALID_TRANSACTION_ID: BadRequestError,
    Code.ILLEGAL_MESSAGE_ID: BadRequestError,
    Code.ILLEGAL_FILTER_EXPRESSION: BadRequestError,
    Code.ILLEGAL_INVISIBLE_TIME: BadRequestError,
    Code.ILLEGAL_DELIVERY_TIME: BadRequestError,
    Code.INVALID_RECEIPT_HANDLE: InvalidReceiptHandleError,
    Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE: BadRequestError,
    Code.UNRECOGNIZED_CLIENT_TYPE: BadRequestError,
    Code.MESSAGE_CORRUPTED: MessageCorruptedError,
    Code.CLIENT_ID_REQUIRED: BadRequestError,
    Code.ILLEGAL_POLLING_TIME: BadRequestError,
    Code.ILLEGAL_OFFSET: BadRequestError,
    Code.ILLEGAL_LITE_TOPIC: BadRequestError,
    Code.INVALID_CLIENT_PROPERTIES: BadRequestError,
    Code.UNAUTHORIZED: UnauthorizedError,
    Code.PAYMENT_REQUIRED: BadRequestError,
    Code.FORBIDDEN: ForbiddenError,
    Code.NOT_FOUND: NotFoundError,
    Code.MESSAGE_NOT_FOUND: NotFoundError,
    Code.TOPIC_NOT_FOUND: NotFoundError,
    Code.CONSUMER_GROUP_NOT_FOUND: NotFoundError,
    Code.OFFSET_NOT_FOUND: NotFoundError,
    Code.REQUEST_TIMEOUT: TimeoutError,
    Code.PAYLOAD_TOO_LARGE: PayloadTooLargeError,
    Code.MESSAGE_BODY_TOO_LARGE: PayloadTooLargeError,
    Code.MESSAGE_BODY_EMPTY: BadRequestError,
    Code.PRECONDITION_FAILED: BadRequestError,
    Code.TOO_MANY_REQUESTS: TooManyRequestsError,
    Code.LITE_TOPIC_QUOTA_EXCEEDED: LiteTopicQuotaExceededError,
    Code.LITE_SUBSCRIPTION_QUOTA_EXCEEDED: LiteSubscriptionQuotaExceededError,
    Code.REQUEST_HEADER_FIELDS_TOO_LARGE: PayloadTooLargeError,
    Code.MESSAGE_PROPERTIES_TOO_LARGE: PayloadTooLargeError,
    Code.INTERNAL_ERROR: InternalError,
    Code.INTERNAL_SERVER_ERROR: InternalError,
    Code.HA_NOT_AVAILABLE: InternalError,
    Code.NOT_IMPLEMENTED: UnsupportedError,
    Code.PROXY_TIMEOUT: TimeoutError,
    Code.MASTER_PERSISTENCE_TIMEOUT: TimeoutError,
    Code.SLAVE_PERSISTENCE_TIMEOUT: TimeoutError,
    Code.UNSUPPORTED: UnsupportedError,
    Code.VERSION_UNSUPPORTED: UnsupportedError,
    Code.VERIFY_FIFO_MESSAGE_UNSUPPORTED: UnsupportedError,
    Code.FAILED_TO_CONSUME_MESSAGE: UnsupportedError,
}
RETRIABLE = (TooManyRequestsError, InternalError, TimeoutError)


def test_the_table_covers_every_error_code() -> None:
    assert set(EXPECTED) == set(Code) - {Code.OK, Code.MULTIPLE_RESULTS}


@pytest.mark.parametrize("code", list(EXPECTED), ids=[c.name for c in EXPECTED])
def test_every_status_code_becomes_its_exception(code: Code) -> None:
    err = error_for_status(int(code), "the server said so", request_id="req-7")
    assert type(err) is EXPECTED[code], (code, type(err))
    assert err.code is code and err.message == "the server said so" and err.request_id == "req-7"
    # ILLEGAL_POLLING_TIME: a request delayed on its way (see thrust.errors.error_for_status).
    # The lite quotas are 429s that waiting does not cure (thrust.errors): not retriable.
    quota = isinstance(err, (LiteTopicQuotaExceededError, LiteSubscriptionQuotaExceededError))
    assert err.retriable is ((isinstance(err, RETRIABLE) and not quota) or code is Code.ILLEGAL_POLLING_TIME)


def test_a_code_this_client_does_not_know_keeps_its_number() -> None:
    for number, cls in [(40099, BadRequestError), (40499, NotFoundError), (50099, InternalError)]:
        err = error_for_status(number, "")
        assert type(err) is cls and err.code == number and err.message == str(number)
    unknown = error_for_status(70000, "")
    assert type(unknown) is UnsupportedError and unknown.code == 70000
    # Without a message the code's name says what happened.
    assert error_for_status(Code.FORBIDDEN, "").message == "FORBIDDEN"


@pytest.mark.parametrize(
    ("status", "cls", "retriable"),
    [
        (grpc.StatusCode.DEADLINE_EXCEEDED, TimeoutError, True),
        (grpc.StatusCode.UNAVAILABLE, thrust.ConnectionError, True),
        (grpc.StatusCode.CANCELLED, thrust.ConnectionError, True),
        (grpc.StatusCode.UNAUTHENTICATED, UnauthorizedError, False),
        (grpc.StatusCode.PERMISSION_DENIED, ForbiddenError, False),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, TooManyRequestsError, True),
        (grpc.StatusCode.UNIMPLEMENTED, UnsupportedError, False),
        (grpc.StatusCode.INVALID_ARGUMENT, BadRequestError, False),
        (grpc.StatusCode.FAILED_PRECONDITION, BadRequestError, False),
        (grpc.StatusCode.OUT_OF_RANGE, BadRequestError, False),
        (grpc.StatusCode.NOT_FOUND, BadRequestError, False),
        (grpc.StatusCode.INTERNAL, InternalError, True),
        (grpc.StatusCode.UNKNOWN, InternalError, True),
        (grpc.StatusCode.ABORTED, InternalError, True),
        (grpc.StatusCode.DATA_LOSS, InternalError, True),
    ],
    ids=lambda v: v.name if isinstance(v, grpc.StatusCode) else None,
)
def test_every_grpc_status_becomes_its_exception(
    status: grpc.StatusCode, cls: type[ThrustError], retriable: bool
) -> None:
    exc = grpc.aio.AioRpcError(status, grpc.aio.Metadata(), grpc.aio.Metadata(), details="from the wire")
    err = translate_grpc_error(exc, "req-9", "SendMessage")
    assert type(err) is cls, (status, type(err))
    assert err.retriable is retriable
    assert (
        err.request_id == "req-9" and "SendMessage failed" in err.message and "from the wire" in err.message
    )
    if cls is UnauthorizedError:
        assert err.code == Code.UNAUTHORIZED


def test_resource_exhausted_for_a_message_over_the_size_limit_is_final() -> None:
    # grpc core's and grpc-java's words for a message over the receiver's max size (S8a).
    for details in ("Received message larger than max (5 vs. 4)", "gRPC message exceeds maximum size 4"):
        exc = grpc.aio.AioRpcError(
            grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details
        )
        err = translate_grpc_error(exc, None, "SendMessage")
        assert type(err) is PayloadTooLargeError and err.code == Code.PAYLOAD_TOO_LARGE
        assert not err.retriable


# Over real gRPC: the status the server answers reaches the caller as its exception --------------------


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (Code.FORBIDDEN, ForbiddenError),
        (Code.INTERNAL_SERVER_ERROR, InternalError),
        (Code.NOT_IMPLEMENTED, UnsupportedError),
        (Code.UNSUPPORTED, UnsupportedError),
        (Code.MESSAGE_CORRUPTED, MessageCorruptedError),
        (Code.BAD_REQUEST, BadRequestError),
        (Code.PROXY_TIMEOUT, TimeoutError),
        (Code.TOPIC_NOT_FOUND, NotFoundError),
    ],
    ids=lambda v: v.name if isinstance(v, Code) else None,
)
def test_a_send_answered_with_a_status_raises_its_exception(code: Code, cls: type[ThrustError]) -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv:
            # One attempt: a retriable code is not retried into something else.
            async with thrust.Producer(endpoints=srv.endpoints[0], topics=["t"], max_attempts=1) as p:
                srv.faults.fail_next(Rpc.SEND_MESSAGE, code, message=f"injected {code.name}")
                with pytest.raises(ThrustError) as info:
                    await p.send(thrust.Message(topic="t", body=b"x"))
                assert type(info.value) is cls, repr(info.value)
                assert info.value.code is code and info.value.message == f"injected {code.name}"
                assert info.value.request_id  # the x-mq-request-id of the call
                assert srv.stats.injected["SendMessage"] == 1 and srv.stats.entries["SendMessage"] == 0

    run(scenario)


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (Code.FORBIDDEN, ForbiddenError),
        (Code.INTERNAL_SERVER_ERROR, InternalError),
        (Code.UNSUPPORTED, UnsupportedError),
        (Code.BAD_REQUEST, BadRequestError),
    ],
    ids=lambda v: v.name if isinstance(v, Code) else None,
)
def test_a_receive_stream_ending_with_a_status_raises_its_exception(
    code: Code, cls: type[ThrustError]
) -> None:
    async def scenario() -> None:
        async with (
            embedded_server(topics=["t"], groups=["g"]) as srv,
            thrust.SimpleConsumer(
                endpoints=srv.endpoints[0], group="g", subscriptions={"t": "*"}, await_duration=5
            ) as c,
        ):
            srv.faults.fail_next(Rpc.RECEIVE_MESSAGE, code)
            with pytest.raises(ThrustError) as info:
                await c.receive(32, 10)
            assert type(info.value) is cls and info.value.code is code, repr(info.value)

    run(scenario)


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (Code.FORBIDDEN, ForbiddenError),
        (Code.INTERNAL_SERVER_ERROR, InternalError),
        (Code.MESSAGE_CORRUPTED, MessageCorruptedError),
        (Code.BAD_REQUEST, BadRequestError),
    ],
    ids=lambda v: v.name if isinstance(v, Code) else None,
)
def test_an_ack_entry_with_a_status_raises_its_exception(code: Code, cls: type[ThrustError]) -> None:
    """The entry's status, not the call's: `ack` raises it, `ack_many` returns it for that message."""

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
            srv.faults.fail_ack_entries(code, first_attempts=1)
            with pytest.raises(ThrustError) as info:
                await c.ack(got[0])
            assert type(info.value) is cls and info.value.code is code, repr(info.value)
            [error] = await c.ack_many([got[1]])
            assert type(error) is cls and error is not None and error.code is code
            srv.faults.clear()
            assert await c.ack_many(got) == [None, None]  # the handles were still good

    run(scenario)


def test_a_receive_delayed_past_the_minimum_poll_is_refused_as_a_retriable_bad_request() -> None:
    """The proxy refuses a ReceiveMessage whose deadline has under 5 s left when it gets there
    (ReceiveMessageActivity): with a 1 s request timeout the client's deadline is 5 + 1 s, and 2 s of
    injected latency leave about 4. The same receive without the delay succeeds."""

    async def scenario() -> None:
        async with (
            embedded_server(topics=["t"], groups=["g"]) as srv,
            thrust.SimpleConsumer(
                endpoints=srv.endpoints[0],
                group="g",
                subscriptions={"t": "*"},
                await_duration=5,
                request_timeout=1,
            ) as c,
        ):
            srv.faults.add_latency(Rpc.RECEIVE_MESSAGE, 2.0)
            with pytest.raises(BadRequestError) as info:
                await c.receive(32, 10)
            assert info.value.code is Code.ILLEGAL_POLLING_TIME and info.value.retriable
            srv.faults.clear()
            assert await c.receive(32, 10) == []  # the retry the flag promises: nothing queued, no error

    run(scenario)
