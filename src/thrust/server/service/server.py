"""`EmbeddedServer`: the brokers, their ports, the parked long polls and the clock of one embedded server.

The process-wide state every broker port shares. It owns its clients (Settings, Telemetry sessions,
expiry, server commands) as a `registry.ClientRegistry` (`clients`) and one `MessagingServicer` per port,
whose RPC families see it through `port.ServerView`. The top of the package: no other module of it
imports this one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final, cast

import grpc

from thrust._codec.status import Code
from thrust._codec.validation import Invalid
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.server.auth import Authenticator, is_loopback
from thrust.server.clock import Clock, ManualClock, SystemClock
from thrust.server.config import MAX_INBOUND_MESSAGE_SIZE, ServerConfig
from thrust.server.core.broker import Broker
from thrust.server.core.catalog import Catalog
from thrust.server.core.model import TopicInfo
from thrust.server.faults import Faults, Stats
from thrust.server.service.registry import ClientRegistry, _Client
from thrust.server.service.servicer import MessagingServicer
from thrust.server.service.status import logger
from thrust.server.service.transport import _register, _server_options
from thrust.server.settings import HandshakeSettings

MAX_RECEIVE_MESSAGE_LENGTH: Final = MAX_INBOUND_MESSAGE_SIZE
"""The default max inbound message (`ServerConfig.max_inbound_message_size`): the proxy's 130 MiB."""


def _scheme_of(host: str) -> int:
    text = host.strip("[]")
    if ":" in text:
        return d.AddressScheme.IPv6
    if text.replace(".", "").isdigit():
        return d.AddressScheme.IPv4
    return d.AddressScheme.DOMAIN_NAME


class EmbeddedServer:
    """An in-memory RocketMQ 5 "proxy + brokers" on `config.brokers` ports.

    Use as `async with EmbeddedServer(config) as server:` or call `start()` / `stop()`.

    Attributes:
        config: the configuration.
        catalog: topics and groups, shared by every broker.
        brokers: one `Broker` per port, named `<prefix>-<i>`.
        faults: fault injection and counters (`faults.stats`).
        clients: the clients' Settings, Telemetry streams and expiry (`ClientRegistry`).
        ports: the bound ports (after `start()`).
        clock: where the brokers' time comes from (`thrust.server.clock`; default the wall clock). With a
            `ManualClock`, `clock.advance(...)` applies the broker timers due by then at once.
    """

    def __init__(
        self, config: ServerConfig | None = None, *, faults: Faults | None = None, clock: Clock | None = None
    ) -> None:
        self.config = config = config or ServerConfig()
        host = config.host
        if not is_loopback(host) and not config.credentials and not config.insecure_allow_remote:
            raise ValueError(
                f"refusing to listen on non-loopback address {host!r} without authentication; "
                "set credentials or insecure_allow_remote"
            )
        if bool(config.tls_cert) != bool(config.tls_key):
            raise ValueError("TLS needs both a certificate and a private key")
        if config.tls_client_ca and not config.tls_cert:
            raise ValueError("client certificates (tls_client_ca) need TLS: set tls_cert and tls_key")
        if (
            not is_loopback(host)
            and config.credentials
            and not config.tls_cert
            and not config.insecure_allow_remote
        ):
            # S7 (docs/reliability.md §5): the signature covers only x-mq-date-time, so over plaintext anyone
            # on the path can replay a captured header (within the date-time window).
            raise ValueError(
                f"refusing to accept signed requests over plaintext on non-loopback address {host!r}: "
                "signatures can be captured and replayed; set tls_cert/tls_key or insecure_allow_remote"
            )
        config.check_limits()
        count = len(config.ports) if config.ports else config.brokers
        if count < 1:
            raise ValueError("at least one broker is needed")
        self.catalog = Catalog(
            auto_create_topics=config.auto_create_topics,
            default_queues=config.default_queues,
            auto_create_groups=config.auto_create_groups,
        )
        for topic in config.topics:
            for b in topic.brokers:
                if b >= count:
                    raise ValueError(f"topic {topic.name!r} is placed on broker {b}, but there are {count}")
            hosts = [f"{config.broker_prefix}-{b}" for b in topic.brokers] if topic.brokers else None
            self.catalog.create_topic(topic.name, topic.queues, topic.types, hosts)
        for group in config.groups:
            self.catalog.create_group(
                group.name,
                fifo=group.fifo,
                retry=group.retry,
                lite_exclusive=group.lite_exclusive,
                lite_quota=group.lite_quota,
                lite_bind_topic=group.lite_bind_topic,
            )
        self.brokers = [
            Broker(
                f"{config.broker_prefix}-{i}",
                self.catalog,
                transaction_check_after=config.transaction_check_after,
                transaction_check_interval=config.transaction_check_interval,
                lite_ttl=config.lite_ttl,
                max_lite_topics=config.max_lite_topics,
            )
            for i in range(count)
        ]
        self.broker_by_name = {b.name: b for b in self.brokers}
        self.faults = faults if faults is not None else Faults()
        self.authenticator = Authenticator(
            config.credentials, date_time_window=config.effective_date_time_window()
        )
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._unsubscribe: Callable[[], None] | None = None
        self.clients = ClientRegistry(config, self.catalog, self._release)
        self.ports: list[int] = []
        self._servers: list[grpc.aio.Server] = []
        self._servicers = [MessagingServicer(self, i) for i in range(count)]
        self._waiters: list[dict[str, set[asyncio.Future[None]]]] = [{} for _ in range(count)]
        self._held: set[asyncio.Future[None]] = set()
        self._parked: dict[tuple[int, str, str], int] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = False

    # ------------------------------------------------------------------------------------------
    # lifecycle

    @property
    def stats(self) -> Stats:
        """Call and entry counters (`faults.stats`)."""
        return self.faults.stats

    @property
    def endpoints(self) -> list[str]:
        """`host:port` of each broker, in broker order."""
        host = self.config.host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return [f"{host}:{port}" for port in self.ports]

    async def start(self) -> None:
        """Bind every port and start serving."""
        if self._started:
            return
        self._loop = asyncio.get_running_loop()
        config = self.config
        credentials = None
        if config.tls_cert and config.tls_key:
            credentials = grpc.ssl_server_credentials(
                [(config.tls_key, config.tls_cert)],
                root_certificates=config.tls_client_ca or None,
                require_client_auth=bool(config.tls_client_ca),
            )
        options = _server_options(config)
        try:
            for i, servicer in enumerate(self._servicers):
                server = grpc.aio.server(options=options)
                _register(server, servicer)
                self._servers.append(server)
                self.ports.append(self._bind(server, i, credentials))
            for server in self._servers:
                await server.start()
        except BaseException:
            for server in self._servers:
                await server.stop(None)
            self._servers.clear()
            self.ports.clear()
            raise
        self._started = True
        self._schedule_timer()
        if isinstance(self.clock, ManualClock):
            self._unsubscribe = self.clock.subscribe(self._on_clock_advanced)
        self.clients.start(self._loop)
        if not is_loopback(config.host):
            logger.warning(
                "listening on non-loopback address %s: authentication %s, TLS %s%s",
                config.host,
                "on" if config.credentials else "OFF",
                "on" if config.tls_cert else "OFF",
                " (insecure_allow_remote)" if config.insecure_allow_remote else "",
            )

    def _bind(self, server: grpc.aio.Server, index: int, credentials: grpc.ServerCredentials | None) -> int:
        config = self.config
        host = config.host
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        if config.ports:
            wanted = [config.ports[index]]
        elif config.port:
            wanted = [config.port + index]
        elif index == 0:
            wanted = [0]
        else:
            # Consecutive ports when free, else any free port.
            wanted = [self.ports[0] + index, 0]
        for port in wanted:
            address = f"{host}:{port}"
            try:
                if credentials is None:
                    bound = server.add_insecure_port(address)
                else:
                    bound = server.add_secure_port(address, credentials)
            except RuntimeError:
                bound = 0
            if bound:
                return bound
        raise OSError(f"cannot bind {host}:{wanted[0]}")

    async def stop(self, grace: float | None = 0.5) -> None:
        """Stop serving: close Telemetry streams, end held calls, cancel timers."""
        if not self._started:
            return
        self._started = False
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.clients.stop()
        for fut in self._held:
            fut.cancel()
        await asyncio.gather(*(server.stop(grace) for server in self._servers))
        self._servers.clear()

    async def wait_for_termination(self) -> None:
        """Wait until every port stops serving."""
        await asyncio.gather(*(server.wait_for_termination() for server in self._servers))

    async def __aenter__(self) -> EmbeddedServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------------------------------
    # clients (`clients` has the rest; these are the calls tests and tools make on the server)

    def client_settings(self, client_id: str) -> HandshakeSettings | None:
        """The settings a client last reported over Telemetry (merged), or None."""
        return self.clients.client_settings(client_id)

    def connected_clients(self) -> list[str]:
        """Client ids with at least one open Telemetry stream."""
        return self.clients.connected_clients()

    def send_command(self, client_id: str, command: s.TelemetryCommand, *, broker: int | None = None) -> bool:
        """Write a server-initiated command on the client's Telemetry stream (see `ClientRegistry`)."""
        return self.clients.send_command(client_id, command, broker=broker)

    def terminate_client(self, client_id: str) -> bool:
        """As NotifyClientTermination (`ClientRegistry.terminate_client`)."""
        return self.clients.terminate_client(client_id)

    def expire_client(self, client_id: str) -> None:
        """Forget a client now, as after `channel_expiry` of silence (`ClientRegistry.expire_client`)."""
        self.clients.expire_client(client_id)

    async def print_thread_stack_trace(self, client_id: str, timeout: float = 5.0) -> s.TelemetryCommand:
        """Send PrintThreadStackTraceCommand; the client's reply (see `ClientRegistry`)."""
        return await self.clients.print_thread_stack_trace(client_id, timeout)

    async def verify_message(
        self, client_id: str, message: d.Message, timeout: float = 5.0
    ) -> s.TelemetryCommand:
        """Send VerifyMessageCommand; the client's reply (`ClientRegistry.verify_message`)."""
        return await self.clients.verify_message(client_id, message, timeout)

    def reconnect_endpoints(self, client_id: str) -> int:
        """Send ReconnectEndpointsCommand on every Telemetry stream of the client; how many were sent."""
        return self.clients.reconnect_endpoints(client_id)

    # ------------------------------------------------------------------------------------------
    # routes

    def topic_brokers(self, requested: d.Endpoints, topic: TopicInfo) -> list[d.Broker]:
        """`route_brokers`, keeping only the brokers that host `topic` (`TopicInfo.brokers`)."""
        routes = self.route_brokers(requested)
        if topic.brokers is None:
            return routes
        return [pb for pb in routes if topic.hosted_on(pb.name)]

    def route_brokers(self, requested: d.Endpoints) -> list[d.Broker]:
        """Every broker as `Broker{name, id 0, endpoints}`: the host the client dialed (from the
        request's endpoints, docs/protocol.md §3.2) with that broker's port."""
        host: str | None = None
        scheme = 0
        if requested.addresses:
            host = requested.addresses[0].host
            scheme = requested.scheme
        if not host:
            host = self.config.advertise_host or self.config.host
            if host in ("0.0.0.0", "::", ""):
                host = "127.0.0.1"
        if not scheme:
            scheme = _scheme_of(host)
        out = []
        for broker, port in zip(self.brokers, self.ports, strict=False):
            pb = d.Broker(name=broker.name, id=0)
            pb.endpoints.scheme = cast(Any, scheme)
            pb.endpoints.addresses.add(host=host, port=port)
            out.append(pb)
        return out

    def _release(self, client_id: str) -> None:
        now = self.clock.time()
        for broker in self.brokers:
            broker.release_client(client_id, now)
            self.reschedule(broker)

    # ------------------------------------------------------------------------------------------
    # pending long polls (S8, docs/reliability.md §5)

    def park(self, index: int, group: str, topic: str) -> None:
        """A ReceiveMessage of `group` for `topic` on broker `index` starts waiting.

        The bound is per (broker, group, topic), as upstream's pop long polling keys its hold queues by
        topic and group (`PopLongPollingService.pollingMap`, each bounded by `popPollingSize`): one push
        consumer of a thousand topics parks one poll per topic, and a bound over the whole group let those
        idle polls fill it, so that the receives of the one topic with messages were refused.

        Raises:
            Invalid(TOO_MANY_REQUESTS): `max_pending_polls` of the group are waiting there for it already.
        """
        key = (index, group, topic)
        waiting = self._parked.get(key, 0)
        limit = self.config.max_pending_polls
        if limit and waiting >= limit:
            raise Invalid(
                Code.TOO_MANY_REQUESTS,
                f"too many long polls waiting for consumer group {group!r} on topic {topic!r} on this"
                f" broker (limit {limit})",
            )
        self._parked[key] = waiting + 1

    def unpark(self, index: int, group: str, topic: str) -> None:
        key = (index, group, topic)
        waiting = self._parked.get(key, 0) - 1
        if waiting > 0:
            self._parked[key] = waiting
        else:
            self._parked.pop(key, None)

    def pending_polls(self, group: str, broker: int | None = None, topic: str | None = None) -> int:
        """ReceiveMessage calls of `group` waiting now (on broker index `broker` / for `topic`, or on all)."""
        return sum(
            n
            for (b, g, t), n in self._parked.items()
            if g == group and broker in (None, b) and topic in (None, t)
        )

    # ------------------------------------------------------------------------------------------
    # the clock and long polls

    def changed(self, index: int, topic: str) -> None:
        """Something on broker `index` may now be poppable for `topic`: wake its long polls and make
        sure the timer covers the broker's next event."""
        waiters = self._waiters[index].pop(topic, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)
        self.reschedule(self.brokers[index])

    def reschedule(self, broker: Broker) -> None:
        """Move the timer earlier if `broker` has an event before it."""
        when = broker.next_event_time()
        if when is not None and when < self._timer_at:
            self._schedule_at(when)

    def _schedule_timer(self) -> None:
        best: float | None = None
        for broker in self.brokers:
            when = broker.next_event_time()
            if when is not None and (best is None or when < best):
                best = when
        self._timer_at = float("inf")
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if best is not None:
            self._schedule_at(best)

    def _schedule_at(self, when: float) -> None:
        if not self._started or self._loop is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._loop.call_later(max(when - self.clock.time(), 0.001), self._on_timer)

    def _on_clock_advanced(self) -> None:
        # A manual clock moved: whatever fell due meanwhile is applied now, as the timer would have.
        if self._started:
            self._on_timer()

    def _on_timer(self) -> None:
        self._timer = None
        now = self.clock.time()
        for index, broker in enumerate(self.brokers):
            try:
                checks = broker.tick(now)
            except Exception:
                logger.exception("tick of broker %s failed", broker.name)
                continue
            for check in checks:
                self.clients.dispatch_check(index, check)
            # Visibility may have changed on any topic of this broker (expired invisibility, delayed
            # messages landing, also when an earlier request's lazy advance applied them): one pop per
            # parked poll.
            waiters = self._waiters[index]
            if waiters:
                self._waiters[index] = {}
                for futures in waiters.values():
                    for fut in futures:
                        if not fut.done():
                            fut.set_result(None)
        self._schedule_timer()

    async def wait_for_change(
        self, index: int, topic: str, within: float, client: _Client | None = None
    ) -> None:
        """Park until `changed(index, topic)` or the timer wakes broker `index`, or `within` seconds pass
        (or `client` expires)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        parked = self._waiters[index].setdefault(topic, set())
        parked.add(fut)
        if client is not None:
            client.polls.add(fut)
        handle = loop.call_later(within, _resolve, fut)
        try:
            await fut
        finally:
            handle.cancel()
            if client is not None:
                client.polls.discard(fut)
            current = self._waiters[index].get(topic)
            if current is not None:
                current.discard(fut)
                if not current:
                    del self._waiters[index][topic]

    async def hold(self, context: grpc.aio.ServicerContext) -> None:  # type: ignore[type-arg]
        """Never answer (a dropped response): wait until the client's deadline has passed, or until
        the call is cancelled or the server stops."""
        remaining = context.time_remaining()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._held.add(fut)
        try:
            if remaining is None:
                await fut
            else:
                await asyncio.wait_for(fut, remaining + 0.5)
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the call itself was cancelled (client gone); `stop()` only cancels `fut`
        finally:
            self._held.discard(fut)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)
