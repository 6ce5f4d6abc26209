"""Official transactional Producer: commit, rollback, and orphans resolved by the TransactionChecker.

argv[1] JSON: {"endpoints", "topic", "transactions": [{"body", "end": "commit"|"rollback"|"none",
"check": "commit"|"rollback"}], "wait_checks_s": 20, "settle_s": 1.5}.

`end: none` leaves the half message open, so the server must send RecoverOrphanedTransactionCommand
over telemetry; the checker answers with `check` (looked up by body) and the client sends
EndTransaction(SOURCE_SERVER_CHECK). Emits `sent`, `ended`, `check` (every checker call), `exit`.
"""

from __future__ import annotations

import threading
import time

from _common import client_configuration, client_log_to_stderr, config, emit, finish
from rocketmq import (
    Message,
    Producer,
    TransactionChecker,
    TransactionResolution,
)

RESOLUTIONS = {"commit": TransactionResolution.COMMIT, "rollback": TransactionResolution.ROLLBACK}


class Checker(TransactionChecker):
    def __init__(self, decisions: dict[str, str]) -> None:
        self.decisions = decisions
        self.checked: set[str] = set()
        self.cond = threading.Condition()

    def check(self, message: Message) -> TransactionResolution:
        body = message.body.decode()
        decision = self.decisions.get(body, "rollback")
        emit("check", id=message.message_id, body=body, resolution=decision, topic=message.topic)
        with self.cond:
            self.checked.add(body)
            self.cond.notify_all()
        return RESOLUTIONS[decision]


def main() -> None:
    cfg = config()
    client_log_to_stderr()
    specs = cfg["transactions"]
    checker = Checker({spec["body"]: spec.get("check", "rollback") for spec in specs})
    producer = Producer(client_configuration(cfg), topics=[cfg["topic"]], checker=checker)
    producer.startup()
    emit("started", client_id=producer.client_id)
    code = 0
    try:
        for index, spec in enumerate(specs):
            message = Message()
            message.topic = cfg["topic"]
            message.body = spec["body"].encode()
            transaction = producer.begin_transaction()
            receipt = producer.send(message, transaction)
            emit(
                "sent",
                index=index,
                id=receipt.message_id,
                transaction_id=receipt.transaction_id,
                body=spec["body"],
            )
            if spec["end"] == "commit":
                transaction.commit()
                emit("ended", id=receipt.message_id, resolution="commit")
            elif spec["end"] == "rollback":
                transaction.rollback()
                emit("ended", id=receipt.message_id, resolution="rollback")
        orphans = {spec["body"] for spec in specs if spec["end"] == "none"}
        deadline = time.monotonic() + cfg.get("wait_checks_s", 20)
        with checker.cond:
            while not orphans <= checker.checked and time.monotonic() < deadline:
                checker.cond.wait(0.2)
        emit("checks_done", complete=orphans <= checker.checked)
        # The EndTransaction of a check is sent asynchronously after check() returns; give it time to land
        # and leave room for a (wrong) repeated check to show up.
        time.sleep(cfg.get("settle_s", 1.5))
    except Exception as exc:
        emit("error", error=repr(exc))
        code = 1
    finish([producer], code)


if __name__ == "__main__":
    main()
