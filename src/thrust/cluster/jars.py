"""Fetch Apache RocketMQ's jars from Maven Central, once per version, into a cache outside the work tree.

The version is pinned here and nowhere else. A throwaway `packaging=pom` project lists the four server
artifacts (namesrv, broker, proxy, tools); `maven-dependency-plugin:copy-dependencies` puts them and
their dependencies (~150 jars, ~100 MB) into `<cache>/<version>/lib`. A marker file written last makes
a half-finished download count as absent, so the next run starts it again.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Final

__all__ = [
    "LITE_VERSION",
    "MAVEN_DEPENDENCY_PLUGIN",
    "ROCKETMQ_VERSION",
    "JarsError",
    "cache_root",
    "fetch_jars",
    "require",
    "supports_lite",
]

ROCKETMQ_VERSION: Final = os.environ.get("THRUST_ROCKETMQ_VERSION") or "5.4.0"
"""The Apache RocketMQ release the harness runs ($THRUST_ROCKETMQ_VERSION overrides it).

5.4.0, not the newest 5.5.0: 5.5.0's broker spins one core for good after the first transaction
(`TransactionalOpBatchService`: `batchSendOpMessage` returns 0 once any op context is idle with an old
`lastWriteTimestamp`, so `waitForRunning(0)`; apache/rocketmq#10966, fix in #10967, open). On a two-core
test machine that halves the CPU of everything after the transaction tests. thrust itself works against
5.5.0 too (`THRUST_ROCKETMQ_VERSION=5.5.0 make test`; docs/interop-findings.md).
"""

LITE_VERSION: Final = os.environ.get("THRUST_ROCKETMQ_LITE_VERSION") or "5.5.0"
"""The release the lite-topic suite runs (`thrust cluster --lite`; $THRUST_ROCKETMQ_LITE_VERSION overrides
it): lite topics came with 5.5.0. Only lite tests run on it, none with transactions (see above). 5.5.0,
not 5.5.1: Maven Central serves 5.5.1's broker and store but no rocketmq-proxy 5.5.1."""

MAVEN_DEPENDENCY_PLUGIN: Final = "3.6.1"

ARTIFACTS: Final = ("rocketmq-namesrv", "rocketmq-broker", "rocketmq-proxy", "rocketmq-tools")

_MARKER: Final = ".complete"


def supports_lite(version: str) -> bool:
    """Whether RocketMQ `version` ("5.5.0", "5.6.0-SNAPSHOT") has lite topics: 5.5 and later."""
    parts = []
    for part in version.split("-")[0].split(".")[:2]:
        if not part.isdigit():
            return False
        parts.append(int(part))
    return tuple(parts) >= (5, 5)


class JarsError(RuntimeError):
    """Java or Maven is missing, or Maven could not fetch the jars (its output's tail is in the message)."""


def require(tool: str, hint: str) -> str:
    """The path of `tool` on PATH; `JarsError` naming what to install when it is missing."""
    path = shutil.which(tool)
    if path is None:
        raise JarsError(f"{tool!r} is not on PATH: the real-RocketMQ harness needs it ({hint})")
    return path


def cache_root() -> Path:
    """`$THRUST_ROCKETMQ_CACHE`, else `$XDG_CACHE_HOME/thrust/rocketmq`, else `~/.cache/thrust/rocketmq`."""
    explicit = os.environ.get("THRUST_ROCKETMQ_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "thrust" / "rocketmq"


def _pom(version: str) -> str:
    deps = "\n".join(
        f"    <dependency><groupId>org.apache.rocketmq</groupId><artifactId>{a}</artifactId>"
        f"<version>{version}</version></dependency>"
        for a in ARTIFACTS
    )
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>thrust.harness</groupId>
  <artifactId>rocketmq-jars</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <dependencies>
{deps}
  </dependencies>
  <build><plugins><plugin>
    <groupId>org.apache.maven.plugins</groupId>
    <artifactId>maven-dependency-plugin</artifactId>
    <version>{MAVEN_DEPENDENCY_PLUGIN}</version>
    <executions><execution>
      <id>copy</id><phase>package</phase><goals><goal>copy-dependencies</goal></goals>
      <configuration><outputDirectory>${{outdir}}</outputDirectory></configuration>
    </execution></executions>
  </plugin></plugins></build>
</project>
"""


def fetch_jars(version: str = ROCKETMQ_VERSION, *, timeout: float = 900.0) -> Path:
    """The folder holding every jar of `version`, fetched by Maven on first use.

    Several processes (pytest workers, a person's shell) may call this at once: a file lock lets one
    download while the others wait, then all use the same folder.

    Raises:
        JarsError: java or mvn missing, or Maven failed.
    """
    require("java", "install OpenJDK 17 or newer, e.g. apt-get install openjdk-17-jdk-headless")
    mvn = require("mvn", "install Apache Maven 3.8+, e.g. apt-get install maven")
    home = cache_root() / version
    lib = home / "lib"
    if (home / _MARKER).exists():
        return lib
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "a+") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        if (home / _MARKER).exists():  # another process finished it while we waited
            return lib
        shutil.rmtree(lib, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix="thrust-rmq-pom-") as work:
            (Path(work) / "pom.xml").write_text(_pom(version))
            cmd = [mvn, "-B", "-q", "-f", str(Path(work) / "pom.xml"), f"-Doutdir={lib}", "package"]
            try:
                done = subprocess.run(
                    cmd, cwd=work, capture_output=True, text=True, timeout=timeout, check=False
                )
            except subprocess.TimeoutExpired as exc:
                raise JarsError(f"mvn did not fetch RocketMQ {version} within {timeout:.0f} s") from exc
        if done.returncode != 0:
            tail = (done.stdout + done.stderr)[-3000:]
            raise JarsError(f"mvn could not fetch RocketMQ {version} (exit {done.returncode}):\n{tail}")
        if not any(lib.glob(f"rocketmq-proxy-{version}.jar")):
            raise JarsError(f"mvn finished but {lib} holds no rocketmq-proxy-{version}.jar")
        (home / _MARKER).write_text(version + "\n")
    return lib
