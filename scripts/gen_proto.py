"""Regenerate (or, with --check, verify) the protobuf and gRPC modules under src/thrust/_proto.

The .proto sources live at src/thrust/_proto/apache/rocketmq/v2/. Two rewrites follow protoc:

- imports: protoc writes `from apache.rocketmq.v2 import definition_pb2`; we rewrite them to the package
  path so the generated modules never need `apache` on sys.path.
- the descriptor pool: protoc registers every file in protobuf's process-wide default pool. The official
  `rocketmq-python-client` registers the same messages there too (`apache.rocketmq.v2.*`, from a file named
  `definition.proto`), so whichever of the two is imported second fails with "duplicate symbol". A
  different *file* name does not help (ours is already `apache/rocketmq/v2/definition.proto`): the default
  pool refuses a second definition of a full name from any file. So our modules register in a pool of
  their own, `thrust._proto.POOL`. Full names, and so the wire (the gRPC method paths
  `/apache.rocketmq.v2.MessagingService/*` are literal strings in the _grpc module), stay as upstream's.

protoc comes from grpcio-tools GRPCIO_TOOLS, deliberately old: protoc 25 (protobuf 4.25) writes modules
that carry no runtime version check, and grpcio-tools 1.62 writes a _grpc module with no grpcio version
check, so the modules load on every protobuf and grpcio that pyproject.toml allows (`make compat` runs the
floor and the newest). Newer protoc writes `ValidateProtobufRuntimeVersion(7, 35, ...)`, which refuses
any older runtime. grpcio-tools pins protobuf<5, so it lives in a venv of its own (built on first use under
`$XDG_CACHE_HOME/thrust/protoc/`), never in the project's venv.

`--check` generates into a temporary folder and fails if any committed file differs
(tests/conformance/test_generated_fresh.py runs it).
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "src" / "thrust" / "_proto"
PROTO_DIR = PROTO_ROOT / "apache" / "rocketmq" / "v2"
PACKAGE = "thrust._proto.apache.rocketmq.v2"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")
GRPCIO_TOOLS = "grpcio-tools==1.62.3"

# What protoc 25 writes, and what it becomes. Each must match exactly once per _pb2.py, so that a protoc
# writing something else fails here instead of silently registering in the default pool again.
_POOL_IMPORT = "from google.protobuf import descriptor_pool as _descriptor_pool\n"
_POOL_ADD = "DESCRIPTOR = _descriptor_pool.Default().AddSerializedFile("
_OWN_POOL_IMPORT = "from thrust._proto import POOL as _thrust_pool\n"
_OWN_POOL_ADD = "DESCRIPTOR = _thrust_pool.AddSerializedFile("


def _tools_python() -> Path:
    """The python of the venv that holds GRPCIO_TOOLS, built on first use."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    name = f"{GRPCIO_TOOLS.replace('==', '-')}-py{sys.version_info.major}.{sys.version_info.minor}"
    venv = base / "thrust" / "protoc" / name
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import grpc_tools.protoc"]
    if python.exists() and subprocess.run(probe, capture_output=True, check=False).returncode == 0:
        return python
    if venv.exists():
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    # Built aside and renamed into place, so a concurrent or interrupted build never leaves half a venv.
    staging = Path(tempfile.mkdtemp(prefix=f"{name}.", dir=venv.parent))
    try:
        subprocess.run([sys.executable, "-m", "venv", str(staging)], check=True)
        pip = [str(staging / "bin" / "python"), "-m", "pip", "install", "--quiet"]
        subprocess.run([*pip, "--disable-pip-version-check", GRPCIO_TOOLS], check=True)
        # Only `bin/python -m ...` is ever run from it, which works from the renamed folder (a venv finds
        # its prefix from the pyvenv.cfg beside its interpreter).
        try:
            staging.rename(venv)
        except OSError:  # another process won the race
            pass
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return python


def _own_pool(text: str, name: str) -> str:
    for old, new in ((_POOL_IMPORT, _OWN_POOL_IMPORT), (_POOL_ADD, _OWN_POOL_ADD)):
        if text.count(old) != 1:
            raise SystemExit(f"{name}: expected one {old.strip()!r} from protoc; update scripts/gen_proto.py")
        text = text.replace(old, new)
    return text


def _generate(out_root: Path) -> list[Path]:
    sources = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_DIR.glob("*.proto"))
    python = _tools_python()
    well_known = subprocess.run(
        [str(python), "-c", "import grpc_tools, os; print(os.path.dirname(grpc_tools.__file__))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    args = [
        "-m",
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}/_proto",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *sources,
    ]
    if subprocess.run([str(python), *args], check=False).returncode != 0:
        raise SystemExit("protoc failed")
    produced = sorted(
        p for p in (out_root / "apache" / "rocketmq" / "v2").iterdir() if p.name.endswith(GENERATED_SUFFIXES)
    )
    for path in produced:
        text = path.read_text()
        text = re.sub(r"^from apache\.rocketmq\.v2 import", f"from {PACKAGE} import", text, flags=re.M)
        if path.name.endswith("_pb2.py"):
            text = _own_pool(text, path.name)
        path.write_text(text)
    return produced


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the committed modules are stale")
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        produced = _generate(Path(tmp))
        stale: list[str] = []
        for path in produced:
            target = PROTO_DIR / path.name
            new = path.read_text()
            if ns.check:
                old = target.read_text() if target.exists() else ""
                if old != new:
                    stale.append(path.name)
                    diff = difflib.unified_diff(
                        old.splitlines(), new.splitlines(), "committed", "fresh", lineterm=""
                    )
                    sys.stdout.write("\n".join(list(diff)[:40]) + "\n")
            else:
                shutil.copyfile(path, target)
        if ns.check:
            expected = {p.name for p in produced}
            extra = [
                p.name
                for p in PROTO_DIR.iterdir()
                if p.name.endswith(GENERATED_SUFFIXES) and p.name not in expected
            ]
            stale.extend(extra)
            if stale:
                print("stale generated modules:", ", ".join(stale), "- run `make proto`")
                return 1
            print("generated modules are fresh")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
