"""The offset in the receipt of a delay (and a transactional) message, over real gRPC: the offset in the
broker's timer (or half) queue, as the RocketMQ proxy reports it, not one in the message's topic."""

from __future__ import annotations

import thrust
from tests.client._util import receive_n, run
from thrust.testing import embedded_server


def test_delay_receipt_offset_is_the_timer_queue_offset_and_the_topic_offset_comes_on_delivery() -> None:
    async def scenario() -> None:
        async with embedded_server(
            topics=["tx:1:TRANSACTION", "d:1:DELAY", "later:1:DELAY"],
            groups=["g"],
            transaction_check_after=600.0,
        ) as srv:
            ep = srv.endpoints[0]
            async with thrust.Producer(endpoints=ep, topics=["tx", "d", "later"]) as p:
                async with p.transaction() as tx:
                    half = [await tx.send(thrust.Message(topic="tx", body=b"%d" % i)) for i in range(2)]
                assert [r.offset for r in half] == [0, 1]  # the half queue's
                # The first delay message on this broker: offset 0 of the timer queue, whatever the
                # transactions before it did.
                first = await p.send(thrust.Message(topic="d", body=b"a", delay=600))
                second = await p.send(thrust.Message(topic="d", body=b"b", delay=600))
                assert (first.offset, second.offset) == (0, 1)
                await p.recall("d", second.recall_handle)  # the recall marker takes offset 2
                soon = await p.send(thrust.Message(topic="later", body=b"c", delay=1))
                assert soon.offset == 3
            async with thrust.SimpleConsumer(
                endpoints=ep, group="g", subscriptions={"later": "*"}, await_duration=5
            ) as c:
                [m] = await receive_n(c, 1)
                assert m.message_id == soon.message_id
                # Its offset in its own topic, known once it landed: the first message of "later".
                assert (m.queue_id, m.queue_offset) == (0, 0)
                await m.ack()

    run(scenario)
