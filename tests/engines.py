"""The two servers a client test can run against: thrust's embedded server and a real Apache RocketMQ.

A test that takes the `engine` fixture (tests/conftest.py) runs twice, once per server, with the same
code. It asks the engine for fresh names (`engine.topic("FIFO")`, `engine.group(fifo=True)`), which are
created on that server before the name is returned: the servers are shared by every test of a session,
so no two tests ever see each other's messages.

The real engine is the cluster that `thrust cluster --exec` started for this run (`make test` does),
or, when pytest runs on its own, one started by this session (tests/conftest.py).
"""

from __future__ import annotations

import itertools
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from thrust.cluster import ClusterInfo, RemotingAdmin
from thrust.cluster.process import wait_routable
from thrust.server.core.model import GroupRetryPolicy, MessageType
from thrust.testing import ServerThread

_RUN = uuid.uuid4().hex[:6]
_serial = itertools.count(1)


def unique(prefix: str) -> str:
    """A name no other test (nor another xdist worker, nor an earlier run) uses."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw")
    return f"{prefix}-{_RUN}-{worker}-{next(_serial)}"


@dataclass
class Engine:
    """A running server and what tests need to know about its limits."""

    name: str
    """"embedded", "rocketmq" or "rocketmq55" (the real 5.5 lite cluster; the pytest id)."""
    endpoint: str
    min_invisible: float
    """The shortest invisible duration a receive may ask for (the proxy's minInvisibleTimeMillsForRecv)."""
    min_long_poll: float
    """The shortest long-poll wait the server honours (shorter ones are raised to this)."""
    _create_topic: Any = field(repr=False)
    _create_group: Any = field(repr=False)
    _create_lite_group: Any = field(repr=False, default=None)

    @property
    def real(self) -> bool:
        return self.name != "embedded"

    def topic(self, kind: str = "NORMAL", *, queues: int = 4, prefix: str = "t") -> str:
        """A new topic of `kind` (NORMAL, FIFO, DELAY, TRANSACTION), created and routable."""
        name = unique(prefix)
        self._create_topic(name, kind.upper(), queues)
        return name

    def group(self, *, fifo: bool = False, max_attempts: int | None = None, prefix: str = "g") -> str:
        """A new consumer group (`fifo`: ordered delivery; `max_attempts` before the DLQ)."""
        name = unique(prefix)
        self._create_group(name, fifo, max_attempts)
        return name

    def lite_group(
        self,
        bind_topic: str,
        *,
        fifo: bool = False,
        quota: int | None = None,
        exclusive: bool = False,
        prefix: str = "lg",
    ) -> str:
        """A new lite consumer group of LITE topic `bind_topic` (`quota`: lite topics per client;
        `exclusive`: one client of the group per lite topic)."""
        name = unique(prefix)
        self._create_lite_group(name, bind_topic, fifo, quota, exclusive)
        return name


def real_engine(info: ClusterInfo, name: str = "rocketmq") -> Engine:
    admin = RemotingAdmin(info.brokers)

    def create_topic(name: str, kind: str, queues: int) -> None:
        admin.create_topic(name, kind, queues=queues)
        wait_routable(info.endpoint, name, deadline=time.monotonic() + 30)

    def create_group(name: str, fifo: bool, max_attempts: int | None) -> None:
        admin.create_group(name, fifo=fifo, max_attempts=max_attempts)

    def create_lite_group(name: str, bind_topic: str, fifo: bool, quota: int | None, exclusive: bool) -> None:
        admin.create_group(
            name, fifo=fifo, lite_bind_topic=bind_topic, lite_quota=quota, lite_exclusive=exclusive
        )

    # apache/rocketmq proxy ProxyConfig: minInvisibleTimeMillsForRecv 10 s,
    # grpcClientConsumerMinLongPollingTimeoutMillis 5 s (the harness keeps both defaults).
    return Engine(name, info.endpoint, 10.0, 5.0, create_topic, create_group, create_lite_group)


class EmbeddedInThread(ServerThread):
    """The embedded server on its own loop thread (`thrust.testing.ServerThread`), shared by a whole
    session, as strict as the proxy about unknown topics (no auto-create)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(auto_create=False, **options)

    def engine(self) -> Engine:
        catalog = self.server.catalog

        def create_topic(name: str, kind: str, queues: int) -> None:
            self.call(catalog.create_topic, name, queues, (MessageType[kind],))

        def create_group(name: str, fifo: bool, max_attempts: int | None) -> None:
            retry = (
                GroupRetryPolicy() if max_attempts is None else GroupRetryPolicy(max_attempts=max_attempts)
            )
            self.call(catalog.create_group, name, fifo=fifo, retry=retry)

        def create_lite_group(
            name: str, bind_topic: str, fifo: bool, quota: int | None, exclusive: bool
        ) -> None:
            # Bound like upstream's; the embedded server also lets an unbound group consume lite topics
            # (upstream refuses a group without `lite.bind.topic`, D18).
            self.call(
                catalog.create_group,
                name,
                fifo=fifo,
                lite_quota=quota,
                lite_exclusive=exclusive,
                lite_bind_topic=bind_topic,
            )

        return Engine(
            "embedded", self.server.endpoints[0], 10.0, 5.0, create_topic, create_group, create_lite_group
        )
