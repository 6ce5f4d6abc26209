"""The Telemetry stream of one endpoint: settings handshake, server commands, re-establishment.

One `TelemetryStream` per (client, endpoint), as every upstream client (docs/protocol.md §4.1, §4.8). It opens
the bidirectional stream, writes the client's Settings at once, and reads server commands until the
stream ends. When the server closes or breaks it, it is opened again after a short capped backoff (the
first retry after 0.1 s, then doubling; Java waits 1 s: docs/protocol.md §4.8) and the Settings are re-sent,
so a restarted proxy learns the client again within about a second.

Writes go through a bounded queue feeding the request iterator, so a slow stream never blocks a caller
(commands beyond the bound are dropped with a warning: they are periodic or answerable again).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from thrust._codec.status import Code
from thrust._core.backoff import RECONNECT_BACKOFF, Backoff
from thrust._core.endpoints import Endpoint
from thrust._io.native import NativeTelemetryCall, Rpc
from thrust._io.rpc import TelemetryCall
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
from thrust.errors import ThrustError, error_for_status

__all__ = ["TelemetryHandler", "TelemetryStream", "thread_stack_dump"]

logger = logging.getLogger("thrust.telemetry")

_QUEUE_BOUND = 64


class TelemetryHandler:
    """What a client does with server commands. Subclass and override; the defaults answer as Java's
    `ClientImpl` does for a client without the feature (docs/protocol.md §4.4)."""

    def settings_command(self) -> pb.Settings:
        """The Settings to report (sent on open, periodically and after every re-establishment)."""
        raise NotImplementedError

    def on_settings(self, endpoint: Endpoint, settings: pb.Settings) -> None:
        """The server's authoritative Settings arrived from `endpoint`."""

    async def on_recover_orphaned_transaction(
        self, endpoint: Endpoint, command: spb.RecoverOrphanedTransactionCommand
    ) -> None:
        """A transaction check; producers answer with EndTransaction(SOURCE_SERVER_CHECK)."""

    async def on_verify_message(
        self, endpoint: Endpoint, command: spb.VerifyMessageCommand
    ) -> tuple[int, str]:
        """Consume the message once and return (status code, message) for VerifyMessageResult."""
        return Code.NOT_IMPLEMENTED, "message verification is not supported by this client type"

    def on_reconnect(self, endpoint: Endpoint) -> None:
        """ReconnectEndpointsCommand: the stream is re-established right after this returns."""

    def on_notify_unsubscribe_lite(
        self, endpoint: Endpoint, command: spb.NotifyUnsubscribeLiteCommand
    ) -> None:
        """NotifyUnsubscribeLiteCommand (RocketMQ 5.5): the server took a lite topic from this lite push
        consumer; a client without lite topics ignores it."""


def thread_stack_dump() -> str:
    """Real stacks of every thread and every asyncio task of the current loop, for PrintThreadStackTrace."""
    names = {t.ident: t.name for t in threading.enumerate()}
    parts: list[str] = []
    for ident, frame in sys._current_frames().items():
        parts.append(
            f'Thread "{names.get(ident, "?")}" (id {ident}):\n{"".join(traceback.format_stack(frame))}'
        )
    try:
        tasks = asyncio.all_tasks()
    except RuntimeError:
        tasks = set()
    for task in tasks:
        stack = task.get_stack()
        if stack:
            formatted = "".join(traceback.format_list(traceback.extract_stack(stack[-1])))
        else:
            formatted = "  (not started)\n"
        parts.append(f"Task {task.get_name()!r}:\n{formatted}")
    return "\n".join(parts)


class TelemetryStream:
    """Owns the Telemetry call for one endpoint and keeps it up until `close()`.

    `settings_received` is a future that completes with the first Settings answer, or fails with the
    error that ended the stream before one arrived (so session creation fails instead of hanging).
    """

    def __init__(
        self,
        endpoint: Endpoint,
        rpc: Callable[[], Rpc],
        handler: TelemetryHandler,
        spawn: Callable[[Awaitable[Any], str], asyncio.Task[Any]],
    ) -> None:
        self.endpoint = endpoint
        self._rpc = rpc
        self._handler = handler
        self._spawn = spawn
        self._queue: asyncio.Queue[spb.TelemetryCommand | None] | None = None
        self._call: TelemetryCall | NativeTelemetryCall | None = None
        self._closed = False
        self._reconnect_now = asyncio.Event()
        self._backoff = Backoff(RECONNECT_BACKOFF)
        self.settings_received: asyncio.Future[pb.Settings] = asyncio.get_running_loop().create_future()
        self.settings_received.add_done_callback(_retrieve)
        self.opened = 0  # how many times the stream was (re)opened, for tests and diagnostics
        # Set while the current stream has had its Settings answered (the server holds them), cleared when
        # it ends: receives after a reconnection wait for it (`RpcClient.receive`).
        self.synced = asyncio.Event()
        self._task = spawn(self._run(), f"thrust-telemetry-{endpoint}")

    # -- writing ---------------------------------------------------------------------------------

    def write(self, command: spb.TelemetryCommand) -> bool:
        """Queue `command` on the current stream; False when there is none or the queue is full."""
        queue = self._queue
        if queue is None or self._closed:
            return False
        try:
            queue.put_nowait(command)
        except asyncio.QueueFull:
            logger.warning(
                "telemetry to %s: write queue full, dropping a %s",
                self.endpoint,
                command.WhichOneof("command"),
            )
            return False
        return True

    def sync_settings(self) -> bool:
        """Send the client's current Settings again (periodic re-sync, docs/protocol.md §4.6)."""
        return self.write(spb.TelemetryCommand(settings=self._handler.settings_command()))

    def reconnect(self) -> None:
        """End the current stream and open a new one immediately."""
        self._reconnect_now.set()
        call = self._call
        if call is not None:
            call.cancel()

    # -- the loop --------------------------------------------------------------------------------

    @staticmethod
    async def _requests(
        queue: asyncio.Queue[spb.TelemetryCommand | None],
    ) -> AsyncIterator[spb.TelemetryCommand]:
        while True:
            command = await queue.get()
            if command is None:
                return
            yield command

    async def _run(self) -> None:
        while not self._closed:
            queue: asyncio.Queue[spb.TelemetryCommand | None] = asyncio.Queue(_QUEUE_BOUND)
            queue.put_nowait(spb.TelemetryCommand(settings=self._handler.settings_command()))
            error: BaseException | None = None
            got_answer = False
            try:
                call = self._rpc().telemetry(self._requests(queue))
                self._queue = queue
                self._call = call
                self.opened += 1
                while True:
                    command = await call.read()
                    if command is None:
                        break
                    if not got_answer:
                        got_answer = True
                        self._backoff.reset()
                    self._dispatch(command)
            except asyncio.CancelledError:
                if self._closed or not self._reconnect_now.is_set():
                    raise
            except ThrustError as exc:
                error = exc
            finally:
                self.synced.clear()
                self._queue = None
                self._call = None
                if not queue.full():
                    queue.put_nowait(None)  # ends the request iterator if grpc is still reading it
            if self._closed:
                break
            if not self.settings_received.done() and error is not None and not self._reconnect_now.is_set():
                # The first handshake failed (refused credentials, server down): fail session creation.
                self.settings_received.set_exception(error)
            if self._reconnect_now.is_set():
                self._reconnect_now.clear()
                continue
            delay = self._backoff.next_delay()
            if error is not None:
                logger.info("telemetry to %s ended (%s); reopening in %.2fs", self.endpoint, error, delay)
            else:
                logger.info("telemetry to %s closed by the server; reopening in %.2fs", self.endpoint, delay)
            try:
                await asyncio.wait_for(self._reconnect_now.wait(), delay)
            except TimeoutError:
                pass
            self._reconnect_now.clear()

    def _dispatch(self, command: spb.TelemetryCommand) -> None:
        kind = command.WhichOneof("command")
        if kind == "settings":
            if command.HasField("status") and int(command.status.code) != Code.OK:
                logger.warning(
                    "telemetry to %s: settings refused: %s %s",
                    self.endpoint,
                    command.status.code,
                    command.status.message,
                )
                return
            self._handler.on_settings(self.endpoint, command.settings)
            self.synced.set()
            if not self.settings_received.done():
                self.settings_received.set_result(command.settings)
        elif kind == "recover_orphaned_transaction_command":
            self._spawn(
                self._handler.on_recover_orphaned_transaction(
                    self.endpoint, command.recover_orphaned_transaction_command
                ),
                "thrust-transaction-check",
            )
        elif kind == "verify_message_command":
            self._spawn(self._verify(command.verify_message_command), "thrust-verify-message")
        elif kind == "print_thread_stack_trace_command":
            nonce = command.print_thread_stack_trace_command.nonce
            self.write(
                spb.TelemetryCommand(
                    status=pb.Status(code=pb.OK, message="OK"),
                    thread_stack_trace=spb.ThreadStackTrace(
                        nonce=nonce, thread_stack_trace=thread_stack_dump()
                    ),
                )
            )
        elif kind == "notify_unsubscribe_lite_command":
            self._handler.on_notify_unsubscribe_lite(self.endpoint, command.notify_unsubscribe_lite_command)
        elif kind == "reconnect_endpoints_command":
            logger.info("telemetry to %s: server asked to reconnect", self.endpoint)
            self._handler.on_reconnect(self.endpoint)
            self.reconnect()
        elif kind is not None:
            logger.debug("telemetry to %s: ignoring %s", self.endpoint, kind)
        elif command.HasField("status") and int(command.status.code) != Code.OK:
            # A status and no command: the server refused what we wrote. The proxy answers a Telemetry
            # command it cannot run (refused credentials first of all: ResponseBuilder.buildStatus maps
            # AuthenticationException to UNAUTHORIZED) with `TelemetryCommand{status}` and then completes
            # the stream (apache/rocketmq proxy/.../grpc/v2/GrpcMessagingApplication.telemetry,
            # writeResponse), and the embedded server writes the same before it aborts the call. During
            # the handshake that status is the answer: how the stream then ends (OK, or an abort that
            # gRPC may report as INTERNAL) must not decide the error the client's start raises.
            call = self._call
            error = error_for_status(
                int(command.status.code),
                command.status.message,
                request_id=None if call is None else call.request_id,
            )
            if not self.settings_received.done():
                self.settings_received.set_exception(error)
            else:
                logger.info("telemetry to %s: the server refused a command: %s", self.endpoint, error)

    async def _verify(self, command: spb.VerifyMessageCommand) -> None:
        try:
            code, message = await self._handler.on_verify_message(self.endpoint, command)
        except Exception as exc:  # report any failure of the check to the server
            code, message = Code.FAILED_TO_CONSUME_MESSAGE, f"{type(exc).__name__}: {exc}"
        self.write(
            spb.TelemetryCommand(
                status=pb.Status(code=int(code), message=message),  # type: ignore[arg-type]
                verify_message_result=spb.VerifyMessageResult(nonce=command.nonce),
            )
        )

    async def close(self) -> None:
        """Half-close the stream, then cancel it; idempotent."""
        if self._closed:
            return
        self._closed = True
        queue = self._queue
        if queue is not None and not queue.full():
            queue.put_nowait(None)
        call = self._call
        if call is not None:
            call.cancel()
        self._task.cancel()
        try:
            await self._task
        except (asyncio.CancelledError, Exception):  # closing: nothing left to report
            pass
        if not self.settings_received.done():
            self.settings_received.cancel()


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark the exception as retrieved: its awaiter may have given up (timeout) before it was set."""
    if not future.cancelled():
        future.exception()
