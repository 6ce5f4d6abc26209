"""An idle queue's empty long polls, on both transports: counted as calls, renewed by the native transport
without waking the event loop (`thrust._io.rpc.Renewal`), ended when the queue is dropped, started at
spread phases (`ClientSettings.push_spread_poll`), and ended on a grid of the wall clock
(`ClientSettings.push_poll_grid`).

The embedded server's `Faults.fail_next(ReceiveMessage, MESSAGE_NOT_FOUND)` answers a poll empty at once,
as a long poll that ran out does, so the renewals take milliseconds instead of 20 s each.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.push._util import run, until
from tests.push.test_push_dropped_queue import _switchable
from thrust._codec.status import Code
from thrust._core.settings import ClientSettings
from thrust._io.rpc import Renewal
from thrust._io.session import ClientSession
from thrust.errors import ThrustError
from thrust.message import ConsumeResult, Message, ReceivedMessage
from thrust.producer import Producer
from thrust.push_consumer import PushConsumer
from thrust.server.faults import Rpc
from thrust.testing import embedded_server

pytestmark = [pytest.mark.slow]

EMPTY = 6


GRID = ClientSettings.for_consumer().push_poll_grid


def _on_grid(t: float) -> bool:
    """Whether `t` (seconds of the wall clock), the end of a poll as its receiver or the server saw it
    start, is at or a little past a point of the idle polls' grid: within 0.1 s after it (the time the
    poll took to reach them), 1 ms before it (rounding). A step is about 0.25 s: the end of a poll that
    ignored the grid would pass two times in five."""
    past = t - round(t / GRID) * GRID
    return -0.001 < past < 0.1


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
                # every poll ends on the grid of the wall clock (`ClientSettings.push_poll_grid`), those
                # after an empty answer (renewed by the native transport, started again by the loop on
                # grpcio) less than a step short of the whole 20 s; the server saw each a moment after it
                # was computed
                first, *after = srv.stats.receives
                for r in (first, *after):
                    assert r.long_polling is not None and _on_grid(r.arrived + r.long_polling)
                assert all(r.long_polling is not None and 20.0 - GRID < r.long_polling <= 20.0 for r in after)
                (q,) = consumer._scanner.queues.values()
                limit = q.pq.budget.idle_limit
                later = time.monotonic() + limit
                if consumer.stats().transport == "native":
                    # the queue's first poll (a chain's first, of a random length: never renewed), then one
                    # receive of the loop whose empty polls were renewed off it
                    assert _repeated(consumer) == EMPTY - 1
                    assert q.renewal is not None and q.renewal.renewed() == EMPTY - 1
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


def test_idle_poll_chains_start_at_spread_phases_after_a_start_or_a_failure(monkeypatch: Any) -> None:
    """A consumer of 8 topics starts 8 idle polls together. A poll that starts a chain (a queue's first, or
    the one after a failed receive) asks for a long polling of its own in [5 s, 20 s] and is not renewed;
    one after an empty answer asks for the whole 20 s, less than a step shorter so as to end on the grid
    of the wall clock (`ClientSettings.push_poll_grid`, steps of about a quarter of a second), and is
    renewed (on the native transport; grpcio is handed the same `Renewal` and renews nothing), keeping the
    phase the chain started with. Every idle poll ends on the grid."""
    polls: dict[str, list[list[Any]]] = {}  # topic -> [long polling, renewed, failed, began] per receive
    receive = ClientSession.receive

    async def recording(self: ClientSession, endpoint: Any, request: Any, **kw: Any) -> Any:
        renewal: Renewal | None = kw.get("renewal")
        poll = [
            request.long_polling_timeout.ToNanoseconds() / 1e9,
            renewal is not None,
            False,
            time.time(),
        ]
        polls.setdefault(request.message_queue.topic.name, []).append(poll)
        try:
            return await receive(self, endpoint, request, **kw)
        except ThrustError:
            poll[2] = True
            raise

    monkeypatch.setattr(ClientSession, "receive", recording)
    topics = [f"t{i}" for i in range(8)]

    def failed() -> int:
        return sum(p[2] for ps in polls.values() for p in ps)

    def chained() -> bool:
        """Every queue has had a renewed poll, and the retry of each failed one was started."""
        return len(polls) == len(topics) and all(
            any(p[1] for p in ps) and not ps[-1][2] for ps in polls.values()
        )

    async def main() -> None:
        async with embedded_server(topics=topics, groups=["g"]) as srv:
            # the 8 first polls fail (each queue retries 1 s later); every poll after them is answered empty
            # after 0.2 s, as a long poll that ran out is
            srv.faults.fail_next(Rpc.RECEIVE_MESSAGE, Code.INTERNAL_ERROR, len(topics))
            srv.faults.fail_fraction(Rpc.RECEIVE_MESSAGE, Code.MESSAGE_NOT_FOUND, 1.0)
            srv.faults.add_latency(Rpc.RECEIVE_MESSAGE, 0.2)
            consumer = PushConsumer(
                endpoints=srv.endpoints[0],
                group="g",
                subscriptions=dict.fromkeys(topics, "*"),
                listener=lambda m: ConsumeResult.SUCCESS,
            )
            async with consumer:
                await until(lambda: failed() == len(topics) and chained(), what="8 failures, 8 chains")
                spread: list[float] = []
                for ps in polls.values():
                    for i, (poll, renewed, _, began) in enumerate(ps):
                        if i == 0 or ps[i - 1][2]:  # a chain's first poll
                            assert not renewed and 5.0 <= poll <= 20.0
                            spread.append(poll)
                        else:  # after an empty answer
                            assert renewed and 20.0 - GRID < poll <= 20.0
                        # on the grid: the poll was computed a moment before it was recorded here
                        assert _on_grid(began + poll)
                assert len(spread) == 2 * len(topics)  # each queue's first poll, and each retry
                assert len(set(spread)) > 1  # not in step

    run(main())
