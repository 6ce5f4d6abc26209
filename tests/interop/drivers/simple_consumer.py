"""Official SimpleConsumer: receive, ack, change-invisible-duration.

argv[1] JSON: {"endpoints", "tls"?, "group", "subscriptions": {topic: tag expression | "sql:<SQL92>"},
"expect": N, "invisible_s": 10, "await_s": 5, "batch": 16, "deadline_s": 40, "drain": true,
"actions": {body: "nack:SECONDS" | "extend:SECONDS"}}.

Receives until N distinct messages are acked (or the deadline passes). On a message's first delivery
an action may apply: `nack:S` changes its invisible duration to S seconds and does not ack (it must come
back with delivery_attempt 2); `extend:S` changes it to S seconds and then acks with the new receipt handle
(it must never come back). With `drain`, one more long-polling receive checks that nothing else arrives. With
`retry_startup_s`, a startup that fails (the client's startup fails while a subscribed topic has no
route, e.g. a dead-letter topic the server has not created yet) is retried every 0.5 s for that long.
"""

from __future__ import annotations

import time

from _common import client_configuration, client_log_to_stderr, config, emit, finish, message_fields
from rocketmq import FilterExpression, SimpleConsumer
from rocketmq.grpc_protocol import FilterType


def main() -> None:
    cfg = config()
    client_log_to_stderr()
    subscription = {
        topic: FilterExpression(expr[4:], FilterType.SQL)
        if expr.startswith("sql:")
        else FilterExpression(expr)
        for topic, expr in cfg["subscriptions"].items()
    }
    startup_deadline = time.monotonic() + cfg.get("retry_startup_s", 0)
    while True:
        consumer = SimpleConsumer(
            client_configuration(cfg),
            cfg["group"],
            subscription=subscription,
            await_duration=cfg.get("await_s", 5),
            tls_enable=cfg.get("tls", False),
        )
        try:
            consumer.startup()
            break
        except Exception as exc:
            if time.monotonic() >= startup_deadline:
                raise
            emit("startup_error", error=repr(exc))
            time.sleep(0.5)
    emit("started", client_id=consumer.client_id)
    actions: dict[str, str] = cfg.get("actions", {})
    invisible = cfg.get("invisible_s", 10)
    batch = cfg.get("batch", 16)
    deadline = time.monotonic() + cfg.get("deadline_s", 40)
    acked: set[str] = set()
    code = 0

    def handle(messages: list, drain: bool) -> None:
        for message in messages:
            emit("received", drain=drain, **message_fields(message))
            action = actions.get(message.body.decode()) if message.delivery_attempt == 1 else None
            if action is not None:
                kind, _, seconds = action.partition(":")
                before = message.receipt_handle
                consumer.change_invisible_duration(message, int(seconds))
                emit(
                    "changed",
                    id=message.message_id,
                    seconds=int(seconds),
                    new_handle=bool(message.receipt_handle) and message.receipt_handle != before,
                )
                if kind == "nack":
                    continue
            consumer.ack(message)
            acked.add(message.message_id)
            emit("acked", id=message.message_id, drain=drain)

    try:
        while len(acked) < cfg["expect"] and time.monotonic() < deadline:
            try:
                messages = consumer.receive(batch, invisible)
            except Exception as exc:
                emit("receive_error", error=repr(exc))
                time.sleep(0.2)
                continue
            emit("receive_returned", count=len(messages))
            handle(messages, drain=False)
        emit("done", acked=len(acked))
        if cfg.get("drain", True):
            handle(consumer.receive(batch, invisible), drain=True)
    except Exception as exc:
        emit("error", error=repr(exc))
        code = 1
    finish([consumer], code)


if __name__ == "__main__":
    main()
