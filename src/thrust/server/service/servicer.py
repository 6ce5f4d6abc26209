"""`MessagingServicer`: the RPC families of `thrust.server.service` mixed into one gRPC servicer."""

from __future__ import annotations

from thrust.server.service.client import ClientRpcs
from thrust.server.service.consumer import ConsumerRpcs
from thrust.server.service.offsets import OffsetRpcs
from thrust.server.service.producer import ProducerRpcs
from thrust.server.service.route import RouteRpcs

__all__ = ["MessagingServicer"]


class MessagingServicer(RouteRpcs, ClientRpcs, ProducerRpcs, ConsumerRpcs, OffsetRpcs):
    """`MessagingService` for one broker (one port) of an `EmbeddedServer`.

    Each handler is a method named as its RPC in `service.proto`, defined in the module of its family;
    `thrust.server.service.transport.register` finds them by name.
    """
