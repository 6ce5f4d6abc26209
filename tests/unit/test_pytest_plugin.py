"""The `thrust_server` fixture, as an application's test suite gets it: a separate pytest process that
finds the plugin through the installed `pytest11` entry point (no conftest, no `-p`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

APP_TESTS = """
import asyncio

import pytest

import thrust
import thrust.sync


def test_sync_round_trip(thrust_server):
    with thrust.sync.Producer(endpoints=thrust_server.endpoint, topics=["orders"]) as producer:
        receipt = producer.send(thrust.Message(topic="orders", body=b"one"))
    with thrust.sync.SimpleConsumer(
        endpoints=thrust_server.endpoint, group="billing", subscriptions={"orders": "*"}, await_duration=1
    ) as consumer:
        [m] = consumer.receive(8)
        m.ack()
    assert m.message_id == receipt.message_id and m.body == b"one"
    assert thrust_server.stats.calls["AckMessage"] == 1


def test_each_test_gets_a_fresh_server(thrust_server):
    assert thrust_server.stats.calls["SendMessage"] == 0


@pytest.mark.thrust_server(topics=["strict:2:FIFO"], groups=["g:fifo"], auto_create=False, brokers=2)
def test_marker_options_and_faults(thrust_server):
    assert len(thrust_server.endpoints) == 2
    thrust_server.call(thrust_server.faults.fail_next, "SendMessage", "TOO_MANY_REQUESTS")

    async def scenario():
        async with thrust.Producer(endpoints=thrust_server.endpoint, topics=["strict"]) as p:
            receipt = await p.send(thrust.Message(topic="strict", body=b"x", message_group="a"))
        with pytest.raises(thrust.NotFoundError):
            async with thrust.Producer(endpoints=thrust_server.endpoint, topics=["unknown"]):
                pass
        return receipt

    assert asyncio.run(scenario()).message_id
    assert thrust_server.stats.calls["SendMessage"] == 2  # the refused one was retried
"""


@pytest.mark.slow
def test_thrust_server_fixture_from_the_installed_plugin(tmp_path: Path) -> None:
    (tmp_path / "test_app.py").write_text(APP_TESTS)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout, done.stdout
