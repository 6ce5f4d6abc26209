"""The push consumer reacts to route changes reported by the session, without polling the route cache."""

from __future__ import annotations

from typing import Any

from tests.push._util import ready, run, until
from thrust._codec import convert
from thrust.message import ConsumeResult, Message, ReceivedMessage
from thrust.producer import Producer
from thrust.push_consumer import PushConsumer
from thrust.testing import embedded_server


def drop_second_broker(srv: Any) -> None:
    """From now on QueryRoute (and QueryAssignment) list only the first broker: a route update. Passes
    through whatever else the server's `route_brokers` takes (it gained a per-topic argument)."""
    everyone = srv.route_brokers
    srv.route_brokers = lambda requested, *args, **kwargs: everyone(requested, *args, **kwargs)[:1]


def test_route_change_drops_the_brokers_queues_at_once_and_rescans() -> None:
    got: list[bytes] = []

    def listener(m: ReceivedMessage) -> ConsumeResult:
        got.append(m.body)
        return ConsumeResult.SUCCESS

    async def main() -> None:
        async with embedded_server(topics=["t"], groups=["g"], brokers=2) as srv:
            ep = srv.endpoints[0]
            # A scan interval far beyond the test: only the route change can cause a new scan.
            consumer = PushConsumer(
                endpoints=ep, group="g", subscriptions={"t": "*"}, listener=listener, scan_interval=600
            )
            async with consumer:
                await ready(consumer, queues=2)
                scans = srv.stats.calls["QueryAssignment"]
                drop_second_broker(srv)
                await consumer.session.refresh_routes()
                # Dropped while handling the notification, not at some later poll.
                assert len(consumer.stats().queues) == 1
                await until(lambda: srv.stats.calls["QueryAssignment"] > scans)
                await until(lambda: len(consumer.session.open_sessions()) == 1)
                assert len(consumer.stats().queues) == 1
                async with Producer(endpoints=ep, topics=["t"]) as producer:
                    await producer.send(Message(topic="t", body=b"after"))
                await until(lambda: got == [b"after"])

    run(main())


def test_unchanged_answers_are_converted_once_and_a_changed_one_again(monkeypatch: Any) -> None:
    """Periodic scans and route refreshes that get the same answer as last time reuse its queues
    (`convert.QueuesMemo`); an answer that changed (a broker left) is converted and acted on."""
    conversions: list[int] = []
    convert_queues = convert.route_queues_from_pb

    def counting(topic: str, message_queues: Any) -> Any:
        queues = convert_queues(topic, message_queues)
        conversions.append(len(queues))
        return queues

    monkeypatch.setattr(convert, "route_queues_from_pb", counting)

    async def main() -> None:
        async with embedded_server(topics=["t:1"], groups=["g"], brokers=2) as srv:
            consumer = PushConsumer(
                endpoints=srv.endpoints[0],
                group="g",
                subscriptions={"t": "*"},
                listener=lambda m: ConsumeResult.SUCCESS,
                scan_interval=0.05,
            )
            async with consumer:
                await ready(consumer, queues=2)
                scans = srv.stats.calls["QueryAssignment"]
                await until(lambda: srv.stats.calls["QueryAssignment"] >= scans + 5)
                await consumer.session.refresh_routes()
                await consumer.session.refresh_routes()
                # One route and one assignment, a queue on each broker, however many answers came since.
                assert conversions == [2, 2]
                drop_second_broker(srv)
                await consumer.session.refresh_routes()
                await until(lambda: len(conversions) == 4)
                assert conversions == [2, 2, 1, 1]
                await until(lambda: len(consumer.stats().queues) == 1)

    run(main())
