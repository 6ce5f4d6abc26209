"""thrust and the official client in ONE process: each sends what the other receives.

Runs in the official client's venv with thrust's sources on PYTHONPATH (tests/interop/test_side_by_side.py).
Both register the `apache.rocketmq.v2` messages with protobuf: the official client in the default
descriptor pool, thrust in a pool of its own (thrust._proto), so importing the second must not fail with
"duplicate symbol" whichever comes first.

argv[1] JSON: {"endpoints", "order": "thrust-first" | "official-first", "topic", "official_group",
"thrust_group", "deadline_s"}. Emits `imported` (with the order it imported in), `official_sent`,
`thrust_received`, `thrust_sent`, `official_received`, then `exit`.
"""

from __future__ import annotations

import importlib
import sys
import time

from _common import client_configuration, client_log_to_stderr, config, emit, finish


def main() -> None:
    cfg = config()
    modules = ["thrust", "rocketmq"] if cfg["order"] == "thrust-first" else ["rocketmq", "thrust"]
    for name in modules:
        importlib.import_module(name)
    import rocketmq

    import thrust
    import thrust.sync

    emit("imported", order=[m for m in sys.modules if m in ("thrust", "rocketmq")], thrust=thrust.__file__)
    client_log_to_stderr()
    deadline = time.monotonic() + cfg["deadline_s"]
    endpoint, topic = cfg["endpoints"], cfg["topic"]
    clients: list[object] = []
    code = 0
    try:
        # Official producer -> thrust consumer.
        producer = rocketmq.Producer(client_configuration(cfg), topics=[topic])
        producer.startup()
        clients.append(producer)
        message = rocketmq.Message()
        message.topic = topic
        message.body = b"from-official"
        message.tag = "official"
        receipt = producer.send(message)
        emit("official_sent", id=receipt.message_id)
        with thrust.sync.SimpleConsumer(
            endpoints=endpoint,
            group=cfg["thrust_group"],
            subscriptions={topic: "official"},
            await_duration=5,
        ) as consumer:
            got: list[thrust.ReceivedMessage] = []
            while not got and time.monotonic() < deadline:
                got = consumer.receive(max_messages=4, invisible_duration=10)
            for received in got:
                received.ack()
                emit("thrust_received", id=received.message_id, body=received.body.decode())

        # thrust producer -> official consumer.
        with thrust.sync.Producer(endpoints=endpoint, topics=[topic]) as thrust_producer:
            sent = thrust_producer.send(thrust.Message(topic=topic, body=b"from-thrust", tag="thrust"))
            emit("thrust_sent", id=sent.message_id)
        official = rocketmq.SimpleConsumer(
            client_configuration(cfg),
            cfg["official_group"],
            subscription={topic: rocketmq.FilterExpression("thrust")},
            await_duration=5,
        )
        official.startup()
        clients.append(official)
        messages: list[rocketmq.Message] = []
        while not messages and time.monotonic() < deadline:
            messages = official.receive(4, 10)
        for m in messages:
            official.ack(m)
            emit("official_received", id=m.message_id, body=m.body.decode())
    except Exception as exc:
        emit("error", error=repr(exc))
        code = 1
    finish(clients, code)


if __name__ == "__main__":
    main()
