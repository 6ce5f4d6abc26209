"""Server-side CPU per message on the send and receive paths, without gRPC: calls the embedded
server's `SendMessage` / `ReceiveMessage` / `AckMessage` handlers directly with a stand-in call context,
so the number is the server's own Python work per message (protobuf in and out, validation, auth,
broker state, wake-ups), the part the server's code decides; gRPC's per-call cost comes on top. It is
this process's CPU time, so other load on the machine disturbs it less than wall-clock time would.

    .venv/bin/python scripts/server_hot_paths.py [--n 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

from thrust._codec.ids import new_message_id
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.server.config import ServerConfig
from thrust.server.service import EmbeddedServer, MessagingServicer


class _Context:
    """The parts of `grpc.aio.ServicerContext` the handlers use, with the thrust client's headers."""

    def __init__(self) -> None:
        self._n = 0

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        self._n += 1
        return (
            ("x-mq-language", "PYTHON"),
            ("x-mq-protocol", "v2"),
            ("x-mq-client-version", "0.1.0"),
            ("x-mq-client-id", "bench@1"),
            ("x-mq-date-time", "20261130T000000Z"),
            ("x-mq-request-id", f"r{self._n}"),
        )

    def time_remaining(self) -> float:
        return 30.0

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"


def _send_request(size: int) -> s.SendMessageRequest:
    m = d.Message(topic=d.Resource(name="t"), body=b"x" * size)
    sp = m.system_properties
    sp.message_id = new_message_id()
    sp.born_host = "bench-host"
    sp.born_timestamp.GetCurrentTime()
    sp.message_type = d.MessageType.NORMAL
    return s.SendMessageRequest(messages=[m])


async def _main(n: int, size: int) -> None:
    server = EmbeddedServer(ServerConfig.build(topics=["t:4"], groups=["g"]))
    servicer = MessagingServicer(server, 0)
    ctx: Any = _Context()
    # Parsed requests, as gRPC hands them to the handler (decoding is gRPC's cost, not counted).
    wire = [_send_request(size).SerializeToString() for _ in range(n)]
    requests = [s.SendMessageRequest.FromString(b) for b in wire]
    t0 = time.process_time()
    for request in requests:
        response = await servicer.producer.SendMessage(request, ctx)
        response.SerializeToString()
    send_us = (time.process_time() - t0) / n * 1e6

    receive = s.ReceiveMessageRequest(
        group=d.Resource(name="g"),
        message_queue=d.MessageQueue(topic=d.Resource(name="t"), id=-1),
        filter_expression=d.FilterExpression(type=d.FilterType.TAG, expression="*"),
        batch_size=32,
        auto_renew=False,
    )
    receive.invisible_duration.seconds = 30
    receive.long_polling_timeout.seconds = 5
    got = 0
    acks: list[s.AckMessageRequest] = []
    t0 = time.process_time()
    while got < n:
        entries = []
        async for response in servicer.consumer.ReceiveMessage(receive, ctx):
            response.SerializeToString()
            if response.WhichOneof("content") == "message":
                sp = response.message.system_properties
                entries.append(s.AckMessageEntry(message_id=sp.message_id, receipt_handle=sp.receipt_handle))
        got += len(entries)
        acks.append(
            s.AckMessageRequest(group=d.Resource(name="g"), topic=d.Resource(name="t"), entries=entries)
        )
    receive_us = (time.process_time() - t0) / n * 1e6
    t0 = time.process_time()
    for ack in acks:
        (await servicer.consumer.AckMessage(ack, ctx)).SerializeToString()
    ack_us = (time.process_time() - t0) / n * 1e6
    print(
        f"{n} messages of {size} B: send {send_us:.1f} us/msg (1 per request), "
        f"receive {receive_us:.1f} us/msg (32 per call), ack {ack_us:.1f} us/msg (32 entries per call)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--size", type=int, default=128)
    args = parser.parse_args()
    asyncio.run(_main(args.n, args.size))


if __name__ == "__main__":
    main()
