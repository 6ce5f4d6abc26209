"""`thrust perf` connects as `thrust send` / `thrust consume` do (`ClientConfig.from_env`): an exported
`ROCKETMQ_ENDPOINTS` is the cluster it measures (not a silently started embedded server), the secret of
`--access-key` may come from `ROCKETMQ_SECRET_KEY`, and `--json` says which server was measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engines import Engine
from thrust.cli import perf as perf_cli
from thrust.cli.main import build_parser
from thrust.testing import ServerThread

REPO = Path(__file__).resolve().parents[2]


def _args(*argv: str) -> object:
    return build_parser().parse_args(["perf", *argv])


def test_an_exported_endpoint_is_the_cluster_measured_unless_server_is_given() -> None:
    env = {"ROCKETMQ_ENDPOINTS": "10.0.0.1:8081", "ROCKETMQ_NAMESPACE": "ns"}
    o = perf_cli.options_from_args(_args("produce"), env)
    assert (o.server, o.endpoints, o.namespace) == ("endpoints", "10.0.0.1:8081", "ns")
    assert o.config is not None and o.config.endpoints == "10.0.0.1:8081"
    # the flags win over the environment
    o = perf_cli.options_from_args(_args("produce", "--endpoints", "10.0.0.2:8081", "--namespace", "n2"), env)
    assert (o.server, o.endpoints, o.namespace) == ("endpoints", "10.0.0.2:8081", "n2")
    # --server asks for a server of perf's own
    assert perf_cli.target(_args("produce", "--server", "embedded"), env) == "embedded"
    assert perf_cli.target(_args("produce"), {}) == "embedded"
    # a server perf starts ignores the exported connection, so --queues is its own again
    assert (
        perf_cli.options_from_args(_args("produce", "--server", "embedded", "--queues", "2"), env).endpoints
        == ""
    )
    with pytest.raises(perf_cli.UsageError, match="--queues"):
        perf_cli.options_from_args(_args("produce", "--queues", "2"), env)


def test_the_secret_of_access_key_comes_from_the_environment() -> None:
    env = {"ROCKETMQ_SECRET_KEY": "sk"}
    # a server perf starts gets it in its environment
    args = _args("produce", "--access-key", "ak")
    assert perf_cli.options_from_args(args, env).secret_key == "sk"
    assert perf_cli.server_env(args, env) == {"THRUST_SECRET_KEY": "sk"}
    # an existing cluster: the flag's access key with the environment's secret
    o = perf_cli.options_from_args(
        _args("produce", "--endpoints", "10.0.0.1:8081", "--access-key", "ak"), env
    )
    assert o.config.credentials.access_key == "ak" and o.config.credentials.secret_key == "sk"
    # both from the environment
    o = perf_cli.options_from_args(
        _args("produce"),
        {"ROCKETMQ_ENDPOINTS": "10.0.0.1:8081", "ROCKETMQ_ACCESS_KEY": "a2", "ROCKETMQ_SECRET_KEY": "s2"},
    )
    assert o.config.credentials.access_key == "a2" and o.config.credentials.secret_key == "s2"
    with pytest.raises(perf_cli.UsageError, match="needs a secret"):
        perf_cli.options_from_args(_args("produce", "--access-key", "ak"), {})


def _perf(tmp_path: Path, env: dict[str, str], *argv: str) -> tuple[subprocess.CompletedProcess[str], dict]:  # type: ignore[type-arg]
    out = tmp_path / "perf.json"
    base = {k: v for k, v in os.environ.items() if not k.startswith("ROCKETMQ_")}
    done = subprocess.run(
        [sys.executable, "-m", "thrust.cli.main", "perf", *argv, "--interval", "1", "--json", str(out)],
        env={**base, "PYTHONPATH": str(REPO / "src"), **env},
        capture_output=True,
        text=True,
        timeout=80,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done, json.loads(out.read_text())


def test_perf_measures_the_exported_endpoint_with_the_exported_credentials(tmp_path: Path) -> None:
    with ServerThread(topics=["bench"], credentials={"ak": "sk"}, auto_create=False) as server:
        env = {
            "ROCKETMQ_ENDPOINTS": server.endpoint,
            "ROCKETMQ_ACCESS_KEY": "ak",
            "ROCKETMQ_SECRET_KEY": "sk",
        }
        done, data = _perf(tmp_path, env, "produce", "-t", "bench", "--count", "30", "--warmup", "0")
        sends = server.stats.entries["SendMessage"]
    assert data["produce"]["total"] == 30 and data["produce"]["errors"] == 0
    assert sends == 30  # they reached this server, signed
    assert data["server"] == data["options"]["server"] == "endpoints"
    assert data["endpoints"] == data["options"]["endpoints"] == server.endpoint
    assert "sk" not in json.dumps(data["options"])
    assert f"existing cluster at {server.endpoint} ($ROCKETMQ_ENDPOINTS)" in done.stderr


@pytest.mark.slow
def test_perf_e2e_on_the_exported_endpoint(engine: Engine, tmp_path: Path) -> None:
    topic, group = engine.topic(), engine.group()
    env = {"ROCKETMQ_ENDPOINTS": engine.endpoint}
    _, data = _perf(tmp_path, env, "e2e", "-t", topic, "-g", group, "--count", "50", "--rate", "100")
    assert data["server"] == "endpoints" and data["endpoints"] == engine.endpoint
    assert data["sent_ok"] == 50 and data["received_unique"] == 50


def test_perf_json_names_the_server_of_endpoints(tmp_path: Path) -> None:
    with ServerThread(topics=["bench"], auto_create=False) as server:
        _, data = _perf(
            tmp_path, {}, "produce", "--endpoints", server.endpoint, "-t", "bench", "--count", "5"
        )
    assert data["server"] == data["options"]["server"] == "endpoints"
    assert data["endpoints"] == server.endpoint
