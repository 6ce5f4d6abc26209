"""Every script in examples/ runs, against the embedded server and against a real RocketMQ (`engine`),
as a user would run it: a separate process, configured by the environment the examples document, on a
topic and group of its own. A script exits non-zero when what it shows did not happen."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engines import Engine
from thrust.cluster import ClusterInfo
from thrust.cluster.tls import harness_certificate
from thrust.testing import ServerProcess, ServerThread

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

# script -> (topic type, FIFO consumer group)
SCRIPTS: dict[str, tuple[str, bool]] = {
    "send_normal.py": ("NORMAL", False),
    "fifo.py": ("FIFO", True),
    "delay.py": ("DELAY", False),
    "priority.py": ("PRIORITY", False),
    "transaction.py": ("TRANSACTION", False),
    "batch_send.py": ("NORMAL", False),
    "simple_consumer.py": ("NORMAL", False),
    "push_consumer_sync.py": ("NORMAL", False),
    "push_consumer_async.py": ("NORMAL", False),
    "sync_threads.py": ("NORMAL", False),
    "tls_credentials.py": ("NORMAL", False),
    "otel_prometheus.py": ("NORMAL", False),
}


def test_every_example_is_tested() -> None:
    scripts = {p.name for p in EXAMPLES.glob("*.py")}
    # lite_topics.py needs RocketMQ 5.5 (lite topics); the real engine is 5.4: embedded server only, below.
    assert scripts == {*SCRIPTS, "test_with_thrust_server.py", "lite_topics.py"}


def _run(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ROCKETMQ_")}
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script)],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "script",
    # delay.py waits for its delivery time: the one example over a few seconds.
    [
        pytest.param(s, marks=pytest.mark.slow) if s == "delay.py" else s
        for s in sorted(set(SCRIPTS) - {"tls_credentials.py"})
    ],
)
def test_example(engine: Engine, script: str) -> None:
    kind, fifo = SCRIPTS[script]
    env = {
        "ROCKETMQ_ENDPOINTS": engine.endpoint,
        "TOPIC": engine.topic(kind),
        "GROUP": engine.group(fifo=fifo),
    }
    done = _run(script, env)
    assert done.returncode == 0, f"{script} failed:\n{done.stdout}\n{done.stderr}"
    assert done.stdout.strip(), "the example printed nothing"


@pytest.mark.slow
def test_tls_credentials_example_against_a_tls_server_with_authentication(tmp_path: Path) -> None:
    """The embedded server with TLS and AK/SK (the real proxy of the suite runs without ACLs, so it would
    accept any signature): the example connects, signs, and sends; a wrong secret is refused."""
    made = harness_certificate(tmp_path)
    assert made is not None
    cert, key = made
    with ServerThread(
        tls_cert=cert.read_bytes(), tls_key=key.read_bytes(), credentials={"ak": "sk"}, topics=["orders"]
    ) as server:
        env = {
            "ROCKETMQ_ENDPOINTS": server.endpoint,
            "ROCKETMQ_TLS": "1",
            "ROCKETMQ_TLS_CA_FILE": str(cert),
            "ROCKETMQ_ACCESS_KEY": "ak",
            "ROCKETMQ_SECRET_KEY": "sk",
        }
        done = _run("tls_credentials.py", env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "sent " in done.stdout and "sk" not in done.stdout.replace("ask", "")
        refused = _run("tls_credentials.py", {**env, "ROCKETMQ_SECRET_KEY": "wrong"})
        assert refused.returncode != 0 and "UnauthorizedError" in refused.stderr


def test_tls_credentials_example_against_the_real_proxy_over_tls(rocketmq: ClusterInfo) -> None:
    assert rocketmq.tls_cert is not None
    env = {
        "ROCKETMQ_ENDPOINTS": rocketmq.endpoint,
        "ROCKETMQ_TLS": "1",
        "ROCKETMQ_TLS_CA_FILE": rocketmq.tls_cert,
        "TOPIC": "normal",  # one of the topics `thrust cluster` creates
    }
    done = _run("tls_credentials.py", env)
    assert done.returncode == 0, done.stdout + done.stderr


# How a user runs the pytest example: the documented command, from the repository's root, with pytest
# and thrust but not the plugins of thrust's own test suite (pytest-timeout, whose `timeout` option the
# repository's pyproject.toml sets: under its `filterwarnings = error` an unknown option failed the run).
_PYTEST_ENVIRONMENTS = {
    "without pytest-timeout": (["-p", "no:timeout"], {}),
    "pytest and thrust only": (["-p", "thrust.pytest_plugin"], {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}),
}


@pytest.mark.slow
@pytest.mark.parametrize("environment", sorted(_PYTEST_ENVIRONMENTS))
def test_pytest_example_runs_as_documented_from_the_repository_root(environment: str) -> None:
    script = EXAMPLES / "test_with_thrust_server.py"
    assert "Run: `pytest examples/test_with_thrust_server.py`" in script.read_text()
    flags, extra_env = _PYTEST_ENVIRONMENTS[environment]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "ROCKETMQ_"))}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            *flags,
            "examples/test_with_thrust_server.py",
        ],
        cwd=EXAMPLES.parent,
        env={**env, **extra_env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout + done.stderr


@pytest.mark.slow
def test_priority_example_runs_as_the_examples_readme_says() -> None:
    """examples/README.md's command for priority.py (auto-created topics are never PRIORITY), then the
    script with its default topic and group: the three priorities come back highest first."""
    readme = (EXAMPLES / "README.md").read_text()
    [command] = re.findall(r"`thrust serve ([^`]*)`", readme)
    args = shlex.split(command)
    with ServerProcess(args, auto_create=False) as server:
        done = _run("priority.py", {"ROCKETMQ_ENDPOINTS": server.endpoints[0]})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "('urgent', 3), ('normal', 2), ('routine', 1)" in done.stdout


def test_lite_topics_example_runs_as_the_examples_readme_says() -> None:
    """examples/README.md's server flags for lite_topics.py, then the script with its default topic and
    group: two subscribed sessions in order, the third one never delivered."""
    readme = (EXAMPLES / "README.md").read_text()
    [flags] = re.findall(r"lite_topics.py` needs [^`]*`([^`]*)`", readme)
    with ServerProcess(shlex.split(flags), auto_create=False) as server:
        done = _run("lite_topics.py", {"ROCKETMQ_ENDPOINTS": server.endpoints[0]})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "session-alice ['alice-0', 'alice-1', 'alice-2']" in done.stdout
    assert "subscribed now: ['session-alice']" in done.stdout
