"""Request validation shared by the client (before any I/O) and the embedded server (on receipt).

Every check returns None or raises `Invalid` carrying the `apache.rocketmq.v2.Code` the upstream proxy
answers with for the same input (reference doc sections 1.5 and 7.7).
"""

from __future__ import annotations

from thrust._codec.status import Code

__all__ = ["Invalid"]


class Invalid(ValueError):
    """A value the protocol rejects; `code` is the status the server answers with."""

    code: Code
    message: str

    def __init__(self, code: Code, message: str) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code.name}: {self.message}"
