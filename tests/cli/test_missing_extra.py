"""`thrust perf` without an extra it needs: one line naming it (`pip install 'thrust[cli]'` for HdrHistogram,
`'thrust[plot]'` for matplotlib, `'thrust[uvloop]'` for `--loop uvloop` of perf, bench and serve), exit
code 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

# `sys.modules[name] = None` makes `import name` raise ModuleNotFoundError(name=name), as on an install
# without the extra.
_SCRIPT = """
import sys
sys.modules[sys.argv[1]] = None
from thrust.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize(
    ("missing", "extra", "args"),
    [
        ("hdrh", "cli", ["perf", "produce", "--endpoints", "127.0.0.1:1", "--count", "1"]),
        (
            "matplotlib",
            "plot",
            ["perf", "produce", "--endpoints", "127.0.0.1:1", "--count", "1", "--plot", "x.png"],
        ),
        ("uvloop", "uvloop", ["perf", "produce", "--endpoints", "127.0.0.1:1", "--loop", "uvloop"]),
        ("uvloop", "uvloop", ["perf", "e2e", "--count", "1", "--server-loop", "uvloop"]),
        ("uvloop", "uvloop", ["bench", "--scenarios", "produce", "--loop", "uvloop"]),
        ("uvloop", "uvloop", ["serve", "--port", "0", "--loop", "uvloop"]),
    ],
)
def test_a_missing_optional_module_names_the_extra(
    missing: str, extra: str, args: list[str], tmp_path: object
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, missing, *args],
        capture_output=True,
        text=True,
        timeout=50,
        cwd=str(tmp_path),
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"pip install 'thrust[{extra}]'" in lines[0] and repr(missing) in lines[0]
    assert lines[0].startswith(f"thrust {args[0]}: ")


def test_an_unrelated_missing_module_still_raises() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, "thrust.bench.perf", "perf", "produce", "--endpoints", "x:1"],
        capture_output=True,
        text=True,
        timeout=50,
    )
    assert done.returncode == 1 and "ModuleNotFoundError" in done.stderr
