"""The report's figures on hand-made replays: delays, entitlements, Jain's index, reasons."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from fleet.sim import report
from fleet.sim.engine import JobResult, Replay, Sample


def result(
    key: str,
    queue: str,
    gpus: int,
    submit: float,
    start: float | None,
    *,
    preempted_for: tuple[str, ...] = (),
    past_deadline: tuple[str, ...] = (),
) -> JobResult:
    end = None if start is None else start + 100.0
    return JobResult(
        key=key,
        queue=queue,
        gpus=gpus,
        submit=submit,
        duration=100.0,
        admit=start,
        start=start,
        end=end,
        state="Succeeded" if start is not None else "Queued",
        cluster=None if start is None else "c",
        mode=None if start is None else "guaranteed",
        preemptions=len(preempted_for),
        gpu_seconds=0.0 if start is None else gpus * 100.0,
        preempted_for=preempted_for,
        past_deadline=past_deadline,
    )


def sample(time: float, used: Mapping[str, int], pending: Mapping[str, int]) -> Sample:
    return Sample(
        time=time,
        used=dict(used),
        borrowed=dict.fromkeys(used, 0),
        pending=dict(pending),
        busy=sum(used.values()),
        fragmentation=0.0,
    )


def replay(
    jobs: Sequence[JobResult] = (),
    samples: Sequence[Sample] = (),
    *,
    min_gpus: Mapping[str, int] | None = None,
    gpus: int = 16,
    horizon: float = 1000.0,
) -> Replay:
    floors = dict(min_gpus if min_gpus is not None else {"a": 4, "b": 8, "c": 4})
    return Replay(
        policy="fleet",
        jobs=tuple(jobs),
        samples=tuple(samples),
        queues=tuple(floors),
        gpus=gpus,
        horizon=horizon,
        wall_s=1.0,
        iterations=1,
        min_gpus=floors,
        weights=dict.fromkeys(floors, 1.0),
    )


def test_jains_index_of_hand_made_shares() -> None:
    assert report.jain([1.0, 1.0, 1.0]) == 1.0
    assert report.jain([0.5, 0.5]) == 1.0
    assert report.jain([1.0, 0.0, 0.0]) == pytest.approx(1 / 3)
    assert report.jain([2.0, 1.0]) == pytest.approx(9 / 10)
    assert report.jain([3.0, 1.0, 0.0, 0.0]) == pytest.approx(16 / 40)
    assert report.jain([]) is None and report.jain([0.0, 0.0]) is None


def test_a_queue_without_min_is_entitled_to_its_weights_share_of_what_the_mins_leave() -> None:
    got = report.entitlements({"a": 4, "b": 0, "c": 0, "d": 8}, {"b": 1.0, "c": 3.0}, 20)
    assert got == {"a": 4.0, "b": 2.0, "c": 6.0, "d": 8.0}
    assert report.entitlements({"a": 16, "b": 0}, {}, 16) == {"a": 16.0, "b": 0.0}
    assert report.entitlements({"a": 0, "b": 0}, {}, 10) == {"a": 5.0, "b": 5.0}


def test_jains_index_is_the_length_weighted_mean_over_contended_windows() -> None:
    samples = [
        # 0-100: only a waits: nobody to be unfair to, left out.
        sample(0, {"a": 8, "b": 8, "c": 0}, {"a": 1, "b": 0, "c": 0}),
        # 100-400: a (8 of 4: 2.0) and b (4 of 8: 0.5) wait; c does not (left out).
        sample(100, {"a": 8, "b": 4, "c": 4}, {"a": 2, "b": 1, "c": 0}),
        # 400-500: a, b and c wait, each holding its min: 1.
        sample(400, {"a": 4, "b": 8, "c": 4}, {"a": 1, "b": 1, "c": 1}),
        # 500-600: b and c wait holding nothing (a holds all): no share to compare.
        sample(500, {"a": 16, "b": 0, "c": 0}, {"a": 0, "b": 3, "c": 1}),
        # 600-1000 (the end): b and c wait, b holds 8 of 8 and c 0 of 4.
        sample(600, {"a": 8, "b": 8, "c": 0}, {"a": 0, "b": 1, "c": 1}),
    ]
    got = report.fairness(replay(samples=samples))
    first = (2.0 + 0.5) ** 2 / (2 * (4.0 + 0.25))
    expected = (first * 300 + 1.0 * 100 + 0.5 * 400) / 800
    # Over one period of 1000 s (the whole replay): all three waited at some
    # sample; GPU-seconds a 8*100+8*300+4*100+16*100+8*400 = 8400 of 4*1000,
    # b 8*100+4*300+8*100+0+8*400 = 6000 of 8000, c 0+4*300+4*100+0+0 = 1600 of 4000.
    shares = [8400 / 4000, 6000 / 8000, 1600 / 4000]
    day = sum(shares) ** 2 / (3 * sum(x * x for x in shares))
    assert got == {
        "jain_index": pytest.approx(expected, abs=1e-3),
        "jain_index_day": pytest.approx(day, abs=1e-3),
        "windows": 3,
        "contended_s": 800,
    }
    assert report.fairness_over_days(replay(samples=samples), window=1000) == got["jain_index_day"]
    # Periods of 500 s: the first half alone (a, b, c waited), the second (b, c).
    first_half = [(800 + 2400 + 400) / 2000, (800 + 1200 + 800) / 4000, (1200 + 400) / 2000]
    second = [(800 + 3200) / 4000, 0.0]
    by_halves = (report.jain(first_half) or 0) * 500 + (report.jain(second) or 0) * 500
    assert report.fairness_over_days(replay(samples=samples), window=500) == pytest.approx(
        by_halves / 1000, abs=1e-3
    )
    assert report.fairness(replay(samples=samples[:1])) == {
        "jain_index": None,
        "jain_index_day": None,
        "windows": 0,
        "contended_s": 0,
    }
    rows = report.queues_csv(replay(samples=samples[1:2])).splitlines()
    assert rows == [
        "time_s,queue,used_gpus,borrowed_gpus,pending_jobs,share",
        "100,a,8,0,2,2",
        "100,b,4,0,1,0.5",
        "100,c,4,0,0,1",
    ]


def test_delays_overall_for_multi_gpu_jobs_and_per_queue() -> None:
    jobs = [
        result("a/1", "a", 1, 0, 10),  # 10
        result("a/2", "a", 8, 0, 100),  # 100, multi-GPU
        result("b/1", "b", 16, 50, 350),  # 300, multi-GPU
        result("b/2", "b", 1, 50, 50),  # 0
        result("b/3", "b", 2, 60, None),  # never started
    ]
    doc = report.summary(replay(jobs))
    assert doc["queueing_delay_s"] == {"mean": 102.5, "p50": 10.0, "p95": 300.0, "p99": 300.0}
    assert doc["multi_gpu_jobs"] == 3
    assert doc["multi_gpu_queueing_delay_s"] == {
        "mean": 200.0,
        "p50": 100.0,
        "p95": 300.0,
        "p99": 300.0,
    }
    a, b = doc["queues"]["a"], doc["queues"]["b"]
    assert a["queueing_delay_s"]["mean"] == 55.0 and a["queueing_delay_s"]["p95"] == 100.0
    assert a["multi_gpu_queueing_delay_s"]["mean"] == 100.0
    assert b["queueing_delay_s"] == {"mean": 150.0, "p50": 0.0, "p95": 300.0, "p99": 300.0}
    assert b["multi_gpu_queueing_delay_s"]["mean"] == 300.0
    assert (a["entitled_gpus"], b["entitled_gpus"]) == (4.0, 8.0)
    assert "c" not in doc["queues"]  # no jobs
    # 1x100 + 8x100 + 16x100 + 1x100 + 2x100 GPU-seconds asked over 16 GPUs x 60 s of arrivals
    assert doc["offered_load"] == pytest.approx(2800 / 960, abs=1e-3)


def test_preemptions_by_reason_and_jobs_past_their_deadline() -> None:
    jobs = [
        result("a/1", "a", 1, 0, 0, preempted_for=("unknown", "unknown")),
        result(
            "a/2", "a", 1, 0, 0, preempted_for=("unknown",), past_deadline=("DeadlineExceeded",)
        ),
        result(
            "b/1",
            "b",
            1,
            0,
            0,
            past_deadline=("DeadlineExceeded", "MaxRuntimeExceeded"),
        ),
        result("b/2", "b", 1, 0, 0, past_deadline=("MaxRuntimeExceeded",)),
    ]
    doc = report.summary(replay(jobs))
    assert doc["preemptions"] == 3
    assert doc["preemptions_by_reason"] == {"unknown": 3}
    assert doc["past_deadline"] == {"jobs": 3, "DeadlineExceeded": 2, "MaxRuntimeExceeded": 2}
    table = report.compare_table({"fleet": doc})
    assert "Preemptions by reason" in table and "UNKNOWN" in table
    head = next(line for line in table.splitlines() if line.startswith("POLICY "))
    assert head.split()[-5:] == ["JAIN", "JAIN-DAY", "PREEMPT", "PAST", "DEADLINE"]
    row = next(line for line in table.splitlines() if line.startswith("fleet "))
    assert row.split()[-2:] == ["3", "3"]
    quiet = report.summary(replay([result("a/1", "a", 1, 0, 0)]))
    assert quiet["preemptions_by_reason"] == {}
    assert "Preemptions by reason" not in report.compare_table({"fleet": quiet})


def test_the_load_table_has_a_row_per_load_and_policy() -> None:
    doc = report.summary(replay([result("a/1", "a", 8, 0, 10), result("a/2", "a", 1, 100, 100)]))
    text = report.load_table({0.6: {"fleet": doc, "private": doc}, 1.2: {"fleet": doc}})
    rows = [line.split() for line in text.splitlines()[2:]]
    assert [(r[0], r[1]) for r in rows] == [("0.6", "fleet"), ("0.6", "private"), ("1.2", "fleet")]


def test_equal_policies_lines_stay_apart_in_the_plots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib")
    import dataclasses

    import matplotlib.pyplot as plt

    jobs = [result(f"a/{i}", "a", 1, 0.0, 10.0 * i) for i in range(20)]
    samples = [sample(100.0 * i, {"a": i % 5}, {}) for i in range(20)]
    same = [dataclasses.replace(replay(jobs, samples), policy=p) for p in ("one", "two", "three")]
    figures: list[Any] = []
    monkeypatch.setattr(plt, "close", figures.append)
    assert report.plot(same, tmp_path)
    for fig in figures[:2]:  # the delay CDF and utilisation over time: one line each
        lines = fig.axes[0].get_lines()
        assert len(lines) == 3
        looks = {(ln.get_linestyle(), ln.get_marker(), ln.get_color()) for ln in lines}
        assert len(looks) == 3
        assert all(ln.get_alpha() is not None and ln.get_alpha() < 1 for ln in lines)
        assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == [
            "one",
            "two",
            "three",
        ]
    monkeypatch.undo()  # plt.close is plt.close again (it appended to figures)
    for fig in figures:
        plt.close(fig)
