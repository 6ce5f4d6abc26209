"""The harness's one error type, in a module of its own so that every module of the package can raise
it and the imports still point one way: `process` -> `control` -> `errors` (pyproject.toml's
import-linter contracts keep it so)."""

from __future__ import annotations

__all__ = ["ClusterError"]


class ClusterError(RuntimeError):
    """A RocketMQ process failed to start, exited, or an admin step failed."""
