"""Testing an application with pytest: installing thrust adds the `thrust_server` fixture (an embedded
server on a free port, fresh for each test). Run: `pytest examples/test_with_thrust_server.py`."""

import pytest

import thrust
import thrust.sync


def place_order(endpoints: str, order_id: int) -> str:
    """The application code under test: publishes an event per order."""
    with thrust.sync.Producer(endpoints=endpoints, topics=["orders"]) as producer:
        return producer.send(thrust.Message(topic="orders", body=f"order {order_id}".encode())).message_id


def test_an_order_is_published(thrust_server) -> None:  # type: ignore[no-untyped-def]
    message_id = place_order(thrust_server.endpoint, 42)
    with thrust.sync.SimpleConsumer(
        endpoints=thrust_server.endpoint, group="audit", subscriptions={"orders": "*"}, await_duration=1
    ) as consumer:
        [message] = consumer.receive(8)
        message.ack()
    assert message.message_id == message_id and message.body == b"order 42"


@pytest.mark.thrust_server(groups=["audit"])
def test_a_refused_send_is_retried(thrust_server) -> None:  # type: ignore[no-untyped-def]
    # Fault hooks run on the server's own loop: `call` them there.
    thrust_server.call(thrust_server.faults.fail_next, "SendMessage", "TOO_MANY_REQUESTS")
    assert place_order(thrust_server.endpoint, 7)
    assert thrust_server.stats.calls["SendMessage"] == 2
