"""Official Producer: normal, FIFO (message_group) and delay (delivery_timestamp) messages, recall.

argv[1] JSON: {"endpoints": "host:port", "tls"?: bool, "topics": [...],
"messages": [{"topic", "body", "tag"?, "keys"?, "properties"?, "group"?, "delay_s"?, "recall"?}]}.
Emits `sent` per message (with the index in `messages`), `recalled` for messages with `recall`, then
`exit`.
"""

from __future__ import annotations

import time

from _common import client_configuration, client_log_to_stderr, config, emit, finish
from rocketmq import Message, Producer


def main() -> None:
    cfg = config()
    client_log_to_stderr()
    producer = Producer(client_configuration(cfg), topics=cfg["topics"], tls_enable=cfg.get("tls", False))
    producer.startup()
    emit("started", client_id=producer.client_id)
    code = 0
    try:
        for index, spec in enumerate(cfg["messages"]):
            message = Message()
            message.topic = spec["topic"]
            message.body = spec["body"].encode()
            if spec.get("tag"):
                message.tag = spec["tag"]
            for key in spec.get("keys", []):
                # The setter adds one key per assignment.
                message.keys = key
            for key, value in spec.get("properties", {}).items():
                message.add_property(key, value)
            if spec.get("group"):
                message.message_group = spec["group"]
            delivery = None
            if spec.get("delay_s"):
                # The client sends Timestamp.seconds = delivery_timestamp (whole seconds).
                delivery = int(time.time()) + int(spec["delay_s"])
                message.delivery_timestamp = delivery
            receipt = producer.send(message)
            emit(
                "sent",
                index=index,
                id=receipt.message_id,
                topic=spec["topic"],
                offset=receipt.offset,
                recall_handle=receipt.recall_handle,
                delivery_timestamp=delivery,
            )
            if spec.get("recall"):
                recalled = producer.recall_message(spec["topic"], receipt.recall_handle)
                emit("recalled", index=index, id=receipt.message_id, recalled_id=recalled)
    except Exception as exc:
        emit("error", error=repr(exc))
        code = 1
    finish([producer], code)


if __name__ == "__main__":
    main()
