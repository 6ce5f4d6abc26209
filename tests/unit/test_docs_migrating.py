"""docs/migrating.md stays true to the code: its Python compiles and every `thrust.` name it cites exists."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "migrating.md"


def test_python_blocks_compile() -> None:
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)
    assert len(blocks) >= 2
    for block in blocks:
        compile(block, str(GUIDE), "exec")


def test_every_thrust_name_cited_exists() -> None:
    names = set(re.findall(r"`(thrust(?:\.[A-Za-z_]\w*)+)", GUIDE.read_text()))
    assert "thrust.sync.PushConsumer" in names and "thrust.ClientConfig.from_env" in names, names
    missing = []
    for name in sorted(names):
        parts = name.split(".")
        # The longest importable module prefix, then attributes.
        for cut in range(len(parts), 0, -1):
            try:
                obj: object = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            break
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            missing.append(name)
    assert not missing, missing
