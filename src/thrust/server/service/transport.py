"""The grpc.aio side of a broker port: server options (the transport limits S8 and S12 of
docs/reliability.md §5) and handler registration that answers undecodable requests INVALID_ARGUMENT."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import grpc

from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.server.config import ServerConfig
from thrust.server.service.status import _UNDECODABLE

if TYPE_CHECKING:
    from thrust.server.service.servicer import MessagingServicer

_MAX_PENDING_CALLS: Final = 1 << 16
# gRPC core's default: the third ping inside `min_ping_interval` without data sent gets GOAWAY.
_MAX_PING_STRIKES: Final = 2
_SERVICE_NAME: Final = "apache.rocketmq.v2.MessagingService"


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def _server_options(config: ServerConfig) -> list[tuple[str, Any]]:
    """grpc.aio server arguments: the transport limits S8 and S12 (docs/reliability.md §5)."""
    options: list[tuple[str, Any]] = [
        # S8: bounded inbound messages (the proxy's grpcMaxInboundMessageSize, 130 MiB by default).
        ("grpc.max_receive_message_length", config.max_inbound_message_size),
        ("grpc.max_send_message_length", -1),
        # S8: calls open at once per connection (SETTINGS_MAX_CONCURRENT_STREAMS); a client's further calls
        # wait in its transport until one ends, they are not refused.
        ("grpc.max_concurrent_streams", config.max_concurrent_streams),
        # S8 keepalive enforcement. Clients may ping without calls (Java and thrust ping every 300 s even
        # when idle, as grpc-java's `permitKeepAliveTime` allows); a client pinging more often than
        # `min_ping_interval` gets GOAWAY too_many_pings after `_MAX_PING_STRIKES` strikes.
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", _ms(config.min_ping_interval)),
        ("grpc.http2.max_ping_strikes", _MAX_PING_STRIKES if config.min_ping_interval else 0),
        # S12: a connection that does not finish its TLS/HTTP/2 handshake in time is closed (slow loris).
        ("grpc.server_handshake_timeout_ms", _ms(config.handshake_timeout)),
        # Without this a second server could silently share a port (SO_REUSEPORT), hiding a port clash.
        ("grpc.so_reuseport", 0),
        # gRPC core queues calls that arrived before the Python server asked for them, and past 1000 queued
        # calls it cancels new ones at random (CANCELLED, before any handler runs; hard limit 3000). A client
        # pipelining ~1000 sends outruns the single-threaded asyncio loop, so that backlog protection
        # cancelled sends. A RocketMQ proxy (grpc-java) has no such limit: it answers overload with
        # TOO_MANY_REQUESTS, never by cancelling the stream. Deadlines still bound every queued call.
        ("grpc.server.max_pending_requests", _MAX_PENDING_CALLS),
        ("grpc.server.max_pending_requests_hard_limit", _MAX_PENDING_CALLS),
    ]
    if config.idle_timeout:
        # S8: the proxy closes a connection without calls after maxConnectionIdle (120 s,
        # docs/protocol.md §2.6).
        options.append(("grpc.max_connection_idle_ms", _ms(config.idle_timeout)))
    if config.keepalive_time:
        # S12: ping a silent connection and close it when the ack does not come, so a half-open peer's
        # fd (and its calls) are freed; grpc's server default is one ping per 2 h.
        options.append(("grpc.keepalive_time_ms", _ms(config.keepalive_time)))
        options.append(("grpc.keepalive_timeout_ms", _ms(config.keepalive_timeout)))
        # A keepalive that fires while another ping (a BDP probe) is unanswered waits for that ping, whose
        # ack is bounded by the ping timeout (60 s by default), not by the keepalive timeout.
        options.append(("grpc.http2.ping_timeout_ms", _ms(config.keepalive_timeout)))
    return options


def _decoder(parse: Callable[[bytes], object]) -> Callable[[bytes], object]:
    def decode(data: bytes) -> object:
        try:
            return parse(data)
        except Exception:
            return _UNDECODABLE

    return decode


def _guard_unary(fn: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    async def handler(request: Any, context: Any) -> Any:
        if request is _UNDECODABLE:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request cannot be decoded")
        return await fn(request, context)

    return handler


def _register(server: grpc.aio.Server, servicer: MessagingServicer) -> None:
    """Register every MessagingService method, like the generated `add_..._to_server`, except that an
    undecodable request is answered gRPC INVALID_ARGUMENT (grpc.aio would answer UNKNOWN, which
    reads as a server bug). The streaming handlers check for it themselves."""
    handlers = {}
    for method in s.DESCRIPTOR.services_by_name["MessagingService"].methods:
        request_type = getattr(s, method.input_type.name)
        response_type = getattr(s, method.output_type.name)
        fn = servicer.handler(method.name)
        decode = _decoder(request_type.FromString)
        encode = response_type.SerializeToString
        if method.client_streaming:
            handler = grpc.stream_stream_rpc_method_handler(fn, decode, encode)
        elif method.server_streaming:
            handler = grpc.unary_stream_rpc_method_handler(fn, decode, encode)
        else:
            handler = grpc.unary_unary_rpc_method_handler(_guard_unary(fn), decode, encode)
        handlers[method.name] = handler
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE_NAME, handlers),))
    # Registered methods are matched by gRPC core when the call arrives, so a call skips the Python-level
    # generic handler lookup (what the generated `add_..._to_server` of grpcio-tools >= 1.63 does too).
    # Older grpcio (pyproject.toml allows them) has no such call; the generic handler above serves alone.
    register = getattr(server, "add_registered_method_handlers", None)
    if register is not None:
        register(_SERVICE_NAME, handlers)
