"""The official `rocketmq-python-client` in a venv of its own, for conformance and interop tests.

Everything from the official client runs as a subprocess of `<repo>/.interop-venv`, so that its
dependencies (opentelemetry, its own grpcio and protobuf pins) never mix with ours. The two clients can
share one process (thrust's generated modules live in a descriptor pool of their own, thrust._proto);
tests/interop/test_side_by_side.py does exactly that, in this venv with thrust's sources on PYTHONPATH.

The venv is built once and reused while healthy (marker file + import probe); a file lock serialises
parallel test processes (pytest-xdist workers, two concurrent `pytest` runs) building it. pip's own
cache (PIP_CACHE_DIR / ~/.cache/pip) is used, and CI may cache `.interop-venv/` keyed on REQUIREMENT
and the Python version recorded in the marker.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Pinned: the conformance allow-list and the interop drivers are written against this exact release.
PACKAGE = "rocketmq-python-client"
VERSION = "5.1.2"
REQUIREMENT = f"{PACKAGE}=={VERSION}"
VENV = Path(os.environ.get("THRUST_INTEROP_VENV", REPO / ".interop-venv"))
MARKER = VENV / "thrust-interop.json"
# Creating the venv and installing from PyPI; generous because a cold pip cache downloads grpcio etc.
BUILD_TIMEOUT = 600.0

# Imports the official client and checks the installed version; run inside the venv.
_PROBE = (
    "import importlib.metadata as m, sys\n"
    "import rocketmq.grpc_protocol.service_pb2, rocketmq.grpc_protocol.definition_pb2\n"
    "from rocketmq import Producer, SimpleConsumer, PushConsumer, ClientConfiguration\n"
    f"sys.exit(0 if m.version({PACKAGE!r}) == {VERSION!r} else 3)\n"
)


class OfficialClientUnavailable(RuntimeError):
    """The venv could not be built (no network, PyPI down, ...): tests must fail, not skip."""


def _python() -> Path:
    return VENV / "bin" / "python"


def _expected_marker() -> dict[str, str]:
    return {"requirement": REQUIREMENT, "python": sys.version.split()[0], "base": sys.base_prefix}


@contextmanager
def _locked() -> Iterator[None]:
    # The lock lives outside the venv so that rebuilding (rmtree) never deletes a held lock file.
    key = hashlib.sha256(str(VENV.resolve()).encode()).hexdigest()[:16]
    lock_path = Path(tempfile.gettempdir()) / f"thrust-interop-venv-{key}.lock"
    with open(lock_path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _healthy() -> bool:
    if not _python().exists() or not MARKER.exists():
        return False
    try:
        if json.loads(MARKER.read_text()) != _expected_marker():
            return False
    except (OSError, ValueError):
        return False
    return _probe()


def _probe() -> bool:
    probe = subprocess.run([str(_python()), "-c", _PROBE], capture_output=True, timeout=120, check=False)
    return probe.returncode == 0


def _run_build_step(cmd: Sequence[str]) -> None:
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False)
    except subprocess.TimeoutExpired as exc:
        raise OfficialClientUnavailable(f"{' '.join(cmd)} timed out after {BUILD_TIMEOUT}s") from exc
    if proc.returncode != 0:
        raise OfficialClientUnavailable(
            f"{' '.join(cmd)} exited {proc.returncode}\n"
            f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}"
        )


def _build() -> None:
    if VENV.exists():
        shutil.rmtree(VENV)
    _run_build_step([sys.executable, "-m", "venv", str(VENV)])
    _run_build_step(
        [str(_python()), "-m", "pip", "install", "--disable-pip-version-check", "--quiet", REQUIREMENT]
    )
    if not _probe():
        raise OfficialClientUnavailable(f"{REQUIREMENT} installed but the import probe failed")
    # Written last: a marker means a complete, probed install.
    MARKER.write_text(json.dumps(_expected_marker()))


@functools.cache
def ensure_venv() -> Path:
    """Return the python of a healthy official-client venv, building it first if needed."""
    with _locked():
        if not _healthy():
            _build()
    return _python()


def run_official(
    args: Sequence[str], *, timeout: float, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python <args>` in the official-client venv; raises TimeoutExpired after `timeout` seconds."""
    python = ensure_venv()
    full_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    # Unbuffered, so the JSON lines of a driver killed on timeout are not lost in a buffer.
    full_env["PYTHONUNBUFFERED"] = "1"
    if env:
        full_env.update(env)
    return subprocess.run(
        [str(python), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
        cwd=str(cwd or REPO),
        check=False,
    )
