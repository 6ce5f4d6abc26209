"""SimpleConsumer with an await duration below the proxy's 5 s minimum long poll (reference §7.5)."""

from __future__ import annotations

import time

import thrust
from tests.client._util import receive_n, run
from thrust._core.settings import receive_deadline
from thrust.testing import embedded_server


def test_receive_deadline_covers_the_proxys_minimum_poll() -> None:
    assert receive_deadline(1.0, 3.0) == 8.0
    assert receive_deadline(0.1, 0.5) == 5.5
    assert receive_deadline(20.0, 3.0) == 23.0


def test_short_await_duration_receives_instead_of_illegal_polling_time() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=1
                ) as c,
                thrust.Producer(endpoints=ep, topics=["t"]) as p,
            ):
                started = time.monotonic()
                assert await c.receive(8) == []  # an empty poll: answered, not refused
                assert time.monotonic() - started < 8.0
                receipt = await p.send(thrust.Message(topic="t", body=b"x"))
                [m] = await receive_n(c, 1)
                assert m.message_id == receipt.message_id
                await m.ack()

    run(scenario)
