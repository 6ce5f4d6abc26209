"""Lite topics (RocketMQ 5.5): one LITE topic, a lightweight ordered sub-channel per chat session, and a
consumer that subscribes to the sessions it serves at run time. Run the server with the topic and a FIFO
group: `thrust serve --topic chat:LITE --group chat-service:fifo` (docs/lite-topics.md)."""

import asyncio
import os
import sys

import thrust

ENDPOINTS = os.environ.get("ROCKETMQ_ENDPOINTS", "127.0.0.1:8081")
TOPIC = os.environ.get("TOPIC", "chat")
GROUP = os.environ.get("GROUP", "chat-service")


async def main() -> None:
    got: dict[str, list[str]] = {}
    all_in = asyncio.Event()

    async def handle(message: thrust.ReceivedMessage) -> None:
        assert message.lite_topic is not None
        got.setdefault(message.lite_topic, []).append(message.body.decode())
        if sum(len(v) for v in got.values()) == 6:
            all_in.set()

    async with thrust.LitePushConsumer(
        endpoints=ENDPOINTS, group=GROUP, bind_topic=TOPIC, listener=handle
    ) as consumer:
        # This consumer serves two sessions; a lite topic is created by its first message.
        await consumer.subscribe_lite("session-alice")
        await consumer.subscribe_lite("session-bob")
        async with thrust.Producer(endpoints=ENDPOINTS, topics=[TOPIC]) as producer:
            for i in range(3):
                for user in ("alice", "bob", "carol"):
                    message = thrust.Message(
                        topic=TOPIC, body=f"{user}-{i}".encode(), lite_topic=f"session-{user}"
                    )
                    await producer.send(message)
        async with asyncio.timeout(60):
            await all_in.wait()
        await asyncio.sleep(1)  # carol's session is not subscribed: nothing of it arrives
        await consumer.unsubscribe_lite("session-bob")
        print("subscribed now:", sorted(consumer.lite_topics))
    for session, bodies in sorted(got.items()):
        print(session, bodies)
    user_of = {"session-alice": "alice", "session-bob": "bob"}
    if set(got) != set(user_of):
        sys.exit(f"unexpected sessions: {sorted(got)}")
    for session, bodies in got.items():
        if bodies != [f"{user_of[session]}-{i}" for i in range(3)]:
            sys.exit(f"out of order: {bodies}")


asyncio.run(main())
