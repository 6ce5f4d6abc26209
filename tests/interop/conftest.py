"""Interop tests: the official rocketmq-python-client (own venv) against thrust's embedded server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.official_client import ensure_venv


@pytest.fixture(scope="session")
def official_python() -> Path:
    # Built once per session (bounded by official_client.BUILD_TIMEOUT per step). Tests mark their
    # timeouts func_only so a cold build from PyPI does not count against the scenario's budget.
    return ensure_venv()
