"""Official PushConsumer with a listener that fails on purpose.

argv[1] JSON: {"endpoints", "group", "topic", "expression": "*", "expect_ok": N, "fail": {body: K},
"max_attempts": M, "deadline_s": 60, "settle_s": 3, "threads": 4, "hang": [body], "crash": false}.

The listener returns FAILURE for the first K calls for a message whose body is in `fail` (K = -1:
always), SUCCESS otherwise. Calls are counted per body, not by delivery_attempt, because the FIFO
consumption of the official client retries locally without a new delivery (docs/protocol.md §9.1).
Runs until N distinct messages were consumed successfully and every always-failing message was seen
M times, then waits `settle_s` for anything unexpected. Emits `consumed` for every listener call (with
the call number, delivery attempt and result), then `exit`. Messages in `hang` block the listener
forever; with `crash` the driver waits until every one of them is being consumed and then exits without
shutting the client down (a crashed consumer holding un-acked messages). With `hold_until` (a path)
the consumer keeps running after `done` until that file exists (bounded by `deadline_s`), so the test
can look at the server's side while it still receives: upstream moves a message that has used up its
attempts to the dead-letter queue only when a receive of the group pops it again (the proxy's
`PopMessageResultFilterImpl`).
"""

from __future__ import annotations

import os
import threading
import time

from _common import client_configuration, client_log_to_stderr, config, emit, finish, message_fields
from rocketmq import (
    ConsumeResult,
    FilterExpression,
    MessageListener,
    PushConsumer,
)


class Listener(MessageListener):
    def __init__(self, fail: dict[str, int], hang: set[str]) -> None:
        self.fail = fail
        self.hang = hang
        self.ok: set[str] = set()
        self.attempts: dict[str, int] = {}
        self.cond = threading.Condition()

    def consume(self, message) -> ConsumeResult:
        body = message.body.decode()
        limit = self.fail.get(body, 0)
        with self.cond:
            call = self.attempts[body] = self.attempts.get(body, 0) + 1
            failed = limit == -1 or call <= limit
            emit("consumed", result="FAILURE" if failed else "SUCCESS", call=call, **message_fields(message))
            if not failed:
                self.ok.add(message.message_id)
            self.cond.notify_all()
        if body in self.hang:
            emit("hanging", id=message.message_id, body=body)
            threading.Event().wait()  # never acked or nacked: the process exits holding it
        return ConsumeResult.FAILURE if failed else ConsumeResult.SUCCESS

    def hanging_seen(self) -> set[str]:
        return {body for body in self.hang if self.attempts.get(body)}


def main() -> None:
    cfg = config()
    client_log_to_stderr()
    hang = set(cfg.get("hang", []))
    listener = Listener({body: int(k) for body, k in cfg.get("fail", {}).items()}, hang)
    always = [body for body, k in listener.fail.items() if k == -1]
    consumer = PushConsumer(
        client_configuration(cfg),
        cfg["group"],
        listener,
        {cfg["topic"]: FilterExpression(cfg.get("expression", "*"))},
        consumption_thread_count=cfg.get("threads", 4),
    )
    consumer.startup()
    emit("started", client_id=consumer.client_id, fifo=consumer.fifo)
    deadline = time.monotonic() + cfg.get("deadline_s", 60)

    def complete() -> bool:
        return len(listener.ok) >= cfg["expect_ok"] and all(
            listener.attempts.get(body, 0) >= cfg["max_attempts"] for body in always
        )

    with listener.cond:
        while not complete() and time.monotonic() < deadline:
            listener.cond.wait(0.2)
        while cfg.get("crash") and len(listener.hanging_seen()) < len(hang) and time.monotonic() < deadline:
            listener.cond.wait(0.2)
    emit("done", complete=complete(), ok=len(listener.ok))
    if cfg.get("hold_until"):
        while not os.path.exists(cfg["hold_until"]) and time.monotonic() < deadline:
            time.sleep(0.1)
        emit("released", by_file=os.path.exists(cfg["hold_until"]))
    time.sleep(cfg.get("settle_s", 3))  # a negative check, so a fixed span: anything unexpected shows in it
    if cfg.get("crash"):
        # A crash: no shutdown, no NotifyClientTermination; the connections just drop.
        emit("exit", code=0, crashed=True)
        os._exit(0)
    finish([consumer], 0)


if __name__ == "__main__":
    main()
