"""The README's quickstart runs unchanged against both servers, once its topic and group exist.

Only the endpoint and the names are swapped (the servers are shared by the whole session): a real
cluster needs the topic and the consumer group created first, which the README says.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from tests.engines import Engine

README = Path(__file__).resolve().parents[2] / "README.md"


def quickstart() -> str:
    text = README.read_text()
    section = text[text.index("## Using the client") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README has no python quickstart"
    return match.group(1)


def test_readme_quickstart(engine: Engine) -> None:
    topic, group = engine.topic(), engine.group()
    code = quickstart()
    for old, new in (
        ("127.0.0.1:8081", engine.endpoint),
        ('"orders"', f'"{topic}"'),
        ('"billing"', f'"{group}"'),
    ):
        assert old in code, old
        code = code.replace(old, new)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    lines = out.getvalue().split()
    # The message id the producer printed, then the body the new group received.
    assert len(lines) == 2 and len(lines[0]) == 34 and lines[1] == "b'hello'", out.getvalue()
