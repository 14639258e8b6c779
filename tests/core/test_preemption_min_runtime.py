"""preemptMinRuntime and reclaimMinRuntime: young jobs are spared as victims, for a while."""

from __future__ import annotations

from typing import Any

from fleet.core import events, snapshot
from fleet.core.cycle import Admit, Preempt, Wait, cycle
from fleet.core.jobs import Mode
from fleet.core.state import SchedulerState
from fleet.manifests import convert
from fleet.manifests.errors import SpecError
from fleet.testing.cells import cell_placer
from tests.core.factories import make_job, make_node, make_nodes, make_state, make_tree

GPU = "nvidia.com/gpu"


def tree(**root: Any) -> dict[str, Any]:
    """16 GPUs shared by team-a and team-b, 8 guaranteed each."""
    return {
        "name": "root",
        "min": {GPU: 16},
        "max": {GPU: 16},
        "children": [
            {"name": "team-a", "min": {GPU: 8}, "max": {GPU: 16}},
            {"name": "team-b", "min": {GPU: 8}, "max": {GPU: 16}},
        ],
        **root,
    }


def at(state: SchedulerState, now: float) -> list[object]:
    events.apply(state, events.ClockAdvanced(now))
    return list(cycle(state))


def borrowing_b(spec: dict[str, Any]) -> SchedulerState:
    """team-b runs b1 (guaranteed) and b2 (borrowed), admitted at t=0."""
    state = make_state(spec, {"c1": make_nodes(2, gpus=8)})
    for name in ("b1", "b2"):
        events.apply(state, events.Submitted(make_job(name, queue="team-b", gpus=8)))
    decisions = at(state, 0.0)
    assert [d.mode for d in decisions if isinstance(d, Admit)] == [
        Mode.GUARANTEED,
        Mode.BORROWED,
    ]
    return state


def test_reclaim_spares_a_job_younger_than_reclaim_min_runtime_and_says_until_when() -> None:
    state = borrowing_b(tree(reclaimMinRuntime=600.0))
    events.apply(state, events.Submitted(make_job("a1", queue="team-a", gpus=8)))
    decisions = at(state, 100.0)
    waits = {d.job: d.reason for d in decisions if isinstance(d, Wait)}
    assert "protected by reclaimMinRuntime until 1970-01-01T00:10:00Z" in waits["default/a1"]
    assert not [d for d in decisions if isinstance(d, Preempt)]
    decisions = at(state, 600.0)
    assert [d.job for d in decisions if isinstance(d, Preempt)] == ["default/b2"]
    state.check_invariants()


def test_without_minimum_runtimes_reclaim_happens_at_once() -> None:
    state = borrowing_b(tree())
    events.apply(state, events.Submitted(make_job("a1", queue="team-a", gpus=8)))
    assert [d.job for d in at(state, 1.0) if isinstance(d, Preempt)] == ["default/b2"]


def test_a_child_inherits_its_parents_minimum_runtime_unless_it_sets_its_own() -> None:
    spec = tree(reclaimMinRuntime=600.0, preemptMinRuntime=60.0)
    spec["children"][1]["reclaimMinRuntime"] = 0.0
    built = make_tree(spec)
    assert built.min_runtimes("team-a") == (60.0, 600.0)
    assert built.min_runtimes("team-b") == (60.0, 0.0)
    assert built.to_spec() == make_node(spec)
    state = borrowing_b(spec)
    events.apply(state, events.Submitted(make_job("a1", queue="team-a", gpus=8)))
    assert [d.job for d in at(state, 1.0) if isinstance(d, Preempt)] == ["default/b2"]


def test_priority_preemption_in_a_queue_spares_a_job_younger_than_preempt_min_runtime() -> None:
    spec = {
        "name": "root",
        "max": {GPU: 8},
        "children": [{"name": "team-a", "max": {GPU: 8}, "preemptMinRuntime": 300.0}],
    }
    state = make_state(spec, {"c1": make_nodes(1, gpus=8)})
    events.apply(state, events.Submitted(make_job("low", gpus=8, priority=10)))
    at(state, 0.0)
    events.apply(state, events.Submitted(make_job("high", gpus=8, priority=100)))
    waits = {d.job: d.reason for d in at(state, 60.0) if isinstance(d, Wait)}
    assert "protected by preemptMinRuntime until 1970-01-01T00:05:00Z" in waits["default/high"]
    assert [d.job for d in at(state, 300.0) if isinstance(d, Preempt)] == ["default/low"]


def test_a_bad_node_preempts_a_protected_job_all_the_same() -> None:
    state = borrowing_b(tree(reclaimMinRuntime=600.0, preemptMinRuntime=600.0))
    node = state.running["default/b2"].pods[0].node
    out = events.apply(state, events.NodeHealthChanged("c1", node, False, "disk"))
    assert "default/b2" in state.stopping and out
    events.apply(state, events.NodeHealthChanged("c1", node, True))


def test_the_admission_time_survives_a_snapshot() -> None:
    state = borrowing_b(tree(reclaimMinRuntime=600.0))
    unit = state.running["default/b2"].units[0]
    again = snapshot.unit_from_plain(state.running["default/b2"].job, snapshot.unit_to_plain(unit))
    assert again.charge == unit.charge
    old = dict(snapshot.unit_to_plain(unit))
    del old["since"]  # a record written before minimum runtimes existed
    assert snapshot.unit_from_plain(state.running["default/b2"].job, old).charge.since == 0.0


QUOTA = """
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {name: t}
spec:
  root:
    name: root
    preemptMinRuntime: 5m
    children:
      - {name: a, namespaces: [a], reclaimMinRuntime: 1h30m}
      - {name: b, namespaces: [b], preemptMinRuntime: 0s}
"""


def test_the_tree_document_takes_the_durations() -> None:
    built, _ = convert.load_quota(QUOTA)
    assert built.min_runtimes("a") == (300.0, 5400.0)
    assert built.min_runtimes("b") == (0.0, 0.0)


def test_a_bad_duration_is_a_field_error() -> None:
    try:
        convert.load_quota(QUOTA.replace("1h30m", "soon"))
    except SpecError as e:
        assert [i.path for i in e.issues] == ["spec.root.children[0].reclaimMinRuntime"]
        assert "not a duration" in e.issues[0].message
    else:
        raise AssertionError("a bad duration was accepted")


def test_cells_held_by_a_young_job_of_another_queue_are_taken_only_after_reclaim_min_runtime() -> (
    None
):
    # One node is team-a's virtual cluster, the other team-b's; b-opp, opportunistic,
    # runs on team-a's idle node until team-a needs it.
    placer = cell_placer(
        "c1",
        racks=1,
        nodes=2,
        gpus=8,
        vcs={"team-a": [("RACK.NODE", 1)], "team-b": [("RACK.NODE", 1)]},
    )
    state = SchedulerState(make_tree(tree(reclaimMinRuntime=600.0)), {"c1": placer})
    events.apply(state, events.Submitted(make_job("b1", queue="team-b", gpus=8)))
    events.apply(state, events.Submitted(make_job("b-opp", queue="team-b", gpus=8, priority=-1)))
    decisions = at(state, 0.0)
    assert {d.job: d.mode for d in decisions if isinstance(d, Admit)} == {
        "default/b1": Mode.GUARANTEED,
        "default/b-opp": Mode.OPPORTUNISTIC,
    }
    events.apply(state, events.Submitted(make_job("a1", queue="team-a", gpus=8)))
    decisions = at(state, 100.0)
    assert not [d for d in decisions if isinstance(d, Preempt | Admit)]
    reason = {d.job: d.reason for d in decisions if isinstance(d, Wait)}["default/a1"]
    assert "protected by reclaimMinRuntime until 1970-01-01T00:10:00Z" in reason, reason
    decisions = at(state, 600.0)
    assert [d.job for d in decisions if isinstance(d, Preempt)] == ["default/b-opp"]
    state.check_invariants()


def test_without_minimum_runtimes_the_cells_are_taken_at_once() -> None:
    placer = cell_placer(
        "c1",
        racks=1,
        nodes=2,
        gpus=8,
        vcs={"team-a": [("RACK.NODE", 1)], "team-b": [("RACK.NODE", 1)]},
    )
    state = SchedulerState(make_tree(tree()), {"c1": placer})
    events.apply(state, events.Submitted(make_job("b1", queue="team-b", gpus=8)))
    events.apply(state, events.Submitted(make_job("b-opp", queue="team-b", gpus=8, priority=-1)))
    at(state, 0.0)
    events.apply(state, events.Submitted(make_job("a1", queue="team-a", gpus=8)))
    decisions = at(state, 100.0)
    assert [d.job for d in decisions if isinstance(d, Preempt)] == ["default/b-opp"]
