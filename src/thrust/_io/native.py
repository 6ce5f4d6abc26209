"""The native transport: `thrust_native` (Rust: tonic, tokio, prost) under `RpcClient`'s interface.

`thrust-native` is a separate distribution (`pip install 'thrust[native]'`, built from `native/` in this
repository). When it is importable, `ClientConfig(transport="auto")` takes it (`resolve_transport`).

How it meets asyncio (docs/architecture.md, "The native transport"):
- each `ClientSession` owns one `NativeHub`: the Rust side queues every completed call in it and writes one
  byte to a socket pair for however many completed meanwhile; the event loop watches that socket
  (`loop.add_reader`) and drains them all in one call, building their Python objects there (received
  messages included, already decoded and checked off the GIL). So the loop wakes once per batch of
  completions, never per message, and tokio's threads never take the GIL;
- each call is a token and a future: `NativeRpcClient` starts the call in Rust with its token, and the hub
  resolves the token's future with the outcome;
- errors come back as gRPC status codes and are translated by `thrust._io.rpc.translate_status`, the one
  translation both transports share.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import importlib
import itertools
import os
from collections.abc import AsyncIterator, Callable
from types import MappingProxyType
from typing import Any, Final

import grpc

from thrust._codec.convert import Corrupted
from thrust._codec.status import Code
from thrust._core.endpoints import Endpoint, Scheme
from thrust._core.settings import receive_after_connect, receive_connect_budget
from thrust._io.metadata import Metadata
from thrust._io.rpc import (
    _SERVICE,
    OK_ONLY,
    ReceiveResult,
    Renewal,
    RpcClient,
    TelemetryCall,
    _channel_closed,
    _task_cancelled,
    translate_status,
)
from thrust._proto.apache.rocketmq.v2 import service_pb2
from thrust.config import ClientConfig
from thrust.errors import ClientClosedError, InternalError, ThrustError, error_for_status
from thrust.message import MessageType, ReceivedMessage

_native: Any
try:
    # Imported by name: the extension ships no type stubs, and its few calls are all in this module.
    _native = importlib.import_module("thrust_native")
except ImportError:  # the pure-Python install: grpcio only
    _native = None

__all__ = [
    "TRANSPORT_ENV",
    "NativeHub",
    "NativeRpcClient",
    "Rpc",
    "native_available",
    "resolve_transport",
]

# Overrides a config's "auto" (and only "auto"): the test suites run every client on one transport with it.
TRANSPORT_ENV: Final = "THRUST_TRANSPORT"
_TRANSPORTS: Final = ("auto", "native", "grpcio")

_UNARY = 0
_UNARY_FAILED = 1
_RECEIVED = 2
_TELEMETRY_ITEM = 3
_TELEMETRY_END = 4
_CANCELLED = 5
_RECEIVED_FIRST = 6
# Completions that leave their call running: the waiter stays.
_ONGOING = frozenset({_TELEMETRY_ITEM, _RECEIVED_FIRST})

_READY = 1

_RESPONSES: Final = {
    m.name: getattr(service_pb2, m.output_type.name).FromString
    for m in _SERVICE.methods
    if not m.client_streaming and not m.server_streaming
}
_STATUS_CODES: Final = {c.value[0]: c for c in grpc.StatusCode}


def native_available() -> bool:
    """Whether the native transport (`thrust-native`) is installed and loads."""
    return _native is not None


def resolve_transport(config: ClientConfig) -> str:
    """ "native" or "grpcio" for a client of `config`.

    "auto" (the default) is `$THRUST_TRANSPORT` when that is set, else native when it is installed. Asking
    for native where it is not installed is a `ThrustError` that says how to get it."""
    choice: str = config.transport
    if choice == "auto":
        choice = os.environ.get(TRANSPORT_ENV, "").strip().lower() or "auto"
        if choice not in _TRANSPORTS:
            raise ThrustError(f"${TRANSPORT_ENV} must be one of {', '.join(_TRANSPORTS)}, not {choice!r}")
    if choice == "auto":
        return "native" if _native is not None else "grpcio"
    if choice == "native" and _native is None:
        raise ThrustError(
            "transport='native' needs the thrust-native package: pip install 'thrust[native]' "
            "(docs/install.md says how to build it where no wheel fits)"
        )
    return choice


def _failure(
    payload: tuple[int, str, bool], request_id: str | None, what: str, endpoint: Endpoint | None = None
) -> ThrustError:
    code, message, connect = payload
    if connect and endpoint is not None:
        # The call never reached the server (refused, TLS handshake failed, ...): name where it tried, as
        # the grpcio transport's `RpcClient._unreachable` does, with the connector's reason after it.
        message = f"{endpoint} is unreachable ({message})"
    return translate_status(_STATUS_CODES.get(code), message, request_id, what)


def new_hub() -> Any:
    """A `thrust_native.Hub`, given the Python types it builds received messages with."""
    assert _native is not None
    return _native.Hub(
        ReceivedMessage,
        Corrupted,
        {int(t): t for t in MessageType},
        MessageType.NORMAL,
        MappingProxyType,
        MappingProxyType({}),
    )


class NativeHub:
    """The completions of one client's native calls, delivered on its event loop (see the module docstring).

    Create inside the running loop; `close()` it after the client's channels."""

    __slots__ = ("_fd", "_hub", "_loop", "_next", "_waiters")

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._hub = new_hub()
        # token -> the future of a call, or the callback of a Telemetry stream (called per item).
        self._waiters: dict[int, asyncio.Future[tuple[int, Any]] | Callable[[int, Any], None]] = {}
        self._next = itertools.count(1).__next__
        self._fd: int | None = self._hub.fileno()
        self._loop.add_reader(self._fd, self._wake)

    @property
    def hub(self) -> Any:
        return self._hub

    def expect(self, token: int) -> asyncio.Future[tuple[int, Any]]:
        future: asyncio.Future[tuple[int, Any]] = self._loop.create_future()
        self._waiters[token] = future
        return future

    def subscribe(self, token: int, callback: Callable[[int, Any], None]) -> None:
        self._waiters[token] = callback

    def forget(self, token: int) -> None:
        self._waiters.pop(token, None)

    def token(self) -> int:
        return self._next()

    def waits_for(self, token: int) -> bool:
        """Whether a call or stream of `token` is still expected (not forgotten, not finished)."""
        return token in self._waiters

    def call_soon(self, callback: Callable[[], None]) -> None:
        """Run `callback` on the loop after the callbacks already scheduled."""
        self._loop.call_soon(callback)

    def cancelled(self, tokens: list[int]) -> None:
        """The calls of `tokens` end as cancelled by their channel's close, as the channel reports them."""
        waiters = self._waiters
        for token in tokens:
            waiter = waiters.pop(token, None)
            if waiter is None:
                continue
            if isinstance(waiter, asyncio.Future):
                if not waiter.done():
                    waiter.set_result((_CANCELLED, None))
            else:
                waiter(_CANCELLED, None)

    def _wake(self) -> None:
        waiters = self._waiters
        for token, kind, payload in self._hub.drain():
            if kind in _ONGOING:
                waiter = waiters.get(token)
            else:
                waiter = waiters.pop(token, None)
            if waiter is None:
                continue
            if isinstance(waiter, asyncio.Future):
                if not waiter.done():
                    waiter.set_result((kind, payload))
            else:
                waiter(kind, payload)

    def close(self) -> None:
        """Stop watching (idempotent); calls still waiting get a closed channel's error."""
        if self._fd is None:
            return
        with contextlib.suppress(Exception):  # the loop may be closed already
            self._loop.remove_reader(self._fd)
        self._fd = None
        self._hub.close()
        self.cancelled(list(self._waiters))


class NativeTelemetryCall:
    """A running native Telemetry call with `thrust._io.rpc.TelemetryCall`'s interface."""

    __slots__ = ("_cancelled", "_channel", "_hub", "_items", "_pump", "_reader", "_request_id", "_token")

    def __init__(
        self, hub: NativeHub, channel: Any, md: tuple[tuple[str, str], ...], requests: AsyncIterator[Any]
    ) -> None:
        self._hub = hub
        self._channel = channel
        self._token = token = hub.token()
        self._request_id = Metadata.request_id_of(md)
        # What arrived and was not read yet: server commands are rare (settings answers, a few commands),
        # and the reader takes them at once.
        self._items: list[tuple[int, Any]] = []
        self._reader: asyncio.Future[None] | None = None
        self._cancelled = False
        hub.subscribe(token, self._arrived)
        writer = channel.telemetry(token, md)
        self._pump = asyncio.ensure_future(self._write_all(writer, requests))

    @staticmethod
    async def _write_all(writer: Any, requests: AsyncIterator[Any]) -> None:
        try:
            async for request in requests:
                if not writer.write(request.SerializeToString()):
                    return
        finally:
            writer.close()

    def _arrived(self, kind: int, payload: Any) -> None:
        self._items.append((kind, payload))
        reader = self._reader
        if reader is not None and not reader.done():
            reader.set_result(None)

    async def read(self) -> Any:
        """The next server command, or None when the server ended the stream cleanly."""
        while not self._items:
            if self._cancelled:
                raise asyncio.CancelledError
            self._reader = asyncio.get_running_loop().create_future()
            try:
                await self._reader
            finally:
                self._reader = None
        kind, payload = self._items.pop(0)
        if kind == _TELEMETRY_ITEM:
            return service_pb2.TelemetryCommand.FromString(payload)
        self._items.append((kind, payload))  # the end stays the end for every later read
        if kind == _CANCELLED:
            raise asyncio.CancelledError
        if payload is None:
            return None
        raise _failure(payload, self._request_id, "Telemetry")

    @property
    def request_id(self) -> str | None:
        """The call's `x-mq-request-id`."""
        return self._request_id

    def cancel(self) -> None:
        """Cancel the call (the reader gets CancelledError)."""
        if self._cancelled:
            return
        self._cancelled = True
        self._channel.cancel(self._token)
        self._hub.forget(self._token)
        self._pump.cancel()
        reader = self._reader
        if reader is not None and not reader.done():
            reader.cancel()


def _receive_waiter(
    future: asyncio.Future[tuple[int, Any]], on_message: Callable[[Any], None]
) -> Callable[[int, Any], None]:
    """A receive's hub waiter when it hands its first message over early: that one to `on_message`, the
    completion to `future`."""

    def arrived(kind: int, payload: Any) -> None:
        if kind == _RECEIVED_FIRST:
            on_message(payload)
        elif not future.done():
            future.set_result((kind, payload))

    return arrived


class NativeRpcClient:
    """One native channel (an HTTP/2 connection, reconnected on demand) to one endpoint, with
    `thrust._io.rpc.RpcClient`'s interface and semantics. Create inside the running loop; `close()` it."""

    __slots__ = (
        "_channel",
        "_closed",
        "_hub",
        "_metadata",
        "_queued",
        "_receives",
        "_receives_cancelled",
        "endpoint",
        "transport_failures",
    )

    def __init__(self, endpoint: Endpoint, config: ClientConfig, metadata: Metadata, hub: NativeHub) -> None:
        self.endpoint = endpoint
        # Consecutive transport-level failures, maintained by the session (as for RpcClient).
        self.transport_failures = 0
        self._metadata = metadata
        self._hub = hub
        self._closed = False
        self._receives: dict[int, asyncio.Future[tuple[int, Any]]] = {}
        self._receives_cancelled = False
        # Unary calls started during this iteration of the loop, handed to the channel together at its
        # end (`_start`, `_flush`).
        self._queued: list[tuple[int, str, bytes, tuple[tuple[str, str], ...], float, float]] = []
        tls_config = config.tls
        tls: tuple[bytes | None, bytes | None, bytes | None, str | None] | None = None
        if tls_config is not None:
            root, key, chain = tls_config.read_files()
            tls = (root, key, chain, tls_config.server_name)
        assert _native is not None
        self._channel = _native.Channel(
            hub.hub,
            list(endpoint.addresses),
            endpoint.scheme is Scheme.DOMAIN_NAME,
            tls,
            config.keepalive_interval,
            config.keepalive_timeout,
        )

    @property
    def closed(self) -> bool:
        """True once `close()` was called."""
        return self._closed

    @property
    def calls_started(self) -> int:
        """How many calls this channel started (diagnostics and tests)."""
        return int(self._channel.calls_started())

    @property
    def connects_attempted(self) -> int:
        """How many connections this channel tried to make: paced by the channel, one per step of its
        backoff while the server cannot be reached, however many calls wait (diagnostics and tests)."""
        return int(self._channel.connects_attempted())

    @property
    def receives_repeated(self) -> int:
        """Empty long polls that receives renewed on their own (`Renewal`): calls `calls_started` misses."""
        return int(self._channel.receives_repeated())

    def cancel_receives(self) -> None:
        """Cancel every ReceiveMessage in flight now and refuse new ones (client close): their callers get
        ClientClosedError at once (as `RpcClient.cancel_receives`)."""
        self._receives_cancelled = True
        for token, future in list(self._receives.items()):
            self._channel.cancel(token)
            self._hub.forget(token)
            if not future.done():
                future.set_result((_CANCELLED, None))

    async def unary(
        self,
        rpc: str,
        request: Any,
        timeout: float,
        ok: frozenset[int] = OK_ONLY,
        *,
        wait_for_connection: bool = True,
        with_request_id: bool = False,
    ) -> Any:
        """As `RpcClient.unary`: the call waits for its connection within `timeout` unless
        `wait_for_connection` is false (then a channel that cannot connect fails it at once)."""
        if self._closed:
            raise ClientClosedError(f"{rpc}: the client is closed")
        md = self._metadata()
        request_id = Metadata.request_id_of(md)
        hub = self._hub
        token = hub.token()
        future = hub.expect(token)
        try:
            self._start(
                token, rpc, request.SerializeToString(), md, timeout, timeout if wait_for_connection else 0.0
            )
            kind, payload = await future
        except asyncio.CancelledError:
            self._channel.cancel(token)
            hub.forget(token)
            if _task_cancelled():
                raise
            raise _channel_closed(rpc, request_id) from None
        except RuntimeError as exc:  # the channel refused the call (closed, or made in a forked parent)
            hub.forget(token)
            raise ClientClosedError(f"{rpc}: {exc}", request_id=request_id) from None
        response = self._outcome(rpc, kind, payload, request_id, ok)
        if with_request_id:
            return response, request_id
        return response

    def _start(
        self,
        token: int,
        rpc: str,
        data: bytes,
        md: tuple[tuple[str, str], ...],
        timeout: float,
        connect_budget: float,
    ) -> None:
        """Start unary call `token` (its completion comes through the hub) at the end of this iteration of
        the loop, together with every other call started in it (`Channel.unary_many`): the tokio worker
        then wakes once for them and the connection writes their frames together, instead of once per
        call (docs/architecture.md, "The native transport"). Raises RuntimeError, as `Channel.unary_many`
        does, when the channel takes no calls (closed, or made in the parent of this forked process)."""
        queued = self._queued
        if not queued:
            self._channel.ensure_open()
            self._hub.call_soon(self._flush)
        queued.append((token, rpc, data, md, timeout, connect_budget))

    def _flush(self) -> None:
        """Hand the queued calls to the channel, but those cancelled meanwhile (`NativeHub.forget`)."""
        queued = self._queued
        if not queued:
            return
        self._queued = []
        hub = self._hub
        calls = [call for call in queued if hub.waits_for(call[0])]
        if not calls:
            return
        try:
            self._channel.unary_many(calls)
        except RuntimeError:  # closed since they were queued: as for calls in flight at close
            hub.cancelled([call[0] for call in calls])

    def _outcome(self, rpc: str, kind: int, payload: Any, request_id: str | None, ok: frozenset[int]) -> Any:
        """The response of a finished unary call, or the ThrustError it ended with (raised)."""
        if kind != _UNARY:
            if kind == _CANCELLED:
                raise _channel_closed(rpc, request_id)
            raise _failure(payload, request_id, rpc, self.endpoint)
        response = _RESPONSES[rpc](payload)
        status = response.status
        code = status.code
        if code not in ok:
            raise error_for_status(code, status.message, request_id=request_id)
        return response

    def start_unary(
        self,
        rpc: str,
        request: Any,
        timeout: float,
        done: Callable[[Any, ThrustError | None, str | None], None],
        ok: frozenset[int] = OK_ONLY,
        *,
        wait_for_connection: bool = True,
    ) -> Callable[[], None] | None:
        """Start unary `rpc` with no task or future of its own: `done(response, error, request_id)` is
        called on the loop when it ends (exactly once, unless cancelled first), with the response or the
        ThrustError `unary` would raise. Returns the call's cancel function (after it, `done` is not
        called), or None when the client is closed (the caller then takes `unary`'s path)."""
        if self._closed:
            return None
        md = self._metadata()
        request_id = Metadata.request_id_of(md)
        hub = self._hub
        token = hub.token()

        def finished(kind: int, payload: Any) -> None:
            try:
                response = self._outcome(rpc, kind, payload, request_id, ok)
            except ThrustError as exc:
                done(None, exc, request_id)
            else:
                done(response, None, request_id)

        hub.subscribe(token, finished)
        try:
            self._start(
                token, rpc, request.SerializeToString(), md, timeout, timeout if wait_for_connection else 0.0
            )
        except RuntimeError:  # the channel refused the call (closed, or made in a forked parent)
            hub.forget(token)
            return None

        def cancel() -> None:
            hub.forget(token)
            self._channel.cancel(token)

        return cancel

    async def receive(
        self,
        request: Any,
        timeout: float,
        on_message: Callable[[Any], None] | None = None,
        settings_synced: asyncio.Event | None = None,
        renewal: Renewal | None = None,
        first_early: bool = True,
    ) -> ReceiveResult:
        """As `RpcClient.receive`. The native stream is read off the loop: with `on_message` and
        `first_early`, the first message after the OK status is handed to it as soon as it arrives (one
        wake-up of the loop), and the rest come decoded in the result, together, when the stream ends; or,
        when the stream then fails, to `on_message` before the error is raised (they are delivered, not
        dropped). Without `first_early`, the first comes with the rest: one wake-up per receive."""
        if self._closed or self._receives_cancelled:
            raise ClientClosedError("ReceiveMessage: the client is closed")
        md = self._metadata()
        request_id = Metadata.request_id_of(md)
        poll = request.long_polling_timeout.seconds + request.long_polling_timeout.nanos / 1e9
        budget = receive_connect_budget(poll, timeout)
        shortened = False
        if (
            self._channel.state() != _READY
            and settings_synced is not None
            and not settings_synced.is_set()
            and budget > 0
        ):
            # As RpcClient.receive: a restarted proxy refuses a receive from a client whose Settings it has
            # not got yet, so a receive on a channel that is not known to be up waits for the handshake.
            loop = asyncio.get_running_loop()
            started = loop.time()
            with contextlib.suppress(builtins.TimeoutError):
                await asyncio.wait_for(settings_synced.wait(), budget)
            waited = loop.time() - started
            if waited > 0:
                poll, timeout = receive_after_connect(poll, timeout, waited)
                budget = max(0.0, budget - waited)
                shorter = type(request)()
                shorter.CopyFrom(request)
                shorter.long_polling_timeout.FromNanoseconds(round(poll * 1e9))
                request = shorter
                shortened = True
            if self._closed or self._receives_cancelled:
                raise ClientClosedError("ReceiveMessage: the client is closed")
        hub = self._hub
        token = hub.token()
        if on_message is None:
            future = hub.expect(token)
        else:
            future = asyncio.get_running_loop().create_future()
            hub.subscribe(token, _receive_waiter(future, on_message))
        self._receives[token] = future
        repeat_for = repeat_poll = grid = 0.0
        if renewal is not None and not renewal.stopped and not shortened:
            # (a poll shortened by the wait for the handshake is not renewed: its renewals would be as short)
            repeat_for, repeat_poll, grid = renewal.window, renewal.poll, renewal.grid
            channel = self._channel
            renewal._stop = lambda: channel.stop_repeating(token)
        try:
            polls = self._channel.receive(
                token,
                request.SerializeToString(),
                md,
                timeout,
                budget,
                self.endpoint,
                on_message is not None and first_early,
                repeat_for,
                repeat_poll,
                grid,
            )
            if polls is not None and renewal is not None:
                renewal._polls = polls.count
            kind, payload = await future
        except asyncio.CancelledError:
            self._channel.cancel(token)
            hub.forget(token)
            if _task_cancelled():
                raise
            raise _channel_closed("ReceiveMessage", request_id) from None
        except RuntimeError as exc:
            hub.forget(token)
            raise ClientClosedError(f"ReceiveMessage: {exc}", request_id=request_id) from None
        finally:
            self._receives.pop(token, None)
            if renewal is not None:
                renewal._stop = renewal._polls = None
        if kind == _CANCELLED:
            if self._receives_cancelled:
                raise ClientClosedError(
                    "ReceiveMessage cancelled: the client is closing", request_id=request_id
                )
            raise _channel_closed("ReceiveMessage", request_id)
        code, text, messages, corrupted, delivery, failure = (
            payload[0],
            payload[1],
            payload[3],
            payload[4],
            payload[2],
            payload[5],
        )
        if failure is not None:
            error = _failure(failure, request_id, "ReceiveMessage", self.endpoint)
            error._after_ok = code == Code.OK
            if code == Code.OK and on_message is not None:
                for m in (*messages, *corrupted):
                    on_message(m)
            raise error
        if code == Code.MESSAGE_NOT_FOUND:
            return ReceiveResult(code, text, [], [], delivery)
        if code == -1:
            # No status at all: Java assumes INTERNAL_SERVER_ERROR (docs/protocol.md §6.4); keep messages
            # only if some came.
            if not messages and not corrupted:
                raise InternalError(
                    "ReceiveMessage: status was not set by server",
                    code=Code.INTERNAL_SERVER_ERROR,
                    request_id=request_id,
                )
            code = Code.OK
        elif code != Code.OK:
            raise error_for_status(code, text, request_id=request_id)
        return ReceiveResult(code, text, messages, corrupted, delivery)

    def telemetry(self, requests: AsyncIterator[Any]) -> TelemetryCall | NativeTelemetryCall:
        """Open the bidirectional Telemetry stream fed by `requests`; no deadline."""
        if self._closed:
            raise ClientClosedError("Telemetry: the client is closed")
        return NativeTelemetryCall(self._hub, self._channel, self._metadata(), requests)

    async def close(self, grace: float | None = None) -> None:
        """Close the channel (idempotent); in-flight calls are cancelled after `grace` seconds."""
        if self._closed:
            return
        self._closed = True
        self._flush()  # calls queued in this iteration are in flight: the close treats them so
        self._channel.close(grace)


# A channel of either transport: what `ClientSession` holds per endpoint.
Rpc = RpcClient | NativeRpcClient
