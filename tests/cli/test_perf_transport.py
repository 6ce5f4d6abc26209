"""`thrust perf --transport auto|native|grpcio`: the flag goes into the clients' config (it wins over
`$THRUST_TRANSPORT`, which decides only "auto"), the transport each side used is printed and written in
`--json`, and native without thrust-native installed is a usage error (exit 2, one line) before any server
starts."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import thrust._io.native as native_module
from thrust.bench.perf import _client_kwargs
from thrust.cli.main import build_parser
from thrust.cli.perf import UsageError, options_from_args

REPO = Path(__file__).resolve().parents[2]

# `sys.modules[name] = None` makes `import thrust_native` raise ImportError, as on an install without the
# native extra (tests/cli/test_missing_extra.py does the same for the other extras).
_WITHOUT_NATIVE = """
import sys
sys.modules["thrust_native"] = None
from thrust.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["perf", *argv])


def test_the_flag_defaults_to_auto_and_takes_the_three_choices() -> None:
    assert options_from_args(_args("e2e")).transport == "auto"
    for choice in ("auto", "native", "grpcio"):
        assert options_from_args(_args("produce", "--transport", choice)).transport == choice
    with pytest.raises(SystemExit):
        _args("produce", "--transport", "rust")


@pytest.mark.parametrize("choice", ["native", "grpcio"])
def test_the_flag_goes_into_the_clients_config_not_only_the_environment(choice: str) -> None:
    other = "grpcio" if choice == "native" else "native"
    # the embedded server's clients: the transport is one of the client keywords
    options = options_from_args(_args("e2e", "--transport", choice), {"THRUST_TRANSPORT": other})
    assert _client_kwargs(options)["transport"] == choice
    # an existing cluster's: in the `ClientConfig` built from the environment and the flags
    options = options_from_args(
        _args("e2e", "--endpoints", "127.0.0.1:1", "--transport", choice), {"THRUST_TRANSPORT": other}
    )
    assert options.config is not None and options.config.transport == choice
    assert _client_kwargs(options)["config"].transport == choice


def test_native_without_thrust_native_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native_module, "_native", None)
    with pytest.raises(UsageError, match=r"--transport native: .*pip install 'thrust\[native\]'"):
        options_from_args(_args("e2e", "--transport", "native"))
    monkeypatch.delenv("THRUST_TRANSPORT", raising=False)
    assert options_from_args(_args("e2e", "--transport", "auto")).transport == "auto"  # grpcio then
    # "auto" with $THRUST_TRANSPORT naming a transport that cannot be had, or none at all
    monkeypatch.setenv("THRUST_TRANSPORT", "native")
    with pytest.raises(UsageError, match=r"--transport auto: .*thrust-native"):
        options_from_args(_args("e2e"))
    monkeypatch.setenv("THRUST_TRANSPORT", "rust")
    with pytest.raises(UsageError, match=r"--transport auto: \$THRUST_TRANSPORT must be one of"):
        options_from_args(_args("e2e"))


def test_native_without_thrust_native_exits_2_with_one_line(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    env.pop("THRUST_TRANSPORT", None)
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_NATIVE, "perf", "e2e", "--count", "10", "--transport", "native"],
        capture_output=True, text=True, timeout=50, cwd=str(tmp_path), env=env, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # no traceback, and no server was started (it would say so)
    assert lines[0].startswith("thrust perf: error: --transport native: ")
    assert "pip install 'thrust[native]'" in lines[0]
    assert done.stdout == ""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flag", "environment", "expected"),
    [
        # the flag wins over $THRUST_TRANSPORT: it is in the config, not in the environment
        ("grpcio", "native", "grpcio"),
        ("native", "grpcio", "native"),
        # auto (the default) takes $THRUST_TRANSPORT
        (None, "grpcio", "grpcio"),
        (None, "native", "native"),
    ],
)
def test_perf_e2e_reports_the_transport_each_side_used(
    tmp_path: Path, flag: str | None, environment: str, expected: str
) -> None:
    out_json = tmp_path / "perf.json"
    argv = ["perf", "e2e", "--count", "200", "--rate", "400", "--size", "64", "--queues", "2"]
    argv += ["--interval", "1", "--warmup", "0", "--json", str(out_json)]
    if flag is not None:
        argv += ["--transport", flag]
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"), THRUST_TRANSPORT=environment)
    proc = subprocess.run(
        [sys.executable, "-m", "thrust.cli.main", *argv],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out_json.read_text())
    assert data["transport"] == {"produce": expected, "consume": expected}
    assert data["options"]["transport"] == (flag or "auto")
    assert data["produce"]["extra"]["transport"] == expected
    assert data["consume"]["extra"]["transport"] == expected
    assert data["sent_ok"] == 200 and data["received_unique"] == 200
    # the header line of each side, before its first interval, and its summary line
    assert f"Transport (produce): {expected} --- 1 producer(s)" in proc.stdout
    assert f"Transport (consume): {expected} --- push consumer" in proc.stdout
    summaries = [line for line in proc.stdout.splitlines() if line.startswith("Aggregated throughput")]
    assert len(summaries) == 2 and all(f"--- transport {expected}" in line for line in summaries)


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["grpcio", "native"])
def test_perf_produce_and_a_simple_consumer_report_their_transport(tmp_path: Path, transport: str) -> None:
    out_json = tmp_path / "perf.json"
    env = dict(os.environ, PYTHONPATH=str(REPO / "src"))
    env.pop("THRUST_TRANSPORT", None)
    proc = subprocess.run(
        [
            sys.executable, "-m", "thrust.cli.main", "perf", "e2e", "--consumer", "simple", "--count", "100",
            "--rate", "400", "--size", "64", "--queues", "2", "--interval", "1", "--warmup", "0",
            "--transport", transport, "--json", str(out_json),
        ],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out_json.read_text())
    assert data["transport"] == {"produce": transport, "consume": transport}
    assert f"Transport (consume): {transport} --- simple consumer" in proc.stdout
