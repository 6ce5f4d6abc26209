"""Session fixtures shared by the suites: the two servers under test.

`engine` is parametrised: a test that takes it runs once against thrust's embedded server and once
against a real Apache RocketMQ (tests/engines.py). `rocketmq` and `rocketmq2` are the real cluster's
connection details, one broker (local mode) and two brokers (cluster mode).

Lite topics need RocketMQ 5.5 (`LITE_VERSION`), which the suite runs beside 5.4 for them alone:
`rocketmq55` is a cluster-mode proxy with one broker serving lite topics (`thrust cluster --lite
--brokers 1`), and `lite_engine` runs a lite test against the embedded server, then against it. Tests
that reach it are marked `real55` (not `real`): `make test` runs them in a step of their own, inside
`thrust cluster --lite`.

The real clusters are the ones `thrust cluster --mode both --exec` started for this run (`make test`
does), read from $THRUST_ROCKETMQ; without it, this session starts its own, once per pytest process
(Java 17 and Maven are required: without them the tests fail and say what to install; they never skip).

$THRUST_TEST_LOOP=uvloop runs every loop the tests make (`asyncio.run`, the sync client's and the
embedded server's loop threads) on uvloop, through the event loop policy; `make pytest` runs the client
suites so once (docs/benchmarks.md, "uvloop"). tests/client/test_loop_choice.py checks that it takes effect.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator

import pytest

from tests.engines import EmbeddedInThread, Engine, real_engine
from thrust.cluster import (
    LITE_VERSION,
    STANDARD_GROUPS,
    STANDARD_TOPICS,
    ClusterInfo,
    RocketMQCluster,
    attach_from_env,
)


def pytest_configure(config: pytest.Config) -> None:
    loop = os.environ.get("THRUST_TEST_LOOP", "asyncio")
    if loop == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    elif loop != "asyncio":
        raise pytest.UsageError(f"THRUST_TEST_LOOP={loop!r}: expected asyncio or uvloop")


def _cluster(mode: str) -> Iterator[ClusterInfo]:
    attached = attach_from_env(mode)
    if attached is not None:
        yield attached
        return
    # The set `thrust cluster` creates with mqadmin, as under `make test`.
    with RocketMQCluster(mode, topics=STANDARD_TOPICS, groups=STANDARD_GROUPS) as cluster:  # type: ignore[arg-type]
        yield cluster.info


@pytest.fixture(scope="session")
def rocketmq() -> Iterator[ClusterInfo]:
    """A real RocketMQ: namesrv and a local-mode proxy with one broker inside."""
    yield from _cluster("local")


@pytest.fixture(scope="session")
def rocketmq2() -> Iterator[ClusterInfo]:
    """A real RocketMQ with two brokers (`broker-a`, `broker-b`) behind a cluster-mode proxy."""
    yield from _cluster("cluster")


@pytest.fixture(scope="session")
def embedded_engine() -> Iterator[Engine]:
    server = EmbeddedInThread()
    try:
        yield server.engine()
    finally:
        server.close()


@pytest.fixture(scope="session", params=["embedded", "rocketmq"])
def engine(request: pytest.FixtureRequest) -> Engine:
    """The server under test: thrust's embedded server, then a real Apache RocketMQ proxy."""
    if request.param == "embedded":
        embedded: Engine = request.getfixturevalue("embedded_engine")
        return embedded
    info: ClusterInfo = request.getfixturevalue("rocketmq")
    return real_engine(info)


@pytest.fixture(scope="session")
def rocketmq55() -> Iterator[ClusterInfo]:
    """A real RocketMQ 5.5 serving lite topics: namesrv, one broker, a cluster-mode proxy."""
    attached = attach_from_env("cluster", lite=True)
    if attached is not None:
        yield attached
        return
    with RocketMQCluster("cluster", version=LITE_VERSION, lite=True, brokers=1) as cluster:
        yield cluster.info


@pytest.fixture(scope="session", params=["embedded", "rocketmq55"])
def lite_engine(request: pytest.FixtureRequest) -> Engine:
    """The server under test for lite topics: the embedded server, then a real RocketMQ 5.5."""
    if request.param == "embedded":
        embedded: Engine = request.getfixturevalue("embedded_engine")
        return embedded
    info: ClusterInfo = request.getfixturevalue("rocketmq55")
    return real_engine(info, "rocketmq55")


_REAL = frozenset({"rocketmq", "rocketmq2"})
_REAL55 = frozenset({"rocketmq55"})
# Modules whose every test reaches the real clusters through `request.getfixturevalue`.
_REAL_MODULES = frozenset({"test_differential.py"})
_REAL55_MODULES = frozenset({"test_differential_lite.py"})


def _needs(item: pytest.Item, fixtures: frozenset[str], modules: frozenset[str]) -> bool:
    if fixtures & set(getattr(item, "fixturenames", ())) or item.path.name in modules:
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and any(v in fixtures for v in callspec.params.values() if isinstance(v, str))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _needs(item, _REAL, _REAL_MODULES):
            # `-m real` selects what needs a real cluster: `make test` runs it as a phase of its own,
            # with the clusters up only then (their JVMs burn CPU even when idle, which the timing-bound
            # reliability tests of the other phase must not share on two cores).
            item.add_marker(pytest.mark.real)
        elif _needs(item, _REAL55, _REAL55_MODULES):
            # The 5.5 lite cluster is another step's (`-m real55`), started alone.
            item.add_marker(pytest.mark.real55)
        else:
            continue
        # Starting a real cluster in a session fixture takes 30-100 s on two busy cores (when pytest runs
        # without `thrust cluster --exec`); the per-test timeout is for the test, not for that start-up,
        # which has its own deadline (RocketMQCluster.startup_timeout).
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(func_only=True))


@pytest.fixture(scope="session")
def embedded_engine2() -> Iterator[Engine]:
    server = EmbeddedInThread(brokers=2)
    try:
        yield server.engine()
    finally:
        server.close()


@pytest.fixture(scope="session", params=["embedded2", "rocketmq2"])
def engine2(request: pytest.FixtureRequest) -> Engine:
    """Two brokers: the embedded server with `brokers=2`, then broker-a and broker-b behind a real
    cluster-mode proxy."""
    if request.param == "embedded2":
        embedded: Engine = request.getfixturevalue("embedded_engine2")
        return embedded
    info: ClusterInfo = request.getfixturevalue("rocketmq2")
    return real_engine(info)
