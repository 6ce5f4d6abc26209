"""`thrust bench --client official` keeps the official client's venv in the user's cache, never the cwd."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from thrust.bench import scenarios


def _built_venv(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run `official_python()` with subprocess faked: the venv directory it would build."""
    calls: list[list[str]] = []

    def fake_run(cmd: list[str], *args: Any, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append([str(c) for c in cmd])
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(scenarios.subprocess, "run", fake_run)
    python = Path(scenarios.official_python())
    venv_calls = [c for c in calls if c[1:3] == ["-m", "venv"]]
    assert len(venv_calls) == 1 and Path(venv_calls[0][3]) == python.parent.parent
    return python.parent.parent


@pytest.fixture
def cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    work = tmp_path / "project"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv("THRUST_INTEROP_VENV", raising=False)
    return work


def test_the_venv_goes_under_xdg_cache_home(
    cwd: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    venv = _built_venv(monkeypatch)
    py = f"py{sys.version_info.major}.{sys.version_info.minor}"
    assert venv == tmp_path / "xdg" / "thrust" / "official-client" / f"rocketmq-python-client-5.1.2-{py}"
    assert venv.parent.is_dir()  # created, so `python -m venv` can make the last level
    assert not venv.is_relative_to(cwd) and list(cwd.iterdir()) == []


@pytest.mark.parametrize("xdg", [None, "", "relative/cache"])
def test_without_a_usable_xdg_cache_home_the_venv_goes_under_home_cache(
    cwd: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, xdg: str | None
) -> None:
    if xdg is None:
        monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_CACHE_HOME", xdg)  # the XDG spec: a relative path is ignored
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    venv = _built_venv(monkeypatch)
    assert venv.parent == tmp_path / "home" / ".cache" / "thrust" / "official-client"
    assert list(cwd.iterdir()) == []


def test_thrust_interop_venv_still_wins(cwd: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THRUST_INTEROP_VENV", str(tmp_path / "shared-venv"))
    assert scenarios.official_venv_dir() == tmp_path / "shared-venv"
    assert _built_venv(monkeypatch) == tmp_path / "shared-venv"
