"""The embedded server's CPU per SendMessage call over real gRPC: `thrust serve` in a child process,
16 concurrent bare grpc.aio senders (one message per request, 128 B) for 6 s after 2 s of warm-up; the
server's CPU time comes from /proc (Linux).

    .venv/bin/python scripts/server_send_cpu.py
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time

import grpc

from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust._proto.apache.rocketmq.v2 import service_pb2_grpc as g

_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


async def main() -> None:
    proc = subprocess.Popen(  # noqa: ASYNC220 - a measuring script, started before any load
        [sys.executable, "-m", "thrust.cli.main", "serve", "--port", "0", "--topic", "t:4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    found = re.search(r":(\d+)", proc.stdout.readline().decode())
    assert found is not None, "thrust serve did not start"
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{found.group(1)}")
    stub = g.MessagingServiceStub(channel)
    md = (("x-mq-client-id", "u@1"), ("x-mq-client-version", "0.1"), ("x-mq-language", "PYTHON"))
    sent = 0
    stop = False

    async def loop(i: int) -> None:
        nonlocal sent
        k = 0
        while not stop:
            m = d.Message(topic=d.Resource(name="t"), body=b"x" * 128)
            m.system_properties.message_id = f"{os.getpid():08X}{i:04X}{k:022X}"[:34]
            m.system_properties.born_host = "h"
            m.system_properties.message_type = d.MessageType.NORMAL
            k += 1
            answer = await stub.SendMessage(s.SendMessageRequest(messages=[m]), metadata=md, timeout=10)
            assert answer.status.code == 20000, answer
            sent += 1

    tasks = [asyncio.create_task(loop(i)) for i in range(16)]
    await asyncio.sleep(2)
    n0, c0, t0 = sent, _cpu_seconds(proc.pid), time.monotonic()
    await asyncio.sleep(6)
    n1, c1, t1 = sent, _cpu_seconds(proc.pid), time.monotonic()
    stop = True
    await asyncio.gather(*tasks, return_exceptions=True)
    await channel.close()
    proc.terminate()
    proc.wait()
    calls, seconds, cpu = n1 - n0, t1 - t0, c1 - c0
    print(
        f"{calls / seconds:.0f} sends/s, server CPU {cpu / seconds * 100:.0f}% of a core, "
        f"{cpu / calls * 1e6:.0f} us server CPU per send"
    )


if __name__ == "__main__":
    asyncio.run(main())
