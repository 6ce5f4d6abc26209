"""Reliability test harness: history recorder and checker, TCP fault proxy, protobuf fuzzer.

Test tooling only (the fault tools of docs/reliability.md §3). The library core never imports this package;
`history` is pure (no grpc, no asyncio) so it can check histories anywhere, while `proxy` and
`fuzz` are asyncio/grpc tools imported explicitly by the tests that need them.
"""

from __future__ import annotations

from thrust.reliability.history import (
    Duplicate,
    Event,
    History,
    HistoryRecorder,
    OrderViolation,
    Report,
    Unexpected,
    Verdict,
    check,
)

__all__ = [
    "Duplicate",
    "Event",
    "History",
    "HistoryRecorder",
    "OrderViolation",
    "Report",
    "Unexpected",
    "Verdict",
    "check",
]
