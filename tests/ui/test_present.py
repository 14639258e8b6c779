"""What the dashboard computes from the API's answers: quantities, bars, colours, codes."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from fleet.ui import present


@pytest.mark.parametrize(
    ("text", "value"),
    [("8", 8.0), ("500m", 0.5), ("2Ti", 2.0 * 2**40), ("1.5k", 1500.0), ("64Gi", 64.0 * 2**30)],
)
def test_quantities_are_read_like_kubernetes(text: str, value: float) -> None:
    assert present.quantity(text) == value


@pytest.mark.parametrize("text", [None, "", "8X", "abc", "1..2"])
def test_unreadable_quantities_are_none(text: str | None) -> None:
    assert present.quantity(text) is None


def test_a_bar_splits_used_into_guaranteed_and_borrowed_and_marks_min() -> None:
    node = {
        "min": {"nvidia.com/gpu": "16"},
        "max": {"nvidia.com/gpu": "32"},
        "used": {"nvidia.com/gpu": "24", "kube-queue/max-jobs": "3"},
        "borrowed": {"nvidia.com/gpu": "8"},
    }
    gpu, jobs = present.bars(node)
    assert (gpu.guaranteed_pct, gpu.borrowed_pct, gpu.min_pct) == (50.0, 25.0, 50.0)
    assert gpu.label == "nvidia.com/gpu: used 24 of max 32, min 16, 8 borrowed"
    assert not gpu.over_max and gpu.limited
    assert jobs.resource == "kube-queue/max-jobs" and not jobs.limited and jobs.max == "unlimited"


def test_a_node_over_a_cut_max_is_flagged() -> None:
    node = {"max": {"nvidia.com/gpu": "8"}, "used": {"nvidia.com/gpu": "16"}}
    (gpu,) = present.bars(node)
    assert gpu.over_max and gpu.label.endswith("(over max)")
    assert gpu.guaranteed_pct == 100.0


def test_a_queue_keeps_its_colour_and_a_view_never_shows_two_queues_alike() -> None:
    names = [f"team-{i}" for i in range(present.PALETTE_SIZE)]
    classes = present.vc_classes(names)
    assert len(set(classes.values())) == present.PALETTE_SIZE
    assert present.vc_class("team-a") == present.vc_class("team-a") != "vc-free"
    alone = present.vc_classes(["team-a"])
    assert alone == {"team-a": present.vc_class("team-a")}
    assert present.vc_class(None) == "vc-free"


def test_codes_are_read_from_the_names() -> None:
    assert present.vc_codes(["b", "a", "c"]) == {"a": "A", "b": "B", "c": "C"}
    many = present.vc_codes([f"q{i:02d}" for i in range(28)])
    assert many["q26"] == "Q27" and len(set(many.values())) == 28
    tree = present.vc_codes(["team-b", "sandbox", "team-a", "team-c", "big-memory"])
    assert tree == {
        "big-memory": "BM",
        "sandbox": "S",
        "team-a": "TA",
        "team-b": "TB",
        "team-c": "TC",
    }
    assert present.vc_codes(["team-apple", "team-alpha"]) == {
        "team-alpha": "TA",
        "team-apple": "TA2",
    }


def test_depths_follow_parents() -> None:
    nodes = [
        {"name": "root", "parent": None},
        {"name": "research", "parent": "root"},
        {"name": "team-a", "parent": "research"},
    ]
    assert present.depths(nodes) == {"root": 0, "research": 1, "team-a": 2}


def test_durations_read_naturally() -> None:
    assert [present.duration(s) for s in (5, 65, 3700, 90000)] == [
        "5s",
        "1m 05s",
        "1h 01m",
        "1d 1h",
    ]


def test_table_durations_and_ages_are_compact() -> None:
    assert [present.compact(s) for s in (40, 720, 3900, 7200, 90000, 86400)] == [
        "40s",
        "12m",
        "1h5m",
        "2h",
        "1d1h",
        "1d",
    ]
    assert present.compact(None) == "-"
    now = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
    assert present.age("2026-01-01T11:55:00Z", now) == "5m"
    assert present.age(None, now) == "-"


def cell(job: str | None, queue: str | None = None, mode: str = "guaranteed") -> dict[str, Any]:
    return {"job": job, "queue": queue, "mode": mode if job else None}


def test_jobs_of_one_queue_side_by_side_take_different_shades() -> None:
    nodes = [
        {"cells": [cell("a/one", "team-a"), cell("a/one", "team-a"), cell("a/two", "team-a")]},
        {"cells": [cell("b/x", "team-b"), cell(None), cell("a/three", "team-a")]},
    ]
    jobs = present.map_jobs(nodes)
    assert list(jobs) == ["a/one", "a/two", "b/x", "a/three"]  # first appearance
    assert [jobs[j].shade for j in ("a/one", "a/two", "a/three")] == [0, 1, 2]
    assert jobs["b/x"].shade == 0 and jobs["a/one"].gpus == 2
    many = present.map_jobs([{"cells": [cell(f"j{i}", "q") for i in range(8)]}])
    assert [m.shade for m in many.values()] == [0, 1, 2, 3, 4, 5, 0, 1]


def test_a_virtual_clusters_free_guarantee_that_others_hold_is_lent() -> None:
    # The member's 8 GPUs are all held by sandbox's borrowed job, in team-c's guarantee:
    # "0 free" of the member and "8 free of 8 guaranteed" of team-c are both true.
    member = {
        "gpus": {"total": 8, "used": 8, "free": 0},
        "virtualClusters": [{"name": "team-c", "gpus": {"total": 8, "used": 0, "free": 8}}],
    }
    nodes = [{"cells": [cell("sandbox/follow", "sandbox", "borrowed")] * 8}]
    assert present.lent(member, nodes) == {"team-c": present.Lent(8, ("sandbox",))}
    # With GPUs free on the member, what the VC leaves free is free indeed.
    idle = {**member, "gpus": {"total": 8, "used": 0, "free": 8}}
    assert present.lent(idle, [{"cells": [cell(None)] * 8}]) == {}
    # Two VCs share what is lent, in the member's order.
    two = {
        "gpus": {"total": 16, "used": 10, "free": 6},
        "virtualClusters": [
            {"name": "team-a", "gpus": {"total": 8, "used": 4, "free": 4}},
            {"name": "team-b", "gpus": {"total": 8, "used": 0, "free": 8}},
        ],
    }
    lent = present.lent(two, [{"cells": [cell("s/j", "sandbox", "opportunistic")] * 6}])
    assert lent == {
        "team-a": present.Lent(4, ("sandbox",)),
        "team-b": present.Lent(2, ("sandbox",)),
    }


def test_the_summary_adds_up_members_and_leaves() -> None:
    clusters = [
        {"gpus": {"total": 16, "used": 10, "free": 6}},
        {"gpus": {"total": 8, "used": 0, "free": 7}},
    ]
    queues = [
        {"name": "root", "leaf": False, "admitted": 3, "pending": 2},
        {"name": "a", "leaf": True, "admitted": 2, "pending": 2},
        {"name": "b", "leaf": True, "admitted": 1, "pending": 0},
    ]
    found = present.summary(clusters, queues, {"fleet": 3900.0})
    assert found == present.Summary(10, 13, 24, 3, 2, "1h5m")
    assert present.summary([], queues, None).wait_p95 == "-"


def history(
    series: str, points: list[tuple[float, dict[str, float | None], float | None]]
) -> dict[str, Any]:
    return {
        "series": series,
        "interval": 60.0,
        "queues": ["team-a", "team-b"],
        "points": [
            {
                "time": datetime.datetime.fromtimestamp(t, datetime.UTC).isoformat(),
                "queues": values,
                "fleet": fleet,
            }
            for t, values, fleet in points
        ],
    }


NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)


def test_a_chart_has_a_line_per_queue_broken_where_samples_are_missing() -> None:
    t0 = NOW.timestamp() - 3600
    points = [(t0 + 60 * i, {"team-a": float(i), "team-b": 2.0}, float(i) + 2) for i in range(10)]
    points += [(t0 + 60 * i, {"team-a": 1.0, "team-b": 2.0}, 3.0) for i in range(30, 33)]
    colours = {"team-a": "vc-3", "team-b": "vc-7"}
    chart = present.chart("gpus", "GPUs", history("gpus", points), colours, now=NOW, window=3600)
    assert not chart.empty
    assert [(line.name, line.cls, line.last) for line in chart.lines] == [
        ("team-a", "vc-3", "1"),
        ("team-b", "vc-7", "2"),
    ]
    a = chart.lines[0].path
    assert a.count("M") == 2 and a.count("L") == 9 + 2  # the 20-minute gap breaks it
    assert chart.lines[0].dash != chart.lines[1].dash  # lines on each other still show
    assert [t.label for t in chart.yticks] == ["0", "2", "4", "6", "8", "10"]
    assert [t.label for t in chart.xticks] == ["11:10", "11:20", "11:30", "11:40", "11:50", "12:00"]
    assert all(chart.left <= t.at <= chart.right for t in chart.xticks)
    assert all(chart.top <= t.at <= chart.bottom for t in chart.yticks)


def test_a_wait_chart_writes_durations_and_the_fleet_line() -> None:
    t0 = NOW.timestamp() - 600
    points = [(t0 + 60 * i, {"team-a": 90.0 * i, "team-b": None}, 100.0 * i) for i in range(10)]
    chart = present.chart(
        "wait", "Wait", history("wait", points), {}, now=NOW, window=3600, fleet_line=True
    )
    assert [line.name for line in chart.lines] == ["team-a", "team-b", "all queues"]
    assert chart.lines[1].path == "" and chart.lines[1].last == "-"  # nothing admitted
    assert chart.lines[2].fleet and chart.lines[2].cls == "fleet" and chart.lines[2].last == "15m"
    assert [t.label for t in chart.yticks] == ["0s", "5m", "10m", "15m"]


def test_a_week_of_samples_is_drawn_with_a_bounded_number_of_points() -> None:
    t0 = NOW.timestamp() - 7 * 86400
    points = [(t0 + 60 * i, {"team-a": float(i % 7), "team-b": 0.0}, None) for i in range(7 * 1440)]
    chart = present.chart("gpus", "GPUs", history("gpus", points), {}, now=NOW, window=7 * 86400)
    drawn = chart.lines[0].path.count("L") + chart.lines[0].path.count("M")
    assert drawn <= present.MAX_POINTS + 1
    assert chart.lines[0].path.count("M") == 1  # merged samples leave no gap
    assert chart.yticks[-1].label == "6" or chart.yticks[-1].label == "8"
    assert chart.xticks[0].label.startswith("Dec")
    empty = present.chart("gpus", "GPUs", history("gpus", []), {}, now=NOW, window=3600)
    assert empty.empty


def test_a_chart_of_many_queues_draws_the_busiest_and_the_others_as_one() -> None:
    t0 = NOW.timestamp() - 600
    names = [f"q{i:02d}" for i in range(20)]
    points = [(t0 + 60 * k, {q: float(i) for i, q in enumerate(names)}, None) for k in range(5)]
    found = {**history("gpus", points), "queues": names}
    chart = present.chart("gpus", "GPUs", found, {}, now=NOW, window=3600)
    assert len(chart.lines) == present.MAX_LINES
    assert [line.name for line in chart.lines[:3]] == ["q09", "q10", "q11"]
    other = chart.lines[-1]
    assert other.name == "9 other queues" and other.cls == "vc-free"
    assert other.last == str(sum(range(9)))  # GPUs of the others add up
