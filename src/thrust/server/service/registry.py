"""The clients of an embedded server: their Settings, Telemetry streams, liveness and expiry, and the
commands the server sends them over Telemetry (docs/protocol.md §4).

`ClientRegistry` is owned by `EmbeddedServer` (`server.clients`), which starts and stops it with itself
and gives it the one thing it needs of the brokers: a function that releases a client's auto-renewed
messages. `_Session` is one open Telemetry stream, `_Client` what is remembered of a client id between its
calls.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Final

import grpc

from thrust._codec.status import Code
from thrust._codec.validation import Invalid, check_group
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.server.config import ServerConfig
from thrust.server.core.catalog import Catalog
from thrust.server.core.model import TransactionCheck
from thrust.server.message_codec import stored_message_pb
from thrust.server.service.status import _STATUS_OK, logger
from thrust.server.settings import HandshakeSettings, merge_settings

_TELEMETRY_QUEUE: Final = 1024  # outgoing commands buffered per stream
_LITE_CLIENTS: Final = (d.ClientType.LITE_PUSH_CONSUMER, d.ClientType.LITE_SIMPLE_CONSUMER)


class _Session:
    """One open Telemetry stream: where server-initiated commands for a client go."""

    __slots__ = ("abort", "broker", "client_id", "mute", "peer", "queue")

    def __init__(self, client_id: str, broker: int, peer: str) -> None:
        self.client_id = client_id
        self.broker = broker
        self.peer = peer
        self.queue: asyncio.Queue[s.TelemetryCommand | None] = asyncio.Queue(_TELEMETRY_QUEUE)
        self.abort: tuple[grpc.StatusCode, str] | None = None
        self.mute = False  # a dropped Telemetry call: settings are stored but never answered

    def send(self, command: s.TelemetryCommand | None) -> bool:
        try:
            self.queue.put_nowait(command)
        except asyncio.QueueFull:
            logger.warning("telemetry queue of client %s is full; command dropped", self.client_id)
            return False
        return True

    def end(self, status: grpc.StatusCode, details: str) -> None:
        """End the stream with `status`, dropping the commands not written yet (even from a full queue)."""
        self.abort = (status, details)
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queue.put_nowait(None)


class _Client:
    """What the server remembers of a client id between its calls: when it was last heard from (any call
    or Telemetry command; upstream expires a channel after `channelExpiredTimeout`, docs/protocol.md §4.7) and
    its parked long polls, answered at once when it expires."""

    __slots__ = ("expired", "last_seen", "polls")

    def __init__(self) -> None:
        self.last_seen = 0.0
        self.expired = False
        self.polls: set[asyncio.Future[None]] = set()


class ClientRegistry:
    """Clients of the server: Settings, Telemetry sessions, expiry, server-initiated commands.

    Owns every client-keyed map and the expiry timers and sweeper on the server's loop.

    Args:
        config: the server's configuration (expiry times).
        catalog: for the groups named in reported Settings.
        release: releases a client's auto-renewed messages on every broker (when it leaves or expires).
    """

    def __init__(self, config: ServerConfig, catalog: Catalog, release: Callable[[str], None]) -> None:
        self._config = config
        self._catalog = catalog
        self._release = release
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False
        self._settings: dict[str, HandshakeSettings] = {}
        self._sessions: dict[str, list[_Session]] = {}
        self._expiry: dict[str, asyncio.TimerHandle] = {}
        self._pending: dict[str, asyncio.Future[s.TelemetryCommand]] = {}
        self._clients: dict[str, _Client] = {}
        self._sweeper: asyncio.TimerHandle | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """The server is serving on `loop`: expiry timers may be set, the silent-client sweep starts."""
        self._loop = loop
        self._started = True
        self._schedule_sweep()

    def stop(self) -> None:
        """On the server's `stop()`: cancel the expiry timers and pending round trips, end every
        Telemetry stream."""
        self._started = False
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        for handle in self._expiry.values():
            handle.cancel()
        self._expiry.clear()
        for sessions in list(self._sessions.values()):
            for session in sessions:
                session.send(None)
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()

    # ------------------------------------------------------------------------------------------
    # clients and telemetry

    def client_settings(self, client_id: str) -> HandshakeSettings | None:
        """The settings a client last reported over Telemetry (merged), or None."""
        return self._settings.get(client_id)

    def connected_clients(self) -> list[str]:
        """Client ids with at least one open Telemetry stream."""
        return list(self._sessions)

    def telemetry_sessions(self, client_id: str) -> list[_Session]:
        """The client's open Telemetry streams, oldest first (a copy; tests end them with `send(None)`)."""
        return list(self._sessions.get(client_id, ()))

    def apply_settings(self, client_id: str, reported: d.Settings) -> s.TelemetryCommand:
        """Validate and merge a client's Settings; the reply to send (docs/protocol.md §4.1, §4.2)."""
        group_info = None
        if reported.WhichOneof("pub_sub") == "subscription" and reported.subscription.group.name:
            check_group(reported.subscription.group.name)
            # An unknown group gets the default settings, neither refused nor created
            # (GrpcClientSettingsManager.mergeSubscriptionData reads the config and keeps the defaults).
            group_info = self._catalog.find_group(reported.subscription.group.name)
            if group_info is not None and group_info.lite_bind_topic is not None:
                _check_lite_binding(reported, group_info.name, group_info.lite_bind_topic)
        settings = merge_settings(
            reported,
            group_info,
            # A group's own quota (its `lite.sub.client.quota`) over the server's, as 5.5.0's
            # GrpcClientSettingsManager reads it from the SubscriptionGroupConfig.
            lite_subscription_quota=(
                group_info.lite_quota
                if group_info is not None and group_info.lite_quota is not None
                else self._config.lite_subscription_quota
            ),
            max_lite_topic_size=self._config.max_lite_topic_size,
        )
        self._settings[client_id] = settings
        return s.TelemetryCommand(status=_STATUS_OK, settings=settings.merged)

    def track(self, client_id: str) -> None:
        """A client holds auto-renewed messages: make sure they are released `client_expiry` seconds
        after it is gone, even when it never opened a Telemetry stream."""
        if client_id in self._sessions or client_id in self._expiry or self._loop is None:
            return
        self._expiry[client_id] = self._loop.call_later(
            self._config.client_expiry, self._expire_client, client_id
        )

    def open_session(self, session: _Session) -> None:
        sessions = self._sessions.setdefault(session.client_id, [])
        sessions.append(session)
        handle = self._expiry.pop(session.client_id, None)
        if handle is not None:
            handle.cancel()
        logger.info(
            "client %s connected to broker %d (telemetry from %s)",
            session.client_id,
            session.broker,
            session.peer,
        )

    def close_session(self, session: _Session) -> None:
        sessions = self._sessions.get(session.client_id)
        if sessions is not None and session in sessions:
            sessions.remove(session)
            if not sessions:
                del self._sessions[session.client_id]
                if self._started and self._loop is not None:
                    # Keep the client's auto-renewed messages for a while: it may reconnect (the
                    # proxy expires a channel after 120 s without heartbeat, docs/protocol.md §4.7).
                    self._expiry[session.client_id] = self._loop.call_later(
                        self._config.client_expiry, self._expire_client, session.client_id
                    )
        logger.info("client %s disconnected from broker %d", session.client_id, session.broker)

    def _expire_client(self, client_id: str) -> None:
        self._expiry.pop(client_id, None)
        if client_id in self._sessions:
            return
        self._settings.pop(client_id, None)
        self._release(client_id)

    def terminate_client(self, client_id: str) -> bool:
        """NotifyClientTermination: forget the client's settings and release its in-flight messages
        (visible again after ~1 s, docs/protocol.md §4.7). False when the client had no settings."""
        known = self._settings.pop(client_id, None) is not None
        self._clients.pop(client_id, None)
        self._release(client_id)
        return known

    # ------------------------------------------------------------------------------------------
    # client expiry (S12) and pending long polls (S8), docs/reliability.md §5

    def seen(self, client_id: str) -> _Client:
        """A call or Telemetry command from `client_id` arrived now; its record."""
        client = self._clients.get(client_id)
        if client is None:
            client = _Client()
            if self._config.channel_expiry:  # else nothing would ever remove it
                self._clients[client_id] = client
        client.last_seen = time.monotonic()
        return client

    def _schedule_sweep(self) -> None:
        expiry = self._config.channel_expiry
        if expiry and self._started and self._loop is not None:
            # Expire within a quarter of the expiry (at most 5 s) after the deadline.
            self._sweeper = self._loop.call_later(max(0.05, min(expiry / 4, 5.0)), self._sweep)

    def _sweep(self) -> None:
        self._sweeper = None
        horizon = time.monotonic() - self._config.channel_expiry
        silent = [cid for cid, client in self._clients.items() if client.last_seen < horizon]
        for client_id in silent:
            self.expire_client(client_id)
        self._schedule_sweep()

    def expire_client(self, client_id: str) -> None:
        """Forget a client now, as after `channel_expiry` of silence: end its Telemetry streams, answer its
        parked long polls with no message, drop its settings and release its auto-renewed messages (the
        proxy's channel expiry, docs/protocol.md §4.7). A live client simply reconnects and registers
        again."""
        client = self._clients.pop(client_id, None)
        if client is not None:
            client.expired = True
            for fut in client.polls:
                if not fut.done():
                    fut.set_result(None)
            client.polls.clear()
        reason = f"client expired: nothing heard from it for {self._config.channel_expiry:g} s"
        for session in self._sessions.pop(client_id, ()):
            session.end(grpc.StatusCode.UNAVAILABLE, reason)
        handle = self._expiry.pop(client_id, None)
        if handle is not None:
            handle.cancel()
        self._settings.pop(client_id, None)
        self._release(client_id)
        logger.info("%s (%s)", reason, client_id)

    def send_command(self, client_id: str, command: s.TelemetryCommand, *, broker: int | None = None) -> bool:
        """Write a server-initiated command on the client's Telemetry stream (on `broker` when it has
        one there, else any). False when the client has no open stream."""
        sessions = self._sessions.get(client_id)
        if not sessions:
            return False
        chosen = sessions[-1]
        if broker is not None:
            for session in sessions:
                if session.broker == broker:
                    chosen = session
        return chosen.send(command)

    def answer(self, nonce: str, command: s.TelemetryCommand) -> None:
        future = self._pending.pop(nonce, None)
        if future is not None and not future.done():
            future.set_result(command)

    async def _round_trip(
        self,
        client_id: str,
        build: Callable[[str], s.TelemetryCommand],
        timeout: float,
    ) -> s.TelemetryCommand:
        nonce = uuid.uuid4().hex
        future: asyncio.Future[s.TelemetryCommand] = asyncio.get_running_loop().create_future()
        self._pending[nonce] = future
        try:
            if not self.send_command(client_id, build(nonce)):
                raise LookupError(f"client {client_id!r} has no open telemetry stream")
            return await asyncio.wait_for(future, timeout)
        finally:
            self._pending.pop(nonce, None)

    async def print_thread_stack_trace(
        self,
        client_id: str,
        timeout: float = 5.0,
    ) -> s.TelemetryCommand:
        """Send PrintThreadStackTraceCommand; the client's `TelemetryCommand{thread_stack_trace}` reply.

        Raises:
            LookupError: the client has no open Telemetry stream.
            TimeoutError: no answer within `timeout`.
        """

        def build(nonce: str) -> s.TelemetryCommand:
            command = s.TelemetryCommand()
            command.print_thread_stack_trace_command.nonce = nonce
            return command

        return await self._round_trip(client_id, build, timeout)

    async def verify_message(
        self,
        client_id: str,
        message: d.Message,
        timeout: float = 5.0,
    ) -> s.TelemetryCommand:
        """Send VerifyMessageCommand; the client's `TelemetryCommand{status, verify_message_result}`."""

        def build(nonce: str) -> s.TelemetryCommand:
            command = s.TelemetryCommand()
            command.verify_message_command.nonce = nonce
            command.verify_message_command.message.CopyFrom(message)
            return command

        return await self._round_trip(client_id, build, timeout)

    def reconnect_endpoints(self, client_id: str) -> int:
        """Send ReconnectEndpointsCommand on every Telemetry stream of the client; how many were sent."""
        sent = 0
        for session in list(self._sessions.get(client_id, ())):
            command = s.TelemetryCommand()
            command.reconnect_endpoints_command.nonce = uuid.uuid4().hex
            sent += session.send(command)
        return sent

    def dispatch_check(self, index: int, check: TransactionCheck) -> None:
        """Ask the producer of a prepared message (or any producer of its topic) to resolve it."""
        command = s.TelemetryCommand()
        recover = command.recover_orphaned_transaction_command
        recover.message.CopyFrom(stored_message_pb(check.message))
        recover.transaction_id = check.transaction_id
        if self.send_command(check.producer_client_id, command, broker=index):
            return
        # The producer is gone: any producer publishing the topic may resolve it (the broker asks
        # any channel of the producer group, docs/protocol.md §5.8).
        topic = check.message.topic
        for client_id, settings in self._settings.items():
            topics = settings.merged.publishing.topics if settings.merged.HasField("publishing") else ()
            if any(t.name == topic for t in topics) and self.send_command(client_id, command, broker=index):
                return


def _check_lite_binding(reported: d.Settings, group: str, bind: str) -> None:
    """A lite consumer of a group bound to LITE topic `bind` (`lite.bind.topic`) subscribes to it alone:
    5.5.0's proxy refuses the Settings otherwise. BAD_REQUEST ends the Telemetry stream with gRPC
    INVALID_ARGUMENT (client.py), as the proxy ends it.

    Raises:
        Invalid(BAD_REQUEST): a subscription to another topic.
    """
    if reported.client_type not in _LITE_CLIENTS:
        return
    for entry in reported.subscription.subscriptions:
        if entry.topic.name != bind:
            raise Invalid(
                Code.BAD_REQUEST,
                f"lite group {group} is expected to bind topic {bind}, but actual is {entry.topic.name}",
            )
