"""Dump protobuf file descriptors as JSON: files, messages (nested too), enums and services.

Runs both in-process (our generated modules) and as a script inside the official client's venv
(`python descriptor_dump.py rocketmq.grpc_protocol.definition_pb2 ...`), so it imports nothing but
the standard library and `google.protobuf`. It reads `DESCRIPTOR.serialized_pb`, i.e. the exact
FileDescriptorProto protoc embedded in each generated module, rather than the runtime's view of it.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

from google.protobuf import descriptor_pb2
from google.protobuf.json_format import MessageToDict


def _options(options: Any) -> dict[str, Any]:
    # Options as a plain dict; empty when none are set (unknown/extension options are not used here).
    return MessageToDict(options, preserving_proto_field_name=True)


def _enum(prefix: str, enum: descriptor_pb2.EnumDescriptorProto, file: str, out: dict[str, Any]) -> None:
    out[f"{prefix}.{enum.name}"] = {
        "file": file,
        "options": _options(enum.options),
        "values": {v.name: {"number": v.number, "options": _options(v.options)} for v in enum.value},
    }


def _message(
    prefix: str,
    msg: descriptor_pb2.DescriptorProto,
    file: str,
    messages: dict[str, Any],
    enums: dict[str, Any],
) -> None:
    full_name = f"{prefix}.{msg.name}"
    # A proto3 `optional` field lives in a synthetic oneof of its own; only the others are real oneofs.
    synthetic = {f.oneof_index for f in msg.field if f.proto3_optional}
    fields: dict[str, Any] = {}
    for f in msg.field:
        in_oneof = f.HasField("oneof_index")
        oneof = msg.oneof_decl[f.oneof_index].name if in_oneof else None
        fields[f.name] = {
            "number": f.number,
            "type": descriptor_pb2.FieldDescriptorProto.Type.Name(f.type),
            "type_name": f.type_name,
            "label": descriptor_pb2.FieldDescriptorProto.Label.Name(f.label),
            "proto3_optional": f.proto3_optional,
            "oneof": oneof if in_oneof and f.oneof_index not in synthetic else None,
            "synthetic_oneof": oneof if in_oneof and f.oneof_index in synthetic else None,
            "default_value": f.default_value,
            "options": _options(f.options),
        }
    messages[full_name] = {
        "file": file,
        "options": _options(msg.options),
        "oneofs": [o.name for i, o in enumerate(msg.oneof_decl) if i not in synthetic],
        "fields": fields,
        "reserved_ranges": [[r.start, r.end] for r in msg.reserved_range],
        "reserved_names": list(msg.reserved_name),
    }
    for nested in msg.nested_type:
        _message(full_name, nested, file, messages, enums)
    for enum in msg.enum_type:
        _enum(full_name, enum, file, enums)


def dump_files(files: list[descriptor_pb2.FileDescriptorProto]) -> dict[str, Any]:
    out: dict[str, Any] = {"files": {}, "messages": {}, "enums": {}, "services": {}}
    for fdp in files:
        out["files"][fdp.name] = {
            "package": fdp.package,
            "syntax": fdp.syntax,
            "dependencies": list(fdp.dependency),
            "options": _options(fdp.options),
        }
        prefix = f".{fdp.package}" if fdp.package else ""
        for msg in fdp.message_type:
            _message(prefix, msg, fdp.name, out["messages"], out["enums"])
        for enum in fdp.enum_type:
            _enum(prefix, enum, fdp.name, out["enums"])
        for svc in fdp.service:
            out["services"][f"{prefix}.{svc.name}"] = {
                "file": fdp.name,
                "options": _options(svc.options),
                "methods": {
                    m.name: {
                        "input": m.input_type,
                        "output": m.output_type,
                        "client_streaming": m.client_streaming,
                        "server_streaming": m.server_streaming,
                        "options": _options(m.options),
                    }
                    for m in svc.method
                },
            }
    return out


def dump_modules(module_names: list[str]) -> dict[str, Any]:
    files = []
    for name in module_names:
        module = importlib.import_module(name)
        files.append(descriptor_pb2.FileDescriptorProto.FromString(module.DESCRIPTOR.serialized_pb))
    return dump_files(files)


if __name__ == "__main__":
    json.dump(dump_modules(sys.argv[1:]), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
