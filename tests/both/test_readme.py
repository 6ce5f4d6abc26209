"""The README's Python runs unchanged against both servers, once its topics and groups exist.

Only the endpoint and the names are swapped (the servers are shared by the whole session): a real
cluster needs the topic and the consumer groups created first, which the README says.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import thrust
from tests.engines import Engine

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks(heading: str) -> list[str]:
    """The ```python blocks of the README section `## <heading>`, in order."""
    text = README.read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end != -1 else len(text)]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert blocks, f"the README section {heading!r} has no python block"
    return blocks


def run_block(code: str, replacements: dict[str, str]) -> list[str]:
    """Exec `code` with `replacements` applied (each must occur); the lines it printed."""
    for old, new in replacements.items():
        assert old in code, old
        code = code.replace(old, new)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    return out.getvalue().splitlines()


def test_readme_quickstart_and_push_consumer(engine: Engine) -> None:
    quickstart, push = python_blocks("Quickstart")
    names = {
        "127.0.0.1:8081": engine.endpoint,
        '"orders"': f'"{engine.topic()}"',
        '"billing"': f'"{engine.group()}"',
    }
    lines = run_block(quickstart, names)
    # The message id the producer printed, then the body the new group received.
    assert len(lines) == 2 and len(lines[0]) == 34 and lines[1] == "b'hello'", lines
    # Another group of the same topic gets the same message pushed to its listener.
    push_names = {k: v for k, v in names.items() if k != '"billing"'}
    # Bounded here (the README waits for as long as it takes), so a miss fails the test with a TimeoutError.
    bounded = {"await first.wait()": "await asyncio.wait_for(first.wait(), 50)"}
    pushed = run_block(push, {**push_names, '"shipping"': f'"{engine.group()}"', **bounded})
    assert pushed == ["b'hello'"], pushed


def test_readme_sync_facade(engine: Engine) -> None:
    [block] = python_blocks("Plain threaded code: `thrust.sync`")
    lines = run_block(
        block,
        {
            "127.0.0.1:8081": engine.endpoint,
            '"orders"': f'"{engine.topic()}"',
            '"billing"': f'"{engine.group()}"',
        },
    )
    assert lines == ["b'hello from a thread'"], lines


def test_readme_real_cluster_config() -> None:
    # Builds a config and a producer without connecting (start() or `async with` connects): checks that
    # the names and keywords the README shows exist.
    [block] = python_blocks("Against a real RocketMQ 5 cluster")
    scope: dict[str, object] = {"__name__": "readme"}
    exec(compile(block, "README.md", "exec"), scope)
    config = scope["config"]
    assert isinstance(config, thrust.ClientConfig)
    assert config.namespace == "prod" and config.tls is not None and config.credentials is not None
    assert isinstance(scope["producer"], thrust.Producer)


def test_readme_keeps_the_two_commands_for_contributors() -> None:
    text = README.read_text()
    section = text[text.index("\n## Developing thrust\n") :]
    assert "make run" in section and "make test" in section
    # Users first: the contributors' section comes after install and quickstart.
    order = [text.index(f"\n## {heading}\n") for heading in ("Install", "Quickstart", "Developing thrust")]
    assert order == sorted(order), order
