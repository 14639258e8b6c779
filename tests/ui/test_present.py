"""What the dashboard computes from the API's answers: quantities, bars, colours, codes."""

from __future__ import annotations

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
