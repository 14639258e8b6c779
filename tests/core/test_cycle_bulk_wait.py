"""The cycle's shortcuts must decide exactly what trying each job in full would.

Two shortcuts are checked against the cycle without them: waiting a whole
queue at once behind a full node, and remembering a cluster's "does not fit"
answers until something is released there.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.core import cycle as cycle_module
from fleet.core.cycle import Admit, Preempt, Wait, cycle
from fleet.core.state import SchedulerState
from tests.core.factories import make_job, make_nodes, make_state

TREE = {
    "name": "root",
    "min": {"nvidia.com/gpu": 12},
    "max": {"nvidia.com/gpu": 16},
    "children": [
        {"name": "team-a", "min": {"nvidia.com/gpu": 4}, "max": {"nvidia.com/gpu": 16}},
        {"name": "team-b", "min": {"nvidia.com/gpu": 4}, "max": {"nvidia.com/gpu": 12}},
        {"name": "team-c", "min": {"nvidia.com/gpu": 4}, "max": {"nvidia.com/gpu": 8}},
    ],
}

job_spec = st.tuples(
    st.sampled_from(["team-a", "team-b", "team-c"]),
    st.integers(1, 2),  # pods
    st.sampled_from([1, 2, 4]),  # GPUs per pod
    st.sampled_from([-1, 10, 100]),  # priority
)


def fresh_state() -> SchedulerState:
    return make_state(TREE, {"c1": make_nodes(2, gpus=8), "c2": make_nodes(1, gpus=4)})


def outcome(state: SchedulerState, specs: list[tuple[str, int, int, int]]) -> list[object]:
    """Submit ``specs`` in three waves, a cycle after each; what each cycle decided."""
    seen: list[object] = []
    per_wave = max(1, len(specs) // 3)
    for start in range(0, len(specs), per_wave):
        for n, (queue, pods, gpus, priority) in enumerate(specs[start : start + per_wave]):
            state.submit(
                make_job(
                    f"j{start + n}",
                    queue=queue,
                    pods=pods,
                    gpus=gpus,
                    priority=priority,
                    seq=start + n,
                )
            )
        decisions = cycle(state, float(start))
        state.check_invariants()
        seen.append(sorted((d.job, d.cluster) for d in decisions if isinstance(d, Admit)))
        seen.append(sorted(d.job for d in decisions if isinstance(d, Preempt)))
        seen.append(sorted(d.job for d in decisions if isinstance(d, Wait)))
    return seen


@settings(max_examples=80, deadline=None)
@given(specs=st.lists(job_spec, min_size=1, max_size=30))
def test_the_shortcuts_change_no_decision(
    specs: list[tuple[str, int, int, int]],
) -> None:
    with_bulk = outcome(fresh_state(), specs)
    place = cycle_module._Cycle.place

    def place_without_memory(self: cycle_module._Cycle, *args: Any) -> Any:
        self.nofit.clear()
        return place(self, *args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cycle_module._Cycle, "wait_all", lambda *args: False)
        patch.setattr(cycle_module._Cycle, "place", place_without_memory)
        one_by_one = outcome(fresh_state(), specs)
    assert with_bulk == one_by_one


def test_a_full_root_waits_the_rest_of_the_queue_with_the_limit_named() -> None:
    state = make_state(TREE, {"c1": make_nodes(2, gpus=8)})
    for i in range(4):
        state.submit(make_job(f"a{i}", queue="team-a", gpus=4, seq=i))
    cycle(state, 0.0)  # team-a takes the whole root max (16)
    for i in range(5):
        state.submit(make_job(f"b{i}", queue="team-b", gpus=8, seq=10 + i))
    decisions = cycle(state, 1.0)
    reasons = {d.job: d.reason for d in decisions if isinstance(d, Wait)}
    assert all(
        "node 'root' at max nvidia.com/gpu 16/16" in reasons[f"default/b{i}"] for i in (2, 3, 4)
    )
