"""Transport and resource limits of the embedded server (S8 and S12, docs/reliability.md §5), end to end over
real gRPC on 127.0.0.1, with the thrust client where it makes sense. Every limit is configurable; the tests
use scaled-down values (the defaults are asserted once) so that each runs in a few seconds.

- S8a: a request over the gRPC max inbound message size is refused with a typed, final error and the
  server keeps serving.
- S8b: at most N ReceiveMessage calls of one group wait at once; the next answers TOO_MANY_REQUESTS, and a
  push consumer backs off (not a tight loop) and consumes everything once the waiting polls are gone.
- S8c: keepalive enforcement: a client pinging at the rate thrust uses (its keepalive equal to the server's
  minimum ping interval) is never sent GOAWAY; a client pinging faster is.
- S8d: a connection without calls is closed after the idle timeout; a thrust client (its Telemetry stream
  is a call) is not.
- S12: a TCP connection that never completes the HTTP/2 handshake is closed within the handshake timeout;
  a client whose traffic is black-holed is expired (streams, polls, settings, messages) and the server's
  fd of its connection is freed within the bounds; a client whose connection is alive but which sends
  nothing is expired as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from typing import Any

import grpc
import pytest

import thrust
from tests.reliability._util import run
from tests.server._wire import Wire, messages_of, status_of
from tests.support import until
from thrust._codec.status import Code
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.reliability.proxy import PASS, Blackhole, FaultProxy
from thrust.server.config import MAX_INBOUND_MESSAGE_SIZE, ServerConfig
from thrust.testing import embedded_server

MiB = 1024 * 1024


def _count_calls(client: thrust.Producer, rpc: str) -> list[str]:
    """A list that gets `rpc` appended each time `client` makes that unary call (a spy on its session:
    calls awaited, and calls started with a callback, `start_call`)."""
    calls: list[str] = []
    session = client.session
    original = session.call
    original_start = session.start_call

    async def call(endpoint: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        if name == rpc:
            calls.append(name)
        return await original(endpoint, name, *args, **kwargs)

    def start_call(endpoint: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        cancel = original_start(endpoint, name, *args, **kwargs)
        if name == rpc and cancel is not None:
            calls.append(name)
        return cancel

    session.call = call  # type: ignore[method-assign]
    session.start_call = start_call  # type: ignore[method-assign]
    return calls


def test_defaults_are_the_catalogue_values() -> None:
    """The defaults the scaled tests below stand for (docs/protocol.md §2.6, S8, S12; thrust's client
    keepalive)."""
    config = ServerConfig()
    assert config.max_inbound_message_size == MAX_INBOUND_MESSAGE_SIZE == 130 * MiB
    assert config.idle_timeout == 120.0  # upstream maxConnectionIdle
    assert config.channel_expiry == 120.0  # upstream channelExpiredTimeout
    assert config.max_pending_polls == 1024  # upstream popPollingSize
    # Generous: a default producer's full window of sends plus its Telemetry stream (and a push consumer's
    # polls and acks) stay far from it; right at the bound a stream can be refused (ServerConfig).
    assert config.max_concurrent_streams == 4096
    assert config.max_concurrent_streams >= 4 * thrust.Producer(endpoints="127.0.0.1:1")._max_in_flight
    # thrust's own keepalive is never below what the server tolerates (C6, docs/reliability.md §6).
    assert config.min_ping_interval <= thrust.ClientConfig("127.0.0.1:1").keepalive_interval
    # A dead connection is freed by the server's keepalive before the client expiry fires.
    assert config.keepalive_time + config.keepalive_timeout < config.channel_expiry
    assert 0 < config.handshake_timeout <= 30


# S8a ---------------------------------------------------------------------------------------------------


def test_s8a_request_over_max_inbound_size_refused_typed_and_server_stays_up() -> None:
    """A 2 MiB body against a 1 MiB inbound bound (scaled from 130 MiB): the producer gets
    PayloadTooLargeError (41300, not retriable) after one attempt, not a retry; the same producer then sends
    a 512 KiB message."""

    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g"], max_inbound_message_size=1 * MiB) as srv:
            ep = srv.endpoints[0]
            async with thrust.Producer(endpoints=ep, topics=["t"], request_timeout=2) as p:
                attempts = _count_calls(p, "SendMessage")
                with pytest.raises(thrust.PayloadTooLargeError) as info:
                    await p.send(thrust.Message(topic="t", body=b"x" * (2 * MiB)))
                assert info.value.code == Code.PAYLOAD_TOO_LARGE
                assert info.value.retriable is False
                assert attempts == ["SendMessage"], attempts  # final at once: never retried
                assert srv.stats.calls.get("SendMessage", 0) == 0  # refused by the transport
                receipt = await p.send(thrust.Message(topic="t", body=b"y" * (512 * 1024)))
            async with thrust.SimpleConsumer(
                endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=1
            ) as c:
                [m] = await c.receive()
                assert m.message_id == receipt.message_id and len(m.body) == 512 * 1024
                await c.ack(m)

    run(scenario)


# S8b ---------------------------------------------------------------------------------------------------


def test_s8b_pending_long_polls_per_group_bounded_too_many_requests() -> None:
    """max_pending_polls=2: two receives of group g wait, a third is answered TOO_MANY_REQUESTS at once
    (another group is not affected); once a waiting poll is answered a new one may wait again."""

    async def scenario() -> None:
        async with embedded_server(topics=["t"], groups=["g", "other"], max_pending_polls=2) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=8
                ) as c,
                thrust.SimpleConsumer(
                    endpoints=ep, group="other", subscriptions={"t": "*"}, await_duration=1
                ) as other,
                thrust.Producer(endpoints=ep, topics=["t"]) as p,
            ):
                waiting = [asyncio.create_task(c.receive()) for _ in range(2)]
                await until(lambda: srv.pending_polls("g") == 2, 5, "two polls waiting")
                with pytest.raises(thrust.TooManyRequestsError) as info:
                    await c.receive()
                # Refused at once: the two 8 s polls it would have joined are still waiting.
                assert not any(task.done() for task in waiting) and srv.pending_polls("g") == 2
                assert info.value.code == Code.TOO_MANY_REQUESTS
                assert "long polls" in info.value.message
                assert await other.receive() == []  # per group: "other" may still wait
                receipt = await p.send(thrust.Message(topic="t", body=b"wake"))
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED, timeout=5)
                [m] = done.pop().result()
                assert m.message_id == receipt.message_id
                await c.ack(m)
                assert srv.pending_polls("g") == 1
                again = asyncio.create_task(c.receive())
                await until(lambda: srv.pending_polls("g") == 2, 5, "a new poll may wait")
                for task in (*waiting, again):
                    task.cancel()
                await asyncio.gather(*waiting, again, return_exceptions=True)
                await until(lambda: srv.pending_polls("g") == 0, 5, "cancelled polls released")

    run(scenario)


def test_s8b_pending_long_polls_bounded_per_topic_not_per_group() -> None:
    """max_pending_polls=2: group g's two polls on topic t fill t's bound (a third is refused), and g may
    still park a poll on topic u. A bound over the whole group let a consumer's idle polls on many topics
    refuse the receives of its one busy topic (docs/benchmarks.md, "A consumer of a thousand topics")."""

    async def scenario() -> None:
        async with embedded_server(topics=["t", "u"], groups=["g"], max_pending_polls=2) as srv:
            ep = srv.endpoints[0]
            async with (
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, await_duration=8
                ) as c,
                thrust.SimpleConsumer(
                    endpoints=ep, group="g", subscriptions={"u": "*"}, await_duration=8
                ) as d,
                thrust.Producer(endpoints=ep, topics=["u"]) as p,
            ):
                waiting = [asyncio.create_task(c.receive()) for _ in range(2)]
                await until(lambda: srv.pending_polls("g", topic="t") == 2, 5, "two polls on t waiting")
                with pytest.raises(thrust.TooManyRequestsError):
                    await c.receive()
                on_u = asyncio.create_task(d.receive())
                await until(lambda: srv.pending_polls("g", topic="u") == 1, 5, "a poll on u waits")
                assert srv.pending_polls("g") == 3
                receipt = await p.send(thrust.Message(topic="u", body=b"wake"))
                [m] = await asyncio.wait_for(on_u, 5)
                assert m.message_id == receipt.message_id
                await d.ack(m)
                for task in waiting:
                    task.cancel()
                await asyncio.gather(*waiting, return_exceptions=True)
                await until(lambda: srv.pending_polls("g") == 0, 5, "cancelled polls released")

    run(scenario)


@pytest.mark.slow
def test_s8b_push_consumer_backs_off_on_full_polls_and_recovers() -> None:
    """max_pending_polls=1 and another member of the group holds the only slot: the push consumer's
    receives are answered TOO_MANY_REQUESTS and retried after a short backoff (far fewer calls than a tight
    loop would make); when the slot frees up it consumes all 20 messages, each once."""

    async def scenario() -> None:
        async with embedded_server(topics=["t:1"], groups=["g"], max_pending_polls=1) as srv:
            ep = srv.endpoints[0]
            async with (
                Wire(ep, client_id="slot-holder") as holder,
                thrust.Producer(endpoints=ep, topics=["t"]) as p,
            ):
                await holder.consumer("g", "t")
                hold = asyncio.create_task(holder.receive("g", "t", polling=6, rpc_timeout=10))
                await until(lambda: srv.pending_polls("g") == 1, 5, "the slot is taken")
                seen: list[str] = []

                def listener(m: thrust.ReceivedMessage) -> thrust.ConsumeResult:
                    seen.append(m.message_id)
                    return thrust.ConsumeResult.SUCCESS

                async with thrust.PushConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, listener=listener
                ):
                    await until(lambda: srv.stats.calls.get("ReceiveMessage", 0) >= 3, 10, "push receives")
                    before = srv.stats.calls["ReceiveMessage"]
                    # A rate over a fixed window, so a fixed span: the calls it counts are the point.
                    await asyncio.sleep(2.0)
                    refused = srv.stats.calls["ReceiveMessage"] - before
                    # Java's flow-control backoff is 20 ms per process queue (one queue here): ~50 calls/s
                    # at most (88 in 2 s measured); a tight loop on the loopback would make thousands.
                    assert 2 <= refused <= 2 * 60, refused
                    assert srv.pending_polls("g") == 1
                    stream = await hold  # the holder's poll ends empty after 6 s; the slot is free
                    assert status_of(stream).code == Code.MESSAGE_NOT_FOUND
                    ids = [
                        (await p.send(thrust.Message(topic="t", body=b"%d" % i))).message_id
                        for i in range(20)
                    ]
                    await until(lambda: len(seen) >= 20, 10, "push consumer recovered")
                    # A negative check, so a fixed span: a duplicate would reach the listener within it.
                    await asyncio.sleep(0.3)
                    assert sorted(seen) == sorted(ids)

    run(scenario)


# S8c ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("case", ["thrust-rate", "too-aggressive"])
def test_s8c_keepalive_pings_at_thrust_rate_never_get_goaway(case: str) -> None:
    """Scaled 10 s -> 1.5 s: the server tolerates pings every `min_ping_interval`, and thrust pings every
    `keepalive_interval` = that interval by default. A thrust producer (Telemetry stream open, otherwise
    idle) pinging at that rate keeps its one connection for 8 s (no GOAWAY: the Telemetry stream is never
    re-opened); one pinging every 0.2 s (gRPC paces it to ~1/s) gets GOAWAY too_many_pings after two
    strikes, which ends its Telemetry stream, and the client opens a new one."""
    permit = 1.5
    interval = permit if case == "thrust-rate" else 0.2

    async def scenario() -> None:
        async with embedded_server(topics=["t"], min_ping_interval=permit) as srv:
            config = thrust.ClientConfig(srv.endpoints[0], keepalive_interval=interval, keepalive_timeout=5)
            async with thrust.Producer(config, topics=["t"]) as p:
                assert srv.stats.calls["Telemetry"] == 1
                if case == "thrust-rate":
                    # A negative check, so a fixed span: a GOAWAY would end the stream (reopened) within it.
                    await asyncio.sleep(8.0)
                    reopened = srv.stats.calls["Telemetry"] - 1
                    assert reopened == 0, "the server sent GOAWAY to a client pinging at thrust's rate"
                else:
                    # The GOAWAY ends the Telemetry stream and the client reopens it: wait for that call.
                    await until(
                        lambda: srv.stats.calls["Telemetry"] >= 2,
                        30,
                        "a client pinging every 0.2 s was never sent GOAWAY",
                    )
                await p.send(thrust.Message(topic="t", body=b"still fine"))

    run(scenario)


# S8d ---------------------------------------------------------------------------------------------------


def test_s8d_idle_connection_closed_but_a_thrust_client_is_kept() -> None:
    """idle_timeout scaled 120 s -> 1 s: a raw channel that made one call and then none is closed by the
    server (GOAWAY: the channel goes IDLE); a thrust producer, whose Telemetry stream is a call, keeps its
    connection over the same time (and at least 2.5 s) and sends without reconnecting."""

    async def scenario() -> None:
        async with embedded_server(topics=["t"], idle_timeout=1.0) as srv:
            ep = srv.endpoints[0]
            async with (
                Wire(ep, client_id="idle-one") as w,
                thrust.Producer(endpoints=ep, topics=["t"]) as p,
            ):
                assert (await w.route("t")).status.code == Code.OK
                assert w.channel.get_state() == grpc.ChannelConnectivity.READY
                t0 = time.monotonic()
                while w.channel.get_state() == grpc.ChannelConnectivity.READY:
                    # Generous: gRPC's default would keep it 120 s.
                    assert time.monotonic() - t0 < 30.0, "the idle connection was not closed"
                    await asyncio.sleep(0.05)
                # A negative check, so a fixed span: the producer's connection must outlive 2.5 s of quiet.
                await asyncio.sleep(max(0.0, 2.5 - (time.monotonic() - t0)))
                assert srv.stats.calls["Telemetry"] == 1  # the producer's stream was never cut
                await p.send(thrust.Message(topic="t", body=b"after idle"))
                assert srv.stats.calls["Telemetry"] == 1
                assert (await w.route("t")).status.code == Code.OK  # the raw channel reconnects on demand

    run(scenario)


# S12 ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sends", [b"", b"PRI * HTTP/2.0\r\n"])
def test_s12_handshake_timeout_closes_a_connection_that_never_completes_it(sends: bytes) -> None:
    """handshake_timeout scaled to 1 s: a TCP connection that sends nothing (or half the HTTP/2 preface)
    is closed by the server after about 1 s (gRPC's default would keep it 120 s)."""

    async def scenario() -> None:
        async with embedded_server(topics=["t"], handshake_timeout=1.0) as srv:
            port = srv.ports[0]

            def probe() -> float:
                # A recv that waits 30 s fails the test: gRPC's default would keep the connection 120 s.
                with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                    sock.sendall(sends)
                    t0 = time.monotonic()
                    try:
                        while sock.recv(4096):  # the server's SETTINGS (and GOAWAY), then EOF
                            pass
                    except ConnectionResetError:
                        pass
                    return time.monotonic() - t0

            took = await asyncio.get_running_loop().run_in_executor(None, probe)
            assert took >= 0.8, took

    run(scenario)


def _connections_served(host: str, port: int) -> set[int]:
    """Socket inodes of this process's connections accepted on host:port (the server's side)."""
    owned = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            owned.add(int(target[8:-1]))
    a, b, c, dd = (int(x) for x in host.split("."))
    ipv4 = f"{dd:02X}{c:02X}{b:02X}{a:02X}"
    # gRPC listens on an IPv6 socket, so IPv4 peers appear v4-mapped in /proc/net/tcp6.
    locals_ = {f"{ipv4}:{port:04X}", f"0000000000000000FFFF0000{ipv4}:{port:04X}"}
    rows: list[list[str]] = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            rows += [line.split() for line in f.readlines()[1:]]
    # state 0A is LISTEN; inode 0 means no process holds the socket any more.
    return {int(r[9]) for r in rows if r[1] in locals_ and r[3] != "0A" and int(r[9]) in owned}


@pytest.mark.slow
def test_s12_blackholed_client_expired_and_its_fd_freed() -> None:
    """Scaled 120 s -> 2 s (channel expiry) and 60 s + 20 s -> 0.5 s + 0.5 s (server keepalive): a push
    consumer behind a FaultProxy holds one message (its listener is stuck) and waits in long polls; then
    its traffic is black-holed (no FIN, no RST). The server closes its side of the connection (the fd is
    freed: without the keepalive it would stay for minutes), expires the client (settings gone, no poll
    waiting: without the expiry it would stay 120 s), and the held message is released to another
    consumer at once instead of after the 60 s invisible time."""

    async def scenario() -> None:
        async with embedded_server(
            topics=["t:1"], groups=["g"], channel_expiry=2.0, keepalive_time=0.5, keepalive_timeout=0.5
        ) as srv:
            port = srv.ports[0]
            async with FaultProxy(target=("127.0.0.1", port), host="127.0.0.2", port=port) as proxy:
                ep = f"127.0.0.2:{port}"
                stuck = asyncio.Event()
                release = asyncio.Event()

                async def listener(m: thrust.ReceivedMessage) -> thrust.ConsumeResult:
                    stuck.set()
                    await release.wait()
                    return thrust.ConsumeResult.SUCCESS

                async with thrust.PushConsumer(
                    endpoints=ep, group="g", subscriptions={"t": "*"}, listener=listener
                ):
                    try:
                        async with thrust.Producer(endpoints=srv.endpoints[0], topics=["t"]) as p:
                            sent = await p.send(thrust.Message(topic="t", body=b"held"))
                        await asyncio.wait_for(stuck.wait(), 10)
                        await until(lambda: srv.pending_polls("g") >= 1, 5, "the push consumer polls")
                        # The closed producer's Telemetry stream ends on the server a moment after close().
                        await until(
                            lambda: len(srv.connected_clients()) == 1, 10, "the producer's stream ended"
                        )
                        [client_id] = srv.connected_clients()
                        # Only the proxied connection is left once the producer's closed one is gone.
                        await until(
                            lambda: len(_connections_served("127.0.0.1", port)) == proxy.stats().active >= 1,
                            5,
                            "the producer's connection closed",
                        )
                        before = _connections_served("127.0.0.1", port)
                        proxy.set_mode(Blackhole())
                        await until(
                            lambda: not before & _connections_served("127.0.0.1", port), 20, "fd freed"
                        )
                        await until(
                            lambda: srv.client_settings(client_id) is None and srv.pending_polls("g") == 0,
                            20,
                            "client expired",
                        )
                        assert client_id not in srv.connected_clients()
                        async with thrust.SimpleConsumer(
                            endpoints=srv.endpoints[0], group="g", subscriptions={"t": "*"}, await_duration=5
                        ) as survivor:
                            # Released already: the first receive (a 5 s poll) gets it, not [].
                            [m] = await survivor.receive()
                            assert m.message_id == sent.message_id and m.delivery_attempt == 2
                            await survivor.ack(m)
                    finally:
                        # Let the stuck consumer go: reset its dead connections so that close() is quick.
                        proxy.reset_connections()
                        proxy.set_mode(PASS)
                        release.set()

    run(scenario)


def test_s12_silent_client_with_a_live_connection_is_expired() -> None:
    """channel_expiry scaled to 1 s: a raw client opens Telemetry, takes a message with auto-renew and
    parks a 20 s long poll, then sends nothing (no heartbeat) while its connection stays healthy. After
    ~1 s the server answers the poll (no message, long before the poll would end), ends its Telemetry
    stream (UNAVAILABLE), forgets its settings (Heartbeat: UNRECOGNIZED_CLIENT_TYPE) and releases its
    message to another consumer."""

    async def scenario() -> None:
        async with embedded_server(topics=["t:1"], groups=["g"], channel_expiry=1.0) as srv:
            ep = srv.endpoints[0]
            async with Wire(ep, client_id="silent") as w, Wire(ep, client_id="other") as other:
                telemetry = await w.consumer("g", "t", kind=d.ClientType.PUSH_CONSUMER)
                await other.producer("t")
                [mid] = await other.send_ok("t")
                held = messages_of(await w.receive("g", "t", auto_renew=True, invisible=None))
                assert [m.system_properties.message_id for m in held] == [mid]
                t0 = time.monotonic()
                stream = await w.receive("g", "t", polling=20, rpc_timeout=25)
                took = time.monotonic() - t0
                assert status_of(stream).code == Code.MESSAGE_NOT_FOUND
                # Ended by the expiry, not by its own end: half the poll is a generous net.
                assert took < 10.0, f"the silent client's poll was held {took:.1f} s"
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await asyncio.wait_for(telemetry.read(), 10)
                assert info.value.code() == grpc.StatusCode.UNAVAILABLE
                assert "expired" in (info.value.details() or "")
                assert srv.client_settings("silent") is None
                beat = await w.stub.Heartbeat(
                    s.HeartbeatRequest(client_type=d.ClientType.PUSH_CONSUMER), metadata=w.md, timeout=5
                )
                assert beat.status.code == Code.UNRECOGNIZED_CLIENT_TYPE
                await other.consumer("g", "t", kind=d.ClientType.PUSH_CONSUMER)

                async def keep_alive() -> None:
                    # `other` must not be expired itself while its poll waits for the released message
                    # (1 s expiry; on a loaded machine the poll can wait about that long).
                    while True:
                        await other.stub.Heartbeat(
                            s.HeartbeatRequest(client_type=d.ClientType.PUSH_CONSUMER), metadata=other.md
                        )
                        await asyncio.sleep(0.2)

                beating = asyncio.create_task(keep_alive())
                try:
                    stream = await other.receive("g", "t", auto_renew=True, invisible=None, polling=5)
                finally:
                    beating.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await beating
                again = messages_of(stream)
                assert [m.system_properties.message_id for m in again] == [mid]

    run(scenario)


# S8e ---------------------------------------------------------------------------------------------------


def test_s8e_concurrent_streams_per_connection_bounded_extra_calls_wait() -> None:
    """max_concurrent_streams=2 (default 4096): three long-poll receives on ONE channel; two reach the
    server and wait, the third waits in the client's transport (it never reaches the handler) instead of
    failing, and starts as soon as one of the two is answered. Every receive ends OK with its message."""

    async def scenario() -> None:
        async with embedded_server(topics=["t:1"], groups=["g"], max_concurrent_streams=2) as srv:
            ep = srv.endpoints[0]
            # A local subchannel pool: this channel's connection is its own, never shared with the
            # producer's (gRPC may otherwise share one connection between channels to one address).
            async with (
                Wire(ep, client_id="streams", options=[("grpc.use_local_subchannel_pool", 1)]) as w,
                thrust.Producer(endpoints=ep, topics=["t"]) as p,
            ):

                def receives() -> int:
                    return srv.stats.calls.get("ReceiveMessage", 0)

                async def answered(n: int) -> None:
                    await until(lambda: sum(task.done() for task in polls) == n, 10, f"{n} polls answered")

                polls = [
                    asyncio.create_task(w.receive("g", "t", polling=20, rpc_timeout=40)) for _ in range(3)
                ]
                await until(lambda: srv.pending_polls("g") >= 2, 10, "two polls waiting")
                # A negative check, so a fixed span: a third stream let through would reach the server in it.
                await asyncio.sleep(0.5)
                assert receives() == 2 and srv.pending_polls("g") == 2, "a third stream reached the server"
                assert not any(task.done() for task in polls)
                sent: list[str] = []
                for n in (1, 2, 3):
                    sent.append((await p.send(thrust.Message(topic="t", body=b"%d" % n))).message_id)
                    await answered(n)
                    if n == 1:  # the third call now has a stream: it reaches the server and waits
                        await until(
                            lambda: receives() == 3 and srv.pending_polls("g") == 2, 10, "the third poll ran"
                        )
                got: list[str] = []
                for task in polls:
                    stream = task.result()
                    assert status_of(stream).code == d.Code.OK
                    got += [m.system_properties.message_id for m in messages_of(stream)]
                assert sorted(got) == sorted(sent)
                assert receives() == 3 and srv.pending_polls("g") == 0

    run(scenario)


@pytest.mark.parametrize("value", [0, -1])
def test_s8e_max_concurrent_streams_must_be_positive(value: int) -> None:
    """0 cannot mean "off" here (gRPC would advertise 0 streams: no call could run), so 0 and negative
    values are refused like the other limits, with ValueError, before anything binds."""
    with pytest.raises(ValueError, match="max_concurrent_streams must be > 0"):
        ServerConfig(max_concurrent_streams=value).check_limits()

    async def scenario() -> None:
        with pytest.raises(ValueError, match="max_concurrent_streams"):
            async with embedded_server(max_concurrent_streams=value):
                pass

    run(scenario)
