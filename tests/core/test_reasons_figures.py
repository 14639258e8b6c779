"""A waiting job's reason gives the figures as they are when it is tried.

A quota block's text names the usage it found ("6 of 10 GPUs guaranteed in use").
When a job of the same queue is admitted between two jobs of one shape, the
second is stopped by the same limit with other figures: its text must give
them, as trying it in full does (the cycle with no shortcut), not the text
remembered for the first.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fleet.core.cycle import Wait, cycle
from fleet.core.cycle_memory import ALL_SHORTCUTS, NO_SHORTCUTS, Shortcuts
from fleet.core.jobs import Job
from fleet.core.state import SchedulerState
from tests.core.factories import make_job, make_nodes, make_state, submit

TREE = {
    "name": "root",
    "min": {"nvidia.com/gpu": 16},
    "max": {"nvidia.com/gpu": 16},
    "children": [
        {"name": "team-a", "min": {"nvidia.com/gpu": 10}, "max": {"nvidia.com/gpu": 16}},
        {"name": "team-b", "min": {"nvidia.com/gpu": 6}, "max": {"nvidia.com/gpu": 6}},
    ],
}


def _rigid(queue: str) -> list[Job]:
    # 4 in use; 8 more is over the min of 10; 2 more fits it; then 8 again.
    return [
        make_job("big-1", queue=queue, gpus=8, priority=120, preemptible=False, seq=11),
        make_job("small", queue=queue, gpus=2, priority=120, preemptible=False, seq=12),
        make_job("big-2", queue=queue, gpus=8, priority=120, preemptible=False, seq=13),
    ]


def _capped(queue: str) -> list[Job]:
    # team-b's max is its min (6): 4 in use, 4 more is over it, 2 more fits.
    return [
        make_job("big-1", queue=queue, gpus=4, seq=11),
        make_job("small", queue=queue, gpus=2, seq=12),
        make_job("big-2", queue=queue, gpus=4, seq=13),
    ]


def _reason_of_big_2(queue: str, jobs: Callable[[str], list[Job]], shortcuts: Shortcuts) -> str:
    state: SchedulerState = make_state(TREE, {"c1": make_nodes(4, gpus=8)})
    submit(state, make_job("running", queue=queue, gpus=4, seq=1))
    cycle(state, 0.0, shortcuts=shortcuts)
    assert "default/running" in state.running
    submit(state, *jobs(queue))
    decisions = cycle(state, 1.0, shortcuts=shortcuts)
    assert "default/small" in state.running
    waits = {d.job: d.reason for d in decisions if isinstance(d, Wait)}
    return waits["default/big-2"]


@pytest.mark.parametrize(
    ("queue", "jobs", "figures"),
    [
        ("team-a", _rigid, "6 of 10 GPUs guaranteed in use; this job needs 8"),
        ("team-b", _capped, "6 of 6 GPUs used"),
    ],
    ids=["non-preemptible-over-min", "at-max"],
)
def test_the_second_job_of_a_shape_names_the_usage_after_the_admission_between(
    queue: str, jobs: Callable[[str], list[Job]], figures: str
) -> None:
    reason = _reason_of_big_2(queue, jobs, ALL_SHORTCUTS)
    assert figures in reason, reason
    assert reason == _reason_of_big_2(queue, jobs, NO_SHORTCUTS)
