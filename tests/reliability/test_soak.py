"""The L5 soak's P5 judgement (synthetic samples) and one short end-to-end run."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from thrust.reliability import soak as soak_mod
from thrust.reliability.soak import Sample


def args(**kw: Any) -> argparse.Namespace:
    ns = soak_mod._parser().parse_args([])
    ns.warmup = 300.0
    for k, v in kw.items():
        setattr(ns, k, v)
    return ns


def sample(
    t: float,
    rss: float,
    kind: str = "periodic",
    fds: int = 22,
    tasks: int = 30,
    fault: str = "",
    sends: int = 0,
) -> Sample:
    return Sample(
        t, rss, fds, 23, tasks, 0, 0, fault, kind, fds + 7, tasks + 20, 500.0, sends_in_flight=sends
    )


def hour(
    rss_at: Any = lambda t: 60.0,
    fds_at: Any = lambda t: 22,
    tasks_at: Any = lambda t: 30,
    sends_at: Any = lambda t: 0,
) -> list[Sample]:
    """Samples of a soak with faults every 60 s: periodic every 10 s, checks at 30 + 60 k and at the end."""
    out: list[Sample] = []
    for t in range(0, 3600, 10):
        fault = "blackhole" if (t - 30) % 60 < 30 and t >= 30 else ""
        out.append(sample(t, rss_at(t), fault=fault))
        if t % 60 == 30:
            out.append(sample(t, rss_at(t), "cycle-end", fds_at(t), tasks_at(t), sends=sends_at(t)))
    out.append(sample(3700, rss_at(3700), "final", fds_at(3700), tasks_at(3700), sends=sends_at(3700)))
    return out


def p5(samples: list[Sample], **kw: Any) -> dict[str, Any]:
    state = SimpleNamespace(args=args(**kw), samples=samples, max_cached=0)
    return soak_mod._p5(state)  # type: ignore[arg-type]


def test_flat_run_passes() -> None:
    r = p5(hour())
    assert r["rss_ok"] and r["fd_task_ok"] and r["push_cache_ok"]
    assert r["rss_baseline_t"] == 330  # the first steady sample at or after the 5-minute warm-up
    assert r["cycle_checks"] == 60  # 59 later cycle ends + the final check
    assert r["server_rss_mib_first_max_last"] == [500.0, 500.0, 500.0]


def test_steady_growth_over_ten_percent_fails() -> None:
    r = p5(hour(rss_at=lambda t: 60.0 + t / 300))  # +12 MiB over the hour: a leak
    assert not r["rss_ok"] and r["rss_growth"] > 0.10 and r["rss_growth_max"] > 0.10
    # The windows: the first and the last 10 minutes of steady samples.
    assert r["rss_windows_s"] == [[330, 930], [2970, 3570]]
    assert r["rss_first_window_median_mib"] == pytest.approx(60.0 + 630 / 300)
    assert r["rss_last_window_median_mib"] == pytest.approx(60.0 + 3270 / 300)


def test_noise_around_a_flat_level_passes_but_a_leak_under_it_fails() -> None:
    # Steady samples swinging by +-10 MiB (allocator slack) with no trend: the largest against the first
    # is +30 %, which is noise, not growth.
    swing = {0: -10.0, 1: 10.0, 2: 0.0, 3: 5.0, 4: -5.0}

    def noisy(t: float) -> float:
        return 75.0 + swing[int(t // 60) % 5]

    r = p5(hour(rss_at=noisy))
    assert r["rss_ok"] and r["rss_growth"] == 0.0
    assert r["rss_growth_max"] > 0.25  # reported, not judged
    # The same noise on top of a leak of 0.2 MiB a minute (+11 MiB over the hour) fails.
    r = p5(hour(rss_at=lambda t: noisy(t) + t / 300))
    assert not r["rss_ok"] and r["rss_growth"] > 0.10


def test_warm_up_growth_does_not_count() -> None:
    r = p5(hour(rss_at=lambda t: 30.0 + min(t, 300) / 10))
    assert r["rss_ok"] and r["rss_growth_max"] == 0.0


def test_transient_fault_peaks_are_reported_not_judged() -> None:
    r = p5(hour(rss_at=lambda t: 60.0 + (40.0 if t % 60 == 50 else 0.0)))
    assert r["rss_ok"]
    assert r["rss_peak_growth_any_sample"] == pytest.approx(40 / 60, abs=1e-3)


def test_fd_or_task_leak_after_a_heal_fails() -> None:
    assert not p5(hour(fds_at=lambda t: 22 + (6 if t > 2000 else 0)))["fd_task_ok"]
    r = p5(hour(tasks_at=lambda t: 30 + t // 500))
    assert not r["fd_task_ok"] and r["fd_task_failures"][0]["t"] == 3030
    assert p5(hour(tasks_at=lambda t: 30 + (5 if t % 120 == 30 else 0)))["fd_task_ok"]  # within + 5


def test_sends_in_flight_at_a_check_are_not_a_leak() -> None:
    # A slow server after a restart: 600 sends in flight at some checks, each with one grpc.aio call task.
    def slow(t: float) -> int:
        return 600 if t % 240 == 90 else 0

    r = p5(hour(tasks_at=lambda t: 30 + slow(t), sends_at=slow))
    assert r["fd_task_ok"] and r["tasks_max_delta_at_checks"] == 0
    # A baseline taken while sends were in flight is judged without them too.
    r = p5(hour(tasks_at=lambda t: 30 + (168 if t == 30 else 0), sends_at=lambda t: 168 if t == 30 else 0))
    assert r["fd_task_ok"] and r["task_baseline"] == 30
    # The same checks with a leak of one task per 100 s under them fail.
    r = p5(hour(tasks_at=lambda t: 30 + slow(t) + t // 100, sends_at=slow))
    assert not r["fd_task_ok"] and r["fd_task_failures"][0]["t"] == 630
    # Tasks beyond the sends in flight still count: 600 calls held by only 500 sends is a leak of 100.
    r = p5(hour(tasks_at=lambda t: 30 + slow(t), sends_at=lambda t: slow(t) * 5 // 6))
    assert not r["fd_task_ok"] and r["tasks_max_delta_at_checks"] == 100


def test_counts_below_the_baseline_are_not_a_leak() -> None:
    # A broker's connection closed while it is down, sends waiting out a backoff: fewer, not more.
    r = p5(
        hour(
            fds_at=lambda t: 22 - (3 if t % 240 == 90 else 0), tasks_at=lambda t: 30 - (20 if t > 600 else 0)
        )
    )
    assert r["fd_task_ok"] and r["fds_max_delta_at_checks"] == 0 and r["tasks_max_delta_at_checks"] == 0


def test_without_faults_every_sample_is_steady() -> None:
    samples = [sample(t, 60.0 + (7.0 if t == 400 else 0.0)) for t in range(0, 600, 10)]
    samples.insert(0, sample(0, 50.0, "cycle-end"))
    samples.append(sample(610, 60.0, "final"))
    r = p5(samples, fault_interval=0.0)
    # Periodic samples count: a third of 300..590 at each end.
    assert r["rss_baseline_t"] == 300 and r["rss_windows_s"] == [[300, 390], [500, 590]]
    assert r["rss_ok"] and r["rss_growth_max"] == pytest.approx(7 / 60, abs=1e-3)  # one spike: reported
    growing = [sample(t, 60.0 + max(0, t - 300) / 20) for t in range(0, 600, 10)]
    r = p5([*growing, sample(610, 75.0, "final")], fault_interval=0.0)
    assert not r["rss_ok"] and r["rss_growth"] > 0.10


def test_too_few_steady_samples_is_not_a_pass() -> None:
    r = p5([sample(t, 60.0, "cycle-end") for t in (30, 330, 390)])
    assert not r["rss_ok"]  # two steady samples after the warm-up: no verdict


def test_without_faults_fds_and_tasks_are_checked_at_the_end() -> None:
    samples = [sample(t, 60.0) for t in range(0, 600, 10)]
    assert p5([*samples, sample(610, 60.0, "final")], fault_interval=0.0)["fd_task_ok"]
    r = p5([*samples, sample(610, 60.0, "final", fds=30)], fault_interval=0.0)
    assert not r["fd_task_ok"] and r["fd_task_baseline_t"] == 0 and r["cycle_checks"] == 1


def test_default_warmup_is_five_minutes_when_it_fits() -> None:
    assert soak_mod.main(["--duration", "10", "--warmup", "10"]) == 2  # the warm-up must end first


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_short_soak_end_to_end(tmp_path: Path) -> None:
    a = args(
        duration=16.0,
        fault_interval=8.0,
        sample_interval=2.0,
        warmup=4.0,
        drain=40.0,
        verbose=False,
        history_dir=str(tmp_path / "hist"),
    )
    figures = asyncio.run(soak_mod.soak(a))
    json.dumps(figures)  # serialisable for --json
    assert figures["server"] == "process"
    assert figures["sent_ok"] > 0 and not figures["hung_sends"] and not figures["untyped_send_errors"]
    for group in ("push", "simple"):
        assert figures["verdicts"][group]["P1"], figures["reports"][group]
        # Every OK send delivered (plus any "unknown" sends that were stored after all).
        assert figures["delivered"][group]["payloads"] >= figures["sent_ok"]
    kinds = [s["kind"] for s in figures["samples"]]
    assert kinds.count("cycle-end") == 2 and kinds[-1] == "final"
    assert all(s["server_rss_mib"] for s in figures["samples"])
    assert all(s["heap_in_use_mib"] for s in figures["samples"])  # glibc: mallinfo2
    assert all(figures["p5"]["heap_in_use_window_medians_mib"])
    assert figures["p5"]["push_cache_ok"]
    # The history files were kept (--history-dir) and give the same verdicts when checked again.
    from thrust.reliability.history import History, check

    report = check(
        History.load(tmp_path / "hist" / "push.jsonl"),
        recovery_bound=30.0,
        copies_per_send=3,
        require_ack=False,
    )
    assert report.summary == figures["reports"]["push"]


def test_a_check_over_the_task_bound_records_the_clients_tasks(tmp_path: Path) -> None:
    async def scenario() -> dict[str, Any]:
        state = soak_mod._Soak(args(verbose=False), tmp_path)
        try:
            state.started = 0.0
            await state.check_sample("cycle-end")  # the baseline
            stray = [asyncio.create_task(asyncio.sleep(60)) for _ in range(soak_mod.FD_TASK_SLACK + 1)]
            try:
                await state.check_sample("cycle-end")
            finally:
                for t in stray:
                    t.cancel()
                await asyncio.gather(*stray, return_exceptions=True)
            await state.check_sample("cycle-end")  # back within the bound: nothing recorded
            assert len(state.task_excess) == 1
            return state.task_excess[0]
        finally:
            state.close()

    excess = asyncio.run(scenario())
    assert excess["kind"] == "cycle-end"
    assert excess["tasks"]["sleep"] == soak_mod.FD_TASK_SLACK + 1
