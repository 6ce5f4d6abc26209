"""`python -m build` makes an sdist and a wheel that work on their own.

From a copy of the source tree (a build writes egg-info and build/ beside the sources), `python -m build`
makes the sdist and then the wheel from that sdist, as a release would. The sdist must carry LICENSE,
NOTICE, the .proto sources, the generated modules' .pyi and py.typed; the wheel too, and the extras. The
wheel then goes into a fresh venv (its dependencies from PyPI), which runs `thrust serve` and a round trip
through every client (scripts/roundtrip.py) with nothing of the source tree on its path.
"""

from __future__ import annotations

import email
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Beside the sources but not part of them (and large): never copied into the build tree.
NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv", ".compat", ".interop-venv", "__pycache__", "*.egg-info", "build", "dist", ".*_cache"
)
IN_BOTH = (
    "thrust/py.typed",
    "thrust/_proto/apache/rocketmq/v2/definition.proto",
    "thrust/_proto/apache/rocketmq/v2/service.proto",
    "thrust/_proto/apache/rocketmq/v2/definition_pb2.pyi",
    "thrust/_proto/apache/rocketmq/v2/service_pb2.pyi",
    "thrust/_proto/apache/rocketmq/v2/service_pb2_grpc.py",
)


def _run(
    cmd: list[str], *, cwd: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, cwd=cwd, timeout=timeout)
    assert proc.returncode == 0, (
        f"{cmd} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_built_wheel_serves_and_round_trips_in_a_fresh_venv(tmp_path: Path) -> None:
    tree, dist, venv = tmp_path / "tree", tmp_path / "dist", tmp_path / "venv"
    shutil.copytree(REPO, tree, ignore=NOT_SOURCES)
    _run([sys.executable, "-m", "build", "--outdir", str(dist), str(tree)], timeout=400)
    [sdist] = dist.glob("thrust-*.tar.gz")
    [wheel] = dist.glob("thrust-*-py3-none-any.whl")

    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/")[0]
        names = {n.removeprefix(f"{top}/") for n in tar.getnames()}
    for name in ("LICENSE", "NOTICE", "README.md", "pyproject.toml", *(f"src/{n}" for n in IN_BOTH)):
        assert name in names, f"{name} missing from the sdist: {sorted(names)}"

    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        [metadata_name] = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = email.message_from_bytes(whl.read(metadata_name))
    info = metadata_name.rsplit("/", 1)[0]
    for name in (*IN_BOTH, f"{info}/licenses/LICENSE", f"{info}/licenses/NOTICE", f"{info}/entry_points.txt"):
        assert name in names, f"{name} missing from the wheel: {sorted(names)}"
    assert not any(n.startswith(("tests/", "scripts/")) for n in names), sorted(names)
    assert metadata["License-Expression"] == "Apache-2.0"
    assert set(metadata.get_all("Provides-Extra") or []) >= {"cli", "plot", "uvloop"}
    requires = metadata.get_all("Requires-Dist") or []
    # The runtime needs only the wire and the codec; everything else is behind an extra.
    assert sorted(r.split(">")[0].split("<")[0] for r in requires if "extra ==" not in r) == [
        "grpcio",
        "protobuf",
    ]

    _run([sys.executable, "-m", "venv", str(venv)], timeout=120)
    python = str(venv / "bin" / "python")
    _run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)], timeout=400)
    where = _run(
        [python, "-c", "import thrust, sys; print(thrust.__file__); print(thrust.__version__)"], cwd=tmp_path
    ).stdout.split()
    assert where[0].startswith(str(venv)) and where[1] == metadata["Version"], where
    assert _run([str(venv / "bin" / "thrust"), "--version"]).stdout.strip() == f"thrust {metadata['Version']}"
    done = _run([python, str(REPO / "scripts" / "roundtrip.py")], cwd=tmp_path, timeout=120)
    assert "roundtrip ok" in done.stdout, done.stdout
