"""What one unary call costs the calling (event loop's) thread in `thrust_native.Channel.unary_many`.

Starts `thrust serve` in a child process, then starts SendMessage calls through one native channel in
bursts of 64, one `unary_many` per burst as `NativeRpcClient` hands over what one loop iteration started,
and measures the calling thread's own CPU time (`time.thread_time`) around that call only: converting the
requests and their headers, spawning the calls' tasks and waking the tokio worker. The completions are
awaited outside the measured part. It runs the bursts with the client's real headers and
with the request id alone, alternating, so the difference is what converting the headers costs. (Wall
time, which cProfile reports, also counts the time this thread is descheduled while it wakes tokio.)

    .venv/bin/python scripts/unary_call_cost.py --calls 20000
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import time

import thrust
from thrust._core.endpoints import parse_endpoint
from thrust._io.metadata import Metadata
from thrust._io.native import NativeHub, NativeRpcClient
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s

BURST = 64


async def _measure(endpoint: str, calls: int) -> dict[str, float]:
    config = thrust.ClientConfig(endpoint)
    metadata = Metadata(config, "unary-cost")
    hub = NativeHub()
    client = NativeRpcClient(parse_endpoint(endpoint), config, metadata, hub)
    request = s.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name="produce"), body=b"x" * 64)])
    data = request.SerializeToString()
    spent = {"all headers": 0.0, "request id only": 0.0}
    counted = dict.fromkeys(spent, 0)
    channel = client._channel
    try:
        for burst in range(calls // BURST):
            kind = "all headers" if burst % 2 == 0 else "request id only"
            headers = [metadata() for _ in range(BURST)]
            if kind == "request id only":
                headers = [(md[-1],) for md in headers]
            tokens = [hub.token() for _ in range(BURST)]
            futures = [hub.expect(token) for token in tokens]
            batch = [
                (token, "SendMessage", data, md, 5.0, 5.0) for token, md in zip(tokens, headers, strict=True)
            ]
            before = time.thread_time()
            channel.unary_many(batch)
            spent[kind] += time.thread_time() - before
            counted[kind] += BURST
            await asyncio.gather(*futures)
    finally:
        await client.close(0.1)
        hub.close()
    return {kind: spent[kind] / counted[kind] * 1e6 for kind in spent}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args()
    server = subprocess.Popen(
        [sys.executable, "-m", "thrust.cli.main", "serve", "--port", "0", "--topic", "produce:4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert server.stdout is not None
        found = re.search(r":(\d+)", server.stdout.readline().decode())
        assert found is not None, "thrust serve did not start"
        result = asyncio.run(_measure(f"127.0.0.1:{found.group(1)}", args.calls))
    finally:
        server.terminate()
        server.wait()
    for kind, micros in result.items():
        print(f"{kind}: {micros:.2f} us of the calling thread's CPU per call")


if __name__ == "__main__":
    main()
