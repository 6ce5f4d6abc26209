"""How long `SimpleConsumer.close()` takes with one receive long-polling an empty topic, and what the
waiting caller gets (issue "Behaviour defects found by trying thrust as a new user", item 2).

    .venv/bin/python scripts/measure_close_pending_receive.py [await_duration_seconds, default 10]

Embedded server in-process on 127.0.0.1; one wall-clock reading, so expect noise of a few ms.
"""

from __future__ import annotations

import asyncio
import sys
import time

from thrust import SimpleConsumer
from thrust.testing import embedded_server


async def main(await_duration: float) -> None:
    async with embedded_server(topics=["t"], groups=["g"]) as srv:
        consumer = SimpleConsumer(
            endpoints=srv.endpoints[0], group="g", subscriptions={"t": "*"}, await_duration=await_duration
        )
        await consumer.start()
        waiter = asyncio.ensure_future(consumer.receive())
        await asyncio.sleep(0.5)  # the long poll is parked on the server
        assert srv.stats.calls["ReceiveMessage"] == 1 and not waiter.done()
        t0 = time.monotonic()
        await consumer.close()
        closed = time.monotonic() - t0
        try:
            got = f"returned {await waiter!r}"
        except BaseException as exc:  # report whatever the caller sees
            got = f"{type(exc).__name__}: {exc}"
        ended = time.monotonic() - t0
        print(
            f"await_duration={await_duration:g}s close()={closed:.3f}s; "
            f"the receive ended after {ended:.3f}s: {got}"
        )


if __name__ == "__main__":
    asyncio.run(main(float(sys.argv[1]) if len(sys.argv) > 1 else 10.0))
