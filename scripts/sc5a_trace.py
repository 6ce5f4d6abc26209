"""Where scenario 5a's time goes: runs its thrust side and reports, from the moment the server first
answered the new assignment, when the first message of queue 1 reached the client (read off the
ReceiveMessage stream) and when the listener got it (the push consumer hands a stream's first message
over as it arrives, the rest when the stream ends).

    .venv/bin/python scripts/sc5a_trace.py [--runs 5]

It wraps `RpcClient.receive` to stamp the first streamed message; everything else is the scenario's
code unchanged.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

from thrust._codec.status import Code
from thrust._io import rpc
from thrust.bench import scenarios
from thrust.bench.server import ControlServer

_arrivals: list[float] = []
_receive = rpc.RpcClient.receive


async def _stamping_receive(
    self: rpc.RpcClient,
    request: Any,
    timeout: float,
    on_message: Callable[[Any], None] | None = None,
) -> rpc.ReceiveResult:
    if request.message_queue.broker.name != "broker-1":
        return await _receive(self, request, timeout, on_message)
    call = self._stub.ReceiveMessage(request, timeout=timeout, metadata=self._metadata())
    messages: list[Any] = []
    code, text, delivery = -1, "", None
    try:
        async for response in call:
            kind = response.WhichOneof("content")
            if kind == "message":
                if not _arrivals:
                    _arrivals.append(time.monotonic())
                if on_message is not None and code == Code.OK:
                    on_message(response.message)  # the push consumer's streamed hand-over
                else:
                    messages.append(response.message)
            elif kind == "status":
                code, text = response.status.code, response.status.message
    except asyncio.CancelledError:
        call.cancel()
        raise
    return rpc.ReceiveResult(code, text, messages, delivery)


_move = scenarios._sc5a_move


async def _traced_move(server: ControlServer, first: Callable[[], float | None]) -> dict[str, float]:
    result = await _move(server, first)
    assigned = server.command("assigned", topic=scenarios._SC5A_TOPIC, group=scenarios.GROUP)["at"]
    result["first_arrival_ms"] = (_arrivals[0] - assigned) * 1000.0 if _arrivals else float("nan")
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    rpc.RpcClient.receive = _stamping_receive  # type: ignore[method-assign]
    scenarios._sc5a_move = _traced_move
    rows = []
    for _ in range(args.runs):
        _arrivals.clear()
        r = await scenarios._sc5a_thrust(scenarios.Context())
        rows.append(r)
        print(
            f"receive reached the server {r['receive_call_ms']:.2f} ms, first message at the client "
            f"{r['first_arrival_ms']:.2f} ms, at the listener {r['first_receive_ms']:.2f} ms",
            flush=True,
        )
    for key in ("receive_call_ms", "first_arrival_ms", "first_receive_ms"):
        print(f"median {key}: {statistics.median(r[key] for r in rows):.2f}")


if __name__ == "__main__":
    asyncio.run(main())
