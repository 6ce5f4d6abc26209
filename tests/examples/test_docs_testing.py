"""docs/testing.md's asyncio example runs as shown under plain pytest: no pytest-asyncio or anyio plugin,
warnings as errors, in a directory of its own (so none of this repository's configuration applies)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def _section_block(heading: str) -> str:
    text = DOC.read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    [block, *_] = re.findall(r"```python\n(.*?)```", text[start:end], re.S)
    return block


@pytest.mark.slow
def test_the_asyncio_example_passes_under_plain_pytest(tmp_path: Path) -> None:
    (tmp_path / "test_order_flow.py").write_text(_section_block("In-process, in an asyncio test"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "ROCKETMQ_"))}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error", "test_order_flow.py"],
        cwd=tmp_path,
        env={**env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},  # plain pytest: no plugin of this venv
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
