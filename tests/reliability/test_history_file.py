"""File-backed history recorder: the same events, and the same verdicts, from a file as from memory."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from thrust.reliability.history import History, HistoryRecorder, check

CHECKS: tuple[dict[str, object], ...] = (
    {},
    {"require_ack": False, "recovery_bound": 30.0, "copies_per_send": 3},
    {"max_attempts": 3, "call_bound": 0.05, "recovery_bound": 0.01},
)


def synthetic(rec: HistoryRecorder, seed: int) -> None:
    """A random history with every event kind, outcome and duplicate cause the checker knows."""
    rng = random.Random(seed)
    t = 0.0

    def now() -> float:
        nonlocal t
        t += rng.random() / 7  # fractional times: the file must keep every bit of them
        return t

    delivered: list[tuple[str, str]] = []
    for i in range(300):
        payload = f"p{i}" if rng.random() < 0.9 else f'p{i}-"quoted"\n\u00e9\u2603'
        group = rng.choice([None, None, "g0", "g1", 'g"2'])
        if rng.random() < 0.03:
            rec.fault_started(rng.choice(["reset", "blackhole", "refuse"]), t=now())
        if rng.random() < 0.03:
            rec.fault_healed(rng.choice(["reset", "blackhole", "refuse"]), t=now())
        op = rec.invoke(payload, group=group, producer=rng.choice(["", "prod-1"]), t=now())
        r = rng.random()
        mid = f"ID{i:032d}"
        if r < 0.7:
            rec.ok(op, mid, t=now())
        elif r < 0.8:
            rec.fail(op, error=rng.choice(["", "BadRequest", "x\ty"]), t=now())
        elif r < 0.9:
            rec.unknown(op, error="TimeoutError", message_id=rng.choice([None, mid]), t=now())
        elif r < 0.95:
            pass  # hung
        else:
            rec.sent(payload, "ok", f"ID{i:032d}-resend", group=group, t=now())
        if r < 0.95 and rng.random() < 0.9:
            delivered.append((payload, mid))
    if rng.random() < 0.5:
        rec.dead_lettered("never-sent", "ID-dlq", attempt=4, t=now())
    rng.shuffle(delivered)
    for payload, mid in delivered:
        for attempt in range(1, rng.choice([2, 2, 2, 3, 5])):
            d = rec.delivered(
                payload, mid, attempt=rng.choice([attempt, attempt, None, 0]), consumer="c", t=now()
            )
            r = rng.random()
            if r < 0.6:
                rec.acked(d, t=now())
            elif r < 0.75:
                rec.nacked(d, t=now())
            elif r < 0.9:
                rec.ack_failed(d, error="ConnectionError", t=now())
        if rng.random() < 0.05:
            rec.dead_lettered(payload, mid, attempt=rng.choice([None, 3, 17]), t=now())
    rec.delivered("stranger", "ID-unknown", t=now())


def both(tmp_path: Path, fill: Callable[[HistoryRecorder], None]) -> tuple[History, History]:
    mem = HistoryRecorder()
    fill(mem)
    path = tmp_path / "history.jsonl"
    with HistoryRecorder(path=path) as rec:
        fill(rec)
        assert len(rec) == len(mem)
        assert rec.path == path
    return mem.snapshot(), History.load(path)


@pytest.mark.parametrize("seed", range(12))
def test_synthetic_history_round_trips_with_identical_verdicts(tmp_path: Path, seed: int) -> None:
    from_memory, from_file = both(tmp_path, lambda rec: synthetic(rec, seed))
    assert from_file == from_memory
    assert [tuple(e) for e in from_file.events] == [tuple(e) for e in from_memory.events]
    for options in CHECKS:
        a = check(from_memory, **options)  # type: ignore[arg-type]
        b = check(from_file, **options)  # type: ignore[arg-type]
        assert a == b
        assert a.summary == b.summary
        assert dict(a.duplicate_causes) == dict(b.duplicate_causes)


def test_synthetic_histories_exercise_the_verdicts(tmp_path: Path) -> None:
    """The round trip above is meaningful: the synthetic histories have defects of every kind."""
    reports = [
        check(both(tmp_path, lambda rec, s=s: synthetic(rec, s))[1], max_attempts=3) for s in range(12)
    ]
    assert any(r.lost for r in reports)
    assert all(r.unexpected for r in reports)
    assert any(r.recovered for r in reports)
    assert any(r.sends_hung for r in reports)
    assert any(r.faults for r in reports)
    assert any(r.order_inversions or r.order_overtakes for r in reports)
    assert any(r.dlq_violations for r in reports)
    causes = set().union(*(r.duplicate_causes for r in reports))
    assert len(causes) >= 5, causes


def test_default_fields_are_left_out_and_restored(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    with HistoryRecorder(path=path) as rec:
        op = rec.invoke("p", t=1.0)
        rec.ok(op, "id", t=2.0)
        d = rec.delivered("p", "id", attempt=0, t=3.0)  # attempt 0 is not the default None
        rec.acked(d, t=4.0)
        rec.fault_started("", t=5.0)
    lines = path.read_text().splitlines()
    assert lines[0] == '["invoke",0,1.0,-1,"p"]'
    assert lines[1] == '["ok",1,2.0,0,"","id"]'
    assert lines[2] == '["deliver",2,3.0,-1,"p","id",null,0]'
    events = History.load(path).events
    assert events[2].attempt == 0 and events[2].group is None and events[2].actor == ""
    assert events[4].detail == "" and events[4].ref == -1


def test_file_mode_keeps_nothing_in_memory_and_snapshots_while_recording(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    with HistoryRecorder(path=path) as rec:
        for i in range(100):
            rec.acked(rec.delivered(f"p{i}", f"id{i}"))
            rec.sent(f"p{i}", "ok", f"id{i}")
        assert rec._events == []
        first = rec.snapshot()  # flushes the buffer
        assert len(first) == 400 == len(rec)
        rec.sent("late", "ok", "id-late")
        assert check(rec).lost == 1  # check() accepts the file-backed recorder too
    assert len(rec.snapshot()) == 402  # still readable after close
    rec.close()  # idempotent
    with pytest.raises(ValueError):
        rec.sent("after-close", "ok", "x")


def test_file_mode_is_thread_safe(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    with HistoryRecorder(path=path) as rec:

        def worker(k: int) -> None:
            for i in range(500):
                p = f"w{k}-{i}"
                rec.sent(p, "ok", f"id-{p}")
                rec.acked(rec.delivered(p, f"id-{p}", attempt=1))

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    history = History.load(path)
    assert [e.seq for e in history.events] == list(range(8000))
    report = check(history)
    assert report.ok and report.deliveries == 2000


def test_load_skips_blank_lines_and_rejects_malformed_ones(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text('["invoke",0,1.0,-1,"p"]\n\n["ok",1,2.0,0,"","id"]\n')
    assert check(History.load(path)).sends_ok == 1
    path.write_text('["invoke",0]\n')
    with pytest.raises(ValueError):
        History.load(path)
