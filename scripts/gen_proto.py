"""Regenerate (or, with --check, verify) the protobuf and gRPC modules under src/thrust/_proto.

The .proto sources live at src/thrust/_proto/apache/rocketmq/v2/. protoc writes imports as
`from apache.rocketmq.v2 import definition_pb2`; we rewrite them to the package path so the
generated modules never need `apache` on sys.path. `--check` generates into a temporary folder
and fails if any committed file differs (tests/conformance/test_generated_fresh.py runs it).
"""

from __future__ import annotations

import argparse
import difflib
import re
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "src" / "thrust" / "_proto"
PROTO_DIR = PROTO_ROOT / "apache" / "rocketmq" / "v2"
PACKAGE = "thrust._proto.apache.rocketmq.v2"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def _generate(out_root: Path) -> list[Path]:
    import grpc_tools
    from grpc_tools import protoc  # dev extra only

    well_known = Path(grpc_tools.__file__).parent / "_proto"
    sources = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_DIR.glob("*.proto"))
    args = [
        "protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *sources,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    produced = sorted(
        p for p in (out_root / "apache" / "rocketmq" / "v2").iterdir() if p.name.endswith(GENERATED_SUFFIXES)
    )
    for path in produced:
        text = path.read_text()
        text = re.sub(r"^from apache\.rocketmq\.v2 import", f"from {PACKAGE} import", text, flags=re.M)
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
