"""`thrust send` and `thrust consume` end to end, against both servers (`engine`): what one prints the
other reads back, every field; bad input and an unreachable server end in one line and a non-zero exit."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.engines import Engine
from thrust.cli.main import main


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def _consume(engine: Engine, capsys: pytest.CaptureFixture[str], *extra: str) -> list[dict[str, Any]]:
    capsys.readouterr()
    code = main(["consume", "--endpoints", engine.endpoint, *extra])
    out = capsys.readouterr()
    assert code == 0, out.err
    return [json.loads(line) for line in out.out.splitlines()]


@pytest.mark.slow
def test_send_with_every_option_then_consume_prints_every_field(
    engine: Engine, capsys: pytest.CaptureFixture[str]
) -> None:
    topic, group = engine.topic(), engine.group()
    code = main(
        [
            "send",
            "--endpoints",
            engine.endpoint,
            "-t",
            topic,
            "--tag",
            "TagA",
            "--key",
            "k1",
            "--key",
            "k2",
            "--property",
            "color=red",
            "--property",
            "eq=a=b",
            "--format",
            "json",
            "hello, thrust",
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    receipt = json.loads(out.out)
    assert receipt["topic"] == topic and len(receipt["message_id"]) > 0

    [m] = _consume(engine, capsys, "-t", topic, "-g", group, "--count", "1")
    assert m["message_id"] == receipt["message_id"]
    assert m["body"] == "hello, thrust" and m["body_encoding"] == "utf-8" and m["body_size"] == 13
    assert m["tag"] == "TagA" and m["keys"] == ["k1", "k2"]
    assert {"color": "red", "eq": "a=b"}.items() <= m["properties"].items()
    assert m["message_type"] == "NORMAL" and m["delivery_attempt"] == 1 and m["topic"] == topic
    assert isinstance(m["born_timestamp"], float) and isinstance(m["queue_offset"], int)
    # Acknowledged after printing: nothing comes back on the next read.
    assert _consume(engine, capsys, "-t", topic, "-g", group, "--idle", "6") == []


def test_lines_from_stdin_one_message_each_and_a_tag_filter(
    engine: Engine, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    topic, group = engine.topic(), engine.group()
    _stdin(monkeypatch, b"one\ntwo\n\nthree\n")
    assert main(["send", "--endpoints", engine.endpoint, "-t", topic, "--tag", "keep", "--lines"]) == 0
    ids = capsys.readouterr().out.split()
    assert len(ids) == 3 and len(set(ids)) == 3
    _stdin(monkeypatch, b"\xff\x00binary")  # not UTF-8: read whole from stdin, printed as base64
    assert main(["send", "--endpoints", engine.endpoint, "-t", topic, "--tag", "drop"]) == 0
    capsys.readouterr()

    got = _consume(engine, capsys, "-t", topic, "-g", group, "--filter", "keep", "--count", "3")
    assert sorted(m["body"] for m in got) == ["one", "three", "two"]
    assert {m["message_id"] for m in got} == set(ids)

    other = engine.group()
    [b] = _consume(engine, capsys, "-t", topic, "-g", other, "--filter", "drop", "--count", "1")
    assert b["body_encoding"] == "base64" and b["body"] == "/wBiaW5hcnk="


@pytest.mark.slow
def test_fifo_group_and_sql_filter_and_no_ack(engine: Engine, capsys: pytest.CaptureFixture[str]) -> None:
    topic, group = engine.topic("FIFO"), engine.group(fifo=True)
    for i in range(3):
        argv = ["send", "--endpoints", engine.endpoint, "-t", topic, "--group", "g1"]
        assert main([*argv, "--property", f"n={i}", f"m{i}"]) == 0
    capsys.readouterr()
    got = _consume(engine, capsys, "-t", topic, "-g", group, "--sql", "--filter", "n >= 1", "--count", "2")
    assert [m["body"] for m in got] == ["m1", "m2"] and {m["message_group"] for m in got} == {"g1"}
    # --no-ack: printed, not acknowledged, so another run of the same group sees it again (after the
    # invisible duration: the proxy's minimum, 10 s, on the real one).
    sql_all = ["-t", topic, "-g", engine.group(fifo=True), "--sql", "--filter", "n = 0"]
    invisible = str(max(engine.min_invisible, 1.0))
    [first] = _consume(engine, capsys, *sql_all, "--count", "1", "--no-ack", "--invisible", invisible)
    [again] = _consume(engine, capsys, *sql_all, "--count", "1")
    assert again["message_id"] == first["message_id"] and again["delivery_attempt"] == 2


@pytest.mark.slow
def test_bad_input_and_an_unreachable_server_end_in_one_line(tmp_path: Path) -> None:
    """Run as a user would (the console script): a bad flag is a usage error (2), a refused or
    unreachable server is one line naming the error type (1), never a traceback."""
    thrust = Path(sys.executable).with_name("thrust")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCKETMQ_")}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(thrust), *argv], capture_output=True, text=True, env=env, timeout=60, check=False
        )

    bad = run("send", "--endpoints", "127.0.0.1:1", "-t", "t", "--property", "novalue", "x")
    assert bad.returncode == 2 and "'novalue' is not KEY=VALUE" in bad.stderr
    missing = run("send", "-t", "t", "x")
    assert missing.returncode == 2
    assert missing.stderr.strip() == (
        "thrust send: error: no endpoints: give --endpoints HOST:PORT or set ROCKETMQ_ENDPOINTS"
    )
    for argv in (("send", "-t", "t", "x"), ("consume", "-t", "t", "-g", "g")):
        down = run(*argv, "--endpoints", "127.0.0.1:1", "--request-timeout", "1")
        assert down.returncode == 1, down
        lines = down.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"thrust {argv[0]}: ConnectionError: "), lines
        assert down.stdout == ""
