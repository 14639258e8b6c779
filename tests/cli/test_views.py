"""The shared column vocabulary's cells, and ``--watch``'s changed rows only."""

from __future__ import annotations

import pytest

from fleet.cli import views
from fleet.service import columns

NOW = 1_000_000.0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.4, "0s"), (40, "40s"), (754.9, "12m"), (3900, "1h5m"), (7200, "2h"), (97200, "1d3h")],
)
def test_durations_have_no_fractions_and_two_units_at_most(seconds: float, text: str) -> None:
    assert columns.duration(seconds) == text


@pytest.mark.parametrize(
    ("earliest", "latest", "text"),
    [
        (NOW + 600, NOW + 1500, "in 10-25m"),
        (NOW + 720, None, "in 12m"),
        (NOW + 3000, NOW + 5400, "in 50m-1h30m"),
        (NOW - 60, NOW + 300, "in 0s-5m"),
        (NOW - 600, NOW - 60, "now"),
        (NOW, None, "now"),
        (None, None, "-"),
    ],
)
def test_a_start_is_relative_and_never_in_the_past(
    earliest: float | None, latest: float | None, text: str
) -> None:
    assert columns.start_in(earliest, latest, NOW) == text


def test_gpu_cells() -> None:
    assert columns.gpu_triple(12, 16, 32) == "12/16/32"
    assert columns.gpu_triple(4, 16, None, 4) == "4/16/- +4 opp"
    assert columns.borrowed(0) == "-" and columns.borrowed(3) == "3"
    assert columns.internal("kube-queue/max-jobs") and not columns.internal("nvidia.com/gpu")


def job(name: str, state: str) -> dict[str, object]:
    return {
        "namespace": "team-a",
        "name": name,
        "queue": "team-a",
        "state": state,
        "gpus": 1,
        "submittedAt": "1970-01-12T13:46:40Z",
    }


def test_watch_prints_the_table_then_only_the_rows_that_change() -> None:
    watcher = views.Watcher()
    first = watcher.update(
        views.jobs_table([job("a", "Queued")], NOW, wide=False, namespaced=False)
    )
    assert first.splitlines()[0].split()[:3] == ["NAME", "QUEUE", "STATE"]
    # Ten seconds later, nothing but the age has changed: nothing is printed.
    later = [job("a", "Queued")]
    assert watcher.update(views.jobs_table(later, NOW + 10, wide=False, namespaced=False)) == ""
    moved = [job("a", "Running"), job("b", "Queued")]
    text = watcher.update(views.jobs_table(moved, NOW + 20, wide=False, namespaced=False))
    assert [line.split()[:3] for line in text.splitlines()] == [
        ["team-a/a", "team-a", "Running"],
        ["team-a/b", "team-a", "Queued"],
    ]


def test_a_start_estimate_range_is_read_from_earliest_and_latest() -> None:
    estimate = {"time": "1970-01-12T14:00:00Z", "earliest": "1970-01-12T13:56:40Z"}
    earliest, latest = views.start_range(estimate)
    assert earliest == NOW + 600 and latest == NOW + 600
