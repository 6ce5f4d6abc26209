"""Generated protobuf modules; see scripts/gen_proto.py."""
