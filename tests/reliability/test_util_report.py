"""`assert_report` (tests/reliability/_util.py): a verdict the history cannot show is not a pass."""

from __future__ import annotations

import pytest

from tests.reliability._util import assert_report
from thrust.reliability.history import HistoryRecorder, check


def _one_send_delivered() -> HistoryRecorder:
    rec = HistoryRecorder()
    op = rec.invoke("a")
    rec.ok(op, "MID-A")
    rec.acked(rec.delivered("a", "MID-A"))
    return rec


def test_a_verdict_shown_true_passes() -> None:
    assert_report(check(_one_send_delivered()), "P1", "P2", "P3")


def test_not_applicable_fails_unless_the_caller_expects_it() -> None:
    report = check(_one_send_delivered())  # no fault healed: P4 cannot be shown
    assert report.verdict("P4").ok is None
    with pytest.raises(AssertionError, match="P4 is n/a"):
        assert_report(report, "P1", "P4")
    assert_report(report, "P1", "P4", not_applicable=["P4"])


def test_expected_not_applicable_must_really_be_not_applicable() -> None:
    rec = _one_send_delivered()
    rec.fault_started("f")
    rec.fault_healed("f")
    op = rec.invoke("b")
    rec.ok(op, "MID-B")
    rec.acked(rec.delivered("b", "MID-B"))
    report = check(rec)
    assert report.verdict("P4").ok is True
    with pytest.raises(AssertionError, match="expected to be n/a"):
        assert_report(report, "P4", not_applicable=["P4"])
    with pytest.raises(AssertionError, match="not asked for"):
        assert_report(report, "P1", not_applicable=["P4"])


def test_a_false_verdict_fails() -> None:
    rec = HistoryRecorder()
    op = rec.invoke("lost")
    rec.ok(op, "MID-L")
    with pytest.raises(AssertionError, match="P1 failed"):
        assert_report(check(rec), "P1")
