"""gRPC core's own log lines in the processes of the `thrust` command.

gRPC core writes them to stderr through absl (`I1202 ... Handshake failed`, `E1202 ... add_port.cc ...
Address already in use`), outside Python's logging. The `thrust` command reports every such failure
itself, in one line naming the error type, so in its processes gRPC core is silenced unless the user asked
for its logs: GRPC_VERBOSITY, or GRPC_TRACE (whose traces need a verbosity), is never overridden. grpc
reads the variable when it is first imported, so `thrust/__init__.py` imports this module before any
module that imports grpc. A library user's process is left as it is.
"""

from __future__ import annotations

import itertools
import os
import sys

__all__ = ["runs_the_cli"]


def runs_the_cli(argv: list[str], script: str) -> bool:
    """Whether this process is the `thrust` command: its console script, or `python -m thrust.cli.main`
    (how `thrust.testing.ServerProcess` and `thrust perf` start `thrust serve`). `argv` is the
    interpreter's own (`sys.orig_argv`), `script` is `sys.argv[0]`."""
    if os.path.basename(script).removesuffix(".exe") == "thrust":
        return True
    return any(a == "-m" and b == "thrust.cli.main" for a, b in itertools.pairwise(argv))


if (
    "GRPC_VERBOSITY" not in os.environ
    and "GRPC_TRACE" not in os.environ
    and runs_the_cli(list(getattr(sys, "orig_argv", [])), sys.argv[0] if sys.argv else "")
):
    os.environ["GRPC_VERBOSITY"] = "NONE"
