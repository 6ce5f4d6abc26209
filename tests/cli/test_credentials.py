"""`thrust send` / `thrust consume` credentials: a flag wins over its variable, and the other half of the
pair may come from the environment (as the `--access-key` help recommends for the secret)."""

from __future__ import annotations

import json

import pytest

from thrust.cli.main import main
from thrust.testing import ServerThread


def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ENDPOINTS", "ACCESS_KEY", "SECRET_KEY", "SESSION_TOKEN"):
        monkeypatch.delenv(f"ROCKETMQ_{name}", raising=False)


def test_access_key_flag_with_the_secret_in_the_environment_sends_and_consumes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _clean_env(monkeypatch)
    monkeypatch.setenv("ROCKETMQ_SECRET_KEY", "SK")
    with ServerThread(topics=["cred-t"], groups=["cred-g"], credentials={"AK": "SK"}) as srv:
        auth = ["--endpoints", srv.endpoint, "--access-key", "AK"]
        assert main(["send", *auth, "-t", "cred-t", "signed"]) == 0, capsys.readouterr().err
        capsys.readouterr()
        code = main(["consume", *auth, "-t", "cred-t", "-g", "cred-g", "-c", "1", "--idle", "10"])
        out = capsys.readouterr()
        assert code == 0, out.err
        assert [json.loads(line)["body"] for line in out.out.splitlines()] == ["signed"]
        # The secret flag with the access key in the environment works too.
        monkeypatch.delenv("ROCKETMQ_SECRET_KEY")
        monkeypatch.setenv("ROCKETMQ_ACCESS_KEY", "AK")
        argv = ["send", "--endpoints", srv.endpoint, "--secret-key", "SK", "-t", "cred-t", "again"]
        assert main(argv) == 0, capsys.readouterr().err


def test_an_access_key_without_any_secret_is_a_usage_error_naming_the_secret(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _clean_env(monkeypatch)
    assert main(["send", "--endpoints", "127.0.0.1:1", "--access-key", "AK", "-t", "t", "x"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == "thrust send: error: an access key needs its secret key: set --secret-key or $ROCKETMQ_SECRET_KEY"
    )
