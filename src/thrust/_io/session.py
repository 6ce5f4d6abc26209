"""The session layer every client type shares: channels, per-endpoint sessions, routes, housekeeping.

Why one module of ~700 lines (docs/CONVENTIONS.md): `ClientSession` owns one client's channels,
endpoint sessions, routes and housekeeping tasks, and close must reach all of them in order; it
stays one class so that no other object holds a piece of that state.

`ClientSession` is one client's connection state:

- one channel per endpoint, created on first use (no I/O): an `RpcClient` (grpc.aio) or a
  `NativeRpcClient` (`thrust._io.native`), as the config's transport resolves;
- one `EndpointSession` per endpoint in `dict[Endpoint, asyncio.Task[EndpointSession]]`: the first caller
  inserts a task that opens the Telemetry stream and waits for the server's Settings answer; later callers
  await the same task (shielded, so a cancelled caller never cancels it); a failed task is removed so that
  the next call tries again. Nothing holds a lock across I/O: a slow new endpoint never delays calls to
  endpoints that already have a session (bench scenario 3, docs/benchmarks.md#scenarios; Java
  `ClientManagerImpl` holds a lock there, docs/protocol.md §2.6);
- a route cache per topic with the same task-per-key pattern, refreshed every 30 s (docs/protocol.md §3.2);
  route listeners hear of every change, and sessions with endpoints that left every route are closed;
- heartbeats every 10 s and a Settings re-sync every 5 min on every telemetry stream (docs/protocol.md §4.6);
- `call(endpoint, rpc, request)` / `receive(endpoint, request)`: ensure the session, then call through
  `thrust._io.rpc`, where gRPC errors and non-OK statuses become ThrustErrors;
- `close(timeout)`: bounded and idempotent (see its docstring).

Everything runs on the loop that created the session; nothing here is thread-safe (nothing needs to be).
"""

from __future__ import annotations

import asyncio
import logging
import platform
import socket
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, TypeVar

from thrust import errors
from thrust._codec import convert
from thrust._codec.status import Code
from thrust._core.endpoints import Endpoint
from thrust._core.routes import Isolation, RouteCache, RouteQueue, TopicRoute
from thrust._core.settings import ClientSettings, ServerSettings, merge
from thrust._io.metadata import CLIENT_VERSION, Metadata, new_client_id
from thrust._io.native import NativeHub, NativeRpcClient, Rpc, resolve_transport
from thrust._io.rpc import OK_ONLY, ReceiveResult, Renewal, RpcClient
from thrust._io.telemetry import TelemetryHandler, TelemetryStream
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
from thrust.config import ClientConfig
from thrust.errors import ClientClosedError, ThrustError

__all__ = ["ClientSession", "EndpointSession"]

logger = logging.getLogger("thrust.session")

T = TypeVar("T")

HEARTBEAT_INTERVAL = 10.0
SETTINGS_SYNC_INTERVAL = 300.0
ROUTE_REFRESH_INTERVAL = 30.0
# A refresh round also takes the routes due within this many seconds: routes fetched one after another
# (a consumer of 1,000 topics fetches them over a second or two) are refreshed in a round or two instead
# of a round each, woken every 50 ms.
ROUTE_REFRESH_AHEAD = 1.0
# Route fetches of one refresh round in flight at once (Java fetches every route at once every 30 s:
# `ClientImpl.updateRouteCache`, apache/rocketmq-clients).
ROUTE_REFRESH_CONCURRENCY = 32
# Java waits 3 s + request timeout for the first Settings answer of a new endpoint (docs/protocol.md §4.5).
SETTINGS_WAIT_EXTRA = 3.0
# Java's recoverTransport: 2 consecutive DEADLINE_EXCEEDED (or UNAVAILABLE) replace the transport, at most
# once per 30 s (docs/protocol.md §4.6). Our cooldown is shorter so that a replacement that was itself made
# while the network was down can be replaced again well inside the 30 s budget for a dead connection
# (keepalive is the backstop); failures are counted per channel, so the calls that were in flight on a
# replaced channel never count against its successor.
TRANSPORT_FAILURES_TO_RECOVER = 2
TRANSPORT_RECOVERY_COOLDOWN = 5.0
# `release_held` unregisters and registers a consumer again at most this often per endpoint: every
# release also returns the messages the consumer is working on (they come again), so a burst of broken
# receives costs one release, not one each.
RELEASE_HELD_COOLDOWN = 10.0
RELEASE_HELD_BACKOFF = 1.0  # first retry of a release that failed; doubles up to the cooldown


class EndpointSession:
    """A live session with one endpoint: its Telemetry stream has been answered with Settings."""

    __slots__ = ("endpoint", "telemetry")

    def __init__(self, endpoint: Endpoint, telemetry: TelemetryStream) -> None:
        self.endpoint = endpoint
        self.telemetry = telemetry


class _Handler(TelemetryHandler):
    """Routes telemetry events to the session (settings merge, reconnect) and the client (the rest)."""

    def __init__(self, session: ClientSession, client: TelemetryHandler) -> None:
        self._session = session
        self._client = client

    def settings_command(self) -> pb.Settings:
        return self._session._settings_command()

    def on_settings(self, endpoint: Endpoint, settings: pb.Settings) -> None:
        self._session._apply_settings(endpoint, settings)
        self._client.on_settings(endpoint, settings)

    async def on_recover_orphaned_transaction(
        self, endpoint: Endpoint, command: spb.RecoverOrphanedTransactionCommand
    ) -> None:
        await self._client.on_recover_orphaned_transaction(endpoint, command)

    async def on_verify_message(
        self, endpoint: Endpoint, command: spb.VerifyMessageCommand
    ) -> tuple[int, str]:
        return await self._client.on_verify_message(endpoint, command)

    def on_reconnect(self, endpoint: Endpoint) -> None:
        self._session._replace_channel(endpoint)
        self._client.on_reconnect(endpoint)

    def on_notify_unsubscribe_lite(
        self, endpoint: Endpoint, command: spb.NotifyUnsubscribeLiteCommand
    ) -> None:
        self._client.on_notify_unsubscribe_lite(endpoint, command)


class ClientSession:
    """Connection state of one client (producer or consumer); see the module docstring.

    Args:
        config: the client configuration.
        client_type: `apache.rocketmq.v2.ClientType` value (PRODUCER=1, PUSH_CONSUMER=2, SIMPLE_CONSUMER=3).
        local_settings: the client's defaults; `settings` is these merged with each server answer.
        handler: the client's telemetry handler. `handler.settings_command()` returns the client-specific
            part of Settings (`publishing` or `subscription`, and `backoff_policy` for producers); the
            session fills in client_type, access_point, request_timeout, user_agent and metric.
        group: the consumer group (heartbeats and NotifyClientTermination carry it).
        heartbeat_interval, settings_sync_interval, route_refresh_interval: housekeeping periods (seconds).

    Attributes:
        client_id: the `x-mq-client-id` of this client.
        settings: the effective `ClientSettings` (local defaults merged with the latest server answer).
        settings_version: incremented on every applied server Settings answer.
    """

    def __init__(
        self,
        config: ClientConfig,
        *,
        transport: str | None = None,
        client_type: int,
        local_settings: ClientSettings,
        handler: TelemetryHandler,
        group: str | None = None,
        heartbeat_interval: float = HEARTBEAT_INTERVAL,
        settings_sync_interval: float = SETTINGS_SYNC_INTERVAL,
        route_refresh_interval: float = ROUTE_REFRESH_INTERVAL,
    ) -> None:
        self.config = config
        self.client_type = client_type
        self.group = group
        self.client_id = new_client_id()
        self.metadata = Metadata(config, self.client_id)
        self.access_point = config.access_point
        # In every QueryRoute and QueryAssignment request (read-only: protobuf copies it in).
        self.access_point_pb = convert.endpoint_to_pb(self.access_point)
        self.local_settings = local_settings
        self.settings = merge(local_settings, ServerSettings())
        self.settings_version = 0
        self._handler = _Handler(self, handler)
        self._intervals = (heartbeat_interval, settings_sync_interval, route_refresh_interval)
        # "native" or "grpcio" (`thrust._io.native.resolve_transport`); the native transport's completions
        # reach the loop through one hub per session, created with the first channel.
        self.transport = transport or resolve_transport(config)
        self._hub: NativeHub | None = None
        self._rpcs: dict[Endpoint, Rpc] = {}
        self._recovered_at: dict[Endpoint, float] = {}
        self._released_at: dict[Endpoint, float] = {}
        self._releases: dict[Endpoint, asyncio.Task[None]] = {}
        self._release_pending: set[Endpoint] = set()
        self.held_releases = 0  # times `release_held` re-registered this client (diagnostics, tests)
        self.transport_recoveries = 0  # channels replaced after transport failures (diagnostics, tests)
        # Calls begun here, by RPC name (`calls()`).
        self._calls: dict[str, int] = {}
        self._sessions: dict[Endpoint, asyncio.Task[EndpointSession]] = {}
        self.routes = RouteCache(route_refresh_interval)
        self._route_answers = convert.QueuesMemo()  # the last QueryRoute answer per topic, converted
        self.isolation = Isolation()
        self._route_tasks: dict[str, asyncio.Task[TopicRoute]] = {}
        self._route_listeners: list[Callable[[str, TopicRoute], None]] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._periodic: list[asyncio.Task[None]] = []
        self._inflight = 0
        self._idle: asyncio.Event | None = None
        self._closing = False
        self._closed = False
        self._closed_event = asyncio.Event()
        self._started = False
        self._static_settings = self._build_static_settings()
        self._group_resource = self.resource(group) if group else None

    # -- small helpers -----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once `close()` has begun: new calls raise ClientClosedError."""
        return self._closing

    @property
    def namespace(self) -> str:
        return self.config.namespace

    def resource(self, name: str) -> pb.Resource:
        """`Resource{namespace, name}` for a topic or group of this client."""
        return pb.Resource(resource_namespace=self.config.namespace, name=name)

    def spawn(self, coro: Coroutine[Any, Any, T] | Awaitable[T], name: str) -> asyncio.Task[T]:
        """Run `coro` as a task owned by this session: it is cancelled and awaited by `close()`.

        Exceptions are logged at debug level (owned tasks report their own errors where they matter)."""
        task: asyncio.Task[T] = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            logger.debug("background task %s failed: %r", task.get_name(), exc)

    def _check_open(self) -> None:
        if self._closing:
            raise ClientClosedError("the client is closed")

    # -- settings --------------------------------------------------------------------------------

    def _build_static_settings(self) -> pb.Settings:
        s = pb.Settings(client_type=self.client_type)  # type: ignore[arg-type]
        s.access_point.CopyFrom(convert.endpoint_to_pb(self.access_point))
        s.request_timeout.CopyFrom(convert.duration(self.config.request_timeout))
        s.user_agent.language = pb.PYTHON
        s.user_agent.version = CLIENT_VERSION
        s.user_agent.platform = f"{platform.system()} {platform.release()} Python {platform.python_version()}"
        s.user_agent.hostname = socket.gethostname()
        s.metric.on = False
        return s

    def _settings_command(self) -> pb.Settings:
        s = pb.Settings()
        s.CopyFrom(self._static_settings)
        s.MergeFrom(self._handler._client.settings_command())
        return s

    def _apply_settings(self, endpoint: Endpoint, settings: pb.Settings) -> None:
        # Every answer is merged again from the local defaults (no latching: docs/protocol.md §9.1).
        self.settings = merge(self.local_settings, convert.server_settings_from_pb(settings))
        self.settings_version += 1

    # -- channels and sessions -------------------------------------------------------------------

    def rpc(self, endpoint: Endpoint) -> Rpc:
        """The channel to `endpoint`, created on first use (no I/O happens here)."""
        client = self._rpcs.get(endpoint)
        if client is None:
            self._check_open()
            if self.transport == "native":
                if self._hub is None:
                    self._hub = NativeHub()
                client = NativeRpcClient(endpoint, self.config, self.metadata, self._hub)
            else:
                client = RpcClient(endpoint, self.config, self.metadata)
            self._rpcs[endpoint] = client
        return client

    def _replace_channel(self, endpoint: Endpoint) -> None:
        """ReconnectEndpointsCommand: a fresh channel; the old one drains in-flight calls, then closes.

        The old channel waits for its calls as long as any of them may last (a receive's deadline, the
        longest), so none is cancelled by the replacement: each ends on its own deadline if the connection
        is dead. Java's `recoverTransport` does the same (`ManagedChannel.enterIdle` lets calls in flight go
        on, docs/protocol.md §4.6). Cancelling a push consumer's long poll can lose messages until the
        consumer closes: the proxy may have popped a batch for it, and renews those receipt handles while
        the client stays connected (`AssignmentScanner._drop_queue`, docs/reliability.md bug 11)."""
        old = self._rpcs.pop(endpoint, None)
        if self._closing:
            return
        self.rpc(endpoint)
        if old is not None:
            self.spawn(old.close(self._drain_grace()), f"thrust-close-channel-{endpoint}")

    def _drain_grace(self) -> float:
        """How long a channel taken out of use waits for its calls in flight: as long as any may last."""
        # (a push consumer's receive is the longest call: `push_receive_deadline`)
        return max(self.settings.request_timeout, self.settings.push_receive_deadline) + 1.0

    def _raise_if_closed(self, exc: ThrustError) -> None:
        """A call whose channel `close()` shut under it failed with a ConnectionError (`rpc._channel_closed`):
        report that the client closed, as for calls made after close, not a transport failure."""
        if self._closing and isinstance(exc, errors.ConnectionError):
            raise ClientClosedError(
                f"the client closed during the call ({exc})", request_id=exc.request_id
            ) from exc

    def _transport_failed(self, endpoint: Endpoint, client: Rpc, exc: ThrustError) -> None:
        """Count a transport failure of a call on `client`; recover the transport after two in a row."""
        if exc.code is not None or self._closing:
            return  # a RocketMQ status (e.g. PROXY_TIMEOUT) came back: the connection works
        client.transport_failures += 1
        if (
            client.transport_failures < TRANSPORT_FAILURES_TO_RECOVER
            or self._rpcs.get(endpoint) is not client
        ):
            return
        now = time.monotonic()
        last = self._recovered_at.get(endpoint)
        if last is not None and now - last < TRANSPORT_RECOVERY_COOLDOWN:
            return
        self._recovered_at[endpoint] = now
        self.recover_transport(endpoint, f"{client.transport_failures} consecutive failures, last: {exc}")

    def recover_transport(self, endpoint: Endpoint, why: str) -> None:
        """Java's recoverTransport (docs/protocol.md §4.6): a fresh channel (so a fresh connection) for
        `endpoint`, and its telemetry stream reopened on it. Calls in flight on the old channel finish or time
        out."""
        if self._closing:
            return
        logger.warning("connection to %s looks dead (%s); replacing it", endpoint, why)
        self.transport_recoveries += 1
        self._replace_channel(endpoint)
        stream = self.telemetry(endpoint)
        if stream is not None:
            stream.reconnect()

    def release_held(self, endpoint: Endpoint) -> None:
        """Make `endpoint` let go of the messages it holds for this consumer, in the background.

        For a push consumer (receives with `auto_renew`) the proxy registers the receipt handle of every
        message it pops for a receive before it writes them, and renews them for as long as this client is
        registered in the group (proxy `ReceiveMessageActivity`, `DefaultReceiptHandleManager`). A receive
        stream that breaks after the server's OK status, at its deadline or with its connection, leaves
        the rest of its batch popped for us and never seen: renewed, it is neither redelivered to us nor
        to anyone else while we live. What releases it is the group's unregistration
        (`DefaultReceiptHandleManager`'s CLIENT_UNREGISTER listener clears the handles of this client and
        group with `invisibleTimeMillisWhenClear`, 1 s): so NotifyClientTermination for the group, then
        the Settings again on the Telemetry stream, which registers the consumer anew
        (`ClientActivity.processAndWriteClientSettings`). The messages we were still working on are
        released too and come again (duplicates, at-least-once); their acks may be refused as invalid.

        Requests coalesce: one release runs at a time per endpoint, at most once per
        `RELEASE_HELD_COOLDOWN`, and a request made meanwhile is served by the next one rather than
        dropped (its batch may have been registered after the last release). A release that fails (the
        connection that broke the stream is often the one it goes out on) is retried with backoff until
        it succeeds or the client closes."""
        if self._closing or self._group_resource is None:
            return
        self._release_pending.add(endpoint)
        if endpoint not in self._releases:
            task = self.spawn(self._release_held(endpoint), name=f"thrust-release-{endpoint}")
            self._releases[endpoint] = task
            task.add_done_callback(lambda t, ep=endpoint: self._releases.pop(ep, None))  # type: ignore[misc]

    async def _release_held(self, endpoint: Endpoint) -> None:
        assert self._group_resource is not None
        request = spb.NotifyClientTerminationRequest(group=self._group_resource)
        backoff = RELEASE_HELD_BACKOFF
        while endpoint in self._release_pending and not self._closing:
            last = self._released_at.get(endpoint)
            if last is not None:
                await asyncio.sleep(max(0.0, last + RELEASE_HELD_COOLDOWN - time.monotonic()))
            self._release_pending.discard(endpoint)
            try:
                await self.call(endpoint, "NotifyClientTermination", request, need_session=False)
            except ThrustError as exc:
                if not exc.retriable:
                    # e.g. UNRECOGNIZED_CLIENT_TYPE: the server has no registration of ours, so it renews
                    # nothing for us either.
                    logger.info("releasing what %s holds for us: nothing to release (%s)", endpoint, exc)
                    continue
                logger.warning("releasing what %s holds for us failed, retrying: %s", endpoint, exc)
                self._release_pending.add(endpoint)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, RELEASE_HELD_COOLDOWN)
                continue
            backoff = RELEASE_HELD_BACKOFF
            self._released_at[endpoint] = time.monotonic()
            self.held_releases += 1
            stream = self.telemetry(endpoint)
            if stream is not None and not stream.sync_settings():
                stream.reconnect()  # a new stream starts with the Settings
            logger.warning(
                "a receive from %s broke after the server took a batch for it: re-registered so that the "
                "server releases what it held for this consumer (those messages come again)",
                endpoint,
            )

    def session_task(self, endpoint: Endpoint) -> asyncio.Task[EndpointSession]:
        """The task that opens (or opened) the session with `endpoint`; created by the first caller."""
        task = self._sessions.get(endpoint)
        if task is None:
            self._check_open()
            task = asyncio.get_running_loop().create_task(
                self._open_session(endpoint), name=f"thrust-session-{endpoint}"
            )
            self._sessions[endpoint] = task
            task.add_done_callback(lambda t, ep=endpoint: self._session_done(ep, t))  # type: ignore[misc]
        return task

    def session(self, endpoint: Endpoint) -> Awaitable[EndpointSession]:
        """Await this for the session with `endpoint` (an open one, or the shared task that opens it)."""
        task = self.session_task(endpoint)
        if task.done():
            return task
        # Shield: a caller that gives up (timeout, cancellation) must not cancel the shared creation.
        return asyncio.shield(task)

    def _session_done(self, endpoint: Endpoint, task: asyncio.Task[EndpointSession]) -> None:
        if task.cancelled() or task.exception() is not None:
            if self._sessions.get(endpoint) is task:
                del self._sessions[endpoint]

    async def _open_session(self, endpoint: Endpoint) -> EndpointSession:
        self.rpc(endpoint)
        stream = TelemetryStream(endpoint, lambda: self.rpc(endpoint), self._handler, self.spawn)
        wait = self.config.request_timeout + SETTINGS_WAIT_EXTRA
        try:
            async with asyncio.timeout(wait):
                await asyncio.shield(stream.settings_received)
        except BaseException as exc:
            await stream.close()
            if isinstance(exc, TimeoutError) and not isinstance(exc, ThrustError):
                raise errors.TimeoutError(f"no Settings answer from {endpoint} within {wait:g}s") from None
            raise
        logger.debug("session with %s established", endpoint)
        return EndpointSession(endpoint, stream)

    def calls(self) -> dict[str, int]:
        """Calls begun by RPC name: every unary call and receive, retries included, and the empty long
        polls that native receives renewed on their own (`Renewal`), of the channels open now; the
        Telemetry streams are not counted. What a client asks of its servers, which a real proxy does not
        count per client (`thrust perf scale`)."""
        counts = dict(self._calls)
        repeated = sum(rpc.receives_repeated for rpc in self._rpcs.values())
        if repeated:
            counts["ReceiveMessage"] = counts.get("ReceiveMessage", 0) + repeated
        return counts

    def is_ready(self, endpoint: Endpoint) -> bool:
        """True when the session with `endpoint` is established (no waiting needed to call it)."""
        task = self._sessions.get(endpoint)
        return task is not None and task.done() and not task.cancelled() and task.exception() is None

    async def wait_any_ready(self, endpoints: Iterable[Endpoint]) -> Endpoint:
        """Open sessions with all `endpoints` (in the background) and return the first that is ready.

        Raises the error of the last one to fail when none can be established."""
        tasks = {self.session_task(ep): ep for ep in endpoints}
        pending: set[asyncio.Task[EndpointSession]] = set(tasks)
        error: BaseException | None = None
        while pending:
            # asyncio.wait never cancels what it waits for, so a cancelled caller leaves the shared
            # session tasks running.
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if t.cancelled():
                    continue
                exc = t.exception()
                if exc is None:
                    return tasks[t]
                error = exc
        if error is None:
            raise ClientClosedError("session creation was cancelled")
        raise error

    def open_sessions(self) -> list[Endpoint]:
        """Endpoints whose session is established."""
        return [
            ep for ep, t in self._sessions.items() if t.done() and not t.cancelled() and t.exception() is None
        ]

    def telemetry(self, endpoint: Endpoint) -> TelemetryStream | None:
        """The telemetry stream of an established session (receives, tests and diagnostics)."""
        task = self._sessions.get(endpoint)
        if task is None or not task.done() or task.cancelled() or task.exception() is not None:
            return None
        return task.result().telemetry

    # -- calls -----------------------------------------------------------------------------------

    async def call(
        self,
        endpoint: Endpoint,
        rpc: str,
        request: Any,
        *,
        timeout: float | None = None,
        ok: frozenset[int] = OK_ONLY,
        need_session: bool = True,
        wait_for_connection: bool = True,
        with_request_id: bool = False,
    ) -> Any:
        """Call unary `rpc` (its protocol name, e.g. "SendMessage") on `endpoint`.

        Waits for the endpoint's session first (unless `need_session=False`, e.g. QueryRoute), and for
        its channel's connection within `timeout` (unless `wait_for_connection=False`: `RpcClient.unary`).
        Returns the response (`(response, request_id)` with `with_request_id`: for per-entry errors,
        `thrust._io.rpc.status_error`); raises a ThrustError for transport failures and for a
        `status.code` not in `ok`. `timeout` defaults to the effective request timeout.
        """
        self._check_open()
        if need_session and not self.is_ready(endpoint):
            await self.session(endpoint)
        client = self.rpc(endpoint)
        calls = self._calls
        calls[rpc] = calls.get(rpc, 0) + 1
        self._inflight += 1
        try:
            response = await client.unary(
                rpc,
                request,
                self.settings.request_timeout if timeout is None else timeout,
                ok,
                wait_for_connection=wait_for_connection,
                with_request_id=with_request_id,
            )
        except (errors.ConnectionError, errors.TimeoutError) as exc:
            self._raise_if_closed(exc)
            self._transport_failed(endpoint, client, exc)
            raise
        else:
            if client.transport_failures:
                client.transport_failures = 0
            return response
        finally:
            self._inflight -= 1
            if self._inflight == 0 and self._idle is not None:
                self._idle.set()

    def start_call(
        self,
        endpoint: Endpoint,
        rpc: str,
        request: Any,
        done: Callable[[Any, ThrustError | None, str | None], None],
        *,
        ok: frozenset[int] = OK_ONLY,
        wait_for_connection: bool = True,
    ) -> Callable[[], None] | None:
        """`call` with no task: start unary `rpc` on `endpoint` now and call `done(response, error,
        request_id)` on the loop when it ends, with what `call` would return or raise (counted, and a
        transport failure handled, as in `call`). Only where no waiting is needed: the endpoint's session
        is ready and its transport completes calls by callback (native). Returns the call's cancel
        function, or None when it cannot start that way (the caller awaits `call` instead)."""
        if self._closing or not self.is_ready(endpoint):
            return None
        client = self.rpc(endpoint)

        def finished(response: Any, error: ThrustError | None, request_id: str | None) -> None:
            self._inflight -= 1
            if self._inflight == 0 and self._idle is not None:
                self._idle.set()
            if error is None:
                if client.transport_failures:
                    client.transport_failures = 0
            elif isinstance(error, errors.ConnectionError | errors.TimeoutError):
                try:
                    self._raise_if_closed(error)
                except ClientClosedError as closed:
                    error = closed
                else:
                    self._transport_failed(endpoint, client, error)
            done(response, error, request_id)

        cancel = client.start_unary(
            rpc,
            request,
            self.settings.request_timeout,
            finished,
            ok,
            wait_for_connection=wait_for_connection,
        )
        if cancel is None:
            return None
        calls = self._calls
        calls[rpc] = calls.get(rpc, 0) + 1
        self._inflight += 1

        def cancelled() -> None:
            cancel()
            self._inflight -= 1
            if self._inflight == 0 and self._idle is not None:
                self._idle.set()

        return cancelled

    async def receive(
        self,
        endpoint: Endpoint,
        request: Any,
        *,
        timeout: float,
        on_message: Callable[[Any], None] | None = None,
        renewal: Renewal | None = None,
        first_early: bool = True,
    ) -> ReceiveResult:
        """One ReceiveMessage stream to completion on `endpoint` (session ensured first).

        With `on_message`, messages after the OK status are handed to it as they arrive instead of
        being collected into the result (`RpcClient.receive`); the native transport hands the first over
        at once and the rest with the end. With `first_early` false, they are collected and `on_message`
        gets them only from a stream that breaks. With `renewal`, the native transport renews empty long
        polls itself (`thrust._io.rpc.Renewal`)."""
        self._check_open()
        if not self.is_ready(endpoint):
            await self.session(endpoint)
            # close() may have begun meanwhile; it cancels only the receives already in flight.
            self._check_open()
        client = self.rpc(endpoint)
        stream = self.telemetry(endpoint)
        calls = self._calls
        calls["ReceiveMessage"] = calls.get("ReceiveMessage", 0) + 1
        self._inflight += 1
        try:
            result = await client.receive(
                request,
                timeout,
                on_message,
                None if stream is None else stream.synced,
                renewal,
                first_early,
            )
        except (errors.ConnectionError, errors.TimeoutError) as exc:
            self._raise_if_closed(exc)
            self._transport_failed(endpoint, client, exc)
            raise
        else:
            if client.transport_failures:
                client.transport_failures = 0
            return result
        finally:
            self._inflight -= 1
            if self._inflight == 0 and self._idle is not None:
                self._idle.set()

    # -- routes ----------------------------------------------------------------------------------

    async def route(self, topic: str) -> TopicRoute:
        """The route of `topic`, from the cache or fetched once (concurrent callers share the fetch)."""
        route = self.routes.get(topic)
        if route is not None:
            return route
        self._check_open()
        task = self._route_tasks.get(topic)
        if task is None:
            task = asyncio.get_running_loop().create_task(
                self._fetch_route(topic), name=f"thrust-route-{topic}"
            )
            self._route_tasks[topic] = task
            task.add_done_callback(lambda t, tp=topic: self._route_tasks.pop(tp, None))  # type: ignore[misc]
            task.add_done_callback(_retrieve)
        return await asyncio.shield(task)

    async def _fetch_route(self, topic: str) -> TopicRoute:
        request = spb.QueryRouteRequest(topic=self.resource(topic), endpoints=self.access_point_pb)
        response = await self.call(self.access_point, "QueryRoute", request, need_session=False)
        return self.apply_route(topic, self._route_answers.queues(topic, response.message_queues))

    def apply_route(self, topic: str, queues: Iterable[RouteQueue]) -> TopicRoute:
        """Store a freshly fetched route of `topic` and act on it (no I/O here, tasks only):

        - sessions with brokers new to the route open in the background (errors surface on first use);
        - route listeners are told when the topic's queues changed (`add_route_listener`);
        - sessions with endpoints that are in no route any more (and are not the access point) are closed:
          their telemetry stream ends and their channel closes once in-flight calls are done. Java keeps
          them until its 30 min idle sweep and stops renewing their telemetry (docs/protocol.md §4.6, §4.8).
        """
        old = self.routes.get(topic)
        route = self.routes.update(topic, queues, time.monotonic()).route
        if self._closing:
            return route
        for endpoint in route.endpoints:
            if endpoint not in self._sessions:
                self.session_task(endpoint)
        if old is None or old.queues != route.queues:
            for listener in list(self._route_listeners):
                try:
                    listener(topic, route)
                except Exception:  # a listener bug must not break route handling for the others
                    logger.exception("route listener failed for topic %r", topic)
        self._close_orphaned_sessions()
        return route

    def add_route_listener(self, listener: Callable[[str, TopicRoute], None]) -> Callable[[], None]:
        """Call `listener(topic, route)` (on the loop, synchronously) whenever a fetched route of a topic
        differs from the cached one (the first fetch included); returns a function that unregisters it."""
        self._route_listeners.append(listener)

        def remove() -> None:
            if listener in self._route_listeners:
                self._route_listeners.remove(listener)

        return remove

    def _close_orphaned_sessions(self) -> None:
        keep = self.routes.endpoints() | {self.access_point}
        for endpoint in [ep for ep in self._sessions if ep not in keep]:
            logger.info("%s left every route; closing its session", endpoint)
            self.close_endpoint(endpoint)

    def close_endpoint(self, endpoint: Endpoint) -> None:
        """Close the session with `endpoint` (its telemetry stream) and its channel, in the background.

        In-flight calls on the channel may finish within their deadlines, receives included (a cancelled
        push receive can lose messages, `_replace_channel`); a later call opens a new session. The access
        point keeps its channel (routes are queried through it)."""
        task = self._sessions.pop(endpoint, None)
        if task is not None:
            if task.done() and not task.cancelled() and task.exception() is None:
                self.spawn(task.result().telemetry.close(), f"thrust-close-telemetry-{endpoint}")
            else:
                task.cancel()
        if endpoint != self.access_point:
            rpc = self._rpcs.pop(endpoint, None)
            if rpc is not None:
                self.spawn(rpc.close(self._drain_grace()), f"thrust-close-channel-{endpoint}")

    def cached_route(self, topic: str) -> TopicRoute | None:
        """The cached route of `topic`, without I/O."""
        return self.routes.get(topic)

    async def refresh_routes(self) -> None:
        """Fetch every cached topic's route again (failures keep the old route)."""
        await self._refresh(self.routes.topics())

    async def _refresh(self, topics: list[str]) -> bool:
        """Fetch the routes of `topics` again; whether any fetch failed (a failure keeps the old route).

        The fetches go out together, ROUTE_REFRESH_CONCURRENCY at a time, rather than one after another:
        the calls leave in one write and their answers come back together, so the loop wakes a few times a
        round instead of twice a route (a consumer of 1,000 topics refreshes about 10 a second;
        docs/benchmarks.md, "Assignment scans in rounds")."""
        failed = False
        for i in range(0, len(topics), ROUTE_REFRESH_CONCURRENCY):
            chunk = topics[i : i + ROUTE_REFRESH_CONCURRENCY]
            results = await asyncio.gather(*(self._fetch_route(t) for t in chunk), return_exceptions=True)
            for topic, result in zip(chunk, results, strict=True):
                if isinstance(result, ThrustError):
                    failed = True
                    logger.info("route refresh of %r failed: %s", topic, result)
                elif isinstance(result, BaseException):
                    raise result
        return failed

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self, topics: tuple[str, ...] | list[str] = ()) -> None:
        """Fetch the routes of `topics`, open sessions to their brokers, start housekeeping.

        Raises the first error (e.g. TOPIC_NOT_FOUND, UNAUTHORIZED); the caller then closes the session.
        """
        self._check_open()
        if not self._started:
            self._started = True
            hb, sync, refresh = self._intervals
            self._periodic = [
                self.spawn(self._every(hb, self._heartbeat), "thrust-heartbeat"),
                self.spawn(self._every(sync, self._sync_settings), "thrust-settings-sync"),
                self.spawn(self._refresh_routes_when_due(refresh), "thrust-route-refresh"),
            ]
        routes = await asyncio.gather(*(self.route(t) for t in topics))
        endpoints = {ep for r in routes for ep in r.endpoints} or {self.access_point}
        # One ready endpoint is enough to start: the others keep connecting in the background, so a
        # slow or dead broker never holds up startup (rocketmq-clients #818).
        await self.wait_any_ready(endpoints)

    async def _refresh_routes_when_due(self, period: float) -> None:
        """Re-fetch each route when `RouteCache.due` says so: every `period`, more often while a route
        lacks a broker it had (a restarted broker comes back in seconds). A round with a failed fetch
        waits at least the degraded period before the next, so a proxy that is down is not polled hard."""
        floor = self.routes.degraded_refresh_period
        while True:
            now = time.monotonic()
            at = self.routes.next_refresh_at(now)
            await asyncio.sleep(period if at is None else min(period, max(at - now, 0.05)))
            if await self._refresh(self.routes.due(time.monotonic(), ahead=ROUTE_REFRESH_AHEAD)):
                await asyncio.sleep(floor)

    async def _every(self, interval: float, action: Any) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await action()
            except ThrustError as exc:
                logger.debug("periodic %s failed: %s", getattr(action, "__name__", action), exc)

    async def _heartbeat(self) -> None:
        request = spb.HeartbeatRequest(client_type=self.client_type)  # type: ignore[arg-type]
        if self._group_resource is not None:
            request.group.CopyFrom(self._group_resource)
        endpoints = self.open_sessions()
        results = await asyncio.gather(
            *(self.call(ep, "Heartbeat", request, need_session=False) for ep in endpoints),
            return_exceptions=True,
        )
        for ep, result in zip(endpoints, results, strict=True):
            if isinstance(result, BaseException):
                logger.info("heartbeat to %s failed: %s", ep, result)
                if isinstance(result, ThrustError) and result.code == Code.UNRECOGNIZED_CLIENT_TYPE:
                    # The server has no Settings of ours (a restarted proxy, or one that expired us):
                    # reopen the stream that carries them now, not when its backoff or the 5 min
                    # settings sync comes round; receives fail until they arrive (proxy
                    # ReceiveMessageActivity reads them for every receive).
                    stream = self.telemetry(ep)
                    if stream is not None:
                        stream.reconnect()

    async def _sync_settings(self) -> None:
        for ep in self.open_sessions():
            stream = self.telemetry(ep)
            if stream is not None:
                stream.sync_settings()

    async def wait_idle(self, timeout: float) -> bool:
        """Wait until no call is in flight (at most `timeout` seconds); True when idle."""
        if self._inflight == 0:
            return True
        self._idle = asyncio.Event()
        try:
            async with asyncio.timeout(max(0.0, timeout)):
                while self._inflight:
                    self._idle.clear()
                    await self._idle.wait()
            return True
        except TimeoutError:
            return False
        finally:
            self._idle = None

    async def close(self, timeout: float = 5.0) -> None:
        """Close within `timeout` seconds; idempotent.

        Order: refuse new calls, cancel the receives (long polls) in flight, wait for the other in-flight
        calls, NotifyClientTermination to every endpoint with a session (as Java's `ClientImpl.shutDown`),
        close telemetry
        streams, cancel every owned task, close every channel. Whatever is still running at the deadline
        is cancelled, so nothing outlives this call.
        """
        if self._closed:
            return
        if self._closing:
            # A concurrent close: wait for the first one to finish.
            await self._closed_event.wait()
            return
        self._closing = True
        deadline = time.monotonic() + max(0.0, timeout)
        try:
            for task in self._periodic:
                task.cancel()
            # Long polls end now (their callers get ClientClosedError); the wait below is for the calls
            # whose outcome matters, such as acks in flight.
            for client in self._rpcs.values():
                client.cancel_receives()
            await self.wait_idle(max(0.0, deadline - time.monotonic() - 0.2))
            endpoints = self.open_sessions()
            remaining = deadline - time.monotonic()
            if endpoints and remaining > 0.05:
                request = spb.NotifyClientTerminationRequest()
                if self._group_resource is not None:
                    request.group.CopyFrom(self._group_resource)
                per_call = min(self.config.request_timeout, remaining * 0.6)
                await asyncio.gather(
                    *(
                        self.rpc(ep).unary("NotifyClientTermination", request, per_call)
                        for ep in endpoints
                        if ep in self._rpcs
                    ),
                    return_exceptions=True,
                )
        finally:
            await self._teardown()

    async def _teardown(self) -> None:
        streams = []
        for task in list(self._sessions.values()):
            if task.done() and not task.cancelled() and task.exception() is None:
                streams.append(task.result().telemetry)
            else:
                task.cancel()
        await asyncio.gather(*(s.close() for s in streams), return_exceptions=True)
        pending = [
            t for t in (*self._sessions.values(), *self._route_tasks.values(), *self._tasks) if not t.done()
        ]
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending, timeout=1.0)
        channels = list(self._rpcs.values())
        self._rpcs.clear()
        await asyncio.gather(*(c.close(None) for c in channels), return_exceptions=True)
        if self._hub is not None:
            self._hub.close()
        self._sessions.clear()
        self._closed = True
        self._closed_event.set()


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Mark a shared task's exception as retrieved (its awaiters got it; nobody else should warn)."""
    if not task.cancelled():
        task.exception()
