"""An idle queue's empty long polls, on both transports: counted as calls, renewed by the native transport
without waking the event loop (`thrust._io.rpc.Renewal`), and ended when the queue is dropped.

The embedded server's `Faults.fail_next(ReceiveMessage, MESSAGE_NOT_FOUND)` answers a poll empty at once,
as a long poll that ran out does, so the renewals take milliseconds instead of 15 s each.
"""

from __future__ import annotations

import time

import pytest

from tests.push._util import run, until
from tests.push.test_push_dropped_queue import _switchable
from thrust._codec.status import Code
from thrust.message import ConsumeResult, Message, ReceivedMessage
from thrust.producer import Producer
from thrust.push_consumer import PushConsumer
from thrust.server.faults import Rpc
from thrust.testing import embedded_server

pytestmark = [pytest.mark.slow]

EMPTY = 6


def _repeated(consumer: PushConsumer) -> int:
    """Empty polls renewed by the transport itself (only the native one does)."""
    return sum(rpc.receives_repeated for rpc in consumer.session._rpcs.values())


def test_an_idle_queues_empty_polls_are_renewed_counted_and_still_deliver() -> None:
    async def main() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            got: list[str] = []

            def listener(m: ReceivedMessage) -> ConsumeResult:
                got.append(m.message_id)
                return ConsumeResult.SUCCESS

            srv.faults.fail_next(Rpc.RECEIVE_MESSAGE, Code.MESSAGE_NOT_FOUND, EMPTY)
            consumer = PushConsumer(endpoints=ep, group="g", subscriptions={"t": "*"}, listener=listener)
            async with Producer(endpoints=ep, topics=["t"]) as producer, consumer:
                # EMPTY answered at once, then one long poll parked on the server (the client counts a
                # call as it starts it, the server as it arrives: equal once the last one parked)
                await until(lambda: srv.stats.calls["ReceiveMessage"] == EMPTY + 1)
                calls = consumer.session.calls()
                assert calls["ReceiveMessage"] == EMPTY + 1  # every poll counted, renewed ones too
                (q,) = consumer._scanner.queues.values()
                limit = q.pq.budget.idle_limit
                later = time.monotonic() + limit
                if consumer.stats().transport == "native":
                    # one receive of the loop, its empty polls renewed off it
                    assert _repeated(consumer) == EMPTY
                    assert q.renewal is not None and q.renewal.renewed() == EMPTY
                    # the renewals are activity the loop did not see: a queue checked an idle limit after
                    # its receive started has not expired; one checked an idle limit after that, with no
                    # renewal in between, has (a stuck receive)
                    assert not q.expired(later)
                    assert q.expired(later + limit)
                else:
                    assert _repeated(consumer) == 0
                    assert q.expired(later)  # each empty poll ended on the loop: none renewed
                receipt = await producer.send(Message(topic="t", body=b"x"))
                await until(lambda: got == [receipt.message_id], what="the message on the renewed poll")
                await until(lambda: consumer.stats().acked == 1)

    run(main())


def test_a_dropped_queue_stops_renewing_after_the_poll_in_flight() -> None:
    """Each empty answer takes 0.3 s; the queue is dropped while its receive renews them (within a window
    of 300 s, longer than `until` waits): the receive ends after the poll in flight."""

    async def main() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            srv.faults.fail_next(Rpc.RECEIVE_MESSAGE, Code.MESSAGE_NOT_FOUND, 1000)
            srv.faults.add_latency(Rpc.RECEIVE_MESSAGE, 0.3)
            consumer = PushConsumer(
                endpoints=ep,
                group="g",
                subscriptions={"t": "*"},
                listener=lambda m: ConsumeResult.SUCCESS,
                scan_interval=0.1,
            )
            switch = _switchable(consumer)
            async with consumer:
                await until(lambda: srv.stats.calls["ReceiveMessage"] >= 3, what="empty polls renewed")
                switch["assigned"] = False
                await until(lambda: consumer.stats().queues_dropped == 1)
                # the dropped queue's receive runs on, retired, until it ends
                await until(lambda: not consumer._scanner._retired, what="the dropped queue's receive ended")
                assert consumer.stats().queues == ()
                assert consumer.session.calls()["ReceiveMessage"] == srv.stats.calls["ReceiveMessage"]

    run(main())
