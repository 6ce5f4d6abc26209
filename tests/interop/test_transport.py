"""Official client over TLS, and against `thrust serve` in a separate process."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path

import pytest

from tests.interop.harness import once_each, run, run_driver
from tests.support import self_signed
from thrust.testing import ServerProcess, embedded_server

pytestmark = pytest.mark.interop


@pytest.mark.timeout(60, func_only=True)
def test_tls(official_python: Path, tmp_path: Path) -> None:
    """Embedded only: it serves a per-test certificate (`tls_cert`) the client is told to trust. The
    session's real proxy accepts TLS on its port only with a self-signed certificate it makes in memory
    at start (`ProxyConfig.tlsTestModeEnable`, `ProxyAndTlsProtocolNegotiator`), which no client can be
    given as a trust root."""
    cert, key = self_signed(
        "thrust interop", dns=["localhost"], ips=["127.0.0.1"], ca=True, valid=datetime.timedelta(hours=1)
    )
    roots = tmp_path / "roots.pem"
    roots.write_bytes(cert)
    # grpc.ssl_channel_credentials() (what the client uses) reads its trust roots from this variable.
    env = {"GRPC_DEFAULT_SSL_ROOTS_FILE_PATH": str(roots)}
    bodies = ["tls-0", "tls-1", "tls-2"]

    async def scenario() -> None:
        async with embedded_server(
            topics=["it-tls:1"], groups=["it-tls-g"], tls_cert=cert, tls_key=key
        ) as srv:
            ep = srv.endpoints[0]
            producer, consumer = await asyncio.gather(
                run_driver(
                    "producer",
                    {
                        "endpoints": ep,
                        "tls": True,
                        "topics": ["it-tls"],
                        "messages": [{"topic": "it-tls", "body": b} for b in bodies],
                    },
                    home=tmp_path / "producer",
                    within=30,
                    env=env,
                ),
                run_driver(
                    "simple_consumer",
                    {
                        "endpoints": ep,
                        "tls": True,
                        "group": "it-tls-g",
                        "subscriptions": {"it-tls": "*"},
                        "expect": len(bodies),
                        "drain": False,
                    },
                    home=tmp_path / "consumer",
                    within=45,
                    env=env,
                ),
            )
            producer.check()
            consumer.check()
            assert sorted(e["body"] for e in consumer.of("received")) == bodies, consumer.describe()
            assert set(consumer.ids("acked")) == set(producer.ids("sent"))

    run(scenario(), timeout=55)


@pytest.mark.timeout(60, func_only=True)
def test_against_thrust_serve_process(official_python: Path, tmp_path: Path) -> None:
    """Embedded only by nature: this checks `thrust serve` as a separate process (the real proxy is
    always one)."""
    bodies = [f"proc-{i}" for i in range(10)]

    async def scenario() -> None:
        with ServerProcess(["--topic", "it-proc:2", "--group", "it-proc-g"]) as proc:
            ep = proc.endpoints[0]
            consumer, producer = await asyncio.gather(
                run_driver(
                    "push_consumer",
                    {
                        "endpoints": ep,
                        "group": "it-proc-g",
                        "topic": "it-proc",
                        "expect_ok": len(bodies),
                        "max_attempts": 1,
                        "deadline_s": 30,
                        "settle_s": 1,
                    },
                    home=tmp_path / "consumer",
                    within=45,
                ),
                run_driver(
                    "producer",
                    {
                        "endpoints": ep,
                        "topics": ["it-proc"],
                        "messages": [{"topic": "it-proc", "body": b} for b in bodies],
                    },
                    home=tmp_path / "producer",
                    within=30,
                ),
            )
            producer.check()
            consumer.check()
            calls = consumer.of("consumed")
            assert {e["id"] for e in calls} == set(producer.ids("sent")), consumer.describe()
            assert once_each([e["id"] for e in calls]) == {}, consumer.describe()
            assert all(e["result"] == "SUCCESS" and e["attempt"] == 1 for e in calls)

    run(scenario(), timeout=55)
