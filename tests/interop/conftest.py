"""Interop tests: the official rocketmq-python-client (own venv) against a server.

Most scenarios run twice with the same test code (the `server` fixture): against thrust's embedded
server and against a real Apache RocketMQ 5.5.0 proxy (the `rocketmq` session cluster, local mode, one
broker). A difference between the two runs tells a server-side difference (ours or upstream's) apart
from the official client's own behaviour (docs/interop-findings.md). Scenarios that need what only the
embedded server has (fault hooks, stats, auth or TLS settings, `thrust serve`) use `embedded_server`
directly and say why.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.engines import unique
from tests.official_client import ensure_venv
from thrust.cluster import ClusterInfo, RemotingAdmin
from thrust.cluster.process import wait_routable
from thrust.server.config import GroupSpec, TopicSpec, parse_group, parse_topic
from thrust.server.core.catalog import dead_letter_topic
from thrust.server.service import EmbeddedServer
from thrust.testing import embedded_server


@pytest.fixture(scope="session")
def official_python() -> Path:
    # Built once per session (bounded by official_client.BUILD_TIMEOUT per step). Tests mark their
    # timeouts func_only so a cold build from PyPI does not count against the scenario's budget.
    return ensure_venv()


@dataclass
class Running:
    """The server one scenario runs against: its endpoint and the names its topics and groups got.

    Tests name topics and groups by what they mean ("it-push", "it-push-g"); `srv["it-push"]` is the
    name on this server. Names are unique per scenario on both servers (the real cluster is shared by
    the whole session, and the embedded one is made the same way so the two runs differ in nothing
    else).
    """

    kind: str
    """"embedded" or "rocketmq"."""
    endpoint: str
    names: Mapping[str, str]
    embedded: EmbeddedServer | None
    """The embedded server, for checks of its broker state that the real one cannot offer (None on
    the real proxy)."""

    @property
    def real(self) -> bool:
        return self.embedded is None

    def __getitem__(self, logical: str) -> str:
        return self.names[logical]

    def dead_letter_topic(self, group: str) -> str:
        """The dead-letter topic of the group the test calls `group` (`%DLQ%<group>` on both)."""
        return dead_letter_topic(self[group])


class Server:
    """What the `server` fixture gives a test: `start(topics, groups)` on the server under test.

    Topics are `NAME[:QUEUES[:TYPE]]` specs or `TopicSpec`s (one message type each, as the real
    proxy checks a message's type against its topic's `message.type`), groups `NAME[:fifo]` or
    `GroupSpec`s (their retry policy's `max_attempts` and `customized` delays are set on both servers).
    """

    def __init__(self, kind: str, cluster: ClusterInfo | None) -> None:
        self.kind = kind
        self.cluster = cluster

    @property
    def real(self) -> bool:
        return self.kind == "rocketmq"

    @asynccontextmanager
    async def start(
        self,
        *,
        topics: Iterable[str | TopicSpec],
        groups: Iterable[str | GroupSpec],
        embedded_options: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[Running]:
        """Create the topics and groups and yield the server.

        `embedded_options` are `embedded_server` settings that shorten the embedded server's timers to
        the test's budget (e.g. `transaction_check_after`); the real cluster's are fixed by the harness
        (`thrust.cluster.process`: transaction check after 3 s, every 3 s).
        """
        topic_specs = [parse_topic(t) for t in topics]
        group_specs = [parse_group(g) for g in groups]
        names = {s.name: unique(s.name) for s in [*topic_specs, *group_specs]}
        topic_specs = [dataclasses.replace(s, name=names[s.name]) for s in topic_specs]
        group_specs = [dataclasses.replace(s, name=names[s.name]) for s in group_specs]
        if self.cluster is None:
            # auto_create off, as on the real proxy: a scenario must declare every topic it uses.
            async with embedded_server(
                topics=topic_specs, groups=group_specs, auto_create=False, **(embedded_options or {})
            ) as srv:
                yield Running(self.kind, srv.endpoints[0], names, srv)
            return
        await asyncio.to_thread(_create_on_cluster, self.cluster, topic_specs, group_specs)
        yield Running(self.kind, self.cluster.endpoint, names, None)


def _create_on_cluster(cluster: ClusterInfo, topics: list[TopicSpec], groups: list[GroupSpec]) -> None:
    admin = RemotingAdmin(cluster.brokers)
    for group in groups:
        retry = group.retry
        admin.create_group(
            group.name,
            fifo=group.fifo,
            max_attempts=None if retry is None else retry.max_attempts,
            retry_delays=None if retry is None or retry.exponential is not None else retry.customized,
        )
    for topic in topics:
        if len(topic.types) != 1:
            raise ValueError(f"topic {topic.name}: the real proxy takes one message type, not {topic.types}")
        admin.create_topic(topic.name, topic.types[0].name, queues=topic.queues)
    deadline = time.monotonic() + 30
    for topic in topics:
        wait_routable(cluster.endpoint, topic.name, deadline=deadline)


@pytest.fixture(params=["embedded", "rocketmq"])
def server(request: pytest.FixtureRequest, official_python: Path) -> Server:
    """The server under test: thrust's embedded server, then a real Apache RocketMQ proxy."""
    if request.param == "embedded":
        return Server("embedded", None)
    cluster: ClusterInfo = request.getfixturevalue("rocketmq")
    return Server("rocketmq", cluster)
