"""`--group NAME[:fifo][:max-attempts=N]` (thrust serve, ServerProcess, embedded_server): a group's max
delivery attempts, so that the dead-letter queue is reachable without hours of the default backoff."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

import thrust
from tests.client._util import run
from thrust.server.config import parse_group
from thrust.server.core.model import GroupRetryPolicy
from thrust.testing import GroupSpec, ServerProcess, embedded_server


def test_group_spec_options() -> None:
    assert parse_group("g") == GroupSpec("g")
    assert parse_group("g:fifo") == GroupSpec("g", fifo=True)
    assert parse_group("g:max-attempts=2") == GroupSpec("g", retry=GroupRetryPolicy(max_attempts=2))
    both = GroupSpec("g", fifo=True, retry=GroupRetryPolicy(max_attempts=3))
    assert parse_group("g:fifo:max-attempts=3") == both
    assert parse_group("g:max-attempts=3:fifo") == both


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("g:max-attempts=0", "max-attempts must be an integer >= 1, got '0'"),
        ("g:max-attempts=-1", "max-attempts must be an integer >= 1, got '-1'"),
        ("g:max-attempts=two", "max-attempts must be an integer >= 1, got 'two'"),
        ("g:max-attempts=", "max-attempts must be an integer >= 1, got ''"),
        (
            "g:max-attempts",
            "unknown option 'max-attempts' (expected fifo, max-attempts=N, lite-exclusive, lite-quota=N "
            "or lite=PARENT)",
        ),
        (
            "g:retries=3",
            "unknown option 'retries=3' (expected fifo, max-attempts=N, lite-exclusive, lite-quota=N "
            "or lite=PARENT)",
        ),
        ("g:fifo=1", "unknown option 'fifo=1'"),
        ("g:fifo:fifo", "option 'fifo' given twice"),
        (":fifo", "the group name is empty"),
    ],
)
def test_group_spec_errors_say_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match="group spec") as info:
        parse_group(spec)
    assert message in str(info.value)
    assert repr(spec) in str(info.value)


@pytest.mark.slow
def test_serve_refuses_a_bad_max_attempts_before_binding() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "thrust.cli.main", "serve", "--port", "0", "--group", "g:max-attempts=x"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "max-attempts must be an integer >= 1, got 'x'" in result.stderr
    assert "listening on" not in result.stdout
    # ServerProcess checks its specs before starting a child.
    with pytest.raises(ValueError, match="unknown option 'bogus'"):
        ServerProcess(groups=["g:bogus"])


async def _nack_twice_then_read_dead_letters(endpoint: str) -> tuple[str, list[int], list[str]]:
    """Send one message to `t`, receive and nack it (ChangeInvisibleDuration 0) twice as group `g`, then
    read `%DLQ%g`: (the sent id, the delivery attempts seen, the ids found in the dead-letter queue)."""
    async with thrust.Producer(endpoints=endpoint, topics=["t"]) as producer:
        sent = (await producer.send(thrust.Message(topic="t", body=b"poison"))).message_id
    attempts: list[int] = []
    async with thrust.SimpleConsumer(
        endpoints=endpoint, group="g", subscriptions={"t": "*"}, await_duration=5
    ) as consumer:
        for _ in range(2):
            got: list[thrust.ReceivedMessage] = []
            while not got:
                got = await consumer.receive(32, invisible_duration=30)
            assert [m.message_id for m in got] == [sent]
            attempts.append(got[0].delivery_attempt)
            await consumer.change_invisible_duration(got[0], 0)
    # The DLQ topic is created by the first dead letter (upstream does the same); the server moves the
    # message when its invisibility (0 s) ends on its loop timer, so a consumer started a moment too
    # early finds no topic yet.
    for _ in range(50):
        try:
            async with thrust.SimpleConsumer(
                endpoints=endpoint, group="dlqreader", subscriptions={"%DLQ%g": "*"}, await_duration=5
            ) as dlq:
                for _ in range(3):
                    dead = await dlq.receive(32, invisible_duration=30)
                    if dead:
                        return sent, attempts, [m.message_id for m in dead]
                return sent, attempts, []
        except thrust.NotFoundError:
            # A polling loop's step: the same helper reads a server in another process (`thrust
            # serve`), where no in-process counter says the dead-letter topic exists.
            await asyncio.sleep(0.05)
    raise AssertionError("%DLQ%g never appeared")


def test_embedded_server_group_with_max_attempts_2_dead_letters_after_two_nacks() -> None:
    async def scenario() -> None:
        async with embedded_server(
            topics=["t"], groups=["g:max-attempts=2", "dlqreader"], auto_create=False
        ) as srv:
            assert srv.catalog.group("g").retry.max_attempts == 2
            sent, attempts, dead = await _nack_twice_then_read_dead_letters(srv.endpoints[0])
            assert attempts == [1, 2]
            assert dead == [sent]
            assert srv.stats.entries["ChangeInvisibleDuration"] == 2

    run(scenario)


@pytest.mark.slow
def test_server_process_group_with_max_attempts_2_dead_letters_after_two_nacks() -> None:
    # Through the child's command line: `thrust serve --topic t --group g:max-attempts=2`.
    with ServerProcess(topics=["t"], groups=["g:max-attempts=2"]) as proc:
        assert "--group" in proc.command() and "g:max-attempts=2" in proc.command()
        sent, attempts, dead = run(lambda: _nack_twice_then_read_dead_letters(proc.endpoints[0]))
    assert attempts == [1, 2]
    assert dead == [sent]
