"""Generated protobuf modules (scripts/gen_proto.py), registered in a descriptor pool of thrust's own.

The official `rocketmq-python-client` registers the same `apache.rocketmq.v2.*` messages in protobuf's
process-wide default pool, which refuses a second definition of any full name; with our own pool both
clients import into one process. Full names, and so the wire, are upstream's (rocketmq-apis).

A message of our pool only accepts sub-messages of our pool (upb's MergeFrom/CopyFrom compare classes), so
the Timestamp and Duration fields need `Timestamp` and `Duration` from here, not from
`google.protobuf.timestamp_pb2`. They carry the same well-known-type helpers (`GetCurrentTime`,
`ToSeconds`, ...): protobuf adds those by full name, whatever the pool.

One limit: protobuf's pure-Python runtime (PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python, not the default)
also files every generated class in the default symbol database (`builder.BuildTopDescriptorsAndMessages`),
whose default pool then reports a conflict; there, the two clients still cannot share a process.
"""

from __future__ import annotations

from typing import cast

from google.protobuf import descriptor_pool, duration_pb2, message_factory, timestamp_pb2

POOL = descriptor_pool.DescriptorPool()
# Our .proto files import these two; a fresh pool has no well-known types.
POOL.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
POOL.AddSerializedFile(duration_pb2.DESCRIPTOR.serialized_pb)

# Typed as the default pool's classes, which they mirror field for field and helper for helper (only
# isinstance against the default pool's class tells them apart); the generated .pyi files type the
# fields that way too.
Timestamp = cast(
    type[timestamp_pb2.Timestamp],
    message_factory.GetMessageClass(POOL.FindMessageTypeByName("google.protobuf.Timestamp")),
)
Duration = cast(
    type[duration_pb2.Duration],
    message_factory.GetMessageClass(POOL.FindMessageTypeByName("google.protobuf.Duration")),
)

__all__ = ["POOL", "Duration", "Timestamp"]
