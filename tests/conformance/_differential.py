"""Differential conformance: the same raw gRPC requests to thrust's embedded server and to a real Apache
RocketMQ 5.5.0 proxy, answers normalised so that only what must agree is compared.

A row (`Row`) is a scenario: an async function of a `Ctx` that creates its own topics and groups, sends
requests over `tests/server/_wire.Wire` and returns a JSON-like value built from `Ctx.n(...)` (the
normalised answers) and whatever counts it wants to compare. The test runs the scenario against both
servers at once and compares the two values; a row with `deviation` asserts that they differ in exactly
those paths, with exactly those values on each side (`diff`).

Normalisation (`Ctx.n`): a `Status` becomes its code name (the texts are the servers' own); ids, receipt
and recall handles, transaction ids, nonces, hosts, ports and timestamps become a placeholder that keeps
only "set"; offsets and the queue ids of messages are left out (proto3 does not send a 0, so absent is not
unset); the names this scenario created (topics, groups, client ids) become `<topic1>`, `<group1>`, ...
wherever they occur in a string (`%RETRY%<group1>`); broker names become `<broker1>`, `<broker2>` in the
order they first appear. Durations, enums, counts, permissions and bodies are kept as they are.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message as PbMessage

from tests.engines import Engine
from tests.server._wire import Wire

__all__ = ["MISSING", "SET", "Ctx", "Row", "diff", "run_pair"]

SET = "<set>"
"""What an id, handle, host, port, offset or timestamp is normalised to."""

_OPAQUE_KEYS = frozenset(
    {
        "message_id",
        "receipt_handle",
        "transaction_id",
        "recall_handle",
        "nonce",
        "born_host",
        "store_host",
        "host",
        "port",
        "born_timestamp",
        "store_timestamp",
        "delivery_timestamp",
        "hostname",
        "trace_context",
    }
)

_ZERO_IS_UNSET = frozenset({"offset", "queue_offset", "queue_id"})
"""Numbers whose 0 proto3 does not send, so that "absent" is not "unset": left out of the comparison."""

_serial = itertools.count(1)


@dataclass
class Ctx:
    """One scenario's view of one server: fresh names, connections, and the normaliser."""

    engine: Engine
    endpoint: str
    _names: dict[str, str] = field(default_factory=dict)
    _brokers: dict[str, str] = field(default_factory=dict)
    _wires: list[Wire] = field(default_factory=list)
    _counts: dict[str, int] = field(default_factory=dict)

    @property
    def real(self) -> bool:
        return self.engine.real

    def _register(self, concrete: str, kind: str) -> str:
        if concrete not in self._names:
            self._counts[kind] = self._counts.get(kind, 0) + 1
            self._names[concrete] = f"<{kind}{self._counts[kind]}>"
        return concrete

    def name(self, concrete: str, kind: str = "name") -> str:
        """Register a name made up by the scenario (normalised like created ones)."""
        return self._register(concrete, kind)

    async def topic(self, kind: str = "NORMAL", *, queues: int = 4) -> str:
        name = await asyncio.to_thread(self.engine.topic, kind, queues=queues)
        return self._register(name, "topic")

    async def group(self, *, fifo: bool = False, max_attempts: int | None = None) -> str:
        name = await asyncio.to_thread(self.engine.group, fifo=fifo, max_attempts=max_attempts)
        return self._register(name, "group")

    async def lite_group(self, bind_topic: str, *, fifo: bool = False, quota: int | None = None) -> str:
        """A lite consumer group bound to LITE topic `bind_topic` (`Engine.lite_group`)."""
        name = await asyncio.to_thread(self.engine.lite_group, bind_topic, fifo=fifo, quota=quota)
        return self._register(name, "group")

    def wire(self, client_id: str | None = "", **kwargs: Any) -> Wire:
        """A connection; `client_id=""` makes a fresh id, None sends no `x-mq-client-id`."""
        if client_id == "":
            client_id = f"diff-client-{next(_serial)}-{id(self):x}"
        if client_id is not None:
            self._register(client_id, "client")
        wire = Wire(self.endpoint, client_id, **kwargs)
        self._wires.append(wire)
        return wire

    async def close(self) -> None:
        for wire in self._wires:
            await wire.__aexit__(None, None, None)

    def n(self, value: Any) -> Any:
        """The normalised form of a protobuf message, a list of them, or plain JSON-like data."""
        if isinstance(value, PbMessage):
            value = MessageToDict(value, preserving_proto_field_name=True)
        return self._walk(value, None)

    def _walk(self, value: Any, key: str | None) -> Any:
        if isinstance(value, PbMessage):
            return self.n(value)
        if isinstance(value, Mapping):
            if key == "status" and "code" in value:
                return value["code"]
            if key == "status" and not value:
                return "CODE_UNSPECIFIED"
            if key == "broker" and "name" in value:
                out = {k: self._walk(v, k) for k, v in value.items() if k != "name"}
                out["name"] = self._broker(value["name"])
                return out
            return {k: self._walk(v, k) for k, v in value.items() if k not in _ZERO_IS_UNSET}
        if isinstance(value, list | tuple):
            return [self._walk(v, key) for v in value]
        if key in _OPAQUE_KEYS:
            return SET if value not in ("", 0, None) else value
        if isinstance(value, str):
            return self._names_in(value)
        return value

    def _broker(self, name: str) -> str:
        if name not in self._brokers:
            self._brokers[name] = f"<broker{len(self._brokers) + 1}>"
        return self._brokers[name]

    def _names_in(self, text: str) -> str:
        if not self._names:
            return text
        pattern = "|".join(re.escape(n) for n in sorted(self._names, key=len, reverse=True))
        return re.sub(pattern, lambda m: self._names[m.group(0)], text)


Scenario = Callable[[Ctx], Awaitable[Any]]

ROW_TIMEOUT = 55.0
"""Seconds for both runs of a row's scenario, unless the row sets more: within pytest's 90 s timeout."""


@dataclass(frozen=True)
class Row:
    """One request sequence. `brokers`: 1 (the local-mode proxy) or 2 (the cluster-mode proxy).
    `deviation`: the known difference, `{path: (embedded, real)}` as `diff` reports it; empty: equal.
    `real_broker_config`: broker settings the real brokers need for the row (set at run time first).
    `timeout`: seconds for both runs of the scenario (a row that waits on the broker's revive needs more)."""

    name: str
    scenario: Scenario
    brokers: int = 1
    deviation: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)
    slow: bool = False
    real_broker_config: Mapping[str, str] = field(default_factory=dict)
    timeout: float = ROW_TIMEOUT


MISSING = "<missing>"


def diff(embedded: Any, real: Any, path: str = "") -> dict[str, tuple[Any, Any]]:
    """Where two normalised values differ: `{path: (embedded, real)}` (`<missing>` for an absent key or
    list element)."""
    if isinstance(embedded, dict) and isinstance(real, dict):
        out: dict[str, tuple[Any, Any]] = {}
        for k in sorted(set(embedded) | set(real), key=str):
            out.update(diff(embedded.get(k, MISSING), real.get(k, MISSING), f"{path}.{k}" if path else k))
        return out
    if isinstance(embedded, list) and isinstance(real, list):
        out = {}
        for i in range(max(len(embedded), len(real))):
            a = embedded[i] if i < len(embedded) else MISSING
            b = real[i] if i < len(real) else MISSING
            out.update(diff(a, b, f"{path}[{i}]"))
        return out
    return {} if embedded == real else {path: (embedded, real)}


async def _one(engine: Engine, scenario: Scenario) -> Any:
    ctx = Ctx(engine, engine.endpoint)
    try:
        return await scenario(ctx)
    finally:
        await ctx.close()


def run_pair(
    embedded: Engine, real: Engine, scenario: Scenario, timeout: float = ROW_TIMEOUT
) -> tuple[Any, Any]:
    """Run `scenario` against both servers at once; (embedded result, real result)."""

    async def both() -> tuple[Any, Any]:
        a, b = await asyncio.wait_for(asyncio.gather(_one(embedded, scenario), _one(real, scenario)), timeout)
        return a, b

    return asyncio.run(both())
