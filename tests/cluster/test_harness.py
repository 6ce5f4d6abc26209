"""The real-RocketMQ harness itself: what mqadmin created, the admin's errors, missing Java or Maven."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from thrust._proto.apache.rocketmq.v2 import definition_pb2 as d
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust._proto.apache.rocketmq.v2 import service_pb2_grpc as g
from thrust.cluster import STANDARD_TOPICS, AdminError, ClusterInfo, JarsError, RemotingAdmin, fetch_jars
from thrust.cluster.process import wait_routable


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
