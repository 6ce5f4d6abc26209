"""The Java client's driver for `thrust bench --client java`: built by Maven on first use, cached.

The sources (`java/pom.xml`, `java/src/main/java/thrust/bench/BenchDriver.java`, shipped with the
package) are copied into `$XDG_CACHE_HOME/thrust/java-driver/<hash of the sources>` (`~/.cache` when
XDG_CACHE_HOME is unset or not absolute) and compiled there with `mvn compile`, which also writes the
runtime classpath (`maven-dependency-plugin:build-classpath`); the jars stay in Maven's own repository.
Nothing built is committed. A marker written last makes a half-finished build count as absent, and a
file lock lets one process build while others wait (pytest workers, a person's shell).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Final

__all__ = ["JAVA_CLIENT_VERSION", "JavaDriverError", "build_java_driver", "java_driver_dir"]

_SOURCES: Final = Path(__file__).with_name("java")
_MAIN: Final = "thrust.bench.BenchDriver"
_MARKER: Final = ".complete"
JAVA_CLIENT_VERSION: Final = "5.2.0"
"""org.apache.rocketmq:rocketmq-client-java, as pinned in java/pom.xml (checked by the tests)."""


class JavaDriverError(RuntimeError):
    """Java or Maven is missing, or the build failed (Maven's output's tail is in the message)."""


def _files() -> list[Path]:
    return sorted(p for p in _SOURCES.rglob("*") if p.is_file() and p.suffix in (".xml", ".java"))


def _digest() -> str:
    h = hashlib.sha256()
    for path in _files():
        h.update(str(path.relative_to(_SOURCES)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def java_driver_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "thrust" / "java-driver" / _digest()


def build_java_driver(*, timeout: float = 900.0) -> list[str]:
    """The command prefix that runs the driver (`java ... thrust.bench.BenchDriver`), built first if
    needed; append `key=value` arguments."""
    java = shutil.which("java")
    mvn = shutil.which("mvn")
    if java is None or mvn is None:
        raise JavaDriverError("the Java client's driver needs java (17+) and mvn on PATH")
    home = java_driver_dir()
    if not (home / _MARKER).exists():
        home.mkdir(parents=True, exist_ok=True)
        with open(home / ".lock", "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            if not (home / _MARKER).exists():
                _build(home, mvn, timeout)
    classpath = f"{home / 'target' / 'classes'}:{(home / 'classpath.txt').read_text().strip()}"
    return [java, "-Xms64m", "-Xmx512m", "-cp", classpath, _MAIN]


def _build(home: Path, mvn: str, timeout: float) -> None:
    for path in _files():
        target = home / path.relative_to(_SOURCES)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    try:
        done = subprocess.run(
            [mvn, "-B", "-q", "-f", str(home / "pom.xml"), "compile"],
            cwd=home,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise JavaDriverError(f"mvn did not build the Java driver within {timeout:.0f} s") from exc
    if done.returncode != 0 or not (home / "classpath.txt").exists():
        tail = (done.stdout + done.stderr)[-3000:]
        raise JavaDriverError(
            f"mvn could not build the Java driver in {home} (exit {done.returncode}):\n{tail}"
        )
    (home / _MARKER).write_text(JAVA_CLIENT_VERSION + "\n")
