"""`thrust send` / `thrust consume` as a new user meets them: an unknown flag gets the subcommand's usage,
a bad number says what is wrong, a body from stdin loses the newline `echo` added (unless
--keep-newline), `--format text` shows the properties, and `--idle` ends on its own deadline, not after
the server's minimum long poll."""

from __future__ import annotations

import argparse
import io
import json
import sys
import time
from typing import Any

import pytest

from tests.engines import Engine
from tests.support import TIMER_SLACK
from thrust.cli import messages
from thrust.cli.main import main
from thrust.simple_consumer import SimpleConsumer


def _usage_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    assert exited.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "prog", "unknown"),
    [
        (["send", "-t", "x", "--bogus"], "thrust send", "--bogus"),
        (["consume", "-t", "x", "-g", "g", "--bogus", "1"], "thrust consume", "--bogus 1"),
        (["perf", "produce", "--bogus"], "thrust perf produce", "--bogus"),
        (["serve", "--bogus"], "thrust serve", "--bogus"),
    ],
)
def test_an_unknown_flag_shows_the_subcommands_usage(
    capsys: pytest.CaptureFixture[str], argv: list[str], prog: str, unknown: str
) -> None:
    err = _usage_error(capsys, *argv)
    assert err.startswith(f"usage: {prog} "), err
    assert err.rstrip().endswith(f"{prog}: error: unrecognized arguments: {unknown}"), err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["send", "-t", "x", "--delay", "abc", "b"], "argument --delay: 'abc' is not a number of seconds"),
        (
            ["consume", "-t", "x", "-g", "g", "--idle", "soon"],
            "argument --idle: 'soon' is not a number of seconds",
        ),
        (
            ["consume", "-t", "x", "-g", "g", "--count", "two"],
            "argument -c/--count: 'two' is not a whole number",
        ),
        (["send", "-t", "x", "--delay", "-1", "b"], "argument --delay: '-1' is not >= 0"),
        (["perf", "produce", "--rate", "fast"], "argument -r/--rate: 'fast' is not a number"),
    ],
)
def test_a_bad_number_says_what_is_wrong(
    capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    err = _usage_error(capsys, *argv)
    assert words in err and "invalid" not in err, err


def _bodies(data: bytes, *flags: str) -> list[bytes]:
    parser = argparse.ArgumentParser()
    parser.add_argument("body", nargs="?")
    parser.add_argument("--lines", action="store_true")
    parser.add_argument("--keep-newline", action="store_true")
    args = parser.parse_args(list(flags))
    return list(messages._bodies(args, io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline="")))


def test_stdin_loses_one_trailing_newline_unless_kept() -> None:
    assert _bodies(b"hi\n") == [b"hi"]
    assert _bodies(b"hi\r\n") == [b"hi"]
    assert _bodies(b"two\n\n") == [b"two\n"]  # one line end only
    assert _bodies(b"no newline") == [b"no newline"]
    assert _bodies(b"hi\n", "--keep-newline") == [b"hi\n"]
    assert _bodies(b"a\nb\r\n\n", "--lines") == [b"a", b"b"]
    assert _bodies(b"a\nb\r\n\n", "--lines", "--keep-newline") == [b"a\n", b"b\r\n"]
    assert _bodies(b"", "x\n") == [b"x\n"]  # an argument is sent as given


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def _consume(engine: Engine, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    capsys.readouterr()
    code = main(["consume", "--endpoints", engine.endpoint, *extra])
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


def test_echo_into_send_stores_the_text_without_its_newline(
    engine: Engine, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    topic, group = engine.topic(), engine.group()
    _stdin(monkeypatch, b"hi\n")
    assert main(["send", "--endpoints", engine.endpoint, "-t", topic, "--tag", "plain"]) == 0
    _stdin(monkeypatch, b"kept\n")
    argv = ["send", "--endpoints", engine.endpoint, "-t", topic, "--tag", "kept", "--keep-newline"]
    assert main(argv) == 0
    capsys.readouterr()
    lines = _consume(engine, capsys, "-t", topic, "-g", group, "--count", "2").splitlines()
    assert sorted(json.loads(line)["body"] for line in lines) == ["hi", "kept\n"]


def test_text_format_shows_the_properties(engine: Engine, capsys: pytest.CaptureFixture[str]) -> None:
    topic, group = engine.topic(), engine.group()
    argv = ["send", "--endpoints", engine.endpoint, "-t", topic, "--property", "color=red"]
    assert main([*argv, "--property", "note=a b,c=d", "body"]) == 0
    [message_id] = capsys.readouterr().out.split()
    head, body = _consume(
        engine, capsys, "-t", topic, "-g", group, "--count", "1", "--format", "text"
    ).splitlines()
    assert head.startswith(f"{message_id} {topic} ") and body == "body"
    shown = json.loads(head.split(" properties=", 1)[1].rsplit(" attempt=", 1)[0])
    assert {"color": "red", "note": "a b,c=d"}.items() <= shown.items()


def test_idle_ends_at_its_deadline_not_after_the_servers_long_poll(
    engine: Engine, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server holds an empty receive for its 5 s minimum whatever the request asks
    (`engine.min_long_poll`): with --idle 1 the receive in flight is cancelled at the idle deadline, it
    does not come back empty after the server's wait."""
    topic, group = engine.topic(), engine.group()
    outcomes: list[str] = []
    receive = SimpleConsumer.receive

    async def recording(self: SimpleConsumer, *args: Any, **kwargs: Any) -> Any:
        try:
            got = await receive(self, *args, **kwargs)
        except BaseException as exc:
            outcomes.append(type(exc).__name__)
            raise
        outcomes.append("messages" if got else "empty")
        return got

    monkeypatch.setattr(SimpleConsumer, "receive", recording)
    started = time.monotonic()
    assert _consume(engine, capsys, "-t", topic, "-g", group, "--idle", "1") == ""
    assert time.monotonic() - started >= 1.0 - TIMER_SLACK  # --idle 1
    assert outcomes == ["CancelledError"]


@pytest.mark.slow
def test_idle_still_prints_what_arrives(engine: Engine, capsys: pytest.CaptureFixture[str]) -> None:
    topic, group = engine.topic(), engine.group()
    assert main(["send", "--endpoints", engine.endpoint, "-t", topic, "one"]) == 0
    [m] = _consume(engine, capsys, "-t", topic, "-g", group, "--idle", "3").splitlines()
    assert json.loads(m)["body"] == "one"


def test_the_receipt_says_why_it_has_no_queue_id(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["send", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "no queue id: the proxy picks the queue and its answer does not name it" in help_text
