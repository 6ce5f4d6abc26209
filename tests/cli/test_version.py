"""`thrust.__version__` comes from the package metadata, `thrust --version` prints it, and
`python -m thrust` is the `thrust` command."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import thrust

REPO = Path(__file__).resolve().parents[2]


def test_version_is_the_installed_metadata_and_pyproject_version() -> None:
    declared = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert thrust.__version__ == importlib.metadata.version("thrust") == declared


def test_thrust_dash_dash_version() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "thrust.cli.main", "--version"], capture_output=True, text=True, timeout=50
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"thrust {thrust.__version__}"


def test_python_dash_m_thrust_is_the_thrust_command() -> None:
    """`python -m thrust` runs the same CLI (for a venv whose bin/ is not on PATH)."""
    done = subprocess.run(
        [sys.executable, "-m", "thrust", "--version"], capture_output=True, text=True, timeout=50
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"thrust {thrust.__version__}"
    usage = subprocess.run(
        [sys.executable, "-m", "thrust", "--help"], capture_output=True, text=True, timeout=50
    )
    assert usage.returncode == 0, usage.stderr
    assert "serve" in usage.stdout and "perf" in usage.stdout
