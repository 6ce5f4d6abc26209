"""History checker self-tests (docs/reliability.md §1): every verdict on a history with the defect and
without."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import pytest

from thrust.reliability.history import (
    CAUSE_ABANDONED,
    CAUSE_ACK_FAILED,
    CAUSE_AFTER_ACK,
    CAUSE_RESEND,
    CAUSE_SAME_ID_RETRY,
    CAUSE_UNKNOWN_STORED,
    History,
    HistoryRecorder,
    OrderViolation,
    Report,
    check,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


def recorder() -> HistoryRecorder:
    return HistoryRecorder(clock=Clock())


def send_ok(rec: HistoryRecorder, payload: str, mid: str | None = None, group: str | None = None) -> None:
    rec.sent(payload, "ok", mid or f"id-{payload}", group=group)


def consume(
    rec: HistoryRecorder, payload: str, mid: str | None = None, attempt: int = 1, group: str | None = None
) -> None:
    rec.acked(rec.delivered(payload, mid or f"id-{payload}", attempt=attempt, group=group))


def clean(n: int = 3) -> HistoryRecorder:
    rec = recorder()
    for i in range(n):
        send_ok(rec, f"p{i}")
    for i in range(n):
        consume(rec, f"p{i}")
    return rec


def test_clean_history_passes_everything() -> None:
    report = check(clean(10))
    assert report.ok
    assert (report.lost, report.unexpected, report.unacked, report.duplicates) == (0, 0, 0, 0)
    assert (report.sends, report.sends_ok, report.deliveries, report.delivered_payloads) == (10, 10, 10, 10)
    assert report.p1.ok and report.p2.ok and report.p3.ok
    assert report.p4.ok is None  # no fault healed
    assert report.p5.ok is None and report.p6.ok is None
    assert report.dlq.ok is None  # max_attempts not given
    assert "verdict: OK" in report.summary
    assert str(report) == report.summary


def test_report_is_frozen() -> None:
    report = check(clean())
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.lost = 3  # type: ignore[misc]
    with pytest.raises(TypeError):
        report.duplicate_causes["x"] = 1  # type: ignore[index]


# P1 -----------------------------------------------------------------------------------------------


def test_lost_message_fails_p1() -> None:
    rec = clean()
    send_ok(rec, "gone")
    report = check(rec)
    assert report.lost == 1
    assert report.lost_examples == ("gone",)
    assert report.p1.ok is False
    assert not report.ok
    assert "lost=1" in report.summary and "FAIL" in report.summary


def test_failed_and_unknown_sends_never_delivered_are_not_lost() -> None:
    rec = clean()
    rec.sent("refused", "fail", error="TOPIC_NOT_FOUND")
    rec.sent("timeout", "unknown", "id-timeout", error="DEADLINE_EXCEEDED")
    report = check(rec)
    assert report.lost == 0
    assert (report.sends_failed, report.sends_unknown) == (1, 1)
    assert report.p1.ok


def test_unknown_send_that_was_stored_is_recovered_not_unexpected() -> None:
    rec = clean()
    op = rec.invoke("maybe")
    rec.unknown(op, error="DEADLINE_EXCEEDED", message_id="id-maybe")
    consume(rec, "maybe")
    report = check(rec)
    assert report.recovered == 1 and report.recovered_examples == ("maybe",)
    assert report.unexpected == 0
    assert report.p1.ok


def test_delivery_of_a_payload_never_sent_is_unexpected() -> None:
    rec = clean()
    consume(rec, "ghost")
    report = check(rec)
    assert report.unexpected == 1
    assert report.unexpected_examples[0].payload_id == "ghost"
    assert report.unexpected_examples[0].reason == "never sent"
    assert report.p1.ok is False


def test_delivery_under_a_foreign_message_id_is_unexpected() -> None:
    rec = recorder()
    send_ok(rec, "p", "id-1")
    consume(rec, "p", "id-999")
    report = check(rec)
    assert report.unexpected == 1
    assert report.unexpected_examples[0].message_id == "id-999"
    assert report.p1.ok is False


def test_foreign_id_is_not_judged_while_a_send_id_is_unknown() -> None:
    rec = recorder()
    send_ok(rec, "p", "id-1")
    rec.sent("p", "unknown")  # the resend's id was never learnt
    consume(rec, "p", "id-999")
    assert check(rec).unexpected == 0


def test_delivered_but_never_acked_fails_p1_only_when_acks_are_required() -> None:
    rec = clean()
    send_ok(rec, "held")
    rec.delivered("held", "id-held", attempt=1)
    assert check(rec).unacked == 1
    assert check(rec).p1.ok is False
    assert check(rec, require_ack=False).p1.ok


def test_dead_lettered_payload_counts_as_finished() -> None:
    rec = clean()
    send_ok(rec, "poison")
    for attempt in (1, 2, 3):
        rec.nacked(rec.delivered("poison", "id-poison", attempt=attempt))
    assert check(rec).p1.ok is False  # neither acked nor in the DLQ
    rec.dead_lettered("poison", "id-poison", attempt=3)
    report = check(rec)
    assert report.p1.ok and report.dead_lettered == 1


# Duplicates and P2 --------------------------------------------------------------------------------


def test_redelivery_after_ack_without_fault_fails_p2() -> None:
    rec = clean()
    consume(rec, "p0", attempt=2)
    report = check(rec)
    assert report.redeliveries == 1 and report.producer_duplicates == 0
    assert report.duplicated_payloads == 1
    assert report.duplicate_causes[CAUSE_AFTER_ACK] == 1
    assert report.duplicate_examples[0].attempts == (1, 2)
    assert report.duplicate_window == 0
    assert report.p2.ok is False
    assert report.p1.ok  # at-least-once still holds


def test_redelivery_after_failed_ack_is_within_window() -> None:
    rec = clean()
    send_ok(rec, "x")
    d = rec.delivered("x", "id-x", attempt=1)
    rec.ack_failed(d, error="UNAVAILABLE")
    consume(rec, "x", attempt=2)
    report = check(rec)
    assert report.redeliveries == 1
    assert report.duplicate_causes[CAUSE_ACK_FAILED] == 1
    assert report.duplicate_window == 1
    assert report.p2.ok and report.ok


def test_redelivery_of_abandoned_delivery_is_within_window() -> None:
    rec = clean()
    send_ok(rec, "x")
    rec.delivered("x", "id-x", attempt=1)  # consumer crashed before acking
    consume(rec, "x", attempt=2)
    report = check(rec)
    assert report.duplicate_causes[CAUSE_ABANDONED] == 1
    assert report.p2.ok


def test_requested_redelivery_is_not_a_duplicate() -> None:
    rec = clean()
    send_ok(rec, "x")
    rec.nacked(rec.delivered("x", "id-x", attempt=1))
    consume(rec, "x", attempt=2)
    report = check(rec)
    assert report.requested_redeliveries == 1
    assert report.duplicates == 0 and report.duplicated_payloads == 0
    assert report.duplicate_window == 0
    assert report.ok


def test_two_stored_copies_of_one_message_id_are_producer_retries() -> None:
    rec = clean()
    send_ok(rec, "x")  # the client retried internally, reusing the id: both attempts were stored
    consume(rec, "x", attempt=1)
    consume(rec, "x", attempt=1)
    report = check(rec)
    assert report.producer_duplicates == 1 and report.redeliveries == 0
    assert report.duplicate_causes[CAUSE_SAME_ID_RETRY] == 1
    assert report.p2.ok is False  # no fault, so no duplicates allowed

    rec2 = clean()
    op = rec2.invoke("x")
    rec2.fault_started("reset")
    rec2.ok(op, "id-x")
    rec2.fault_healed("reset")
    consume(rec2, "x", attempt=1)
    consume(rec2, "x", attempt=1)
    report2 = check(rec2)
    assert report2.producer_duplicates == 1
    assert report2.duplicate_window == 1  # the send was in flight when the fault hit
    assert report2.p2.ok


def test_interleaved_copies_and_redeliveries_are_told_apart() -> None:
    rec = clean()
    send_ok(rec, "x")
    for attempt in (1, 1, 2, 2):
        rec.nacked(rec.delivered("x", "id-x", attempt=attempt))
    consume(rec, "x", attempt=3)
    report = check(rec)
    assert report.producer_duplicates == 1  # two copies, each started at attempt 1
    assert report.requested_redeliveries == 3  # 1->2, 1->2, 2->3
    assert report.redeliveries == 0


def test_payload_resent_under_a_new_id_is_a_producer_resend() -> None:
    rec = clean()
    send_ok(rec, "x", "id-a")
    send_ok(rec, "x", "id-b")
    consume(rec, "x", "id-a")
    consume(rec, "x", "id-b")
    report = check(rec)
    assert report.duplicate_causes[CAUSE_RESEND] == 1
    assert report.producer_duplicates == 1 and report.redeliveries == 0
    assert report.p2.ok is False


def test_unknown_send_stored_then_resent_is_told_from_a_resend() -> None:
    rec = clean()
    rec.sent("x", "unknown", "id-a", error="DEADLINE_EXCEEDED")
    send_ok(rec, "x", "id-b")
    consume(rec, "x", "id-a")
    consume(rec, "x", "id-b")
    report = check(rec)
    assert report.duplicate_causes == {CAUSE_UNKNOWN_STORED: 1}
    assert report.duplicate_window == 1  # the unknown send
    assert report.p2.ok and report.p1.ok


def test_window_counts_unacked_deliveries_at_fault_start() -> None:
    rec = clean()
    send_ok(rec, "x")
    d = rec.delivered("x", "id-x", attempt=1)
    rec.fault_started("blackhole")
    rec.acked(d)  # the ack was recorded OK but the server lost it during the fault
    rec.fault_healed("blackhole")
    consume(rec, "x", attempt=2)
    report = check(rec)
    assert report.duplicate_window == 1
    assert report.p2.ok
    # The same redelivery without the fault is a defect.
    rec2 = clean()
    send_ok(rec2, "x")
    consume(rec2, "x", attempt=1)
    consume(rec2, "x", attempt=2)
    assert check(rec2).p2.ok is False


def test_copies_per_send_scales_the_window() -> None:
    rec = clean()
    rec.sent("x", "unknown", "id-x")
    for _ in range(3):
        consume(rec, "x", attempt=1)
    assert check(rec).p2.ok is False
    assert check(rec, copies_per_send=2).p2.ok


def test_send_that_outlasted_an_attempt_timeout_may_be_stored_once_per_timed_out_attempt() -> None:
    """No fault: a send that took 2.5 request timeouts had at most two attempts end at their deadline, each
    of which may have been stored before the retry; a send quicker than one timeout had none."""
    rec = clean()
    op = rec.invoke("x", t=100.0)
    rec.ok(op, "id-x", t=105.0)
    for _ in range(3):
        consume(rec, "x", attempt=1)  # the timed-out attempts and the last one, all stored
    assert check(rec).p2.ok is False
    assert check(rec, attempt_timeout=2.0, copies_per_send=3).duplicate_window == 2
    assert check(rec, attempt_timeout=2.0, copies_per_send=3).p2.ok
    # At most copies_per_send, however long the send took.
    assert check(rec, attempt_timeout=2.0, copies_per_send=1).p2.ok is False
    # Too quick for a timed-out attempt: the copies are a defect.
    assert check(rec, attempt_timeout=6.0, copies_per_send=3).duplicate_window == 0
    assert check(rec, attempt_timeout=6.0, copies_per_send=3).p2.ok is False


# P3 -----------------------------------------------------------------------------------------------


def test_send_that_never_completes_fails_p3() -> None:
    rec = clean()
    rec.invoke("stuck")
    report = check(rec)
    assert report.sends_hung == 1
    assert report.p3.ok is False


def test_slow_send_fails_p3_only_against_a_bound() -> None:
    rec = clean()
    op = rec.invoke("slow", t=100.0)
    rec.ok(op, "id-slow", t=112.0)
    consume(rec, "slow")
    assert check(rec).p3.ok
    assert check(rec, call_bound=11.0).p3.ok is False
    assert check(rec, call_bound=12.5).p3.ok


def test_p3_is_not_applicable_without_sends() -> None:
    assert check(History(())).p3.ok is None


# P4 -----------------------------------------------------------------------------------------------


def _fault_then_send(heal: float, ok_at: float) -> HistoryRecorder:
    rec = recorder()
    rec.fault_started("refuse", t=1.0)
    rec.sent("before", "fail", t=2.0)
    rec.fault_healed("refuse", t=heal)
    op = rec.invoke("after", t=heal + 0.5)
    rec.ok(op, "id-after", t=ok_at)
    rec.acked(rec.delivered("after", "id-after", attempt=1, t=ok_at + 0.1))
    return rec


def test_recovery_within_bound_passes_p4() -> None:
    report = check(_fault_then_send(heal=10.0, ok_at=13.0))
    assert report.p4.ok
    assert report.recovery_times == pytest.approx((3.0,))


def test_slow_recovery_fails_p4() -> None:
    report = check(_fault_then_send(heal=10.0, ok_at=30.0))
    assert report.p4.ok is False
    assert "worst=20.000s" in report.p4.detail


def test_no_successful_send_after_heal_is_unrecovered() -> None:
    rec = recorder()
    rec.fault_started("blackhole", t=1.0)
    rec.fault_healed("blackhole", t=2.0)
    rec.sent("after", "fail", t=3.0)
    report = check(rec)
    assert report.unrecovered_faults == 1
    assert report.p4.ok is False


def test_stranded_messages_must_resume_after_heal() -> None:
    def run(delivered_at: float) -> Report:
        rec = recorder()
        rec.sent("x", "ok", "id-x", t=1.0)
        rec.fault_started("partition", t=2.0)
        rec.fault_healed("partition", t=3.0)
        rec.acked(rec.delivered("x", "id-x", attempt=1, t=delivered_at))
        return check(rec)

    assert run(5.0).p4.ok
    assert run(60.0).p4.ok is False


# Order --------------------------------------------------------------------------------------------


def test_fifo_inversion_is_reported() -> None:
    rec = recorder()
    for p in ("a", "b", "c"):
        send_ok(rec, p, group="g")
    for p in ("a", "c", "b"):
        consume(rec, p, group="g")
    report = check(rec)
    assert report.order_inversions == 1
    assert OrderViolation("g", "inversion", "b", "c") in report.order_examples
    assert report.order.ok is False
    assert report.p1.ok


def test_fifo_in_order_with_requested_redelivery_passes() -> None:
    rec = recorder()
    for p in ("a", "b", "c"):
        send_ok(rec, p, group="g")
    rec.nacked(rec.delivered("a", "id-a", attempt=1, group="g"))
    consume(rec, "a", attempt=2, group="g")
    consume(rec, "b", group="g")
    consume(rec, "c", group="g")
    report = check(rec)
    assert (report.order_inversions, report.order_overtakes) == (0, 0)
    assert report.order.ok and report.ok


def test_fifo_overtake_while_head_pending_is_reported() -> None:
    rec = recorder()
    for p in ("a", "b"):
        send_ok(rec, p, group="g")
    rec.nacked(rec.delivered("a", "id-a", attempt=1, group="g"))
    consume(rec, "b", group="g")  # handed out while a was still waiting for its retry
    consume(rec, "a", attempt=2, group="g")
    report = check(rec)
    assert report.order_inversions == 0  # first deliveries were in order ...
    assert report.order_overtakes == 1  # ... but b overtook the pending a
    assert report.order_examples == (OrderViolation("g", "overtake", "a", "b"),)
    assert report.order.ok is False


def test_groups_are_independent_and_ungrouped_messages_unordered() -> None:
    rec = recorder()
    send_ok(rec, "a1", group="A")
    send_ok(rec, "b1", group="B")
    send_ok(rec, "a2", group="A")
    send_ok(rec, "n1")
    send_ok(rec, "n2")
    for p, g in (("n2", None), ("b1", "B"), ("a1", "A"), ("n1", None), ("a2", "A")):
        consume(rec, p, group=g)
    report = check(rec)
    assert report.order.ok and report.ok
    assert "groups=2" in report.order.detail


def test_order_not_applicable_without_groups() -> None:
    assert check(clean()).order.ok is None


# DLQ ----------------------------------------------------------------------------------------------


def _poison(attempts: int) -> HistoryRecorder:
    rec = clean()
    send_ok(rec, "poison")
    for attempt in range(1, attempts + 1):
        rec.nacked(rec.delivered("poison", "id-poison", attempt=attempt))
    rec.dead_lettered("poison", "id-poison", attempt=attempts)
    return rec


def test_dead_lettered_after_exactly_max_attempts_passes() -> None:
    report = check(_poison(17), max_attempts=17)
    assert report.dlq.ok and report.ok
    assert report.requested_redeliveries == 16


def test_dead_lettered_too_early_or_delivered_too_often_fails() -> None:
    early = check(_poison(5), max_attempts=17)
    assert early.dlq.ok is False and "after 5 attempts" in early.dlq_examples[0]
    late = check(_poison(18), max_attempts=17)
    assert late.dlq.ok is False and "attempt 18" in late.dlq_examples[0]


# Recorder -----------------------------------------------------------------------------------------


def test_recorder_rejects_bad_send_outcomes() -> None:
    rec = recorder()
    with pytest.raises(ValueError):
        rec.sent("x", "maybe")
    with pytest.raises(ValueError):
        rec.sent("x", "ok")  # an OK send always has an id


def test_recorder_is_thread_safe() -> None:
    rec = HistoryRecorder()
    threads_n, per_thread = 8, 2_000

    def work(tid: int) -> None:
        for i in range(per_thread):
            p = f"t{tid}-{i}"
            op = rec.invoke(p)
            rec.ok(op, f"id-{p}")
            rec.acked(rec.delivered(p, f"id-{p}", attempt=1))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    history = rec.snapshot()
    assert len(history) == threads_n * per_thread * 4
    assert sorted(e.seq for e in history.events) == list(range(len(history)))
    report = check(history)
    assert report.ok and report.sends_ok == threads_n * per_thread


def test_recorder_from_asyncio_tasks() -> None:
    rec = HistoryRecorder()

    async def producer(i: int) -> None:
        op = rec.invoke(f"p{i}", group=f"g{i % 4}")
        await asyncio.sleep(0)
        rec.ok(op, f"id-{i}")

    async def main() -> None:
        await asyncio.gather(*(producer(i) for i in range(200)))
        for i in range(200):
            rec.acked(rec.delivered(f"p{i}", f"id-{i}", group=f"g{i % 4}", attempt=1))

    asyncio.run(main())
    report = check(rec)
    assert report.ok and report.delivered_payloads == 200


def test_history_round_trips_through_plain_tuples() -> None:
    rec = clean()
    send_ok(rec, "gone")
    rows = [tuple(e) for e in rec.snapshot().events]
    assert check(History.of(rows)).lost == 1


def test_large_history_checks_in_linear_time() -> None:
    rec = HistoryRecorder()
    n = 50_000
    for i in range(n):
        rec.sent(f"p{i}", "ok", f"id-{i}", group=f"g{i % 16}")
    for i in range(n):
        rec.acked(rec.delivered(f"p{i}", f"id-{i}", group=f"g{i % 16}", attempt=1))
    report = check(rec)
    assert report.ok and report.deliveries == n
