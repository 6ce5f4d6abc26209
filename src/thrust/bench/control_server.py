"""The embedded server for `thrust bench`, in a process of its own, steered over stdin/stdout.

    python -m thrust.bench.control_server '{"brokers": 1, "topics": ["t:4"], "groups": ["g"]}'

It prints one `listening on HOST:PORT` line per broker, then answers one JSON line per JSON command
read from stdin:

- `{"op": "fault", "kind": "latency", "spec": "ReceiveMessage:0.002"}`: a `thrust serve --fault-*` flag
- `{"op": "fill", "topic": "t", "count": 10000, "size": 64}`: store a backlog directly (no RPCs, so the
  prefill costs the run nothing); the messages are spread over the queues and brokers
  (`"broker": 1`: on that broker only)
- `{"op": "expire", "message_ids": [...]}`: their receipt handles answer INVALID_RECEIPT_HANDLE
- `{"op": "assign", "topic": "t", "group": "g", "queues": [[1, 0]]}`: QueryAssignment for (topic,
  group) answers these (broker index, queue id) pairs (`Faults.set_assignment`); `{"op": "assigned",
  "topic": "t", "group": "g"}`: the `time.monotonic()` at which that override was first answered
  (None until a client asked), comparable with other processes' `time.monotonic()` on Linux;
  `{"op": "first_call", "broker": 1, "rpc": "ReceiveMessage"}`: the `time.monotonic()` at which that
  broker got its first call of that RPC (None: never)
- `{"op": "stats"}` / `{"op": "reset"}`: the call and entry counters; `{"op": "cpu"}`: own CPU seconds;
  `{"op": "polls", "group": "g"}`: the group's ReceiveMessage calls waiting (parked) now, on every broker
- `{"op": "clear"}`: remove every fault

The server runs in its own process so that it never competes with the measured client for the GIL, and
so that its own CPU use can be read (`cpu`) to show whether it limited a run.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Iterable
from typing import Any

from thrust._codec.ids import new_message_id
from thrust.server.config import ServerConfig, parse_group, parse_topic
from thrust.server.core.model import InboundMessage, MessageType
from thrust.server.faults import Faults, apply_fault_flag
from thrust.server.service import EmbeddedServer

__all__ = ["main"]


class _CountingFaults(Faults):
    """Also counts the acks answered INVALID_RECEIPT_HANDLE by `expire` (bench scenario 4,
    docs/benchmarks.md#scenarios: how often a client retries a handle that can never succeed)."""

    def __init__(self) -> None:
        super().__init__()
        self.expired_hits = 0
        self.served_at: dict[tuple[str, str], float | None] = {}
        self.first_calls: dict[tuple[int, str], float] = {}

    def on_call(self, rpc: str, broker: int) -> Any:
        key = (broker, str(rpc))
        if key not in self.first_calls:
            self.first_calls[key] = time.monotonic()  # scenario 5a: when queue 1's first receive arrived
        return super().on_call(rpc, broker)

    def set_assignment(self, topic: str, group: str, queues: Iterable[tuple[int, int]] | None) -> None:
        super().set_assignment(topic, group, queues)
        self.served_at[(topic, group)] = None

    def assignment(self, topic: str, group: str) -> tuple[tuple[int, int], ...] | None:
        queues = super().assignment(topic, group)
        key = (topic, group)
        if queues is not None and key in self.served_at and self.served_at[key] is None:
            self.served_at[key] = time.monotonic()  # scenario 5a: when a client first saw the move
        return queues

    def handle_expired(self, receipt_handle: str, message_id: str) -> bool:
        hit = super().handle_expired(receipt_handle, message_id)
        if hit:
            self.expired_hits += 1
        return hit


def _fill(
    server: EmbeddedServer, topic: str, count: int, size: int, tag: str | None, broker: int | None = None
) -> list[str]:
    body = b"x" * max(1, size)
    now = time.time()
    brokers = server.brokers if broker is None else [server.brokers[broker]]
    sent = 0
    ids: list[str] = []
    batch = 32  # one request's worth: each request goes to the next queue round-robin
    i = 0
    while sent < count:
        n = min(batch, count - sent)
        messages = [
            InboundMessage(
                topic=topic,
                body=body,
                message_id=new_message_id(),
                tag=tag,
                keys=(),
                properties={},
                message_type=MessageType.NORMAL,
                message_group=None,
                delivery_timestamp=None,
                born_timestamp=now,
                born_host="bench",
            )
            for _ in range(n)
        ]
        target = brokers[i % len(brokers)]
        target.send(messages, now)
        # Wake the long polls parked on it, as a SendMessage does: a consumer already waiting gets the
        # backlog now rather than when its poll ends.
        server.changed(server.brokers.index(target), topic)
        if count <= 10_000:
            ids.extend(m.message_id for m in messages)
        sent += n
        i += 1
    return ids


async def _serve(spec: dict[str, Any]) -> None:
    config = ServerConfig(
        host="127.0.0.1",
        port=0,
        brokers=int(spec.get("brokers", 1)),
        auto_create_topics=True,
        default_queues=int(spec.get("default_queues", 4)),
        topics=tuple(parse_topic(t) for t in spec.get("topics", ())),
        groups=tuple(parse_group(g) for g in spec.get("groups", ())),
        lite_subscription_quota=int(spec.get("lite_subscription_quota", 2000)),
    )
    faults = _CountingFaults()
    server = EmbeddedServer(config, faults=faults)
    for kind, flag in spec.get("faults", ()):
        apply_fault_flag(server.faults, kind, flag)
    await server.start()
    for endpoint in server.endpoints:
        print(f"listening on {endpoint}", flush=True)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            try:
                reply = _command(server, json.loads(line))
            except Exception as exc:
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(reply), flush=True)
    finally:
        await server.stop(grace=None)


def _command(server: EmbeddedServer, cmd: dict[str, Any]) -> dict[str, Any]:
    op = cmd.get("op")
    stats = server.stats
    if op == "stats":
        return {
            "calls": dict(stats.calls),
            "broker_calls": {f"{b}:{rpc}": n for (b, rpc), n in stats.broker_calls.items()},
            "entries": dict(stats.entries),
            "injected": dict(stats.injected),
            "expired_hits": getattr(server.faults, "expired_hits", 0),
        }
    if op == "reset":
        stats.reset()
        return {"ok": True}
    if op == "fault":
        apply_fault_flag(server.faults, cmd["kind"], cmd["spec"])
        return {"ok": True}
    if op == "clear":
        server.faults.clear()
        return {"ok": True}
    if op == "expire":
        server.faults.expire_messages(*cmd["message_ids"])
        return {"ok": True}
    if op == "fill":
        ids = _fill(
            server,
            cmd["topic"],
            int(cmd["count"]),
            int(cmd.get("size", 64)),
            cmd.get("tag"),
            cmd.get("broker"),
        )
        return {"ok": True, "ids": ids}
    if op == "assign":
        queues = cmd["queues"]
        server.faults.set_assignment(
            cmd["topic"], cmd["group"], None if queues is None else [(int(b), int(q)) for b, q in queues]
        )
        return {"ok": True}
    if op == "assigned":
        served = getattr(server.faults, "served_at", {})
        return {"at": served.get((cmd["topic"], cmd["group"]))}
    if op == "first_call":
        first = getattr(server.faults, "first_calls", {})
        return {"at": first.get((int(cmd["broker"]), cmd["rpc"]))}
    if op == "polls":
        return {"polls": server.pending_polls(cmd["group"])}
    if op == "cpu":
        t = os.times()
        return {"cpu": t.user + t.system}
    return {"error": f"unknown op {op!r}"}


def main() -> None:
    spec = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
    try:
        asyncio.run(_serve(spec))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
