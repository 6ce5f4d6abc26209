"""The embedded server's gRPC layer: `apache.rocketmq.v2.MessagingService` over `grpc.aio`.

Thin on purpose: every decision about messages lives in `thrust.server.core` (pure, synchronous);
this package validates requests with the shared validators, translates protobuf, runs the clock
(a timer at the brokers' `next_event_time`), holds long polls and owns the Telemetry streams.

Wire behaviour follows the Apache RocketMQ proxy (docs/protocol.md §2-§7):

- every unary RPC and ReceiveMessage ends with gRPC OK; the outcome is `Status` in the body;
  Telemetry alone uses gRPC codes (INVALID_ARGUMENT for PUBSUB_NOT_SET);
- `BrokerError` / `Invalid` become their status code; anything unexpected INTERNAL_SERVER_ERROR
  (the proxy's catch-all 50001), never a gRPC INTERNAL;
- one `grpc.aio.server` per broker port; QueryRoute on any port lists every broker hosting the topic.

Long polling is event-driven: a waiting ReceiveMessage parks a future under (broker, topic); sends,
acks of FIFO messages, nacks, transaction commits and the timer (visibility changes, delayed messages
landing) wake the parked polls, each of which then pops once.

Modules, one per RPC family plus the shared parts, from the top down (each imports only modules
below it; the families none of each other):

- `server`: `EmbeddedServer`, the process-wide state (brokers, ports, the clock); owns a
  `ClientRegistry` and the servicers;
- `transport`: grpc.aio server options and handler registration;
- `servicer`: `MessagingServicer`, one port's servicer, owning one object per RPC family;
- `route`: QueryRoute, QueryAssignment;
- `client`: Heartbeat, NotifyClientTermination, Telemetry;
- `producer`: SendMessage, EndTransaction, RecallMessage;
- `consumer`: ReceiveMessage (long polls), AckMessage, ChangeInvisibleDuration,
  ForwardMessageToDeadLetterQueue;
- `offsets`: the offset-mode and lite RPCs (NOT_IMPLEMENTED);
- `port`: `Port` (what a port's families share: its broker, caches, `unary`: authentication, fault
  hooks, errors to `Status`) and `ServerView` (what they may use of the server);
- `registry`: `ClientRegistry`, the clients' Settings, Telemetry streams, expiry and server commands;
- `status`: `Status` helpers, the undecodable-request marker, the logger.
"""

from thrust.server.service.server import MAX_RECEIVE_MESSAGE_LENGTH, EmbeddedServer
from thrust.server.service.servicer import MessagingServicer

__all__ = ["MAX_RECEIVE_MESSAGE_LENGTH", "EmbeddedServer", "MessagingServicer"]
