"""Exact restore: a state rebuilt from its records decides what the original decides."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.core import events, snapshot
from fleet.core.cycle import Admit, Decision, Preempt, cycle
from fleet.core.placement import RestoreError
from fleet.core.state import SchedulerState
from fleet.testing.cells import cell_placer
from tests.core.factories import (
    confirm_stops,
    finish,
    make_job,
    make_nodes,
    make_state,
    make_tree,
    submit,
)
from tests.core.test_decisions_as_full_trial import TREE, job_spec


def acts(decisions: list[Decision]) -> list[Decision]:
    return [d for d in decisions if isinstance(d, Admit | Preempt)]


def reasons(state: SchedulerState) -> dict[str, str]:
    return {j.key: state.waiting.reason_of(j) for j in state.pending()}


CLUSTERS = {"c1": make_nodes(2, gpus=8), "c2": make_nodes(1, gpus=4)}


def fresh_copy(state: SchedulerState, order_seed: int) -> SchedulerState:
    """Serialise ``state`` through JSON and restore it on a fresh tree and placers."""
    plain = json.loads(json.dumps(snapshot.to_plain(snapshot.take(state))))
    records = snapshot.from_plain(plain)
    shuffled = list(records.running)
    random.Random(order_seed).shuffle(shuffled)
    records = snapshot.Snapshot(records.now, records.pending, records.stopping, tuple(shuffled))
    empty = make_state(TREE, CLUSTERS)
    restored = snapshot.restore(records, make_tree(TREE), empty.placers)
    restored.check_invariants()
    return restored


@settings(max_examples=60, deadline=None)
@given(
    specs=st.lists(job_spec, min_size=1, max_size=24),
    finishes=st.lists(st.integers(0, 50), max_size=6),
    seed=st.integers(0, 1000),
)
def test_a_restored_state_makes_the_same_next_decisions(
    specs: list[tuple[str, int, int, int]], finishes: list[int], seed: int
) -> None:
    state = make_state(TREE, CLUSTERS)
    for n, (queue, pods, gpus, priority) in enumerate(specs):
        submit(
            state, make_job(f"j{n}", queue=queue, pods=pods, gpus=gpus, priority=priority, seq=n)
        )
        if n % 5 == 4:
            decisions = cycle(state, float(n))
            confirm_stops(state, decisions)
            for pick in finishes[: n // 5]:
                running = sorted(state.running)
                if running:
                    finish(state, running[pick % len(running)])
    restored = fresh_copy(state, seed)
    assert snapshot.to_plain(snapshot.take(restored)) == snapshot.to_plain(snapshot.take(state))
    extra = make_job("late", queue="team-b", gpus=4, seq=999)
    submit(state, extra)
    submit(restored, extra)
    # The reasons of waiting jobs are not restored: the restored state reports
    # each again, the original only those that changed; both end with the same.
    assert acts(cycle(state, 100.0)) == acts(cycle(restored, 100.0))
    assert reasons(state) == reasons(restored)


def test_two_jobs_claiming_one_gpu_is_an_error_naming_both() -> None:
    state = make_state(TREE, CLUSTERS)
    submit(state, make_job("a", queue="team-a", gpus=8))
    submit(state, make_job("b", queue="team-b", gpus=8))
    cycle(state, 0.0)
    records = snapshot.take(state)
    a, b = records.running
    clash = snapshot.RunningRecord(
        b.job, a.cluster, b.phase, (snapshot.Unit(b.units[0].charge, a.units[0].pods),)
    )
    broken = snapshot.Snapshot(records.now, (), (), (a, clash))
    with pytest.raises(RestoreError, match="default/a") as err:
        snapshot.restore(broken, make_tree(TREE), make_state(TREE, CLUSTERS).placers)
    assert "default/b" in str(err.value)


def test_a_placement_on_an_unknown_node_is_refused() -> None:
    state = make_state(TREE, CLUSTERS)
    submit(state, make_job("a", queue="team-a", gpus=8))
    cycle(state, 0.0)
    records = snapshot.take(state)
    moved = snapshot.RunningRecord(
        records.running[0].job, "c2", records.running[0].phase, records.running[0].units
    )
    with pytest.raises(RestoreError, match="default/a: "):
        snapshot.restore(
            snapshot.Snapshot(0.0, (), (), (moved,)),
            make_tree(TREE),
            make_state(TREE, CLUSTERS).placers,
        )


def test_events_after_a_restore_follow_the_lifecycle() -> None:
    state = make_state(TREE, CLUSTERS)
    submit(state, make_job("a", queue="team-a", gpus=8))
    cycle(state, 0.0)
    events.apply(state, events.Dispatched("default/a"))
    restored = fresh_copy(state, 0)
    out = events.apply(restored, events.Started("default/a"))
    assert [(t.old, t.new) for t in out] == [("Dispatched", "Running")]  # type: ignore[union-attr]


def cell_state() -> SchedulerState:
    """Two racks of two 4-GPU nodes; VC team-a owns one node, team-b none."""
    placer = cell_placer(racks=2, nodes=2, gpus=4, vcs={"team-a": [("RACK.NODE", 1)]})
    return SchedulerState(make_tree(TREE), {"c1": placer})


def test_a_cell_placer_state_restores_through_json_to_the_same_next_decisions() -> None:
    state = cell_state()
    submit(state, make_job("a-gang", queue="team-a", pods=2, gpus=2, seq=1))
    submit(state, make_job("b-one", queue="team-b", gpus=4, seq=2))
    submit(state, make_job("oppo", queue="team-b", gpus=2, priority=-1, seq=3))
    submit(state, make_job("elastic", queue="team-a", pods=3, gpus=1, gang=False, seq=4))
    confirm_stops(state, cycle(state, 0.0))
    plain = json.loads(json.dumps(snapshot.to_plain(snapshot.take(state))))
    records = snapshot.from_plain(plain)
    late = make_job("late", queue="team-a", gpus=4, seq=9)
    answers = []
    for order in (records.running, tuple(reversed(records.running))):
        shuffled = snapshot.Snapshot(records.now, records.pending, records.stopping, order)
        fresh = cell_state()
        restored = snapshot.restore(shuffled, fresh.tree, fresh.placers)
        restored.check_invariants()
        assert snapshot.to_plain(snapshot.take(restored)) == plain
        submit(restored, late)
        answers.append(cycle(restored, 1.0))
    submit(state, late)
    assert answers == [cycle(state, 1.0)] * 2
