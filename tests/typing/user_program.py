"""A user's program, type-checked by tests/typing/test_public_types.py with `mypy --strict` (never run).

Every `assert_type` fails under mypy when the expression's type differs, and an `Any` differs from every
class: were `thrust.PushConsumer` (or anything else public) typed as Any, this file would not pass.
"""

from __future__ import annotations

import concurrent.futures
from typing import assert_type

import thrust
import thrust.otel
import thrust.sync
from thrust.producer import ProducerStats
from thrust.push_consumer import PushConsumerStats
from thrust.simple_consumer import SimpleConsumerStats


async def asyncio_clients() -> None:
    config = thrust.ClientConfig("127.0.0.1:8081").replace(request_timeout=5.0, namespace="ns")
    assert_type(config, thrust.ClientConfig)
    async with thrust.Producer(config, topics=["orders"]) as producer:
        assert_type(producer, thrust.Producer)
        receipt = await producer.send(thrust.Message(topic="orders", body=b"x", tag="a", keys=["k"]))
        assert_type(receipt, thrust.SendReceipt)
        assert_type(receipt.message_id, str)
        assert_type(
            await producer.send_batch([thrust.Message(topic="orders", body=b"y")]), list[thrust.SendReceipt]
        )
        async with producer.transaction() as tx:
            assert_type(tx, thrust.Transaction)
            await tx.send(thrust.Message(topic="orders", body=b"z"))

    async with thrust.SimpleConsumer(
        endpoints="127.0.0.1:8081", group="billing", subscriptions={"orders": "a"}
    ) as consumer:
        assert_type(consumer, thrust.SimpleConsumer)
        messages = await consumer.receive(max_messages=16, invisible_duration=30)
        assert_type(messages, list[thrust.ReceivedMessage])
        for message in messages:
            assert_type(message.body, bytes)
            assert_type(message.tag, str | None)
            await message.ack()
        assert_type(await consumer.ack_many(messages), list[thrust.ThrustError | None])

    async def listener(message: thrust.ReceivedMessage) -> thrust.ConsumeResult:
        return thrust.ConsumeResult.SUCCESS

    def plain(message: thrust.ReceivedMessage) -> None:
        print(message.body)

    async with thrust.PushConsumer(
        endpoints="127.0.0.1:8081", group="billing", subscriptions={"orders": "*"}, listener=listener
    ) as push:
        assert_type(push, thrust.PushConsumer)
        assert_type(push.stats(), PushConsumerStats)
    assert_type(
        thrust.PushConsumer(
            endpoints="127.0.0.1:8081",
            group="billing",
            subscriptions={"orders": thrust.FilterExpression.sql("a > 1")},
            listener=plain,
        ),
        thrust.PushConsumer,
    )


def sync_clients() -> None:
    with thrust.sync.Producer(endpoints="127.0.0.1:8081", topics=["orders"]) as producer:
        assert_type(producer, thrust.sync.Producer)
        assert_type(producer.send(thrust.Message(topic="orders", body=b"x")), thrust.SendReceipt)
        future = producer.send_async(thrust.Message(topic="orders", body=b"x"))
        assert_type(future, concurrent.futures.Future[thrust.SendReceipt])
        assert_type(producer.aio, thrust.Producer)
    with thrust.sync.SimpleConsumer(
        endpoints="127.0.0.1:8081", group="billing", subscriptions={"orders": "*"}
    ) as consumer:
        for message in consumer.receive(max_messages=4):
            assert_type(message, thrust.ReceivedMessage)
            consumer.ack(message)

    def handle(message: thrust.ReceivedMessage) -> thrust.ConsumeResult:
        return thrust.ConsumeResult.FAILURE

    with thrust.sync.PushConsumer(
        endpoints="127.0.0.1:8081", group="billing", subscriptions={"orders": "*"}, listener=handle
    ) as push:
        assert_type(push, thrust.sync.PushConsumer)
        assert_type(push.aio, thrust.PushConsumer)
        assert_type(push.stats(), PushConsumerStats)
    assert_type(thrust.__version__, str)


async def observed_clients() -> None:
    otel = thrust.otel.instrument()
    assert_type(otel, thrust.otel.OpenTelemetryInstrumentation)
    config = thrust.ClientConfig("127.0.0.1:8081", instrumentation=otel)
    async with thrust.Producer(endpoints="127.0.0.1:8081", instrumentation=otel) as producer:
        assert_type(producer.stats(), ProducerStats)
        assert_type(producer.stats().latency.p99, float)
    async with thrust.SimpleConsumer(config, group="billing", subscriptions={"orders": "*"}) as consumer:
        assert_type(consumer.stats(), SimpleConsumerStats)
        for message in await consumer.receive():
            assert_type(message.trace_context, str | None)
    with thrust.sync.Producer(endpoints="127.0.0.1:8081", instrumentation=otel) as sync_producer:
        assert_type(sync_producer.stats().retries, int)
    with thrust.sync.SimpleConsumer(config, group="billing", subscriptions={"orders": "*"}) as sync_consumer:
        assert_type(sync_consumer.stats().renewals, int)
