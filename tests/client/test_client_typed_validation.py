"""Local validation raises typed thrust errors before any I/O: a body over the limit is a
`PayloadTooLargeError` (as a server refusal is) and a `ValidationError`; a batch of several topics, types
or message groups is refused as the Java client refuses it (BAD_REQUEST, not MESSAGE_CORRUPTED); a
SimpleConsumer's bad await_duration is a ValidationError like its bad invisible_duration."""

from __future__ import annotations

import pytest

import thrust
from tests.client._util import run
from thrust._codec.status import Code
from thrust.testing import embedded_server

MiB = 1024 * 1024


def test_a_body_over_4_mib_is_caught_as_payload_too_large_and_as_validation_error() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv:
            async with thrust.Producer(endpoints=srv.endpoints[0], topics=["t"]) as p:
                calls = srv.stats.calls["SendMessage"]
                for catch in (thrust.PayloadTooLargeError, thrust.ValidationError):
                    with pytest.raises(catch) as info:
                        await p.send(thrust.Message(topic="t", body=b"x" * (4 * MiB + 1)))
                    assert info.value.code == Code.MESSAGE_BODY_TOO_LARGE
                with pytest.raises(thrust.PayloadTooLargeError):
                    await p.send_batch([thrust.Message(topic="t", body=b"x" * (4 * MiB + 1))])
                assert srv.stats.calls["SendMessage"] == calls

    run(scenario)


def test_a_mixed_batch_is_a_bad_request_before_any_io() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["a", "b"]) as srv:
            # Not started: a refused batch must not even start the producer.
            p = thrust.Producer(endpoints=srv.endpoints[0], topics=["a", "b"])
            try:
                for batch, what in [
                    ([thrust.Message(topic="a", body=b"1"), thrust.Message(topic="b", body=b"2")], "topics"),
                    (
                        [thrust.Message(topic="a", body=b"1"), thrust.Message(topic="a", body=b"2", delay=5)],
                        "types",
                    ),
                    (
                        [
                            thrust.Message(topic="a", body=b"1", message_group="g1"),
                            thrust.Message(topic="a", body=b"2", message_group="g2"),
                        ],
                        "message groups",
                    ),
                ]:
                    with pytest.raises(thrust.ValidationError, match=f"different {what}") as info:
                        await p.send_batch(batch)
                    assert info.value.code == Code.BAD_REQUEST
                    assert not isinstance(info.value, thrust.MessageCorruptedError)
                assert sum(srv.stats.calls.values()) == 0
            finally:
                await p.close()

    run(scenario)


def test_something_else_than_a_message_is_a_type_error_before_any_io_in_every_send() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"]) as srv:
            async with thrust.Producer(endpoints=srv.endpoints[0], topics=["t"]) as p:
                calls = srv.stats.calls["SendMessage"]
                for send in (p.send, p.send_async, lambda m: p.send_batch([m])):
                    with pytest.raises(TypeError, match=r"expected thrust\.Message"):
                        await send({"topic": "t", "body": b"x"})  # type: ignore[arg-type]
                with pytest.raises(TypeError, match=r"expected thrust\.Message"):
                    await p.send_batch([thrust.Message(topic="t", body=b"x"), "x"])  # type: ignore[list-item]
                assert srv.stats.calls["SendMessage"] == calls
                await p.send(thrust.Message(topic="t", body=b"ok"))  # and the producer is unharmed

    run(scenario)


def test_simple_consumer_await_duration_is_a_validation_error_like_invisible_duration() -> None:
    kwargs = {"endpoints": "127.0.0.1:1", "group": "g", "subscriptions": {"t": "*"}}
    with pytest.raises(thrust.ValidationError) as invisible:
        thrust.SimpleConsumer(**kwargs, invisible_duration=1)  # type: ignore[arg-type]
    assert invisible.value.code == Code.ILLEGAL_INVISIBLE_TIME
    for bad in (0, -1, 3601):
        with pytest.raises(thrust.ValidationError) as awaited:
            thrust.SimpleConsumer(**kwargs, await_duration=bad)  # type: ignore[arg-type]
        assert awaited.value.code == Code.ILLEGAL_POLLING_TIME
        assert isinstance(awaited.value, ValueError)  # what it raised before, still caught the same way
