"""`make compat`: thrust on the oldest and on the newest grpcio and protobuf that pyproject.toml allows.

For each of the two it builds a fresh venv under `.compat/` with thrust installed editable (pip resolving
its declared dependencies, so a floor pip cannot satisfy fails here), pins grpcio and protobuf to exactly
the declared floors (read from pyproject.toml, so the floors tested are the floors declared) or lets pip
take the newest, then runs the client tests (tests/unit and tests/client on the embedded server) and
scripts/roundtrip.py (`thrust serve` plus every client). Exits non-zero on the first failure.

    python scripts/compat.py                 # floor, then newest
    python scripts/compat.py --only floor    # one of them
    python scripts/compat.py --workers 2     # pytest-xdist workers (default 4, as `make pytest`)
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".compat"
PINNED = ("grpcio", "protobuf")
# What the client tests need beside thrust (the dev extra's test tools, without the linters; uvloop for
# tests/client/test_loop_choice.py, which checks the loop `make pytest` runs the client suites on).
TEST_TOOLS = ("pytest>=8", "pytest-timeout>=2.3", "pytest-xdist>=3.5", "cryptography>=42", "uvloop>=0.17")
TESTS = ("tests/unit", "tests/client")


def floors() -> dict[str, str]:
    """`name -> version` of the `>=` bound of each PINNED runtime dependency in pyproject.toml."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    found: dict[str, str] = {}
    for dep in deps:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9.]*)(\s*,.*)?", dep)
        if match and match.group(1).lower() in PINNED:
            found[match.group(1).lower()] = match.group(2)
    missing = set(PINNED) - set(found)
    if missing:
        raise SystemExit(f"pyproject.toml declares no >= floor for {sorted(missing)}")
    return found


def step(title: str, cmd: list[str]) -> None:
    print(f"compat: {title}", flush=True)
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"compat: FAILED ({title}): {' '.join(cmd)} exited {proc.returncode}")
    print(f"compat: {title}: ok in {time.monotonic() - started:.0f} s", flush=True)


def run(kind: str, workers: int) -> None:
    venv = WORK / kind
    if venv.exists():
        shutil.rmtree(venv)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    if kind == "floor":
        pins = [f"{name}=={version}" for name, version in floors().items()]
    else:
        pins = [f"{name}" for name in PINNED]
        pip.append("--upgrade")
    step(f"{kind}: install {' '.join(pins)}", [*pip, "-e", ".", *pins, *TEST_TOOLS])
    versions = subprocess.run(
        [
            python,
            "-c",
            "import grpc, google.protobuf as p; print('grpcio', grpc.__version__, 'protobuf', p.__version__)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    print(f"compat: {kind}: {versions}", flush=True)
    if kind == "floor":
        for name, version in floors().items():
            if f"{name} {version}" not in versions:
                raise SystemExit(f"compat: floor venv has {versions}, not {name} {version}")
    pytest = [
        python,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-n",
        "2",
        "-m",
        # Without the native extension (these venvs test the pure-Python install): its own tests are left
        # out, not skipped; every other phase of `make test` runs them.
        "not real and not realfaults and not real55 and not native",
    ]
    step(f"{kind}: client tests ({versions})", [*pytest, *TESTS])
    step(f"{kind}: round trip against thrust serve", [python, "scripts/roundtrip.py"])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", choices=("floor", "newest"), help="run one of the two")
    # Four on two cores, as `make pytest`: the client tests mostly wait (long polls, invisible times).
    parser.add_argument("--workers", type=int, default=4, help="pytest-xdist workers")
    ns = parser.parse_args()
    started = time.monotonic()
    for kind in (ns.only,) if ns.only else ("floor", "newest"):
        run(kind, ns.workers)
    print(f"compat: all ok in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
