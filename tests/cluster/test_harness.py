"""The real-RocketMQ harness itself: what mqadmin created, the admin's errors, missing Java or Maven."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

import thrust
from tests.engines import unique
from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust._proto.apache.rocketmq.v2 import service_pb2_grpc as g
from thrust.cluster import (
    STANDARD_TOPICS,
    AdminError,
    ClusterControl,
    ClusterError,
    ClusterInfo,
    JarsError,
    RemotingAdmin,
    RocketMQCluster,
    attach_from_env,
    fetch_jars,
    process,
)
from thrust.cluster import tls as tls_module
from thrust.cluster.control import ControlServer
from thrust.cluster.jars import supports_lite
from thrust.cluster.process import ENV_VAR, wait_routable
from thrust.cluster.tls import harness_certificate


def route(endpoint: str, topic: str) -> s.QueryRouteResponse:
    host, _, port = endpoint.rpartition(":")
    request = s.QueryRouteRequest(
        topic=d.Resource(name=topic),
        endpoints=d.Endpoints(scheme=d.AddressScheme.IPv4, addresses=[d.Address(host=host, port=int(port))]),
    )
    with grpc.insecure_channel(endpoint) as channel:
        reply: s.QueryRouteResponse = g.MessagingServiceStub(channel).QueryRoute(
            request, metadata=(("x-mq-client-id", "harness-test"),), timeout=10
        )
        return reply


@pytest.mark.parametrize("fixture", ["rocketmq", "rocketmq2"])
def test_mqadmin_created_one_topic_of_each_type(fixture: str, request: pytest.FixtureRequest) -> None:
    info: ClusterInfo = request.getfixturevalue(fixture)
    for spec in STANDARD_TOPICS:
        name, _, kind = spec.partition(":")
        reply = route(info.endpoint, name)
        assert reply.status.code == d.Code.OK, (name, reply.status)
        brokers = {q.broker.name for q in reply.message_queues}
        assert len(brokers) == len(info.brokers), (name, brokers)
        types = {d.MessageType.Name(t) for q in reply.message_queues for t in q.accept_message_types}
        assert types == {kind}, (name, types)


def test_admin_topics_of_each_type_and_its_errors(rocketmq: ClusterInfo) -> None:
    admin = RemotingAdmin(rocketmq.brokers)
    name = f"harness-{os.getpid()}-{time.monotonic_ns()}"
    admin.create_topic(name, "FIFO", queues=3)
    wait_routable(rocketmq.endpoint, name, deadline=time.monotonic() + 30)
    reply = route(rocketmq.endpoint, name)
    assert len(reply.message_queues) == 3
    assert {t for q in reply.message_queues for t in q.accept_message_types} == {d.MessageType.FIFO}
    with pytest.raises(ValueError, match="unknown message type"):
        admin.create_topic(name, "LOUD")
    # The broker's own refusal (TopicValidator: illegal characters) comes back as AdminError.
    with pytest.raises(AdminError, match="code"):
        admin.create_topic("bad topic name!", "NORMAL")
    with pytest.raises(AdminError):
        RemotingAdmin(["127.0.0.1:1"], timeout=2).create_group("g")


def test_without_java_or_maven_the_harness_fails_at_once_and_names_them(tmp_path: Path) -> None:
    only_python = tmp_path / "bin"
    only_python.mkdir()
    (only_python / "python").symlink_to(sys.executable)
    env = {**os.environ, "PATH": str(only_python), "THRUST_ROCKETMQ_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        [sys.executable, "-m", "thrust.cli.main", "cluster", "--exec", "true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "'java' is not on PATH" in done.stderr and "OpenJDK 17" in done.stderr


def test_fetch_jars_names_maven_when_only_java_is_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    java = Path(subprocess.run(["which", "java"], capture_output=True, text=True, check=True).stdout.strip())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "java").symlink_to(java)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("THRUST_ROCKETMQ_CACHE", str(tmp_path / "cache"))
    with pytest.raises(JarsError, match=r"'mvn' is not on PATH.*Maven"):
        fetch_jars()


@pytest.mark.parametrize("fixture", ["rocketmq", "rocketmq2"])
def test_proxy_serves_tls_with_the_harness_certificate(fixture: str, request: pytest.FixtureRequest) -> None:
    """The proxy starts with the harness's certificate (`thrust.cluster.tls`), not one it makes in
    memory: a client that trusts only that certificate sends and receives over TLS, on the same port
    as plaintext (the proxy's TLS-permissive mode)."""
    info: ClusterInfo = request.getfixturevalue(fixture)
    assert info.tls_cert is not None and Path(info.tls_cert).exists()
    topic, group = unique("tls"), unique("tlsg")
    admin = RemotingAdmin(info.brokers)
    admin.create_topic(topic, "NORMAL", queues=2)
    admin.create_group(group)
    wait_routable(info.endpoint, topic, deadline=time.monotonic() + 30)
    tls = thrust.TlsConfig(ca_file=info.tls_cert)

    async def scenario() -> None:
        async with (
            thrust.Producer(endpoints=info.endpoint, topics=[topic], tls=tls) as producer,
            thrust.SimpleConsumer(
                endpoints=info.endpoint, group=group, subscriptions={topic: "*"}, tls=tls, await_duration=5
            ) as consumer,
        ):
            receipt = await producer.send(thrust.Message(topic=topic, body=b"over tls"))
            got: list[thrust.ReceivedMessage] = []
            for _ in range(10):
                got += await consumer.receive(8, 15)
                if got:
                    break
            assert [m.message_id for m in got] == [receipt.message_id]
            assert got[0].body == b"over tls"
            await consumer.ack(got[0])

    asyncio.run(scenario())


def test_harness_certificate_made_once_by_cryptography_or_openssl(tmp_path: Path) -> None:
    """One certificate per cache folder, reused; both ways of making it give a PKCS#8 key (what netty's
    `GrpcSslContexts.forServer(cert, key)` reads) matching a certificate valid for localhost and
    127.0.0.1."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    made = harness_certificate(tmp_path / "a")
    assert made is not None
    assert harness_certificate(tmp_path / "a") == made
    cert_a = made[0].read_bytes()
    assert harness_certificate(tmp_path / "a") is not None and made[0].read_bytes() == cert_a
    (tmp_path / "b").mkdir()
    by_openssl = (tmp_path / "b" / "cert.pem", tmp_path / "b" / "key.pem")
    assert tls_module._with_openssl(*by_openssl)
    for cert_path, key_path in (made, by_openssl):
        key_pem = key_path.read_bytes()
        assert key_pem.startswith(b"-----BEGIN PRIVATE KEY-----")
        key = serialization.load_pem_private_key(key_pem, password=None)
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        assert cert.public_key().public_numbers() == key.public_key().public_numbers()  # type: ignore[union-attr]
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert "localhost" in san.get_values_for_type(x509.DNSName)
        assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]


class _Processes:
    """What `ControlServer` serves, without JVMs: each call recorded; `restart` of "busy" fails as the
    real cluster does for a running JVM."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.running = {"proxy": True}

    def kill(self, name: str) -> int:
        self.calls.append(("kill", name))
        self.running[name] = False
        return -9

    def terminate(self, name: str, grace: float) -> int:
        self.calls.append(("terminate", name))
        self.running[name] = False
        return 143

    def restart(self, name: str, *, timeout: float) -> float:
        if self.running.get(name, True):
            raise ClusterError(f"{name} is still running; kill or terminate it first")
        self.running[name] = True
        self.calls.append(("restart", name))
        return 1.5

    def pid(self, name: str) -> int:
        return 4242

    def returncode(self, name: str) -> int | None:
        return None if self.running.get(name, True) else -9


def test_control_socket_carries_each_operation_and_its_errors(tmp_path: Path) -> None:
    """The protocol `thrust cluster` serves for the fault tests: every operation reaches the cluster
    object with its answer back, and a failure there comes back as `ClusterError` with its message."""
    processes = _Processes()
    server = ControlServer(processes, tmp_path / "control.sock")  # type: ignore[arg-type]
    try:
        control = ClusterControl(str(server.path))
        assert control.pid("proxy") == 4242 and control.returncode("proxy") is None
        with pytest.raises(ClusterError, match="still running"):
            control.restart("proxy")
        assert control.kill("proxy") == -9 and control.returncode("proxy") == -9
        assert control.restart("proxy", timeout=5) == 1.5
        assert control.terminate("proxy", grace=1) == 143
        assert processes.calls == [("kill", "proxy"), ("restart", "proxy"), ("terminate", "proxy")]
        with pytest.raises(ClusterError, match="op must be one of"):
            control._ask("reboot", "proxy", 1.0)
    finally:
        server.close()
    assert not (tmp_path / "control.sock").exists()
    with pytest.raises(ClusterError, match="cluster control"):
        ClusterControl(str(tmp_path / "control.sock")).pid("proxy")


def test_lite_options_are_checked_and_reach_the_broker_config(tmp_path: Path) -> None:
    assert [supports_lite(v) for v in ("5.4.0", "5.5.0", "5.5.1", "5.6.0-SNAPSHOT", "6.0.0", "x")] == [
        False,
        True,
        True,
        True,
        True,
        False,
    ]
    with pytest.raises(ValueError, match="mode='cluster'"):
        RocketMQCluster("local", version="5.5.0", lite=True)
    with pytest.raises(ValueError, match=r"5\.5 or later"):
        RocketMQCluster("cluster", version="5.4.0", lite=True)
    with pytest.raises(ValueError, match="brokers must be 1 or 2"):
        RocketMQCluster("cluster", brokers=3)
    with pytest.raises(ValueError, match="brokers applies"):
        RocketMQCluster("local", brokers=1)
    cluster = RocketMQCluster(
        "cluster", version="5.5.0", lite=True, brokers=1, groups=["svc:fifo:lite=chat", "plain"]
    )
    assert cluster.groups == (("svc", True, "chat"), ("plain", False, None))
    for bad in ("svc:lite=", "svc:fifo:fifo", "svc:other", ":fifo"):
        with pytest.raises(ValueError, match="NAME"):
            RocketMQCluster("cluster", groups=[bad])
    cluster.root = tmp_path
    conf, _ = cluster._broker_conf("broker-a", "127.0.0.1:9876", "127.0.0.1")
    lines = conf.read_text().splitlines()
    assert "enableLmq=true" in lines and "enableMultiDispatch=true" in lines
    plain = RocketMQCluster("cluster")
    plain.root = tmp_path / "plain"
    conf, _ = plain._broker_conf("broker-a", "127.0.0.1:9876", "127.0.0.1")
    assert "enableLmq" not in conf.read_text()


def test_attach_from_env_tells_lite_clusters_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    plain = ClusterInfo("127.0.0.1:1", "127.0.0.1:2", ("127.0.0.1:3",), "cluster", "5.4.0")
    lite = ClusterInfo("127.0.0.1:4", "127.0.0.1:5", ("127.0.0.1:6",), "cluster", "5.5.0", lite=True)
    assert ClusterInfo.from_json(lite.to_json()) == lite
    monkeypatch.setenv(ENV_VAR, json.dumps([json.loads(plain.to_json()), json.loads(lite.to_json())]))
    assert attach_from_env("cluster") == plain
    assert attach_from_env("cluster", lite=True) == lite
    monkeypatch.setenv(ENV_VAR, lite.to_json())
    assert attach_from_env("cluster") is None
    assert attach_from_env(lite=True) == lite


def test_thrust_cluster_refuses_lite_where_it_cannot_run(capsys: pytest.CaptureFixture[str]) -> None:
    from thrust.cli.main import main

    # Refused before anything starts: lite needs cluster mode and 5.5+.
    assert main(["cluster", "--lite", "--mode", "local"]) == 2
    assert "mode='cluster'" in capsys.readouterr().err
    assert main(["cluster", "--lite", "--version", "5.4.0"]) == 2
    assert "5.5 or later" in capsys.readouterr().err
    assert main(["cluster", "--group", "g:lite="]) == 2
    assert "NAME[:fifo][:lite=PARENT]" in capsys.readouterr().err


def test_listening_ports_are_picked_outside_the_ephemeral_range() -> None:
    """The JVMs' listening ports come from below the ephemeral range, where no outgoing connection can take
    one between the probe and the JVM's bind; a broker's block (port - 2, port + 1) is free as a whole."""
    low, high = process._ephemeral_range()
    for _ in range(50):
        port = process._free_port(also=(-2, 1))
        for p in (port - 2, port, port + 1):
            assert 1024 < p < 65535
            assert not low <= p <= high, (p, low, high)
            assert process._is_free("127.0.0.1", p)
