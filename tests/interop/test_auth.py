"""Official client with AK/SK credentials (MQv2-HMAC-SHA1 signatures) against a server with auth on."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.interop.harness import run, run_driver
from thrust.testing import embedded_server

pytestmark = pytest.mark.interop


@pytest.mark.timeout(60, func_only=True)
def test_signed_requests_accepted_and_wrong_secret_rejected(official_python: Path, tmp_path: Path) -> None:
    """Embedded only: the session's real cluster runs without authentication (the harness enables no
    ACL), so there is nothing to sign against; this checks the embedded server's `credentials`."""
    bodies = ["a0", "a1", "a2"]

    async def scenario() -> None:
        async with embedded_server(
            topics=["it-auth:1"], groups=["it-auth-g"], credentials={"it-ak": "it-sk"}
        ) as srv:
            ep = srv.endpoints[0]
            good = {"endpoints": ep, "ak": "it-ak", "sk": "it-sk"}
            producer, consumer, intruder = await asyncio.gather(
                run_driver(
                    "producer",
                    {
                        **good,
                        "topics": ["it-auth"],
                        "messages": [{"topic": "it-auth", "body": b} for b in bodies],
                    },
                    home=tmp_path / "producer",
                    within=30,
                ),
                run_driver(
                    "simple_consumer",
                    {
                        **good,
                        "group": "it-auth-g",
                        "subscriptions": {"it-auth": "*"},
                        "expect": 3,
                        "drain": False,
                    },
                    home=tmp_path / "consumer",
                    within=45,
                ),
                run_driver(
                    "producer",
                    {
                        "endpoints": ep,
                        "ak": "it-ak",
                        "sk": "wrong",
                        "topics": ["it-auth"],
                        "messages": [{"topic": "it-auth", "body": "intruder"}],
                    },
                    home=tmp_path / "intruder",
                    within=30,
                ),
            )
            producer.check()
            consumer.check()
            assert sorted(e["body"] for e in consumer.of("received")) == bodies, consumer.describe()
            assert set(consumer.ids("acked")) == set(producer.ids("sent"))

            # A bad signature fails the send (the client sees UNAUTHORIZED); nothing is stored.
            assert intruder.of("sent") == [] and intruder.of("error"), intruder.describe()
            assert "40100" in intruder.stderr, intruder.describe()  # Code.UNAUTHORIZED from QueryRoute
            assert "intruder" not in {m.body.decode() for m in srv.brokers[0].messages("it-auth")}

    run(scenario(), timeout=55)
