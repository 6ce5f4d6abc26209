"""`MessagingServicer`: one broker port's gRPC servicer, made of the RPC families of this package.

Each family (route, client, producer, consumer, offsets) is an object of its own holding only the
port's `Port`; the servicer owns one of each and answers each RPC by its family's method of that name
(`handler`, which `transport.register` uses). The families never see each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.server.service.client import ClientRpcs
from thrust.server.service.consumer import ConsumerRpcs
from thrust.server.service.offsets import OffsetRpcs
from thrust.server.service.port import Port, ServerView
from thrust.server.service.producer import ProducerRpcs
from thrust.server.service.route import RouteRpcs

__all__ = ["MessagingServicer"]


class MessagingServicer:
    """`MessagingService` for one broker (one port) of an `EmbeddedServer`.

    Attributes:
        port: what the families share.
        route / client / producer / consumer / offsets: the RPC families; each handler is a method
            named as its RPC in `service.proto`.
    """

    __slots__ = ("_handlers", "client", "consumer", "offsets", "port", "producer", "route")

    def __init__(self, server: ServerView, index: int) -> None:
        self.port = port = Port(server, index)
        self.route = RouteRpcs(port)
        self.client = ClientRpcs(port)
        self.producer = ProducerRpcs(port)
        self.consumer = ConsumerRpcs(port)
        self.offsets = OffsetRpcs(port)
        families = (self.route, self.client, self.producer, self.consumer, self.offsets)
        self._handlers: dict[str, Callable[..., Any]] = {}
        for method in s.DESCRIPTOR.services_by_name["MessagingService"].methods:
            found = [getattr(family, method.name) for family in families if hasattr(family, method.name)]
            if len(found) != 1:
                raise TypeError(f"{method.name}: {len(found)} RPC families define it, expected one")
            self._handlers[method.name] = found[0]

    def handler(self, name: str) -> Callable[..., Any]:
        """The method serving RPC `name` of `MessagingService`."""
        return self._handlers[name]
