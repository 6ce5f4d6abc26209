"""Transactions: a half message stays invisible until the transaction commits; a rollback discards it.
If the producer dies before it decides, the broker asks a producer's `transaction_checker` later (the
topic's type is TRANSACTION)."""

import asyncio
import os
import sys

import thrust

ENDPOINTS = os.environ.get("ROCKETMQ_ENDPOINTS", "127.0.0.1:8081")
TOPIC = os.environ.get("TOPIC", "payments")
GROUP = os.environ.get("GROUP", "ledger")

# What the application decided, by message id: the checker answers from here (in a real application,
# from the database the local transaction wrote to).
decided: dict[str, thrust.TransactionResolution] = {}


def checker(message: thrust.ReceivedMessage) -> thrust.TransactionResolution:
    """Called when the broker asks about a transaction this process never resolved."""
    return decided.get(message.message_id, thrust.TransactionResolution.ROLLBACK)


async def main() -> None:
    async with thrust.Producer(endpoints=ENDPOINTS, topics=[TOPIC], transaction_checker=checker) as producer:
        async with producer.transaction() as tx:  # leaving the block commits; an exception rolls back
            kept = await tx.send(thrust.Message(topic=TOPIC, body=b"charge 10 EUR"))
            decided[kept.message_id] = thrust.TransactionResolution.COMMIT
        tx2 = producer.transaction()
        dropped = await tx2.send(thrust.Message(topic=TOPIC, body=b"charge twice"))
        decided[dropped.message_id] = thrust.TransactionResolution.ROLLBACK
        await tx2.rollback()
    async with thrust.SimpleConsumer(
        endpoints=ENDPOINTS, group=GROUP, subscriptions={TOPIC: "*"}, await_duration=5
    ) as consumer:
        got: list[thrust.ReceivedMessage] = []
        async with asyncio.timeout(60):
            while not got:
                got = await consumer.receive(8)
        for m in got:
            await consumer.ack(m)
    print("committed:", [m.body.decode() for m in got])
    if [m.message_id for m in got] != [kept.message_id]:
        sys.exit("the consumer must see the committed message only")


asyncio.run(main())
