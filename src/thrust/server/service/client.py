"""Client management: Heartbeat, NotifyClientTermination and the Telemetry stream (docs/protocol.md §4)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc

from thrust._codec.status import Code
from thrust._codec.validation import Invalid, check_group
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.server.auth import Caller
from thrust.server.core.model import BrokerError
from thrust.server.faults import Rpc
from thrust.server.service.port import Port
from thrust.server.service.registry import _Session
from thrust.server.service.status import (
    _STATUS_OK,
    _error_status,
    _status,
    _undecodable,
    logger,
)


class ClientRpcs:
    """Heartbeat, NotifyClientTermination, Telemetry."""

    def __init__(self, port: Port) -> None:
        self._port = port

    async def Heartbeat(
        self,
        request: s.HeartbeatRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> s.HeartbeatResponse:
        def work(caller: Caller) -> s.HeartbeatResponse:
            if request.HasField("group") and request.group.name:
                check_group(request.group.name)
            # The proxy answers from the settings Telemetry stored (docs/protocol.md §4.1).
            if self._port.clients.client_settings(caller.client_id) is None:
                return s.HeartbeatResponse(
                    status=_status(
                        Code.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client"
                    )
                )
            return s.HeartbeatResponse(status=_STATUS_OK)

        return await self._port.unary(Rpc.HEARTBEAT, context, work, lambda st: s.HeartbeatResponse(status=st))

    async def NotifyClientTermination(
        self,
        request: s.NotifyClientTerminationRequest,
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> s.NotifyClientTerminationResponse:
        def work(caller: Caller) -> s.NotifyClientTerminationResponse:
            known = self._port.clients.terminate_client(caller.client_id)
            if not known:
                return s.NotifyClientTerminationResponse(
                    status=_status(
                        Code.UNRECOGNIZED_CLIENT_TYPE, "cannot find client settings for this client"
                    )
                )
            return s.NotifyClientTerminationResponse(status=_STATUS_OK)

        return await self._port.unary(
            Rpc.NOTIFY_CLIENT_TERMINATION,
            context,
            work,
            lambda st: s.NotifyClientTerminationResponse(status=st),
        )

    async def Telemetry(
        self,
        request_iterator: AsyncIterator[s.TelemetryCommand],
        context: grpc.aio.ServicerContext,  # type: ignore[type-arg]
    ) -> None:
        action = self._port.faults.on_call(Rpc.TELEMETRY, self._port.index)
        if action is not None:
            early = await self._port.pre_action(action, context)
            if early is not None:
                await context.write(s.TelemetryCommand(status=early))
                return
        try:
            caller = self._port.auth.check(context.invocation_metadata() or ())
        except Invalid as exc:
            await context.write(s.TelemetryCommand(status=_error_status(exc)))
            code = (
                grpc.StatusCode.UNAUTHENTICATED
                if exc.code == Code.UNAUTHORIZED
                else grpc.StatusCode.INVALID_ARGUMENT
            )
            await context.abort(code, exc.message)
            return
        session = _Session(caller.client_id, self._port.index, context.peer())
        session.mute = action is not None and action.drop
        clients = self._port.clients
        clients.seen(caller.client_id)
        clients.open_session(session)
        reader = asyncio.create_task(self._telemetry_reader(session, request_iterator))
        try:
            while (command := await session.queue.get()) is not None:
                await context.write(command)
        finally:
            reader.cancel()
            clients.close_session(session)
        if session.abort is not None:
            await context.abort(*session.abort)

    async def _telemetry_reader(
        self, session: _Session, request_iterator: AsyncIterator[s.TelemetryCommand]
    ) -> None:
        clients = self._port.clients
        try:
            async for command in request_iterator:
                if _undecodable(command):
                    session.abort = (grpc.StatusCode.INVALID_ARGUMENT, "telemetry command cannot be decoded")
                    break
                clients.seen(session.client_id)
                which = command.WhichOneof("command")
                if which == "settings":
                    try:
                        reply = clients.apply_settings(session.client_id, command.settings)
                    except Invalid as exc:
                        if exc.code == Code.BAD_REQUEST:  # PUBSUB_NOT_SET (docs/protocol.md §2.2)
                            session.abort = (grpc.StatusCode.INVALID_ARGUMENT, exc.message)
                            break
                        reply = s.TelemetryCommand(status=_error_status(exc))
                    except BrokerError as exc:
                        reply = s.TelemetryCommand(status=_error_status(exc))
                    delay = self._port.faults.settings_delay(self._port.index)
                    if session.mute:
                        continue
                    if delay:
                        asyncio.get_running_loop().call_later(delay, session.send, reply)
                    else:
                        session.send(reply)
                elif which == "thread_stack_trace":
                    clients.answer(command.thread_stack_trace.nonce, command)
                elif which == "verify_message_result":
                    clients.answer(command.verify_message_result.nonce, command)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the stream broke (client went away); the writer ends below
            logger.debug("telemetry stream of %s ended: %s", session.client_id, exc)
        finally:
            session.send(None)
