"""Namespaces end to end against the embedded server (docs/protocol.md §2.7): a producer, a simple consumer
and a push consumer configured with `namespace=` send and receive as any other client, and every request
they make carries the namespace, in the `x-mq-namespace` header and in every `Resource` of its body. The
embedded server, like the proxy, keys topics and groups by name; it keeps the namespace of the Settings a
client reports."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.message import Message as ProtoMessage

import thrust
from tests.client._util import receive_n, run
from tests.push._util import until
from thrust._io.native import NativeRpcClient
from thrust._io.rpc import RpcClient
from thrust.testing import embedded_server

NS = "tenant-a"


def _resources(message: ProtoMessage) -> list[ProtoMessage]:
    """Every `apache.rocketmq.v2.Resource` set anywhere in `message`."""
    found: list[ProtoMessage] = []
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        values = [value] if isinstance(value, ProtoMessage) else list(value)  # one, repeated, or a map's keys
        for item in values:
            if not isinstance(item, ProtoMessage):
                continue  # a map of scalars
            if item.DESCRIPTOR.full_name == "apache.rocketmq.v2.Resource":
                found.append(item)
            else:
                found += _resources(item)
    return found


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any, dict[str, str]]]:
    """(rpc, request, headers) of every unary call (awaited, or started with a callback: `start_unary`)
    and every ReceiveMessage the clients make, on either transport."""
    calls: list[tuple[str, Any, dict[str, str]]] = []
    for channel in (RpcClient, NativeRpcClient):
        spy_unary, spy_start, spy_receive = _spies(calls, channel.unary, channel.start_unary, channel.receive)
        monkeypatch.setattr(channel, "unary", spy_unary)
        monkeypatch.setattr(channel, "start_unary", spy_start)
        monkeypatch.setattr(channel, "receive", spy_receive)
    return calls


def _spies(
    calls: list[tuple[str, Any, dict[str, str]]], unary: Any, start_unary: Any, receive: Any
) -> tuple[Any, Any, Any]:
    def headers(client: RpcClient | NativeRpcClient) -> dict[str, str]:
        return {k: str(v) for k, v in client._metadata()}

    async def spy_unary(self: Any, rpc: str, request: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append((rpc, request, headers(self)))
        return await unary(self, rpc, request, *args, **kwargs)

    def spy_start(self: Any, rpc: str, request: Any, *args: Any, **kwargs: Any) -> Any:
        cancel = start_unary(self, rpc, request, *args, **kwargs)
        if cancel is not None:  # started (else the caller awaits `unary`, which records it)
            calls.append((rpc, request, headers(self)))
        return cancel

    async def spy_receive(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(("ReceiveMessage", request, headers(self)))
        return await receive(self, request, *args, **kwargs)

    return spy_unary, spy_start, spy_receive


def test_clients_with_a_namespace_round_trip_and_send_it_everywhere(
    sent: list[tuple[str, Any, dict[str, str]]],
) -> None:
    async def scenario() -> None:
        async with embedded_server(topics=["orders"], groups=["billing", "audit"]) as srv:
            ep = srv.endpoints[0]
            pushed: list[bytes] = []

            def listener(m: thrust.ReceivedMessage) -> thrust.ConsumeResult:
                pushed.append(m.body)
                return thrust.ConsumeResult.SUCCESS

            async with (
                thrust.Producer(endpoints=ep, namespace=NS, topics=["orders"]) as p,
                thrust.SimpleConsumer(
                    endpoints=ep,
                    namespace=NS,
                    group="billing",
                    subscriptions={"orders": "*"},
                    await_duration=5,
                ) as c,
                thrust.PushConsumer(
                    endpoints=ep,
                    namespace=NS,
                    group="audit",
                    subscriptions={"orders": "*"},
                    listener=listener,
                ) as push,
            ):
                assert p.config.namespace == c.config.namespace == push.config.namespace == NS
                receipt = await p.send(thrust.Message(topic="orders", body=b"in the namespace"))
                [m] = await receive_n(c, 1)
                assert (m.message_id, m.topic, m.body) == (receipt.message_id, "orders", b"in the namespace")
                await c.change_invisible_duration(m, 30)
                await m.ack()
                await until(lambda: push.stats().acked == 1, timeout=20)
                assert pushed == [b"in the namespace"]
                # The server kept the namespace of what each client reported over Telemetry.
                for client, resource in [
                    (p.client_id, lambda s: s.publishing.topics[0]),
                    (c.client_id, lambda s: s.subscription.group),
                    (push.client_id, lambda s: s.subscription.group),
                ]:
                    settings = srv.client_settings(client)  # type: ignore[arg-type]
                    assert settings is not None
                    assert resource(settings.merged).resource_namespace == NS, settings.merged

    run(scenario)
    rpcs = {rpc for rpc, _, _ in sent}
    assert {"QueryRoute", "SendMessage", "ReceiveMessage", "AckMessage", "ChangeInvisibleDuration"} <= rpcs
    assert {"QueryAssignment", "NotifyClientTermination"} <= rpcs
    for rpc, request, headers in sent:
        assert headers.get("x-mq-namespace") == NS, (rpc, headers)
        resources = _resources(request)
        assert all(r.resource_namespace == NS for r in resources), (rpc, request)  # type: ignore[attr-defined]
        if rpc not in ("Heartbeat", "NotifyClientTermination"):  # a producer's name no group
            assert resources, f"{rpc} named no topic or group"
    # The consumers' termination names their group, in the namespace.
    groups = [r.name for rpc, req, _ in sent if rpc == "NotifyClientTermination" for r in _resources(req)]  # type: ignore[attr-defined]
    assert sorted(groups) == ["audit", "billing"]


def test_without_a_namespace_nothing_is_sent_for_it(sent: list[tuple[str, Any, dict[str, str]]]) -> None:
    async def scenario() -> None:
        async with (
            embedded_server(topics=["orders"]) as srv,
            thrust.Producer(endpoints=srv.endpoints[0], topics=["orders"]) as p,
        ):
            await p.send(thrust.Message(topic="orders", body=b"x"))

    run(scenario)
    assert sent
    for rpc, request, headers in sent:
        assert headers.get("x-mq-namespace", "") == "", (rpc, headers)
        assert all(r.resource_namespace == "" for r in _resources(request)), rpc  # type: ignore[attr-defined]
