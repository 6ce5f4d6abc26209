"""`mypy --strict` on a user's program: the public API is fully typed, none of it is Any.

tests/typing/user_program.py uses Producer, SimpleConsumer, PushConsumer and the thrust.sync facade with
`assert_type` on what they return (an Any fails assert_type); tests/typing/user_mistakes.py makes mistakes,
each marked `# expect: <code>`, that mypy must report, and exactly those. Both failed before
`thrust.PushConsumer` was declared for type checkers (it came from `thrust.__getattr__`, typed Any) and
before `thrust.sync.PushConsumer` named its keyword parameters (it took `**options: Any`).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PROGRAMS = (HERE / "user_program.py", HERE / "user_mistakes.py")
ERROR = re.compile(r"^(?P<file>[^:\n]+):(?P<line>\d+): error: .*\[(?P<code>[a-z-]+)\]$", re.M)
EXPECT = re.compile(r"# expect: (?P<code>[a-z-]+)\s*$")


def expected_errors() -> set[tuple[str, int, str]]:
    found = set()
    for path in PROGRAMS:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if match := EXPECT.search(line):
                found.add((path.name, number, match["code"]))
    return found


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_mypy_strict_on_a_users_program(tmp_path: Path) -> None:
    expected = expected_errors()
    assert len(expected) >= 10, expected
    # A config of its own (run outside the repo, so pyproject.toml's mypy settings do not apply): what a
    # user gets with `strict = true`, thrust found as an installed package (py.typed).
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\nstrict = True\nshow_error_codes = True\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(config),
            "--cache-dir",
            str(tmp_path / "cache"),
            *map(str, PROGRAMS),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=220,
        check=False,
    )
    got = {(Path(m["file"]).name, int(m["line"]), m["code"]) for m in ERROR.finditer(proc.stdout)}
    assert got == expected, (
        f"missing: {sorted(expected - got)}\nunexpected: {sorted(got - expected)}\n{proc.stdout}{proc.stderr}"
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
