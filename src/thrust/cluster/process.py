"""Start and stop a real Apache RocketMQ 5 (namesrv, broker(s), gRPC proxy) as JVM child processes.

Why one module of ~780 lines (docs/CONVENTIONS.md): `RocketMQCluster` owns the start order, ports,
homes and teardown of every JVM of one cluster; its two shapes share all of it.

Two shapes:
- `mode="local"`: a namesrv and one proxy in local mode, the broker running inside the proxy's JVM
  (`ProxyStartup -pm local -bc broker.conf`): two JVMs, the cheapest real engine.
- `mode="cluster"`: a namesrv, brokers `broker-a` and `broker-b`, and one cluster-mode proxy that talks
  to them over remoting: four JVMs, for routes and assignments that span two brokers (`brokers=1`:
  `broker-a` alone, three JVMs).

`lite=True` (RocketMQ 5.5 and later, cluster mode) turns on what lite topics need: the brokers' light
message queues (`enableLmq`, `enableMultiDispatch`). Only a cluster-mode proxy serves lite subscriptions:
5.5.0's local-mode proxy has no `LiteSubscriptionService` behind SyncLiteSubscription.

Every process gets its own `user.home` (logs land in `~/logs/rocketmqlogs`), its own logback file from
the jars (`rmq.<role>.logback.xml`), a small heap and free loopback ports. The store and the homes live
in one temporary folder, removed on `stop()`. The order is upstream's: namesrv, then brokers (each
registered), then the proxy; readiness is the boot line on stdout, then a gRPC QueryRoute answered OK.
A JVM that exits or does not become ready raises `ClusterError` with its last log lines.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal

from thrust.cluster.admin import MESSAGE_TYPES, RemotingAdmin
from thrust.cluster.control import ControlServer
from thrust.cluster.errors import ClusterError
from thrust.cluster.jars import ROCKETMQ_VERSION, fetch_jars, require, supports_lite
from thrust.cluster.tls import harness_certificate

__all__ = [
    "ENV_VAR",
    "STANDARD_GROUPS",
    "STANDARD_TOPICS",
    "ClusterError",
    "ClusterInfo",
    "RocketMQCluster",
    "attach_from_env",
]

STANDARD_TOPICS: Final = ("normal:NORMAL", "fifo:FIFO", "delay:DELAY", "transaction:TRANSACTION")
"""One topic of each message type: what `thrust cluster` creates when given no --topic."""
STANDARD_GROUPS: Final = ("group", "fifo-group:fifo")

ENV_VAR: Final = "THRUST_ROCKETMQ"
"""`thrust cluster --exec` puts the running cluster's `ClusterInfo` here (JSON) for its child."""

CLUSTER_NAME: Final = "DefaultCluster"

# JDK 17 closes these packages; RocketMQ's netty and store reach into them (upstream's runbroker.sh).
_JDK17_OPENS: Final = (
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
)
# Upstream's scripts size heaps for servers (4-8 GB); a two-core test box needs far less. C1 only
# starts the JVMs noticeably faster and the tests never run long enough for C2 to pay off.
_HEAPS: Final = {
    "namesrv": ("-Xmx256m",),
    "broker": ("-Xmx512m", "-XX:MaxDirectMemorySize=512m"),
    "proxy-cluster": ("-Xmx512m",),
    "proxy-local": ("-Xmx1g", "-XX:MaxDirectMemorySize=512m"),
    "tools": ("-Xmx256m",),
}
_MAIN: Final = {
    "namesrv": "org.apache.rocketmq.namesrv.NamesrvStartup",
    "broker": "org.apache.rocketmq.broker.BrokerStartup",
    "proxy": "org.apache.rocketmq.proxy.ProxyStartup",
    "tools": "org.apache.rocketmq.tools.command.MQAdminStartup",
}
_READY: Final = {
    "namesrv": re.compile(r"The Name Server boot success"),
    "broker": re.compile(r"The broker\[.*\] boot success"),
    "proxy": re.compile(r"rocketmq-proxy startup successfully"),
}
# Lines after which waiting longer is pointless (the JVM will not come up).
_FATAL: Final = re.compile(
    r"Address already in use|Please set the ROCKETMQ_HOME|Lock failed,MQ already started|"
    r"DefaultHeartBeatSyncerTopic failed|Error: Could not find or load main class|OutOfMemoryError"
)


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """Where a running cluster listens: enough for another process to use it (see `attach_from_env`)."""

    endpoint: str
    """The proxy's gRPC `host:port`: what clients connect to."""
    namesrv: str
    brokers: tuple[str, ...]
    """Each master broker's remoting `host:port` (admin requests go there)."""
    mode: str
    version: str
    tls_cert: str | None = None
    """The PEM certificate the proxy serves TLS with (CN/SAN localhost, 127.0.0.1), for a client's
    `TlsConfig(ca_file=...)`; None when the proxy made its own in memory (`thrust.cluster.tls`)."""
    control: str | None = None
    """The Unix socket of the process that owns the JVMs, when it serves one (`thrust cluster --exec`):
    `ClusterControl(info.control)` kills, terminates and restarts them from another process."""
    lite: bool = False
    """The brokers serve lite topics (`RocketMQCluster(lite=True)`)."""

    def to_json(self) -> str:
        return json.dumps(
            {
                "endpoint": self.endpoint,
                "namesrv": self.namesrv,
                "brokers": list(self.brokers),
                "mode": self.mode,
                "version": self.version,
                "tls_cert": self.tls_cert,
                "control": self.control,
                "lite": self.lite,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> ClusterInfo:
        raw = json.loads(text)
        return cls(
            raw["endpoint"],
            raw["namesrv"],
            tuple(raw["brokers"]),
            raw["mode"],
            raw["version"],
            raw.get("tls_cert"),
            raw.get("control"),
            bool(raw.get("lite", False)),
        )

    def admin(self) -> RemotingAdmin:
        return RemotingAdmin(self.brokers)


def attach_from_env(mode: str | None = None, *, lite: bool = False) -> ClusterInfo | None:
    """The cluster that `thrust cluster --exec` started for this process, if any (and of `mode`; a lite
    cluster (`--lite`) only when `lite`, an ordinary one only when not).

    `THRUST_ROCKETMQ` holds one `ClusterInfo` JSON object, or a JSON list of them (one per mode).
    """
    raw = os.environ.get(ENV_VAR)
    if not raw:
        return None
    items = json.loads(raw)
    for item in items if isinstance(items, list) else [items]:
        info = ClusterInfo.from_json(json.dumps(item))
        if (mode is None or info.mode == mode) and info.lite == lite:
            return info
    return None


# Where listening ports are picked: below the kernel's ephemeral range, which the JVMs' own outgoing
# connections (and every other process's) draw from. A port that bind(0) picked there was free when probed
# and could be some connection's local port by the time the JVM bound it ("Address already in use", seen
# once in about fifteen cluster starts on 6 December).
_LISTEN_PORTS = (10000, 32767)


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _free_port(host: str = "127.0.0.1", *, also: Sequence[int] = ()) -> int:
    """A port free now on `host`, whose offsets in `also` (e.g. -2 and +1 for a broker) are free too, outside
    the ephemeral port range where one can be found."""
    low, high = _LISTEN_PORTS
    ephemeral = _ephemeral_range()
    for _ in range(200):
        port = random.randint(low, high)
        block = [port, *(port + d for d in also)]
        if any(p <= 1024 or p >= 65535 or ephemeral[0] <= p <= ephemeral[1] for p in block):
            continue
        if all(_is_free(host, p) for p in block):
            return port
    for _ in range(200):  # a machine whose ephemeral range covers those ports: any free block
        with socket.socket() as probe:
            probe.bind((host, 0))
            port = int(probe.getsockname()[1])
        extra = [port + d for d in also]
        if any(p <= 1024 or p >= 65535 for p in extra):
            continue
        if all(_is_free(host, p) for p in extra):
            return port
    raise ClusterError("no free port block found")


def _is_free(host: str, port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


class _Jvm:
    """One RocketMQ JVM: command, log file, readiness line, stop."""

    def __init__(
        self, name: str, role: str, main: str, args: Sequence[str], heap: Sequence[str], root: Path, lib: Path
    ) -> None:
        self.name = name
        self.role = role
        self.home = root / name
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "tmp").mkdir(exist_ok=True)
        self.log_path = self.home / "stdout.log"
        self.command = [
            require("java", "install OpenJDK 17 or newer"),
            *heap,
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            *_JDK17_OPENS,
            f"-Duser.home={self.home}",
            f"-Drocketmq.home.dir={self.home}",
            # netty and the JDK write temporary files (certificates, native libraries) there: removed
            # with the cluster's state rather than left in /tmp.
            f"-Djava.io.tmpdir={self.home / 'tmp'}",
            f"-Drmq.logback.configurationFile=rmq.{role}.logback.xml",
            "-Dtls.server.mode=disabled" if role != "proxy" else "-Dtls.server.mode=permissive",
            "-cp",
            str(lib / "*"),
            main,
            *args,
        ]
        self.process: subprocess.Popen[bytes] | None = None
        self.log_offset = 0
        self.started_at = 0.0
        self.ready_after = 0.0

    def start(self) -> None:
        # A restart appends to the same log: readiness is judged on what comes after this point.
        self.log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        env = dict(os.environ)
        # NamesrvStartup and BrokerStartup exit without it; any existing folder will do.
        env["ROCKETMQ_HOME"] = str(self.home)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=self.home,
                start_new_session=True,  # a Ctrl-C in the shell reaches us, and we stop the JVMs in order
            )
        self.started_at = time.monotonic()

    def wait_ready(self, pattern: re.Pattern[str], deadline: float) -> None:
        assert self.process is not None
        while True:
            with open(self.log_path, "rb") as log:
                log.seek(self.log_offset)
                text = log.read().decode(errors="replace")
            if pattern.search(text):
                self.ready_after = time.monotonic() - self.started_at
                return
            if self.process.poll() is not None:
                raise ClusterError(f"{self.name} exited with {self.process.returncode}\n{self.tail()}")
            fatal = _FATAL.search(text)
            if fatal:
                raise ClusterError(f"{self.name} cannot start ({fatal.group(0)})\n{self.tail()}")
            if time.monotonic() > deadline:
                raise ClusterError(f"{self.name} not ready in time\n{self.tail()}")
            time.sleep(0.1)

    def tail(self, lines: int = 40) -> str:
        """The last lines of stdout and of the main RocketMQ log under `user.home`."""
        parts = []
        for path in [self.log_path, *sorted((self.home / "logs").glob("rocketmqlogs/*.log"))]:
            with contextlib.suppress(OSError):
                text = path.read_text(errors="replace").splitlines()[-lines:]
                if text:
                    parts.append(
                        f"--- {self.name}: {path.name} (last {len(text)} lines) ---\n" + "\n".join(text)
                    )
        return "\n".join(parts)

    def rss_bytes(self) -> int:
        if self.process is None or self.process.poll() is not None:
            return 0
        try:
            with open(f"/proc/{self.process.pid}/status") as status:
                for line in status:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            return 0
        return 0

    def terminate(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait_or_kill(self, deadline: float) -> None:
        process = self.process
        if process is None:
            return
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def stop(self, grace: float = 5.0) -> None:
        self.terminate()
        self.wait_or_kill(time.monotonic() + grace)


class RocketMQCluster:
    """A real Apache RocketMQ on loopback, from the Maven Central jars.

    Args:
        mode: `"local"` (namesrv + a local-mode proxy with its broker inside) or `"cluster"` (namesrv,
            two brokers, a cluster-mode proxy).
        topics: created with `mqadmin updateTopicList` at start, as `NAME` or `NAME:TYPE` (TYPE one of
            NORMAL, FIFO, DELAY, TRANSACTION, PRIORITY, MIXED, LITE).
        groups: created with `mqadmin updateSubGroupList` at start, as `NAME`, `NAME:fifo`, and with
            `:lite=PARENT` a lite consumer group bound to LITE topic PARENT. The
            brokers do not create groups (`autoCreateSubscriptionGroup=false`): a consumer of any other
            group is refused with CONSUMER_GROUP_NOT_FOUND until `create_group` makes it.
        version: the RocketMQ release (default: `ROCKETMQ_VERSION`).
        brokers: in cluster mode, how many brokers (1 or 2; default 2).
        lite: the brokers serve lite topics (5.5 and later, cluster mode only).
        proxy_config: extra `rmq-proxy.json` keys over the harness's
            (e.g. `{"minInvisibleTimeMillsForRecv": 1000}`).
        broker_config: extra broker `.conf` keys over the harness's.
        startup_timeout: seconds for the whole start.
        keep: keep the state folder on stop (for reading the logs).
        stop_grace: seconds each JVM gets after SIGTERM before SIGKILL.

    Attributes (after `start()`): `endpoint` (the proxy's gRPC `host:port`), `info` (a `ClusterInfo`),
    `startup_seconds`, `admin` (a `RemotingAdmin` over every broker).
    """

    def __init__(
        self,
        mode: Literal["local", "cluster"] = "local",
        *,
        topics: Iterable[str] = (),
        groups: Iterable[str] = (),
        version: str = ROCKETMQ_VERSION,
        brokers: int = 2,
        lite: bool = False,
        proxy_config: Mapping[str, Any] | None = None,
        broker_config: Mapping[str, str] | None = None,
        startup_timeout: float = 420.0,
        keep: bool = False,
        stop_grace: float = 3.0,
    ) -> None:
        if mode not in ("local", "cluster"):
            raise ValueError(f"mode must be 'local' or 'cluster', got {mode!r}")
        if brokers not in (1, 2):
            raise ValueError(f"brokers must be 1 or 2, got {brokers}")
        if brokers != 2 and mode == "local":
            raise ValueError(
                "a local-mode proxy runs its one broker inside; brokers applies to mode='cluster'"
            )
        if lite and mode != "cluster":
            raise ValueError("lite topics need mode='cluster' (a local-mode proxy does not serve them)")
        if lite and not supports_lite(version):
            raise ValueError(f"lite topics need RocketMQ 5.5 or later, not {version}")
        self.mode = mode
        self.topics = tuple(_parse_topic(t) for t in topics)
        self.groups = tuple(_parse_group(g) for g in groups)
        self.version = version
        self.broker_count = brokers
        self.lite = lite
        self.proxy_config = dict(proxy_config or {})
        self.broker_config = dict(broker_config or {})
        self.startup_timeout = startup_timeout
        self.keep = keep
        self.stop_grace = stop_grace
        self.root: Path | None = None
        self.jvms: list[_Jvm] = []
        self._info: ClusterInfo | None = None
        self._admin: RemotingAdmin | None = None
        self._probe: str | None = None
        self._tls: tuple[Path, Path] | None = None
        self._control: ControlServer | None = None  # when `serve_control` ran
        self.startup_seconds = 0.0

    # -- public -------------------------------------------------------------------------------------

    @property
    def info(self) -> ClusterInfo:
        if self._info is None:
            raise ClusterError("the cluster is not started")
        return self._info

    @property
    def endpoint(self) -> str:
        return self.info.endpoint

    @property
    def admin(self) -> RemotingAdmin:
        if self._admin is None:
            raise ClusterError("the cluster is not started")
        return self._admin

    def create_topic(self, name: str, message_type: str = "NORMAL", *, queues: int = 8) -> None:
        """Create `name` on every broker and wait until the proxy routes it."""
        self.admin.create_topic(name, message_type, queues=queues)
        wait_routable(self.endpoint, name, deadline=time.monotonic() + 30)

    def create_group(
        self,
        name: str,
        *,
        fifo: bool = False,
        max_attempts: int | None = None,
        lite_bind_topic: str | None = None,
        lite_quota: int | None = None,
    ) -> None:
        """Create consumer group `name` on every broker (`RemotingAdmin.create_group`)."""
        self.admin.create_group(
            name, fifo=fifo, max_attempts=max_attempts, lite_bind_topic=lite_bind_topic, lite_quota=lite_quota
        )

    def process(self, name: str) -> subprocess.Popen[bytes]:
        """The running JVM `name` ("namesrv", "proxy", "broker-a", "broker-b"), e.g. for its pid."""
        process = self._named(name).process
        if process is None:
            raise ClusterError(f"{name} was never started")
        return process

    def pid(self, name: str) -> int:
        return self.process(name).pid

    def returncode(self, name: str) -> int | None:
        """`name`'s exit status (negative: the signal), None while it runs."""
        return self.process(name).poll()

    def kill(self, name: str) -> int | None:
        """SIGKILL `name` (no shutdown hook runs: a crash), wait for it to exit; its exit status."""
        jvm = self._named(name)
        if jvm.process is not None and jvm.process.poll() is None:
            jvm.process.kill()
            jvm.process.wait()
        return None if jvm.process is None else jvm.process.returncode

    def terminate(self, name: str, grace: float = 30.0) -> int | None:
        """SIGTERM `name` and wait for its shutdown hooks (SIGKILL after `grace` seconds); its exit
        status."""
        jvm = self._named(name)
        jvm.stop(grace)
        return None if jvm.process is None else jvm.process.returncode

    def serve_control(self) -> str:
        """Serve `kill`, `terminate`, `restart`, `pid` and `returncode` on a Unix socket in the state
        folder, for other processes (`ClusterControl`); its path, also in `info.control`."""
        if self._info is None or self.root is None:
            raise ClusterError("the cluster is not started")
        if self._control is None:
            self._control = ControlServer(self, self.root / "control.sock")
            self._info = dataclasses.replace(self._info, control=str(self._control.path))
        return str(self._control.path)

    def restart(self, name: str, *, timeout: float = 120.0) -> float:
        """Start `name` again with the same command, ports and store (after `kill` or `terminate`);
        the seconds until its boot line. The proxy is also checked with a QueryRoute."""
        jvm = self._named(name)
        if jvm.process is not None and jvm.process.poll() is None:
            raise ClusterError(f"{name} is still running; kill or terminate it first")
        deadline = time.monotonic() + timeout
        if jvm.role == "proxy":
            _start_proxy(jvm, deadline)
        else:
            jvm.start()
            jvm.wait_ready(_READY["broker"] if jvm.role == "broker" else _READY[jvm.role], deadline)
        if jvm.role == "proxy" and self._probe is not None:
            wait_routable(self.endpoint, self._probe, deadline=deadline)
        return jvm.ready_after

    def _named(self, name: str) -> _Jvm:
        for jvm in self.jvms:
            if jvm.name == name:
                return jvm
        raise ClusterError(f"no process {name!r}; there are {[j.name for j in self.jvms]}")

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory of each JVM, by name."""
        return {jvm.name: jvm.rss_bytes() for jvm in self.jvms}

    def start(self) -> ClusterInfo:
        """Fetch the jars (first use), start every JVM in upstream's order, create the topics and
        groups, and wait until the proxy answers a QueryRoute."""
        if self._info is not None:
            raise ClusterError("already started")
        begin = time.monotonic()
        lib = fetch_jars(self.version)
        deadline = begin + self.startup_timeout
        self.root = Path(tempfile.mkdtemp(prefix=f"thrust-rocketmq-{self.mode}-"))
        self._tls = harness_certificate()
        try:
            self._start(lib, deadline)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - begin
        return self.info

    def stop(self) -> None:
        """SIGTERM every JVM (proxy first, namesrv last), then remove the state folder. Idempotent."""
        if self._control is not None:
            self._control.close()
            self._control = None
        # The proxy first, so that clients see it go before the brokers behind it; then the rest
        # together. The JVMs' shutdown hooks take 10-15 s each on two cores (flushing a store this
        # harness deletes next), so each gets `grace` seconds after SIGTERM, then SIGKILL.
        proxies = [j for j in self.jvms if j.role == "proxy"]
        for jvm in proxies:
            jvm.stop(self.stop_grace)
        rest = [j for j in self.jvms if j.role != "proxy"]
        for jvm in rest:
            jvm.terminate()
        deadline = time.monotonic() + self.stop_grace
        for jvm in rest:
            jvm.wait_or_kill(deadline)
        self.jvms = []
        self._info = None
        self._admin = None
        if self.root is not None and not self.keep:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def __enter__(self) -> RocketMQCluster:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def logs(self, lines: int = 40) -> str:
        """Every JVM's last log lines (for a failure message)."""
        return "\n".join(jvm.tail(lines) for jvm in self.jvms)

    # -- start-up -----------------------------------------------------------------------------------

    def _start(self, lib: Path, deadline: float) -> None:
        assert self.root is not None
        host = "127.0.0.1"
        ns_port = _free_port(host)
        (self.root / "namesrv").mkdir()
        (self.root / "namesrv" / "namesrv.conf").write_text(f"listenPort={ns_port}\n")
        namesrv = self._jvm("namesrv", "namesrv", ["-c", str(self.root / "namesrv" / "namesrv.conf")], lib)
        namesrv.start()
        namesrv.wait_ready(_READY["namesrv"], deadline)
        ns_addr = f"{host}:{ns_port}"

        grpc_port = _free_port(host)
        proxy_json = self.root / "rmq-proxy.json"
        proxy_json.write_text(json.dumps(self._proxy_config(ns_addr, grpc_port, _free_port(host)), indent=1))
        brokers: list[str] = []
        if self.mode == "local":
            conf, port = self._broker_conf("broker-a", ns_addr, host)
            brokers.append(f"{host}:{port}")
            proxy = self._jvm(
                "proxy",
                "proxy",
                ["-pc", str(proxy_json), "-pm", "local", "-bc", str(conf), "-n", ns_addr],
                lib,
                heap=_HEAPS["proxy-local"],
            )
            _start_proxy(proxy, deadline)
        else:
            started = []
            for name in ("broker-a", "broker-b")[: self.broker_count]:
                conf, port = self._broker_conf(name, ns_addr, host)
                brokers.append(f"{host}:{port}")
                broker = self._jvm(name, "broker", ["-c", str(conf), "-n", ns_addr], lib)
                broker.start()
                started.append(broker)
            for broker in started:
                broker.wait_ready(_READY["broker"], deadline)
            # A cluster-mode proxy started before any broker registered exits ("create system broadcast
            # topic DefaultHeartBeatSyncerTopic failed"); the boot lines above come after registration.
            proxy = self._jvm(
                "proxy",
                "proxy",
                ["-pc", str(proxy_json), "-pm", "cluster", "-n", ns_addr],
                lib,
                heap=_HEAPS["proxy-cluster"],
            )
            _start_proxy(proxy, deadline)
        endpoint = f"{host}:{grpc_port}"
        self._admin = RemotingAdmin(brokers)
        # A probe topic proves the whole path: admin -> broker -> namesrv -> proxy -> gRPC.
        probe = f"thrust-ready-{uuid.uuid4().hex[:8]}"
        self._probe = probe
        self._admin.create_topic(probe, "NORMAL", queues=1)
        wait_routable(endpoint, probe, deadline=deadline)
        self._info = ClusterInfo(
            endpoint,
            ns_addr,
            tuple(brokers),
            self.mode,
            self.version,
            tls_cert=None if self._tls is None else str(self._tls[0]),
            lite=self.lite,
        )
        self._mqadmin(lib, ns_addr, deadline)
        for name, _ in self.topics:
            wait_routable(endpoint, name, deadline=deadline)

    def _jvm(
        self, name: str, role: str, args: Sequence[str], lib: Path, *, heap: Sequence[str] | None = None
    ) -> _Jvm:
        assert self.root is not None
        jvm = _Jvm(name, role, _MAIN[role], args, heap if heap is not None else _HEAPS[role], self.root, lib)
        self.jvms.append(jvm)
        return jvm

    def _proxy_config(self, ns_addr: str, grpc_port: int, remoting_port: int) -> dict[str, Any]:
        config: dict[str, Any] = {
            "rocketMQClusterName": CLUSTER_NAME,
            "namesrvAddr": ns_addr,
            "grpcServerPort": grpc_port,
            "remotingListenPort": remoting_port,
            "localServeAddr": "127.0.0.1",
            # Default 30 s: every stop would wait that long for streams that tests already closed.
            "grpcShutdownTimeSeconds": 1,
            # Default 20 s: a topic created by a test would stay "not found" in the proxy's caches.
            "topicRouteServiceCacheRefreshSeconds": 1,
            "topicConfigCacheRefreshSeconds": 1,
            "subscriptionGroupConfigCacheRefreshSeconds": 1,
            "transactionHeartbeatPeriodSecond": 3,
            # Routes name the port the client dialled, not the proxy's own (`RouteActivity`): a client
            # behind a TCP proxy or port forward (the fault tests' FaultProxy) keeps using that path.
            # A client that dials the proxy directly sees no difference.
            "useEndpointPortFromRequest": True,
        }
        if self._tls is not None:
            cert, key = self._tls
            config.update(tlsTestModeEnable=False, tlsCertPath=str(cert), tlsKeyPath=str(key))
        config.update(self.proxy_config)
        return config

    def _broker_conf(self, name: str, ns_addr: str, host: str) -> tuple[Path, int]:
        assert self.root is not None
        # The broker also binds listenPort - 2 (fast remoting) and listenPort + 1 (HA).
        port = _free_port(host, also=(-2, 1))
        store = self.root / name / "store"
        store.mkdir(parents=True, exist_ok=True)
        settings = {
            "brokerClusterName": CLUSTER_NAME,
            "brokerName": name,
            "brokerId": "0",
            "brokerRole": "ASYNC_MASTER",
            "flushDiskType": "ASYNC_FLUSH",
            "namesrvAddr": ns_addr,
            "brokerIP1": host,  # routes of a local-mode proxy point here
            "listenPort": str(port),
            "storePathRootDir": str(store),
            "storePathCommitLog": str(store / "commitlog"),
            # Upstream defaults map 1 GB commit-log files and ~6 MB consume queues per queue.
            "mappedFileSizeCommitLog": str(100 * 1024 * 1024),
            "mappedFileSizeConsumeQueue": "600000",
            "maxHashSlotNum": "50000",
            "maxIndexNum": "200000",
            "autoCreateTopicEnable": "false",
            # A consumer of a group nobody created is refused (CONSUMER_GROUP_NOT_FOUND at its first
            # receive) instead of getting a group of its own on the broker's first pop
            # (SubscriptionGroupManager.findSubscriptionGroupConfig): a typo'd group is an error, as
            # docs/rocketmq.md says. The groups a run needs are created with mqadmin or `admin`.
            "autoCreateSubscriptionGroup": "false",
            "enablePropertyFilter": "true",  # SQL92 filters
            "timerWheelEnable": "true",  # delay messages with an arbitrary delivery time
            # RecallMessage of a delay message (5.3.2+); upstream's default refuses it with NO_PERMISSION
            # ("recall failed, operation is forbidden", RecallMessageProcessor).
            "recallMessageEnable": "true",
            "transactionTimeOut": "3000",
            "transactionCheckInterval": "3000",
            "waitTimeMillsInSendQueue": "1000",
            "maxMessageSize": str(4 * 1024 * 1024 + 64 * 1024),
            # The test machines' disks are large but shared; the broker's 90 % "disk full" guard applies.
            "diskMaxUsedSpaceRatio": "95",
        }
        if self.lite:
            # A lite topic's messages go to a light message queue of its own (`%LMQ%parent$lite`), which
            # the broker keeps only with both on (BrokerConfig, MessageStoreConfig; upstream's defaults
            # are off).
            settings.update(enableLmq="true", enableMultiDispatch="true")
        settings.update(self.broker_config)
        conf = self.root / name / "broker.conf"
        conf.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        return conf, port

    def _mqadmin(self, lib: Path, ns_addr: str, deadline: float) -> None:
        """Create the constructor's topics and groups with upstream's own mqadmin (batch forms: one JVM
        each). mqadmin exits 0 even when a request failed, so its output is checked for "success"."""
        assert self.root is not None
        jobs: list[tuple[str, list[str]]] = []
        if self.topics:
            topic_file = self.root / "topics.json"
            topic_file.write_text(
                json.dumps(
                    [
                        {
                            "topicName": name,
                            "readQueueNums": 8,
                            "writeQueueNums": 8,
                            "perm": 6,
                            "topicFilterType": "SINGLE_TAG",
                            "topicSysFlag": 0,
                            "order": False,
                            "attributes": {"+message.type": kind},
                        }
                        for name, kind in self.topics
                    ]
                )
            )
            jobs.append(
                ("topics", ["updateTopicList", "-n", ns_addr, "-c", CLUSTER_NAME, "-f", str(topic_file)])
            )
        if self.groups:
            group_file = self.root / "groups.json"
            group_file.write_text(
                json.dumps(
                    [
                        {
                            "groupName": name,
                            "consumeMessageOrderly": fifo,
                            "retryQueueNums": 1,
                            "retryMaxTimes": 16,
                            # RemotingAdmin.create_group's form of the lite group attribute.
                            **({"attributes": {"+lite.bind.topic": bind}} if bind else {}),
                        }
                        for name, fifo, bind in self.groups
                    ]
                )
            )
            jobs.append(
                ("groups", ["updateSubGroupList", "-n", ns_addr, "-c", CLUSTER_NAME, "-f", str(group_file)])
            )
        # Each job is idempotent; on a loaded machine mqadmin's own 3-5 s RPC timeouts do fire, so a
        # failed run is repeated (twice at most) before the start is given up.
        for attempt in range(1, 4):
            running = []
            for name, args in jobs:
                jvm = self._jvm(f"mqadmin-{name}-{attempt}", "tools", args, lib)
                jvm.start()
                running.append((name, args, jvm))
            failed = []
            for name, args, jvm in running:
                assert jvm.process is not None
                try:
                    jvm.process.wait(max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    jvm.stop()
                    raise ClusterError(f"{jvm.name} did not finish\n{jvm.tail()}") from None
                out = jvm.log_path.read_text(errors="replace")
                if "success" not in out or "Exception" in out:
                    failed.append((name, args, jvm))
            self.jvms = [j for j in self.jvms if all(j is not r[2] for r in running)]
            if not failed:
                return
            if attempt == 3 or time.monotonic() > deadline:
                jvm = failed[0][2]
                assert jvm.process is not None
                raise ClusterError(f"{jvm.name} failed (exit {jvm.process.returncode}):\n{jvm.tail()}")
            jobs = [(name, args) for name, args, _ in failed]


def _start_proxy(jvm: _Jvm, deadline: float) -> None:
    """Start a proxy JVM and wait for its boot line, starting it again (until `deadline`) when it gave up
    because the namesrv did not answer in time: at start-up the cluster-mode proxy looks up and creates
    `DefaultHeartBeatSyncerTopic` with 3 s remoting calls (hard-coded in `DefaultAdminService`) and exits
    on a timeout, which a machine under heavy load produces (seen at a load average of 65-80 on two
    cores, several times in a row)."""
    while True:
        jvm.start()
        try:
            jvm.wait_ready(_READY["proxy"], deadline)
            return
        except ClusterError as exc:
            if "DefaultHeartBeatSyncerTopic" not in str(exc) or time.monotonic() > deadline:
                raise
            jvm.stop(grace=5.0)


def _parse_topic(spec: str) -> tuple[str, str]:
    name, _, kind = spec.partition(":")
    kind = (kind or "NORMAL").upper()
    if not name or kind not in MESSAGE_TYPES:
        raise ValueError(f"topic {spec!r} is not NAME[:TYPE] with TYPE one of {MESSAGE_TYPES}")
    return name, kind


def _parse_group(spec: str) -> tuple[str, bool, str | None]:
    """`NAME`, `NAME:fifo`, `NAME:lite=PARENT` (a lite group bound to LITE topic PARENT) or both."""
    name, *options = spec.split(":")
    fifo = False
    bind: str | None = None
    for option in options:
        if option.lower() == "fifo" and not fifo:
            fifo = True
        elif option.lower().startswith("lite=") and bind is None and option[5:]:
            bind = option[5:]
        else:
            raise ValueError(f"group {spec!r} is not NAME[:fifo][:lite=PARENT]")
    if not name:
        raise ValueError(f"group {spec!r} is not NAME[:fifo][:lite=PARENT]")
    return name, fifo, bind


def wait_routable(endpoint: str, topic: str, *, deadline: float) -> None:
    """Poll the proxy with QueryRoute for `topic` until it answers OK (the proxy caches routes and
    "topic not found" for `topicRouteServiceCacheRefreshSeconds`)."""
    import grpc

    from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
    from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
    from thrust._proto.apache.rocketmq.v2 import service_pb2_grpc as g

    host, _, port = endpoint.rpartition(":")
    request = s.QueryRouteRequest(
        topic=d.Resource(name=topic),
        endpoints=d.Endpoints(scheme=d.AddressScheme.IPv4, addresses=[d.Address(host=host, port=int(port))]),
    )
    metadata = (("x-mq-client-id", f"thrust-harness-{os.getpid()}"), ("x-mq-language", "PYTHON"))
    last = "no answer"
    with grpc.insecure_channel(endpoint) as channel:
        stub = g.MessagingServiceStub(channel)
        while True:
            try:
                reply = stub.QueryRoute(request, metadata=metadata, timeout=5)
                if reply.status.code == d.Code.OK and reply.message_queues:
                    return
                last = f"{d.Code.Name(reply.status.code)}: {reply.status.message}"
            except grpc.RpcError as exc:
                last = f"{exc.code()}: {exc.details()}"
            if time.monotonic() > deadline:
                raise ClusterError(f"the proxy at {endpoint} does not route {topic!r}: {last}")
            time.sleep(0.2)
