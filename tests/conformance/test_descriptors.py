"""Our apache.rocketmq.v2 descriptors against the ones shipped in the official Python client wheel.

The peer is `rocketmq-python-client==5.1.2` (docs/protocol.md §1): its generated modules carry the
FileDescriptorProtos protoc built from upstream rocketmq-apis at the time of that release. Both sides are
dumped with the same script (tests/conformance/descriptor_dump.py); theirs runs in the official client's
own venv (tests/official_client.py).

Everything both sides define must be identical (numbers, names, types, type names, labels, proto3
`optional`, real and synthetic oneofs, enum values, RPC shapes, options). Anything defined on one side
only must be listed, with its reason, in ONLY_OURS / ONLY_THEIRS; stale entries fail too.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.descriptor_dump import dump_modules
from tests.official_client import REQUIREMENT, run_official

PACKAGE = "apache.rocketmq.v2"
OUR_MODULES = [f"thrust._proto.{PACKAGE}.definition_pb2", f"thrust._proto.{PACKAGE}.service_pb2"]
THEIR_MODULES = [
    "rocketmq.grpc_protocol.definition_pb2",
    "rocketmq.grpc_protocol.service_pb2",
    "rocketmq.grpc_protocol.admin_pb2",
]
DUMP_SCRIPT = Path(__file__).resolve().parent / "descriptor_dump.py"

# Upstream rocketmq-apis keeps the files at apache/rocketmq/v2/*.proto, which is what the Java client and the
# proxy compile and what gRPC server reflection would report; we use the same names. The wheel's protoc ran
# with `-I apache/rocketmq/v2`, so its file names are flat. File names are not on the wire (only full
# message/service names are), so this is a rename, not a one-sided difference: theirs are mapped to ours.
FILE_NAMES = {
    "definition.proto": "apache/rocketmq/v2/definition.proto",
    "service.proto": "apache/rocketmq/v2/service.proto",
}

_CLIENT_PROPERTIES = (
    "rocketmq-apis #108 added Settings.client_properties (map<string,string> = 9) after the 5.1.2 wheel was "
    "built (docs/protocol.md §4.2); the Java client sends it since 2026-05. An older peer skips field 9 "
    "as unknown."
)

ONLY_OURS: dict[str, str] = {
    f"field .{PACKAGE}.Settings.client_properties": _CLIENT_PROPERTIES,
    f"message .{PACKAGE}.Settings.ClientPropertiesEntry": "the map entry type protoc synthesises for "
    + "Settings.client_properties (see that field)",
    f"enum_value .{PACKAGE}.Code.INVALID_CLIENT_PROPERTIES": "status 40021, added upstream with "
    + "Settings.client_properties for its validation (docs/protocol.md §2.3); an older peer sees an "
    + "unknown Code value and treats it as a generic error",
}

_ADMIN = (
    "admin.proto (a separate service apache.rocketmq.v2.Admin with one RPC, ChangeLogLevel) ships in "
    "the wheel; it is not part of MessagingService, none of the RPCs of docs/protocol.md §2.1 use it, "
    "and thrust defines and serves MessagingService only"
)

ONLY_THEIRS: dict[str, str] = {
    "file admin.proto": _ADMIN,
    f"message .{PACKAGE}.ChangeLogLevelRequest": _ADMIN,
    f"message .{PACKAGE}.ChangeLogLevelResponse": _ADMIN,
    f"service .{PACKAGE}.Admin": _ADMIN,
}


def _diff_attrs(
    what: str, ours: dict[str, Any], theirs: dict[str, Any], skip: tuple[str, ...] = ()
) -> list[str]:
    return [
        f"{what}: {key} ours={ours.get(key)!r} theirs={theirs.get(key)!r}"
        for key in sorted(set(ours) | set(theirs))
        if key not in skip and ours.get(key) != theirs.get(key)
    ]


def _normalise_files(dump: dict[str, Any]) -> dict[str, Any]:
    """Map the wheel's flat file names to ours wherever a file name appears."""
    out = copy.deepcopy(dump)
    out["files"] = {FILE_NAMES.get(name, name): f for name, f in dump["files"].items()}
    for f in out["files"].values():
        f["dependencies"] = [FILE_NAMES.get(d, d) for d in f["dependencies"]]
    for kind in ("messages", "enums", "services"):
        for item in out[kind].values():
            item["file"] = FILE_NAMES.get(item["file"], item["file"])
    return out


def compare(ours: dict[str, Any], theirs: dict[str, Any]) -> tuple[list[str], set[str], set[str]]:
    """Return (mismatches in what both define, keys only ours define, keys only theirs define)."""
    mismatches: list[str] = []
    only_ours: set[str] = set()
    only_theirs: set[str] = set()

    def one_sided(kind: str, a: dict[str, Any], b: dict[str, Any], parent: str = "") -> list[str]:
        only_ours.update(f"{kind} {parent}{k}" for k in set(a) - set(b))
        only_theirs.update(f"{kind} {parent}{k}" for k in set(b) - set(a))
        return sorted(set(a) & set(b))

    for name in one_sided("file", ours["files"], theirs["files"]):
        mismatches += _diff_attrs(f"file {name}", ours["files"][name], theirs["files"][name])

    for name in one_sided("message", ours["messages"], theirs["messages"]):
        a, b = ours["messages"][name], theirs["messages"][name]
        mismatches += _diff_attrs(f"message {name}", a, b, skip=("fields",))
        for field in one_sided("field", a["fields"], b["fields"], f"{name}."):
            mismatches += _diff_attrs(f"field {name}.{field}", a["fields"][field], b["fields"][field])

    for name in one_sided("enum", ours["enums"], theirs["enums"]):
        a, b = ours["enums"][name], theirs["enums"][name]
        mismatches += _diff_attrs(f"enum {name}", a, b, skip=("values",))
        for value in one_sided("enum_value", a["values"], b["values"], f"{name}."):
            mismatches += _diff_attrs(f"enum_value {name}.{value}", a["values"][value], b["values"][value])

    for name in one_sided("service", ours["services"], theirs["services"]):
        a, b = ours["services"][name], theirs["services"][name]
        mismatches += _diff_attrs(f"service {name}", a, b, skip=("methods",))
        for method in one_sided("method", a["methods"], b["methods"], f"{name}."):
            mismatches += _diff_attrs(f"method {name}.{method}", a["methods"][method], b["methods"][method])

    # A type defined on one side only covers its nested types, fields and values.
    def covered(keys: set[str]) -> set[str]:
        roots = {k.split(" ", 1)[1] for k in keys if k.startswith(("message ", "enum ", "service "))}
        return {k for k in keys if not any(k.split(" ", 1)[1].startswith(r + ".") for r in roots)}

    return sorted(mismatches), covered(only_ours), covered(only_theirs)


@pytest.fixture(scope="module")
def ours() -> dict[str, Any]:
    return dump_modules(OUR_MODULES)


@pytest.fixture(scope="module")
def theirs() -> dict[str, Any]:
    proc = run_official([str(DUMP_SCRIPT), *THEIR_MODULES], timeout=120)
    assert proc.returncode == 0, f"descriptor dump in the {REQUIREMENT} venv failed:\n{proc.stderr}"
    dump: dict[str, Any] = json.loads(proc.stdout)
    return _normalise_files(dump)


def test_our_file_names_package_and_options(ours: dict[str, Any]) -> None:
    assert set(ours["files"]) == {"apache/rocketmq/v2/definition.proto", "apache/rocketmq/v2/service.proto"}
    for name, f in ours["files"].items():
        assert f["package"] == PACKAGE, name
        assert f["syntax"] == "proto3", name
        # Upstream's options (rocketmq-apis): they decide Java/C# class names of anything generated from ours.
        assert f["options"]["java_package"] == PACKAGE, name
        assert f["options"]["java_multiple_files"] is True, name
        assert f["options"]["csharp_namespace"] == "Apache.Rocketmq.V2", name
    assert (
        ours["files"]["apache/rocketmq/v2/definition.proto"]["options"]["java_outer_classname"] == "MQDomain"
    )
    assert ours["files"]["apache/rocketmq/v2/service.proto"]["options"]["java_outer_classname"] == "MQService"
    assert ours["files"]["apache/rocketmq/v2/service.proto"]["dependencies"][-1] == (
        "apache/rocketmq/v2/definition.proto"
    )


def test_comparator_catches_differences(ours: dict[str, Any]) -> None:
    # Guards against a comparison that passes vacuously: every kind of change must show up.
    other = copy.deepcopy(ours)
    settings = other["messages"][f".{PACKAGE}.Settings"]
    settings["fields"]["request_timeout"]["number"] = 99
    settings["fields"]["access_point"]["proto3_optional"] = False
    settings["fields"]["publishing"]["oneof"] = None
    del settings["fields"]["metric"]
    other["enums"][f".{PACKAGE}.Code"]["values"]["OK"]["number"] = 0
    other["services"][f".{PACKAGE}.MessagingService"]["methods"]["ReceiveMessage"]["server_streaming"] = False
    other["files"]["apache/rocketmq/v2/service.proto"]["options"]["java_package"] = "x"
    other["messages"][".x.Extra"] = {"fields": {}, "file": "x"}

    mismatches, only_ours, only_theirs = compare(ours, other)
    text = "\n".join(mismatches)
    for needle in (
        "Settings.request_timeout: number",
        "Settings.access_point: proto3_optional",
        "Settings.publishing: oneof",
        "Code.OK: number",
        "MessagingService.ReceiveMessage: server_streaming",
        "service.proto: options",
    ):
        assert needle in text, needle
    assert only_ours == {f"field .{PACKAGE}.Settings.metric"}
    assert only_theirs == {"message .x.Extra"}
    assert compare(ours, ours) == ([], set(), set())


# func_only: the `theirs` fixture may build the official client's venv from PyPI first (bounded by
# official_client.BUILD_TIMEOUT per step); only the comparison itself counts against the test timeout.
@pytest.mark.timeout(60, func_only=True)
def test_descriptors_match_official_client(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    # Sanity: the dump saw the real thing, not an empty module.
    service = f".{PACKAGE}.MessagingService"
    assert len(theirs["services"][service]["methods"]) >= 17
    assert len(theirs["messages"]) >= 60 and len(theirs["enums"]) >= 13

    mismatches, only_ours, only_theirs = compare(ours, theirs)
    for key in sorted(only_ours):
        print(f"only ours:   {key} -- {ONLY_OURS.get(key, 'NOT ALLOW-LISTED')}")
    for key in sorted(only_theirs):
        print(f"only theirs: {key} -- {ONLY_THEIRS.get(key, 'NOT ALLOW-LISTED')}")

    assert mismatches == []
    assert only_ours == set(ONLY_OURS), "one-sided (ours) definitions changed: update ONLY_OURS with reasons"
    assert only_theirs == set(ONLY_THEIRS), "one-sided (theirs) definitions changed: update ONLY_THEIRS"
