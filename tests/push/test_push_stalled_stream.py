"""A receive stream that stalls after the server took its batch loses nothing.

On a real two-broker cluster a push receive now and then stopped mid-batch: the OK status and a few of its
messages arrived, then nothing until the call's deadline (docs/reliability.md, bug 12). The proxy had
registered the receipt handle of every message of the batch before writing it, and renews them for as long
as the client stays registered in the group (apache/rocketmq proxy `ReceiveMessageActivity`,
`DefaultReceiptHandleManager`), so the messages that never arrived were neither redelivered nor given to
another consumer. The consumer now re-registers with that endpoint after such a receive
(`ClientSession.release_held`): NotifyClientTermination releases them (`invisibleTimeMillisWhenClear`)
and its Settings register it again.

The embedded server's `Faults.stall_stream_next` stalls one stream after a given number of messages, and
renews a push consumer's in-flight messages as the proxy does, so without the re-registration the rest of
the batch would stay away until the consumer closes.
"""

from __future__ import annotations

import pytest

from tests.push._util import ready, run, until
from thrust.message import ConsumeResult, Message, ReceivedMessage
from thrust.producer import Producer
from thrust.push_consumer import PushConsumer
from thrust.server.faults import Rpc
from thrust.testing import embedded_server

pytestmark = [pytest.mark.slow]

REQUEST_TIMEOUT = 1.0
# The stalled stream ends at the receive's deadline: the server's 20 s long polling + the request timeout
# + 5 s (`ClientSettings.push_receive_deadline`).
STALL_BOUND = 20.0 + REQUEST_TIMEOUT + 5.0 + 30.0


@pytest.mark.parametrize("release", ["answered", "first-lost"])
def test_the_rest_of_a_batch_whose_stream_stalled_is_released_and_consumed(release: str) -> None:
    """Five messages popped in one batch, the stream stalls after two: all five reach the listener. With
    `first-lost` the first NotifyClientTermination is never answered (the connection that broke the stream
    is often the one the release goes out on), and the release is retried."""

    async def main() -> None:
        async with embedded_server(topics=["t"], groups=["g"]) as srv:
            ep = srv.endpoints[0]
            seen: list[bytes] = []

            def listener(m: ReceivedMessage) -> ConsumeResult:
                seen.append(m.body)
                return ConsumeResult.SUCCESS

            consumer = PushConsumer(
                endpoints=ep,
                group="g",
                subscriptions={"t": "*"},
                listener=listener,
                request_timeout=REQUEST_TIMEOUT,
                receives_per_queue=1,
            )
            async with Producer(endpoints=ep, topics=["t"]) as producer, consumer:
                await ready(consumer)
                srv.faults.stall_stream_next(after=2)
                if release == "first-lost":
                    srv.faults.drop_next(Rpc.NOTIFY_CLIENT_TERMINATION, process=False)
                # One SendMessage stores all five at once, so the parked poll pops them in one batch.
                await producer.send_batch([Message(topic="t", body=b"m%d" % i) for i in range(5)])
                await until(lambda: srv.faults.stats.stalled_streams == 1)
                await until(lambda: seen == [b"m0"])  # the first message goes to the listener at once
                await until(lambda: set(seen) == {b"m%d" % i for i in range(5)}, timeout=STALL_BOUND)
                assert consumer.session.held_releases == 1 == consumer.stats().held_releases
                calls = srv.faults.stats.calls[Rpc.NOTIFY_CLIENT_TERMINATION.value]
                assert calls == (2 if release == "first-lost" else 1)
                assert consumer.stats().receive_failures >= 1  # the stalled stream met its deadline

    run(main(), timeout=STALL_BOUND + 60)
