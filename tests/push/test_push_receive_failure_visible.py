"""A receive failure no retry can cure is visible: `stats().last_receive_error` holds the typed error and
the warning (every 10 s while it lasts) says it is not retriable, in a receive's words, not a listener's;
the consumer keeps trying and consumes once the server accepts its receives again."""

from __future__ import annotations

import logging

import pytest

from tests.push._util import run, until
from thrust._codec.status import Code
from thrust.errors import BadRequestError, ThrustError
from thrust.message import ConsumeResult, Message
from thrust.producer import Producer
from thrust.push_consumer import PushConsumer
from thrust.testing import embedded_server


def test_a_non_retriable_receive_failure_shows_in_stats_and_the_log(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        async with embedded_server(topics=["t:1"], groups=["g"]) as srv:
            srv.faults.fail_fraction("ReceiveMessage", Code.ILLEGAL_FILTER_EXPRESSION, 1.0)
            consumer = PushConsumer(
                endpoints=srv.endpoints[0],
                group="g",
                subscriptions={"t": "*"},
                listener=lambda m: ConsumeResult.SUCCESS,
            )
            with caplog.at_level(logging.WARNING, logger="thrust.consumer"):
                async with Producer(endpoints=srv.endpoints[0], topics=["t"]) as producer, consumer:
                    assert consumer.stats().last_receive_error is None
                    await until(lambda: consumer.stats().receive_failures >= 2, timeout=30)
                    error: ThrustError | None = consumer.stats().last_receive_error
                    assert isinstance(error, BadRequestError) and not error.retriable
                    assert error.code == Code.ILLEGAL_FILTER_EXPRESSION
                    # Fixed on the server: the same consumer consumes.
                    srv.faults.clear()
                    await producer.send(Message(topic="t", body=b"after"))
                    await until(lambda: consumer.stats().acked == 1, timeout=30)
        warnings = [r.getMessage() for r in caplog.records if "receive from" in r.getMessage()]
        assert warnings, caplog.records
        assert "ILLEGAL_FILTER_EXPRESSION" in warnings[0] and "not retriable" in warnings[0]
        assert not any("listener" in w or "counted as FAILURE" in w for w in warnings)

    run(main())
