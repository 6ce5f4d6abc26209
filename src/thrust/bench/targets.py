"""The servers `thrust bench` runs its scenarios against, and the CPU time of the processes involved
(read through `thrust.bench.cpu`).

- `embedded` (default): a fresh embedded server in a child process per run (`ControlServer`), with the
  scenario's fault hooks; "N queues" means N brokers with one queue each, as before.
- `real` (`--server real`): a real Apache RocketMQ started once for the whole bench by the harness
  (`thrust.cluster.RocketMQCluster`, local mode: a namesrv and a proxy with its broker inside, the fair
  single-broker comparison) and stopped at the end. Every run gets a topic and a group of its own,
  created over the broker's remoting protocol, so no run sees another's backlog or offsets.
- `external` (`--endpoints`): an existing cluster. Nothing is created: the topics and the group the
  selected scenarios name (`resource_names`) must exist. Backlogs are produced before each window and
  what a run leaves is consumed by later runs.

On both real kinds a backlog is produced with bare batched SendMessage calls before the client starts
(the embedded server stores it directly); its cost stays outside the measured window either way.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

from thrust.bench.cpu import proc_cpu_seconds, self_cpu_seconds
from thrust.bench.server import ControlServer

__all__ = [
    "GROUP",
    "EmbeddedTarget",
    "ExternalTarget",
    "RealTarget",
    "RunSpec",
    "ServerRun",
    "Target",
    "latency_front",
    "proc_cpu_seconds",
    "resource_names",
    "self_cpu_seconds",
]

GROUP = "bench"

Faults = tuple[tuple[str, str], ...]


@dataclasses.dataclass(frozen=True, slots=True)
class RunSpec:
    """What one run needs from the server."""

    topics: tuple[str, ...]
    """Logical topic names; `ServerRun.topic` gives the name on the server."""
    brokers: int = 1
    """Embedded server: brokers, one queue each per topic ("N queues" in the titles)."""
    queues: int = 8
    """Real server: queues per topic (one broker; a non-FIFO group is assigned the whole broker)."""
    faults: Faults = ()
    """Embedded server only: `thrust serve --fault-*` flags."""


def sized_name(logical: str, size: int) -> str:
    """The topic name on an existing cluster: one topic per message size, so that a backlog left by
    a run at one size never mixes into a run at another."""
    return f"bench-{logical}" if size == 64 else f"bench-{logical}-{size}"


def resource_names(topics: Sequence[tuple[str, int]]) -> tuple[list[str], list[str]]:
    """The topics (from (logical name, size) pairs) and groups an `--endpoints` run needs."""
    names: list[str] = []
    for logical, size in topics:
        name = sized_name(logical, size)
        if name not in names:
            names.append(name)
    return names, [GROUP]


class ServerRun:
    """The server side of one run: where clients dial, the names on the server, the backlog, the
    server's CPU seconds and (embedded only) its counters."""

    kind = "embedded"

    def __init__(self, endpoints: list[str], names: dict[str, str], group: str) -> None:
        self.endpoints = endpoints
        """Every address the server listens on (embedded: one per broker; real: the proxy)."""
        self.names = names
        self.group = group
        self.filled: dict[str, int] = collections.defaultdict(int)
        self.idle_cpu_pct: float | None = None
        self.exclusive = True
        """The topics hold only this run's backlog (False on an existing cluster, whose topics may hold
        what earlier runs left)."""

    def sample_idle(self, *, quiet_pct: float = 15.0, max_wait: float = 20.0) -> None:
        """Wait (1 s samples, at most `max_wait` s) until the server's CPU is under `quiet_pct` % of one
        core, and keep the last sample as `idle_cpu_pct`: its background work right before the client
        starts. A real broker keeps working for seconds after a backlog was sent (building its consume
        queues, flushing) and revives the messages that earlier runs' clients left unacked; the server
        CPU per message of the window includes whatever of that is left."""
        if self.cpu() is None:
            return
        deadline = time.monotonic() + max_wait
        while True:
            before, t0 = self.cpu(), time.monotonic()
            time.sleep(1.0)
            after, t1 = self.cpu(), time.monotonic()
            if before is None or after is None:
                return
            self.idle_cpu_pct = (after - before) / (t1 - t0) * 100.0
            if self.idle_cpu_pct < quiet_pct or t1 > deadline:
                return

    @property
    def endpoint(self) -> str:
        return self.endpoints[0]

    def topic(self, logical: str) -> str:
        return self.names[logical]

    def fill(self, logical: str, count: int, size: int) -> None:
        raise NotImplementedError

    def cpu(self) -> float | None:
        """The server's CPU seconds so far (None: unknown, e.g. an existing cluster without --server-pids)."""
        return None

    def stats(self) -> dict[str, Any] | None:
        """The embedded server's call and entry counters (None on a real server)."""
        return None

    @property
    def control(self) -> ControlServer:
        raise RuntimeError("this needs the embedded server")


class _EmbeddedRun(ServerRun):
    def __init__(self, server: ControlServer, topics: Sequence[str]) -> None:
        super().__init__(list(server.endpoints), {t: t for t in topics}, GROUP)
        self._server = server

    def fill(self, logical: str, count: int, size: int) -> None:
        self._server.command("fill", topic=self.topic(logical), count=count, size=size)
        self.filled[logical] += count

    def cpu(self) -> float | None:
        return float(self._server.command("cpu")["cpu"])

    def stats(self) -> dict[str, Any] | None:
        return self._server.command("stats")

    @property
    def control(self) -> ControlServer:
        return self._server


class _RealRun(ServerRun):
    kind = "real"

    def __init__(self, endpoint: str, names: dict[str, str], group: str, pids: Sequence[int]) -> None:
        super().__init__([endpoint], names, group)
        self._pids = list(pids)

    def fill(self, logical: str, count: int, size: int) -> None:
        send_backlog(self.endpoint, self.topic(logical), count, size)
        self.filled[logical] += count

    def cpu(self) -> float | None:
        if not self._pids:
            return None
        return sum(proc_cpu_seconds(pid) for pid in self._pids)


class Target:
    """A kind of server for the whole bench: `start()` once, `run(spec, size)` per run, `stop()`."""

    kind = "embedded"
    title = "the embedded server"

    def start(self, log: Callable[[str], None]) -> None:
        pass

    def stop(self) -> None:
        pass

    def run(self, spec: RunSpec, size: int) -> contextlib.AbstractContextManager[ServerRun]:
        raise NotImplementedError


class EmbeddedTarget(Target):
    def run(self, spec: RunSpec, size: int) -> contextlib.AbstractContextManager[ServerRun]:
        return self._run(spec)

    @contextlib.contextmanager
    def _run(self, spec: RunSpec) -> Iterator[ServerRun]:
        server = ControlServer(
            {
                "brokers": spec.brokers,
                "topics": [f"{t}:1" for t in spec.topics],
                "groups": [GROUP],
                "faults": list(spec.faults),
            }
        )
        with server:
            yield _EmbeddedRun(server, spec.topics)


class RealTarget(Target):
    """A real Apache RocketMQ in local mode, started by the harness for the bench; or, under
    `thrust cluster --exec` (`$THRUST_ROCKETMQ` names a local-mode cluster), that cluster, so that a
    bench inside the test suite's real phase starts no JVM of its own."""

    kind = "real"

    def __init__(self) -> None:
        from thrust.cluster import ROCKETMQ_VERSION

        self.title = f"a real Apache RocketMQ {ROCKETMQ_VERSION} (local-mode proxy with its broker)"
        self.cluster: Any = None
        self.endpoint = ""
        self.admin: Any = None
        self.pids: list[int] = []
        self._seq = itertools.count(1)
        self._tag = f"{os.getpid() % 10000}"

    def start(self, log: Callable[[str], None]) -> None:
        from thrust.cluster import ClusterControl, RocketMQCluster, attach_from_env

        attached = attach_from_env("local")
        if attached is not None:
            self.title = f"a real Apache RocketMQ {attached.version} (local-mode proxy with its broker)"
            self.endpoint, self.admin = attached.endpoint, attached.admin()
            if attached.control:
                self.pids = [ClusterControl(attached.control).pid("proxy")]
            log(f"using the local-mode RocketMQ of $THRUST_ROCKETMQ at {self.endpoint}")
            return
        log("starting a real RocketMQ (local mode) ...")
        cluster = RocketMQCluster("local")
        cluster.start()
        self.cluster = cluster
        self.endpoint, self.admin = cluster.endpoint, cluster.admin
        # the proxy's and the brokers' JVMs (in local mode the broker runs inside the proxy's); the
        # namesrv is left out: it serves routes to the proxy, not messages
        self.pids = [j.process.pid for j in cluster.jvms if j.role in ("proxy", "broker") and j.process]
        took = cluster.startup_seconds
        log(f"  rocketmq {cluster.version} local: {cluster.endpoint} (started in {took:.1f} s)")
        self.warm(log)

    def warm(self, log: Callable[[str], None], seconds: float = 8.0) -> None:
        """A fresh JVM interprets, then compiles, its hot paths during its first seconds of load: the
        first scenario would measure the proxy's warm-up. Send and consume a backlog once, unmeasured."""
        import asyncio

        from thrust.bench.raw import raw_consume

        started = time.monotonic()
        with self._run(RunSpec(("warm",))) as run:
            run.fill("warm", 60_000, 64)
            asyncio.run(
                raw_consume(
                    run.endpoint,
                    run.topic("warm"),
                    run.group,
                    loops=8,
                    warmup=0.0,
                    window=seconds,
                    on_start=lambda: None,
                    on_end=lambda: None,
                )
            )
        took = time.monotonic() - started
        log(f"  server warm-up: 60,000 messages sent, then consumed for {seconds:.0f} s ({took:.1f} s)")

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None

    def run(self, spec: RunSpec, size: int) -> contextlib.AbstractContextManager[ServerRun]:
        return self._run(spec)

    @contextlib.contextmanager
    def _run(self, spec: RunSpec) -> Iterator[ServerRun]:
        from thrust.cluster.process import wait_routable

        if self.admin is None:
            raise RuntimeError("the real RocketMQ is not started")
        n = next(self._seq)
        names = {t: f"b{self._tag}-{n}-{t}" for t in spec.topics}
        group = f"b{self._tag}-{n}-{GROUP}"
        for name in names.values():
            self.admin.create_topic(name, "NORMAL", queues=spec.queues)
        for name in names.values():
            wait_routable(self.endpoint, name, deadline=time.monotonic() + 30)
        self.admin.create_group(group)
        yield _RealRun(self.endpoint, names, group, self.pids)


class ExternalTarget(Target):
    """An existing cluster at `endpoint`: the topics and the group must exist (`resource_names`)."""

    kind = "external"

    def __init__(self, endpoint: str, pids: Sequence[int] = ()) -> None:
        self.endpoint = endpoint
        self.pids = list(pids)
        self.title = f"the cluster at {endpoint}"

    def run(self, spec: RunSpec, size: int) -> contextlib.AbstractContextManager[ServerRun]:
        return self._run(spec, size)

    @contextlib.contextmanager
    def _run(self, spec: RunSpec, size: int) -> Iterator[ServerRun]:
        names = {t: sized_name(t, size) for t in spec.topics}
        run = _RealRun(self.endpoint, names, GROUP, self.pids)
        run.exclusive = False
        yield run


@contextlib.contextmanager
def real_cluster(
    topics: Sequence[str], message_type: str, queues: int, group: str, fifo: bool
) -> Iterator[Any]:
    """A real RocketMQ in local mode with `topics` (of `message_type`, `queues` each) and `group`, for
    `thrust perf --server real`; stopped when the block ends."""
    from thrust.cluster import RocketMQCluster

    with RocketMQCluster("local") as cluster:
        for topic in topics:
            cluster.create_topic(topic, message_type, queues=queues)
        cluster.create_group(group, fifo=fifo)
        yield cluster


# ---------------------------------------------------------------------------------------------------
# the backlog on a real server, and the latency in front of any server


def _metadata(name: str) -> tuple[tuple[str, str], ...]:
    return (("x-mq-client-id", f"{name}@{os.getpid()}"), ("x-mq-language", "PYTHON"))


def send_backlog(
    endpoint: str,
    topic: str,
    count: int,
    size: int,
    *,
    batch: int = 32,
    in_flight: int = 8,
    message_groups: int = 0,
) -> None:
    """Store `count` messages of `size` bytes in `topic` with bare SendMessage calls of `batch` messages
    each, `in_flight` at once (the proxy takes a batch of one topic as one broker batch). With
    `message_groups` > 0 they are FIFO messages, each batch of one group, the groups taken in turn (a
    FIFO topic refuses messages without a group; a batch's messages must share one)."""
    import grpc

    from thrust._codec.ids import new_message_id
    from thrust._proto.apache.rocketmq.v2 import definition_pb2 as pb
    from thrust._proto.apache.rocketmq.v2 import service_pb2 as spb
    from thrust._proto.apache.rocketmq.v2 import service_pb2_grpc as rpc

    template = pb.Message(topic=pb.Resource(name=topic), body=b"x" * max(1, size))
    template.system_properties.born_host = "bench"
    template.system_properties.message_type = pb.NORMAL
    template.system_properties.body_encoding = pb.IDENTITY
    metadata = _metadata("bench-fill")
    pending: collections.deque[Any] = collections.deque()
    issued = 0
    with grpc.insecure_channel(endpoint) as channel:
        stub = rpc.MessagingServiceStub(channel)
        while issued < count or pending:
            while issued < count and len(pending) < in_flight:
                n = min(batch, count - issued)
                request = spb.SendMessageRequest()
                group = f"g{(issued // batch) % message_groups}" if message_groups > 0 else None
                for _ in range(n):
                    m = request.messages.add()
                    m.CopyFrom(template)
                    if group is not None:
                        m.system_properties.message_type = pb.FIFO
                        m.system_properties.message_group = group
                    m.system_properties.message_id = new_message_id()
                    m.system_properties.born_timestamp.GetCurrentTime()
                pending.append(stub.SendMessage.future(request, metadata=metadata, timeout=30))
                issued += n
            answer = pending.popleft().result()
            if answer.status.code != pb.OK:
                raise RuntimeError(
                    f"filling {topic!r} failed: {pb.Code.Name(answer.status.code)} {answer.status.message}"
                )


@contextlib.asynccontextmanager
async def latency_front(run: ServerRun, one_way: float) -> AsyncIterator[str]:
    """The endpoint a client should dial: the server's own, or with `one_way` > 0 a TCP FaultProxy per
    server address in a child process of its own (its CPU is charged to neither the client nor the
    server) that forwards every chunk `one_way` seconds late in each direction, so every round trip
    takes 2 x `one_way` longer.

    The client must stay behind the proxies after QueryRoute: the embedded server's routes name the host
    the client dialled with each broker's own port, so its proxies listen on 127.0.0.2 with the brokers'
    ports; the real proxy's routes name the host and port the client dialled
    (`useEndpointPortFromRequest`, which the harness sets), so one proxy on any port will do. An existing
    cluster needs that setting too, or its clients leave the proxy after their first QueryRoute.
    """
    if one_way <= 0:
        yield run.endpoint
        return
    from thrust.reliability.proxy_process import ProxyProcess

    proxies: list[ProxyProcess] = []
    try:
        for address in run.endpoints if run.kind == "embedded" else run.endpoints[:1]:
            host, _, port = address.rpartition(":")
            if run.kind == "embedded":
                proxy = ProxyProcess((host, int(port)), host="127.0.0.2", port=int(port), latency=one_way)
            else:
                proxy = ProxyProcess((host, int(port)), latency=one_way)
            proxies.append(proxy)
            await proxy.start()
        yield proxies[0].endpoint
    finally:
        for proxy in proxies:
            with contextlib.suppress(Exception):
                await proxy.aclose()
