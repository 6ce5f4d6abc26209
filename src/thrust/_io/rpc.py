"""The one place where gRPC meets thrust: channels, stubs, and error translation.

`RpcClient` wraps one `grpc.aio` channel to one endpoint. Every unary call and every ReceiveMessage
stream goes through `RpcClient.unary` / `RpcClient.receive`; each turns `grpc.aio.AioRpcError` into a
`ThrustError` subclass, and a non-OK `Status` in the response body into `error_for_status(...)`
(RocketMQ answers every unary RPC with gRPC OK and puts the outcome in the body: docs/protocol.md §2.2).
No other module catches `grpc.RpcError`.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import inspect
import logging
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import grpc.aio

from thrust._codec.convert import Corrupted, received_from_pb, received_from_pbs
from thrust._codec.status import Code
from thrust._core.endpoints import Endpoint
from thrust._core.settings import receive_after_connect, receive_connect_budget
from thrust._io.metadata import Metadata
from thrust._proto.apache.rocketmq.v2 import service_pb2
from thrust.config import ClientConfig
from thrust.errors import (
    BadRequestError,
    ClientClosedError,
    ConnectionError,
    ForbiddenError,
    InternalError,
    PayloadTooLargeError,
    ThrustError,
    TimeoutError,
    TooManyRequestsError,
    UnauthorizedError,
    UnsupportedError,
    error_for_status,
)
from thrust.message import ReceivedMessage

__all__ = [
    "OK_ONLY",
    "OK_OR_MULTIPLE",
    "ReceiveResult",
    "RpcClient",
    "TelemetryCall",
    "channel_options",
    "check_grpc_usable",
    "decode_one",
    "status_error",
    "translate_grpc_error",
    "translate_status",
]

logger = logging.getLogger("thrust.io")

_EOF: Any = grpc.aio.EOF  # type: ignore[attr-defined]  # missing from grpc-stubs

_SERVICE = service_pb2.DESCRIPTOR.services_by_name["MessagingService"]


def _registered_methods(channel: grpc.aio.Channel) -> bool:
    # grpcio >= 1.63 takes `_registered_method=True` (what newer generated stubs pass): the method path is
    # registered with gRPC core once per channel instead of being interned on every call. Older grpcio,
    # which pyproject.toml allows, has no such parameter.
    return "_registered_method" in inspect.signature(type(channel).unary_unary).parameters


class _Stub:
    """The generated `MessagingServiceStub`, built from the service descriptor: one multi-callable per RPC,
    as an attribute named after it. Ours, because the committed stub comes from grpcio-tools 1.62
    (scripts/gen_proto.py says why), which predates registered methods."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        extra: dict[str, Any] = {"_registered_method": True} if _registered_methods(channel) else {}
        for method in _SERVICE.methods:
            if method.client_streaming:
                make: Any = channel.stream_stream
            elif method.server_streaming:
                make = channel.unary_stream
            else:
                make = channel.unary_unary
            callable_ = make(
                f"/{_SERVICE.full_name}/{method.name}",
                request_serializer=getattr(service_pb2, method.input_type.name).SerializeToString,
                response_deserializer=getattr(service_pb2, method.output_type.name).FromString,
                **extra,
            )
            setattr(self, method.name, callable_)


# -- fork() ---------------------------------------------------------------------------------------------
# grpc.aio runs on one process-wide completion queue whose poller is a thread (grpc's `PollerCompletionQueue`,
# started with the first channel or server and stopped when the last is deallocated), over gRPC core's
# own threads. fork() copies none of those threads into the child, but the child inherits the state that
# says they run: a channel created there waits on a queue nobody polls, so its first call never completes
# (or gRPC core aborts on a mutex a vanished thread held). gRPC's fork support does not cover grpc.aio
# (grpc/grpc doc/fork_support.md), and with GRPC_ENABLE_FORK_SUPPORT=1 core skips its fork handlers anyway
# while the poller thread is inside `grpc_completion_queue_next` ("Other threads are currently calling
# into gRPC, skipping fork() handlers"). Nothing in the child can restart them, so the only honest answer
# there is a typed error before any gRPC object exists. A child of a process that had closed every client
# (the poller and core's threads stopped) starts gRPC afresh and works; a fork right after the last close
# waits (at most `_FORK_QUIESCE_TIMEOUT`) for those threads to end.
_open_channels = 0  # RpcClients created and not yet closed in this process
_last_close = -1e9  # time.monotonic() when the last open RpcClient closed
_live_at_fork = False  # set by the before-fork hook, read by the child's hook
_inherited_live_grpc = False  # this process is a fork child of a process whose gRPC runtime was running
# gRPC core's own threads, by the names it gives them (Linux `comm`, 15 characters): the timer manager
# ("grpc_global_timer"), the EventEngine pool ("event_engine") and its "lifeguard". They end a moment
# after the last channel is gone; a fork in that moment copies a core that still counts them.
_GRPC_THREAD_PREFIXES = ("grpc_", "event_engine", "lifeguard")
# How long a fork right after the last client closed waits for them (then the child refuses gRPC).
_FORK_QUIESCE_WINDOW = 5.0
_FORK_QUIESCE_TIMEOUT = 2.0


def _grpc_aio_running() -> bool:
    """Whether grpc.aio's poller thread runs in this process (or a thrust channel is still open); with
    `_grpc_core_threads`, whether a fork child would inherit a running gRPC."""
    if _open_channels:
        return True
    # grpc's Cython core, loaded by `import grpc`; not a public API, hence no import of it here.
    poller_type = getattr(sys.modules.get("grpc._cython.cygrpc"), "PollerCompletionQueue", None)
    if poller_type is None:  # pragma: no cover - a grpcio without the poller engine
        return False
    for thread in threading.enumerate():
        # The poller thread's target is the bound `PollerCompletionQueue._poll_wrapper`.
        target = getattr(thread, "_target", None)
        if isinstance(getattr(target, "__self__", None), poller_type):
            return True
    return False


def _grpc_core_threads() -> int:
    """How many of gRPC core's threads run in this process (0 where /proc is not there)."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:  # pragma: no cover - not Linux
        return 0
    count = 0
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm") as comm:
                name = comm.read().strip()
        except OSError:  # the thread ended meanwhile
            continue
        count += name.startswith(_GRPC_THREAD_PREFIXES)
    return count


def _grpc_live() -> bool:
    return _grpc_aio_running() or _grpc_core_threads() > 0


def _before_fork() -> None:
    global _live_at_fork
    live = _grpc_live()
    if live and not _open_channels and time.monotonic() - _last_close < _FORK_QUIESCE_WINDOW:
        # The last client closed a moment ago (a pre-fork server closing its clients, then forking):
        # let grpc.aio's poller and gRPC core's threads end first, so that the child starts gRPC afresh.
        deadline = time.monotonic() + _FORK_QUIESCE_TIMEOUT
        while (live := _grpc_live()) and time.monotonic() < deadline:
            time.sleep(0.005)
    _live_at_fork = live


def _after_fork_in_child() -> None:
    global _inherited_live_grpc, _open_channels
    _inherited_live_grpc = _inherited_live_grpc or _live_at_fork
    _open_channels = 0


if hasattr(os, "register_at_fork"):  # no fork() on Windows
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)


def check_grpc_usable() -> None:
    """Raise ThrustError at once in a fork child that inherited a running gRPC runtime (see above)."""
    if _inherited_live_grpc:
        raise ThrustError(
            "gRPC cannot be used in this process: it was forked while gRPC was running in its parent (a "
            "thrust client, or another grpc.aio channel or server, was open at os.fork()), and grpc.aio "
            "has no fork support. Close every client before forking, or create clients only in processes "
            "forked before any was opened (docs/guide-sync.md)"
        )


OK_ONLY: frozenset[int] = frozenset({Code.OK})
_READY = grpc.ChannelConnectivity.READY
_TRANSIENT_FAILURE = grpc.ChannelConnectivity.TRANSIENT_FAILURE
_SHUTDOWN = grpc.ChannelConnectivity.SHUTDOWN
# Send and Ack answer MULTIPLE_RESULTS when entries differ; the caller inspects entries
# (docs/protocol.md §2.3).
OK_OR_MULTIPLE: frozenset[int] = frozenset({Code.OK, Code.MULTIPLE_RESULTS})


def status_error(status: Any, request_id: str | None, ok: frozenset[int] = OK_ONLY) -> ThrustError | None:
    """The typed error of one `Status` whose code is not in `ok`, else None.

    The one mapping of a status in a response body, the response's own or one entry's (SendMessage,
    AckMessage, ChangeInvisibleDuration results), to the error a caller sees. `request_id` is the
    x-mq-request-id of the call that answered it (`RpcClient.unary(..., with_request_id=True)`), kept in
    the error so that a refused entry can be found in the proxy's logs like a refused call."""
    code = status.code
    if code in ok:
        return None
    return error_for_status(code, status.message, request_id=request_id)


_GRPC_TO_ERROR: dict[grpc.StatusCode, type[ThrustError]] = {
    grpc.StatusCode.DEADLINE_EXCEEDED: TimeoutError,
    grpc.StatusCode.UNAVAILABLE: ConnectionError,
    grpc.StatusCode.UNAUTHENTICATED: UnauthorizedError,
    grpc.StatusCode.PERMISSION_DENIED: ForbiddenError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: TooManyRequestsError,
    grpc.StatusCode.UNIMPLEMENTED: UnsupportedError,
    grpc.StatusCode.INVALID_ARGUMENT: BadRequestError,
    grpc.StatusCode.FAILED_PRECONDITION: BadRequestError,
    grpc.StatusCode.OUT_OF_RANGE: BadRequestError,
    grpc.StatusCode.NOT_FOUND: BadRequestError,
    grpc.StatusCode.INTERNAL: InternalError,
    grpc.StatusCode.UNKNOWN: InternalError,
    grpc.StatusCode.ABORTED: InternalError,
    grpc.StatusCode.DATA_LOSS: InternalError,
}


# How gRPC says a message is over the receiver's max message size: grpc core ("Received message larger
# than max (N vs. M)") and grpc-java, i.e. the RocketMQ proxy ("gRPC message exceeds maximum size M").
_TOO_LARGE_DETAILS = ("larger than max", "exceeds maximum size")


def _task_cancelled() -> bool:
    """Whether the running task is being cancelled, as opposed to only its gRPC call.

    grpc.aio raises `asyncio.CancelledError` in the awaiting task when the *call* is cancelled, e.g.
    because its channel was closed: transport recovery (docs/protocol.md §4.6) replaces a channel and closes
    the old one after a grace, cancelling the calls still in flight on it. The task itself was not cancelled
    then (`Task.cancelling() == 0`); the caller must get a typed, retriable error (`_channel_closed`) instead
    of a bare CancelledError escaping a public call. A real cancellation is re-raised as it is."""
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


def _channel_closed(what: str, request_id: str | None) -> ConnectionError:
    # A transport failure: the request may or may not have been handled (a send's outcome is unknown).
    return ConnectionError(f"{what} failed: the call was cancelled (channel closed)", request_id=request_id)


def translate_grpc_error(exc: grpc.RpcError, request_id: str | None, what: str) -> ThrustError:
    """The ThrustError for a failed gRPC call (transport level: no RocketMQ status came back)."""
    code = exc.code() if isinstance(exc, grpc.aio.AioRpcError) else None
    details = (exc.details() if isinstance(exc, grpc.aio.AioRpcError) else None) or str(exc)
    return translate_status(code, details, request_id, what)


def translate_status(
    code: grpc.StatusCode | None, details: str, request_id: str | None, what: str
) -> ThrustError:
    """The ThrustError for a gRPC status that ended a call (grpcio's or the native transport's)."""
    if code == grpc.StatusCode.CANCELLED:
        # Not this client's doing: grpc.aio reports a call cancelled in this process (`cancel()`, its
        # channel closed, its task cancelled) as asyncio.CancelledError, never as an AioRpcError, and
        # `unary` / `receive` handle that (`_task_cancelled`, `_channel_closed`). A CANCELLED status came
        # from the other side: a server or proxy going down resets the streams in flight (grpc-java answers
        # them CANCELLED), so the call failed in transport, like UNAVAILABLE, and a retry may succeed (a
        # send's outcome is unknown, as for any transport failure). The session still reports a failure
        # during its own close as ClientClosedError (`ClientSession._raise_if_closed`).
        return ConnectionError(f"{what} failed: CANCELLED by the server: {details}", request_id=request_id)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and any(m in details for m in _TOO_LARGE_DETAILS):
        # The request is over the server's max inbound message size (S8, docs/reliability.md §5): the same
        # call can never pass, so it is final (PAYLOAD_TOO_LARGE), not flow control to retry.
        return PayloadTooLargeError(
            f"{what} failed: RESOURCE_EXHAUSTED: {details}",
            code=Code.PAYLOAD_TOO_LARGE,
            request_id=request_id,
        )
    cls = _GRPC_TO_ERROR.get(code, ConnectionError) if code is not None else ConnectionError
    name = code.name if code is not None else "RPC_ERROR"
    err = cls(f"{what} failed: {name}: {details}", request_id=request_id)
    if cls is UnauthorizedError:
        err.code = Code.UNAUTHORIZED
    return err


def channel_options(
    endpoint: Endpoint,
    server_name: str | None,
    keepalive_interval: float = 300.0,
    keepalive_timeout: float = 30.0,
) -> list[tuple[str, Any]]:
    """gRPC channel arguments.

    Keepalive (by default every 300 s with a 30 s timeout, as Java: `ClientConfig.keepalive_*`) is as
    often as the proxy's grpc-java default `permitKeepAliveTime` allows; faster pings get GOAWAY
    `too_many_pings`. A dead connection is found by the session instead, which replaces a channel after
    two consecutive transport failures (heartbeats every 10 s included; `ClientSession`, as Java's
    `ClientManagerImpl`),
    and the capped reconnect backoff (1 s .. 5 s) brings the replacement up quickly.

    The reconnect backoff is gRPC's (grpc/grpc doc/connection-backoff.md: 1 s, x1.6, jitter 0.2) capped at
    5 s instead of 120 s. The Java client keeps grpc-java's defaults (`ExponentialBackoffPolicy`, the same
    1 s x1.6 up to 2 min; `RpcClientImpl` sets only a 3 s connect timeout, keepalive and no retries) and
    fails calls fast while a channel backs off; thrust's calls wait for the connection within their
    deadline instead (`RpcClient._connected`). A channel tries again at least every 6 s (5 s + jitter)
    however long the server was away, so a receive, whose long poll leaves it 17 s to wait by default
    (`receive_connect_budget`), reaches a server that is back; a unary call waits its 3 s deadline and
    its caller retries.
    Retries are off (we retry by the server's policy), sizes are unlimited like every upstream client, and
    a local subchannel pool keeps clients isolated (so a replaced channel gets a new connection).
    """
    options: list[tuple[str, Any]] = [
        ("grpc.keepalive_time_ms", max(100, round(keepalive_interval * 1000))),
        ("grpc.keepalive_timeout_ms", max(100, round(keepalive_timeout * 1000))),
        # A keepalive that fires while another ping (e.g. a BDP probe) is unanswered waits for that ping,
        # whose ack is bounded by the ping timeout (60 s by default), not by the keepalive timeout: a
        # connection that died right after a BDP ping went out stayed "alive" for a minute.
        ("grpc.http2.ping_timeout_ms", max(100, round(keepalive_timeout * 1000))),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.initial_reconnect_backoff_ms", 1_000),
        ("grpc.min_reconnect_backoff_ms", 1_000),
        ("grpc.max_reconnect_backoff_ms", 5_000),
        ("grpc.enable_retries", 0),
        ("grpc.max_send_message_length", -1),
        ("grpc.max_receive_message_length", -1),
        ("grpc.use_local_subchannel_pool", 1),
    ]
    if server_name:
        options.append(("grpc.ssl_target_name_override", server_name))
        options.append(("grpc.default_authority", server_name))
    return options


class ReceiveResult:
    """A completed ReceiveMessage stream: its status, the messages decoded in order (`ReceivedMessage`s), the
    ones that failed their digest or decompression (`Corrupted`, never mixed in), and the delivery
    timestamp. Both transports decode before a consumer sees a message."""

    __slots__ = ("code", "corrupted", "delivery_timestamp", "message", "messages")

    def __init__(
        self,
        code: int,
        message: str,
        messages: list[ReceivedMessage],
        corrupted: list[Corrupted],
        delivery_timestamp: float | None,
    ) -> None:
        self.code = code
        self.message = message
        self.messages = messages
        self.corrupted = corrupted
        self.delivery_timestamp = delivery_timestamp


class Renewal:
    """Lets one receive renew its empty long polls itself for up to `window` seconds from its start: the
    native transport does, without waking the event loop (a push consumer's idle queue, one long poll after
    another while nothing comes), and counts each in `receives_repeated`; grpcio answers every empty poll,
    and its caller polls again, which comes to the same calls. `stop()` ends the renewing after the poll
    in flight (a dropped queue starts no new receive).

    `renewed()` is the activity the loop does not see: how many polls the transport renewed so far, so
    that a queue whose receive keeps renewing is not taken for a stuck one (`_Queue.expired`).

    Each renewed poll asks for `poll` seconds of long polling (0: as the first poll did), shortened to end
    on the wall clock's `grid` when it is positive (`thrust._core.settings.poll_on_grid`), as the caller
    does for the polls it starts itself."""

    __slots__ = ("_polls", "_seen", "_stop", "grid", "poll", "stopped", "window")

    def __init__(self, window: float, poll: float = 0.0, grid: float = 0.0) -> None:
        self.window = window
        self.poll = poll
        self.grid = grid
        self.stopped = False
        self._stop: Callable[[], None] | None = None  # set by the transport while its receive runs
        self._polls: Callable[[], int] | None = None  # likewise, when the transport renews
        self._seen = 0

    def stop(self) -> None:
        self.stopped = True
        if self._stop is not None:
            self._stop()

    def renewed(self) -> int:
        """Empty long polls the transport renewed so far (0 on grpcio, which renews none)."""
        polls = self._polls
        return 0 if polls is None else polls()

    def advanced(self) -> bool:
        """Whether the transport renewed a poll since the last time this was asked."""
        renewed = self.renewed()
        if renewed == self._seen:
            return False
        self._seen = renewed
        return True


def decode_one(message: Any, endpoint: Endpoint) -> ReceivedMessage | Corrupted:
    """One received protobuf `Message` decoded, or the `Corrupted` it is (`RpcClient.receive`'s
    `on_message` gets either)."""
    try:
        return received_from_pb(message, endpoint)
    except Corrupted as exc:
        return exc


class TelemetryCall:
    """A running Telemetry call whose reads raise ThrustErrors, not grpc errors."""

    __slots__ = ("_call", "_request_id")

    def __init__(self, call: Any, request_id: str | None) -> None:
        self._call = call
        self._request_id = request_id

    async def read(self) -> Any:
        """The next server command, or None when the server ended the stream cleanly."""
        try:
            message = await self._call.read()
        except grpc.RpcError as exc:
            raise translate_grpc_error(exc, self._request_id, "Telemetry") from None
        if message is _EOF:
            return None
        return message

    @property
    def request_id(self) -> str | None:
        """The call's `x-mq-request-id`."""
        return self._request_id

    def cancel(self) -> None:
        """Cancel the call (the reader gets CancelledError)."""
        self._call.cancel()


class RpcClient:
    """One gRPC channel and stub for one endpoint. Create inside the running loop; `close()` it.

    Methods are named after the RPCs' kinds, not the RPCs: `unary(name, request, ...)` looks the stub method
    up by its protocol name (e.g. "SendMessage").
    """

    __slots__ = (
        "_channel",
        "_closed",
        "_metadata",
        "_ready_watcher",
        "_receives",
        "_receives_cancelled",
        "_stub",
        "endpoint",
        "transport_failures",
    )

    def __init__(self, endpoint: Endpoint, config: ClientConfig, metadata: Metadata) -> None:
        check_grpc_usable()
        self.endpoint = endpoint
        # Consecutive transport-level failures (DEADLINE_EXCEEDED / UNAVAILABLE) of calls on this channel;
        # maintained by the session, which replaces the channel after two (docs/protocol.md §4.6).
        self.transport_failures = 0
        self._metadata = metadata
        self._closed = False
        # ReceiveMessage calls in flight, for `cancel_receives`; set once that was called.
        self._receives: set[Any] = set()
        self._receives_cancelled = False
        self._ready_watcher: asyncio.Task[None] | None = None  # `_connected`
        tls = config.tls
        server_name = tls.server_name if tls is not None else None
        options = channel_options(endpoint, server_name, config.keepalive_interval, config.keepalive_timeout)
        target = endpoint.target
        if tls is not None:
            root, key, chain = tls.read_files()
            creds = grpc.ssl_channel_credentials(
                root_certificates=root, private_key=key, certificate_chain=chain
            )
            self._channel = grpc.aio.secure_channel(target, creds, options=options)
        else:
            self._channel = grpc.aio.insecure_channel(target, options=options)
        self._stub: Any = _Stub(self._channel)
        global _open_channels
        _open_channels += 1

    @property
    def closed(self) -> bool:
        """True once `close()` was called."""
        return self._closed

    @property
    def receives_repeated(self) -> int:
        """Always 0: grpcio renews no long poll by itself (`Renewal`); `NativeRpcClient` does."""
        return 0

    def cancel_receives(self) -> None:
        """Cancel every ReceiveMessage in flight now and refuse new ones (client close).

        A long poll only waits for messages nobody will take once the client closes, so close must not
        wait it out as it waits for acks (whose outcome matters): each waiting caller gets
        ClientClosedError at once. Unary calls are left alone. The channel stays open for them."""
        self._receives_cancelled = True
        for call in self._receives:
            call.cancel()

    async def _connected(self, what: str, request_id: str | None, budget: float) -> float:
        """Wait up to `budget` seconds for the channel to be READY; the seconds waited (0 when it was).

        A call started on a channel that is not connected fails fast with UNAVAILABLE while the channel
        is in TRANSIENT_FAILURE, its reconnect backoff, even when the server came back a moment ago:
        grpc does not retry the connection before the backoff ends. So every call waits for the
        connection within its own deadline, as grpc's `wait_for_ready` would, and only then starts:
        a channel still down at the end of the budget raises the retriable ConnectionError grpc would
        have, without starting the call. Not `wait_for_ready` itself: grpc.aio leaks the native op array of
        a share of calls that fail while the channel cannot connect (grpc/grpc#43360; measured with memray
        in the soak, docs/reliability.md bug 8), so no call starts before the channel is READY. One watcher
        task per channel serves every waiting call. The Telemetry stream is not held here: it has no
        deadline to wait within, and `TelemetryStream` reopens it on its own short capped backoff.
        """
        state = self._channel.get_state()
        if state is _READY or state is _SHUTDOWN:  # SHUTDOWN: closed under us; the call fails as such
            return 0.0
        if budget <= 0:
            # No time to wait: a channel in its backoff fails the call now, as gRPC would; one that is
            # idle or connecting takes it (gRPC holds it until the connection attempt ends).
            if state is _TRANSIENT_FAILURE:
                raise self._unreachable(what, request_id, state, 0.0)
            return 0.0
        loop = asyncio.get_running_loop()
        started = loop.time()
        watcher = self._ready_watcher
        if watcher is None or watcher.done():
            watcher = self._ready_watcher = loop.create_task(
                self._watch_until_ready(), name=f"thrust-connect-{self.endpoint}"
            )
        # asyncio.wait leaves the shared watcher running when this caller gives up or is cancelled.
        await asyncio.wait((watcher,), timeout=budget)
        if self._closed:
            # Closed while we waited (transport recovery replaced the channel): a call on a closed
            # grpc.aio channel raises UsageError; the caller gets the closed channel's retriable error.
            raise _channel_closed(what, request_id)
        state = self._channel.get_state()
        if state is not _READY and state is not _SHUTDOWN:
            raise self._unreachable(what, request_id, state, budget)
        return loop.time() - started

    async def _watch_until_ready(self) -> None:
        # try_to_connect starts a connection from IDLE; in TRANSIENT_FAILURE the channel keeps its backoff.
        try:
            state = self._channel.get_state(try_to_connect=True)
            while state is not _READY and state is not _SHUTDOWN:
                await self._channel.wait_for_state_change(state)
                state = self._channel.get_state(try_to_connect=True)
        except Exception:  # a channel closed while watched: the waiters look at its state themselves
            return

    def _unreachable(self, what: str, request_id: str | None, state: Any, waited: float) -> ConnectionError:
        return ConnectionError(
            f"{what} failed: UNAVAILABLE: {self.endpoint} is unreachable (channel {state.name} after waiting "
            f"{waited:.3g} s for the connection)",
            request_id=request_id,
        )

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
        """Call unary `rpc`, return its response; raise a ThrustError unless `status.code in ok`.

        The call first waits for the channel's connection within `timeout` (`_connected`), unless
        `wait_for_connection` is false: then a channel that cannot connect fails it at once (a producer
        with another broker to try). With `with_request_id`, returns `(response, request_id)`: what a
        caller needs to build per-entry errors (`status_error`)."""
        if self._closed:
            raise ClientClosedError(f"{rpc}: the client is closed")
        md = self._metadata()
        waited = await self._connected(
            rpc, Metadata.request_id_of(md), timeout if wait_for_connection else 0.0
        )
        timeout -= waited
        try:
            response = await getattr(self._stub, rpc)(request, timeout=timeout, metadata=md)
        except grpc.RpcError as exc:
            raise translate_grpc_error(exc, Metadata.request_id_of(md), rpc) from None
        except asyncio.CancelledError:
            if _task_cancelled():
                raise
            raise _channel_closed(rpc, Metadata.request_id_of(md)) from None
        status = response.status
        code = status.code
        if code not in ok:
            raise error_for_status(code, status.message, request_id=Metadata.request_id_of(md))
        if with_request_id:
            return response, Metadata.request_id_of(md)
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
        """None: a grpc.aio call needs a task to drive it, so callers take `unary` (the native transport
        starts a call with a completion callback instead: `NativeRpcClient.start_unary`)."""
        return None

    async def receive(
        self,
        request: Any,
        timeout: float,
        on_message: Callable[[Any], None] | None = None,
        settings_synced: asyncio.Event | None = None,
        renewal: Renewal | None = None,
        first_early: bool = True,
    ) -> ReceiveResult:
        """Run one ReceiveMessage stream to completion (docs/protocol.md §6.4: clients act on completion).
        (`renewal` is the native transport's; here each empty poll is answered.)

        MESSAGE_NOT_FOUND is an empty result, not an error. Other non-OK statuses raise.

        `on_message`, when given, is called with each message that arrives after an OK status, as it
        arrives (decoded: a `ReceivedMessage`, or the `Corrupted` it is), instead of collecting it into the
        result: the proxy writes the status first and each message is final once written
        (docs/protocol.md §6.4), so a consumer may start on the first message while the server is still
        streaming the rest of the batch (bench scenario 5a: reading 32 messages to the end costs several
        ms). Messages before any status are collected as usual. If the stream then fails, the error is
        raised as usual; the messages already handed over stay delivered (they are invisible on the broker
        either way). With `first_early` false, the messages are collected into the result as without
        `on_message`, and `on_message` gets them only if the stream fails after its OK status (before the
        error is raised), as the native transport's does.

        A receive on a channel that is not connected waits for the connection (`_connected`) and then,
        within the same budget, for `settings_synced`, set while this client's Telemetry stream to the
        endpoint has its Settings answered: a restarted proxy refuses a receive from a client whose
        Settings it has not got yet (INTERNAL_SERVER_ERROR, D14 in docs/interop-findings.md), and the
        stream comes back on its own schedule, not with the channel.
        """
        if self._closed or self._receives_cancelled:
            raise ClientClosedError("ReceiveMessage: the client is closed")
        md = self._metadata()
        code = -1
        text = ""
        messages: list[Any] = []
        delivery: float | None = None
        poll = request.long_polling_timeout.seconds + request.long_polling_timeout.nanos / 1e9
        budget = receive_connect_budget(poll, timeout)
        reconnected = self._channel.get_state() is not _READY
        waited = await self._connected("ReceiveMessage", Metadata.request_id_of(md), budget)
        if reconnected and settings_synced is not None and not settings_synced.is_set() and budget > waited:
            loop = asyncio.get_running_loop()
            started = loop.time()
            with contextlib.suppress(builtins.TimeoutError):  # then the server answers for itself
                await asyncio.wait_for(settings_synced.wait(), budget - waited)
            waited += loop.time() - started
        if waited > 0:
            # What the wait took comes out of the long poll, so that the server still answers an empty
            # poll before the deadline (docs/protocol.md §6.2).
            poll, timeout = receive_after_connect(poll, timeout, waited)
            shortened = type(request)()
            shortened.CopyFrom(request)
            shortened.long_polling_timeout.FromNanoseconds(round(poll * 1e9))
            request = shortened
            if self._closed or self._receives_cancelled:
                raise ClientClosedError("ReceiveMessage: the client is closed")
        call = self._stub.ReceiveMessage(request, timeout=timeout, metadata=md)
        self._receives.add(call)
        early = on_message if first_early else None
        try:
            async for response in call:
                kind = response.WhichOneof("content")
                if kind == "message":
                    if early is not None and code == Code.OK:
                        early(decode_one(response.message, self.endpoint))
                    else:
                        messages.append(response.message)
                elif kind == "status":
                    code = response.status.code
                    text = response.status.message
                elif kind == "delivery_timestamp":
                    ts = response.delivery_timestamp
                    delivery = ts.seconds + ts.nanos / 1e9
        except grpc.RpcError as exc:
            error = translate_grpc_error(exc, Metadata.request_id_of(md), "ReceiveMessage")
            error._after_ok = code == Code.OK
            if code == Code.OK and on_message is not None:
                # what the broken stream brought is delivered, not dropped (as when handed over early)
                for m in messages:
                    on_message(decode_one(m, self.endpoint))
            raise error from None
        except asyncio.CancelledError:
            call.cancel()
            if _task_cancelled():
                raise
            if self._receives_cancelled:
                raise ClientClosedError(
                    "ReceiveMessage cancelled: the client is closing", request_id=Metadata.request_id_of(md)
                ) from None
            raise _channel_closed("ReceiveMessage", Metadata.request_id_of(md)) from None
        finally:
            self._receives.discard(call)
        if code == Code.MESSAGE_NOT_FOUND:
            return ReceiveResult(code, text, [], [], delivery)
        if code == -1:
            # No status at all: Java assumes INTERNAL_SERVER_ERROR (docs/protocol.md §6.4); keep messages
            # only if some came (they are already invisible on the broker, dropping them delays them).
            if not messages:
                raise InternalError(
                    "ReceiveMessage: status was not set by server",
                    code=Code.INTERNAL_SERVER_ERROR,
                    request_id=Metadata.request_id_of(md),
                )
            code = Code.OK
        elif code != Code.OK:
            raise error_for_status(code, text, request_id=Metadata.request_id_of(md))
        good, bad = received_from_pbs(messages, self.endpoint)
        return ReceiveResult(code, text, good, bad, delivery)

    def telemetry(self, requests: AsyncIterator[Any]) -> TelemetryCall:
        """Open the bidirectional Telemetry stream fed by `requests`; no deadline (docs/protocol.md §4.1)."""
        if self._closed:
            raise ClientClosedError("Telemetry: the client is closed")
        md = self._metadata()
        return TelemetryCall(self._stub.Telemetry(requests, metadata=md), Metadata.request_id_of(md))

    async def close(self, grace: float | None = None) -> None:
        """Close the channel (idempotent); in-flight calls are cancelled after `grace` seconds."""
        if self._closed:
            return
        self._closed = True
        global _open_channels, _last_close
        _open_channels = max(0, _open_channels - 1)  # an inherited client closed in a fork child
        _last_close = time.monotonic()
        if self._ready_watcher is not None:
            self._ready_watcher.cancel()
        await self._channel.close(grace)
