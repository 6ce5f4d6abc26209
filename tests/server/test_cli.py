"""`thrust serve` as a subprocess and thrust.testing.ServerProcess."""

from __future__ import annotations

import subprocess
import sys

import grpc
import pytest

from tests.server._wire import Wire, run
from thrust._codec.status import Code
from thrust._proto.apache.rocketmq.v2 import service_pb2 as s
from thrust.cli import serve
from thrust.cli.main import build_parser
from thrust.server.core.model import MessageType
from thrust.testing import ServerProcess


@pytest.mark.slow
def test_serve_prints_listening_lines_and_exits_cleanly_on_sigterm() -> None:
    with ServerProcess(
        ["--topic", "orders:2:FIFO", "--group", "g:fifo"], brokers=3, auto_create=False
    ) as proc:
        assert len(proc.ports) == 3
        assert len(set(proc.ports)) == 3

        async def check() -> None:
            async with Wire(proc.endpoints[2]) as w:
                route = await w.route("orders")
                assert route.status.code == Code.OK
                assert len({mq.broker.name for mq in route.message_queues}) == 3
                assert (await w.route("unknown")).status.code == Code.TOPIC_NOT_FOUND

        run(check())
        assert proc.terminate() == 0
        log = proc.log_path.read_text()
        assert "stopping" in log


@pytest.mark.slow
def test_server_process_kill_stop_cont_restart() -> None:
    with ServerProcess(["--auto-create"]) as proc:
        port = proc.ports[0]
        proc.stop()

        async def frozen() -> None:
            async with Wire(proc.endpoints[0]) as w:
                with pytest.raises(grpc.aio.AioRpcError) as info:
                    await w.stub.QueryRoute(s.QueryRouteRequest(), metadata=w.md, timeout=0.5)
                assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED

        run(frozen())
        proc.cont()

        async def alive() -> int:
            async with Wire(proc.endpoints[0]) as w:
                return (await w.route("t")).status.code

        assert run(alive()) == Code.OK
        assert proc.kill() == -9
        proc.restart()
        assert proc.ports == [port]
        assert run(alive()) == Code.OK


def test_serve_takes_the_topic_syntax_of_thrust_cluster() -> None:
    parser = build_parser()
    config = serve._config(parser.parse_args(["serve", "--topic", "orders:FIFO", "--topic", "t:2:DELAY"]))
    assert [(t.name, t.queues, t.types) for t in config.topics] == [
        ("orders", 4, (MessageType.FIFO,)),
        ("t", 2, (MessageType.DELAY,)),
    ]


def test_serve_auto_create_covers_topics_and_groups() -> None:
    parser = build_parser()
    strict = serve._config(parser.parse_args(["serve"]))
    assert (strict.auto_create_topics, strict.auto_create_groups) == (False, False)
    auto = serve._config(parser.parse_args(["serve", "--auto-create"]))
    assert (auto.auto_create_topics, auto.auto_create_groups) == (True, True)


@pytest.mark.slow
def test_serve_help_mentions_memory_only_and_refuses_remote_without_auth() -> None:
    parser = build_parser()
    help_text = parser._subparsers._group_actions[0].choices["serve"].format_help()  # type: ignore[union-attr]
    assert "in memory only" in help_text and "NO persistence" in help_text
    result = subprocess.run(
        [sys.executable, "-m", "thrust.cli.main", "serve", "--host", "0.0.0.0", "--port", "0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "non-loopback" in result.stderr
    assert "listening on" not in result.stdout


@pytest.mark.slow
def test_server_process_that_fails_to_start_leaves_nothing_open() -> None:
    """A bad `thrust serve` argument: the constructor raises and closes its log file and temp folder
    (an unclosed file would surface as a ResourceWarning, an error under this suite's settings)."""
    import gc

    import pytest

    from thrust.testing import ServerProcess

    with pytest.raises(Exception):  # noqa: B017 - whatever start() raises, the cleanup must run
        ServerProcess(["--no-such-flag"], startup_timeout=10)
    gc.collect()
