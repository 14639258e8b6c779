"""Regression tests for the cycle: each failed before its fix."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.core import admission
from fleet.core.cells.config import load_cell_config
from fleet.core.cells.placer import CellPlacer
from fleet.core.charges import Charge
from fleet.core.cycle import Admit, Preempt, Wait, cycle
from fleet.core.cycle_context import CycleRun
from fleet.core.cycle_memory import NO_SHORTCUTS
from fleet.core.jobs import Job, Mode
from fleet.core.placement import BindError, Fit
from fleet.core.state import SchedulerState
from fleet.testing.cells import rack_config
from tests.core.factories import make_job, make_nodes, make_state, make_tree, submit
from tests.core.test_decisions_as_full_trial import fresh_state, job_spec, outcome

LEAF8 = {
    "name": "root",
    "min": {"nvidia.com/gpu": 12},
    "max": {"nvidia.com/gpu": 12},
    "children": [
        {"name": "team-a", "min": {"nvidia.com/gpu": 4}, "max": {"nvidia.com/gpu": 8}},
        {"name": "team-b", "min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 8}},
    ],
}


def test_preempting_a_grown_job_for_a_higher_priority_job_of_its_queue() -> None:
    state = make_state(LEAF8, {"c1": make_nodes(2, gpus=8)})
    submit(state, make_job("elastic", queue="team-a", pods=3, gpus=4, gang=False))
    first = cycle(state, 0.0)
    state.check_invariants()
    grown = [d for d in first if isinstance(d, Admit)]
    assert len(state.running["default/elastic"].units) == 2, grown
    assert state.running["default/elastic"].units[1].charge.key == "default/elastic#2"
    # A priority-100 job asking for 8 GPUs in the same leaf: it used to crash
    # with KeyError on the growth charge "default/elastic#2".
    submit(state, make_job("urgent", queue="team-a", gpus=8, priority=100))
    decisions = cycle(state, 1.0)
    state.check_invariants()
    preempts = [d for d in decisions if isinstance(d, Preempt)]
    assert preempts, decisions
    assert all(d.job == "default/elastic" for d in preempts)


def test_a_growth_step_reclaimed_leaves_the_job_running() -> None:
    state = make_state(LEAF8, {"c1": make_nodes(4, gpus=4)})
    submit(state, make_job("elastic", queue="team-a", pods=3, gpus=4, gang=False))
    cycle(state, 0.0)
    run = state.running["default/elastic"]
    assert [u.charge.mode for u in run.units] == [Mode.GUARANTEED, Mode.BORROWED]
    submit(state, make_job("owner", queue="team-b", pods=2, gpus=4))
    decisions = cycle(state, 1.0)
    state.check_invariants()
    preempts = [d for d in decisions if isinstance(d, Preempt)]
    assert [(d.job, d.unit) for d in preempts] == [("default/elastic", "default/elastic#2")]
    assert "default/elastic" in state.running  # its guaranteed part keeps running
    assert len(state.running["default/elastic"].pods) == 1
    assert "default/owner" in state.running


def test_min_available_starts_at_the_largest_size_that_fits() -> None:
    tree = {"name": "root", "children": [{"name": "team-a"}]}
    state = make_state(tree, {"c1": make_nodes(6, gpus=1)})
    submit(state, make_job("gang", pods=8, gpus=1, min_members=5))
    decisions = cycle(state, 0.0)
    started = [d for d in decisions if isinstance(d, Admit) and not d.grown]
    assert len(started) == 1 and len(started[0].pods) == 6


def test_a_refused_victim_search_leaves_the_state_exactly_as_it_was() -> None:
    tree = {
        "name": "root",
        "min": {"nvidia.com/gpu": 8},
        "max": {"nvidia.com/gpu": 8},
        "children": [
            {"name": "team-a", "min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 8}},
            {"name": "team-b", "max": {"nvidia.com/gpu": 8}},
        ],
    }
    # Quota victims exist (team-b borrows), but no cluster can take the job
    # even after they go: the plan is refused and every charge is put back.
    state = make_state(tree, {"c1": make_nodes(1, gpus=4), "c2": make_nodes(1, gpus=4)})
    submit(state, make_job("b1", queue="team-b", gpus=4))
    submit(state, make_job("b2", queue="team-b", gpus=4))
    cycle(state, 0.0)
    used_before = state.tree.used("team-b")
    submit(state, make_job("big", queue="team-a", pods=1, gpus=8))
    decisions = cycle(state, 1.0)
    state.check_invariants()
    assert [d.job for d in decisions if isinstance(d, Wait)] == ["default/big"]
    assert not [d for d in decisions if isinstance(d, Preempt)]
    assert state.tree.used("team-b") == used_before


@settings(max_examples=40, deadline=None)
@given(specs=st.lists(job_spec, min_size=1, max_size=24))
def test_every_refused_plan_leaves_the_state_consistent(
    specs: list[tuple[str, int, int, int]],
) -> None:
    original = admission.plan_with_victims

    def checked(run: CycleRun, *args: Any) -> Any:
        before = {q: run.state.tree.used(q) for q in run.state.tree.nodes()}
        result = original(run, *args)
        if not isinstance(result, admission.Plan):
            # Mid-cycle, admitted jobs still sit in their pending lists until the
            # end of the cycle: check the quota tree and every placer.
            run.state.tree.check_invariants()
            for placer in run.state.placers.values():
                placer.check_invariants()
            assert {q: run.state.tree.used(q) for q in run.state.tree.nodes()} == before
        return result

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(admission, "plan_with_victims", checked)
        outcome(fresh_state(), specs, NO_SHORTCUTS)


class RefusingCells(CellPlacer):
    """A cell placer that refuses every fit that plans preemption, at bind time."""

    def bind(self, job: Job, charge: Charge, fit: Fit) -> None:
        if fit.victims:
            raise BindError(f"{job.key}: refused")
        super().bind(job, charge, fit)


@pytest.mark.interpreted_core
def test_a_refused_bind_puts_cell_victims_back_exactly() -> None:
    tree = {
        "name": "root",
        "min": {"nvidia.com/gpu": 8},
        "children": [
            {"name": "team-a", "min": {"nvidia.com/gpu": 4}},
            {"name": "team-b", "min": {"nvidia.com/gpu": 4}},
        ],
    }
    config = rack_config(1, 2, 4, {"team-a": [("RACK.NODE", 1)], "team-b": [("RACK.NODE", 1)]})
    placer = RefusingCells("c1", load_cell_config(config))
    state = SchedulerState(make_tree(tree), {"c1": placer})
    submit(state, make_job("oppo", queue="team-b", pods=2, gpus=4, priority=-1))
    cycle(state, 0.0)
    before = placer.placement_of("default/oppo")
    submit(state, make_job("owner", queue="team-a", gpus=4))
    decisions = cycle(state, 1.0)
    state.check_invariants()
    assert not [d for d in decisions if isinstance(d, Preempt | Admit)]
    assert placer.placement_of("default/oppo") == before
