"""What a consumer group and a namespace are worth, on both servers (docs/rocketmq.md, "What the cluster
needs" and "Namespaces").

A group nobody created is refused at its first receive (CONSUMER_GROUP_NOT_FOUND; INTERNAL_SERVER_ERROR
behind a local-mode proxy, D15 in docs/interop-findings.md): the embedded server of the suite runs without
auto-creation, and `thrust cluster` starts its brokers with
`autoCreateSubscriptionGroup=false` (upstream's default, true, would give a typo'd group a group of its
own that starts consuming; apache/rocketmq broker/.../subscription/SubscriptionGroupManager.java
`findSubscriptionGroupConfig`).

A namespace is sent in the `x-mq-namespace` header and in every `Resource` (as the Java client 5.x does,
tests/client/test_client_namespace.py), and separates nothing on either server: since 5.2.0 the proxy keys
topics and groups by `Resource.name` alone (docs/protocol.md §2.7).
"""

from __future__ import annotations

import pytest

import thrust
from tests.client._util import receive_n, run
from tests.engines import Engine, unique
from thrust._codec.status import Code


def _typo_group_refusal(engine: Engine) -> thrust.ThrustError:
    """What the first receive of a group nobody created raises, once a message waits on the topic; and
    the created group then receives that message."""
    topic, group = engine.topic(), engine.group()
    typo = unique("typo")
    refused: list[thrust.ThrustError] = []

    async def scenario() -> None:
        async with thrust.Producer(endpoints=engine.endpoint, topics=[topic]) as producer:
            sent = await producer.send(thrust.Message(topic=topic, body=b"for billing"))
        # The proxy answers the settings and the heartbeat of an unknown group with its defaults
        # (GrpcClientSettingsManager.mergeSubscriptionData): the consumer starts; its receive is refused.
        async with thrust.SimpleConsumer(
            endpoints=engine.endpoint, group=typo, subscriptions={topic: "*"}, await_duration=5
        ) as wrong:
            with pytest.raises(thrust.ThrustError) as err:
                await wrong.receive(32, engine.min_invisible)
            refused.append(err.value)
        async with thrust.SimpleConsumer(
            endpoints=engine.endpoint, group=group, subscriptions={topic: "*"}, await_duration=5
        ) as right:
            [m] = await receive_n(right, 1, invisible_duration=engine.min_invisible)
            assert m.message_id == sent.message_id
            await right.ack(m)

    run(scenario, timeout=60)
    assert f"subscription group [{typo}] does not exist" in str(refused[0])
    return refused[0]


def test_a_group_nobody_created_is_refused_at_its_first_receive(engine: Engine) -> None:
    error = _typo_group_refusal(engine)
    if engine.real:
        # D15 (docs/interop-findings.md): a local-mode proxy wraps the broker's SUBSCRIPTION_GROUP_NOT_EXIST
        # in INTERNAL_SERVER_ERROR (LocalMessageService.popMessage).
        assert isinstance(error, thrust.InternalError) and error.code == Code.INTERNAL_SERVER_ERROR
    else:
        assert isinstance(error, thrust.NotFoundError) and error.code == Code.CONSUMER_GROUP_NOT_FOUND


def test_a_group_nobody_created_is_consumer_group_not_found_behind_a_cluster_mode_proxy(
    engine2: Engine,
) -> None:
    # The cluster-mode proxy gets the broker's answer over remoting and maps it (ResponseBuilder).
    error = _typo_group_refusal(engine2)
    assert isinstance(error, thrust.NotFoundError) and error.code == Code.CONSUMER_GROUP_NOT_FOUND


def test_a_namespace_separates_nothing(engine: Engine) -> None:
    topic, first, second = engine.topic(), engine.group(), engine.group()

    async def receive_one(namespace: str, group: str) -> thrust.ReceivedMessage:
        async with thrust.SimpleConsumer(
            endpoints=engine.endpoint,
            namespace=namespace,
            group=group,
            subscriptions={topic: "*"},
            await_duration=5,
        ) as c:
            [m] = await receive_n(c, 1, invisible_duration=engine.min_invisible)
            await c.ack(m)
            return m

    async def scenario() -> None:
        async with thrust.Producer(endpoints=engine.endpoint, namespace="ns1", topics=[topic]) as p:
            sent = await p.send(thrust.Message(topic=topic, body=b"sent in ns1"))
        in_ns1 = await receive_one("ns1", first)
        # The same topic and another group, in namespace ns2: the same message (no `ns2%topic` exists).
        in_ns2 = await receive_one("ns2", second)
        assert in_ns1.message_id == in_ns2.message_id == sent.message_id
        assert in_ns1.topic == in_ns2.topic == topic

    run(scenario, timeout=60)
