"""`MessagingServicer` answers every RPC of `MessagingService` with exactly one family's method."""

from __future__ import annotations

from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.server.config import ServerConfig
from thrust.server.service import EmbeddedServer, MessagingServicer


def test_every_rpc_has_one_handler_on_its_family() -> None:
    server = EmbeddedServer(ServerConfig.build(topics=["t"]))
    servicer = MessagingServicer(server, 0)
    names = [m.name for m in s.DESCRIPTOR.services_by_name["MessagingService"].methods]
    assert servicer.handler("SendMessage") == servicer.producer.SendMessage
    assert servicer.handler("ReceiveMessage") == servicer.consumer.ReceiveMessage
    assert servicer.handler("Telemetry") == servicer.client.Telemetry
    families = (servicer.route, servicer.client, servicer.producer, servicer.consumer, servicer.offsets)
    for name in names:
        owners = [f for f in families if getattr(f, name, None) == servicer.handler(name)]
        assert len(owners) == 1, name
    # The families share only the port they are given.
    assert all(f._port is servicer.port for f in families)
    assert servicer.port.clients is server.clients
