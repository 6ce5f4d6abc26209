"""`thrust.sync.PushConsumer`: a plain-threaded program consumes through the library's loop thread."""

from __future__ import annotations

import asyncio
import threading
import time

import thrust
import thrust.sync
from thrust.testing import embedded_server


def test_sync_push_consumer_consumes_everything_and_closes() -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["sync-push:2"], groups=["sync-group"]) as srv:
            ep = srv.endpoints[0]
            async with thrust.Producer(endpoints=ep, topics=["sync-push"]) as producer:
                sent = {
                    (await producer.send(thrust.Message(topic="sync-push", body=b"m%d" % i))).message_id
                    for i in range(50)
                }
            seen: set[str] = set()
            threads: set[str] = set()
            lock = threading.Lock()

            def listener(message: thrust.ReceivedMessage) -> thrust.ConsumeResult:
                with lock:
                    seen.add(message.message_id)
                    threads.add(threading.current_thread().name)
                return thrust.ConsumeResult.SUCCESS

            def run_sync() -> None:
                with thrust.sync.PushConsumer(
                    endpoints=ep, group="sync-group", subscriptions={"sync-push": "*"}, listener=listener
                ) as consumer:
                    deadline = time.monotonic() + 20
                    while time.monotonic() < deadline:
                        with lock:
                            if seen >= sent:
                                break
                        time.sleep(0.05)
                    assert "PushConsumer" in repr(consumer)
                # close() flushed the acks: every consumed message was acknowledged.
                assert consumer.aio.stats().acked == len(sent)

            # The sync facade refuses to run inside a loop, so drive it from a plain thread.
            await asyncio.to_thread(run_sync)
            assert seen == sent
            assert all(name.startswith("thrust-consume") for name in threads)

    asyncio.run(scenario())
