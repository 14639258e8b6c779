"""The core's one event entry point: what each event does to the state and reports."""

from __future__ import annotations

import dataclasses

import pytest

from fleet.core import events
from fleet.core.capacity import CapacityPlacer
from fleet.core.cycle import Admit, Preempt, Wait, cycle
from fleet.core.lifecycle import IllegalTransition, JobState
from fleet.core.resources import Resources
from fleet.core.state import DuplicateJob, SchedulerState, Transition, UnknownJob
from tests.core.factories import make_job, make_node, make_nodes, make_state

Q, A, D, R = JobState.QUEUED, JobState.ADMITTED, JobState.DISPATCHED, JobState.RUNNING

TREE = {
    "name": "root",
    "min": {"nvidia.com/gpu": 8},
    "max": {"nvidia.com/gpu": 16},
    "children": [
        {
            "name": "team-a",
            "min": {"nvidia.com/gpu": 4},
            "max": {"nvidia.com/gpu": 16},
            "namespaces": ["research"],
        },
        {
            "name": "team-b",
            "min": {"nvidia.com/gpu": 4},
            "max": {"nvidia.com/gpu": 16},
            "namespaces": ["vision"],
        },
    ],
}


def fresh() -> SchedulerState:
    return make_state(TREE, {"c1": make_nodes(2, gpus=8)})


def moves(out: list[events.Outcome]) -> list[tuple[str, JobState | None, JobState]]:
    return [(t.job, t.old, t.new) for t in out if isinstance(t, Transition)]


def admit(state: SchedulerState, *jobs: object) -> list[object]:
    for job in jobs:
        events.apply(state, events.Submitted(job))  # type: ignore[arg-type]
    return list(cycle(state))


def test_a_job_walks_its_lifecycle_through_events() -> None:
    state = fresh()
    job = make_job("a", gpus=4)
    assert moves(events.apply(state, events.Submitted(job))) == [("default/a", None, Q)]
    assert [type(d) for d in cycle(state)] == [Admit]
    assert state.phase["default/a"] is A
    assert moves(events.apply(state, events.Dispatched("default/a"))) == [("default/a", A, D)]
    assert moves(events.apply(state, events.Started("default/a"))) == [("default/a", D, R)]
    out = events.apply(state, events.Finished("default/a", succeeded=False, reason="OOM"))
    assert moves(out) == [("default/a", R, JobState.FAILED)]
    assert "default/a" not in state.phase and not state.running
    assert state.tree.used("team-a")["nvidia.com/gpu"] == 0
    state.check_invariants()


def test_member_reports_move_a_job_only_while_they_apply() -> None:
    """Late and repeated member reports change nothing; current ones move the job."""
    state = fresh()
    admit(state, make_job("a", gpus=4))
    key = "default/a"
    ignored = [
        events.MemberJobStarted(key),  # still Admitted: the creation is not recorded
        events.MemberJobStopped(key),  # not being stopped
        events.MemberJobStarted("default/nobody"),
        events.MemberJobFinished("default/nobody"),
        events.MemberJobStopped("default/nobody"),
    ]
    for report in ignored:
        assert events.apply(state, report) == []
    assert state.phase[key] is A
    events.apply(state, events.Dispatched(key))
    assert moves(events.apply(state, events.MemberJobStarted(key))) == [(key, D, R)]
    assert events.apply(state, events.MemberJobStarted(key)) == []  # said twice
    out = events.apply(state, events.MemberJobFinished(key, succeeded=False, reason="OOM"))
    assert moves(out) == [(key, R, JobState.FAILED)]
    assert events.apply(state, events.MemberJobFinished(key)) == []  # ended already
    state.check_invariants()


def test_a_member_that_finished_a_job_before_its_creation_was_recorded_ends_it() -> None:
    state = fresh()
    admit(state, make_job("a", gpus=4))
    out = events.apply(state, events.MemberJobFinished("default/a"))
    assert moves(out) == [("default/a", D, JobState.SUCCEEDED)]
    assert not state.running
    state.check_invariants()


def test_a_member_that_stopped_a_preempted_job_queues_it_again() -> None:
    state = fresh()
    admit(state, make_job("low", pods=2, gpus=8, priority=10))
    events.apply(state, events.Dispatched("default/low"))
    decisions = admit(state, make_job("high", pods=2, gpus=8, priority=100))
    assert any(isinstance(d, Preempt) and d.job == "default/low" for d in decisions)
    out = events.apply(state, events.MemberJobStopped("default/low"))
    assert moves(out) == [("default/low", JobState.PREEMPTED, Q)]
    assert events.apply(state, events.MemberJobStopped("default/low")) == []
    state.check_invariants()


def test_an_illegal_move_raises_and_changes_nothing() -> None:
    state = fresh()
    events.apply(state, events.Submitted(make_job("a", gpus=4)))
    with pytest.raises(IllegalTransition):
        events.apply(state, events.Started("default/a"))
    with pytest.raises(IllegalTransition):
        events.apply(state, events.Finished("default/a"))
    assert state.is_pending("default/a") and state.phase["default/a"] is Q
    with pytest.raises(UnknownJob):
        events.apply(state, events.Dispatched("default/nobody"))
    with pytest.raises(DuplicateJob):
        events.apply(state, events.Submitted(make_job("a", gpus=1)))
    state.check_invariants()


def test_a_refused_dispatch_requeues_the_job_in_its_old_place_without_a_preemption() -> None:
    state = fresh()
    admit(state, make_job("a", gpus=4, seq=1))
    events.apply(state, events.Submitted(make_job("b", gpus=16, seq=2)))
    out = events.apply(state, events.DispatchFailed("default/a", "quota exceeded in member"))
    assert moves(out) == [("default/a", A, Q)]
    assert [j.key for j in state.queues["team-a"].pending] == ["default/a", "default/b"]
    assert not state.running
    state.check_invariants()


def test_a_preempted_job_is_queued_again_only_when_the_shell_confirms_it_stopped() -> None:
    state = fresh()
    admit(state, make_job("oppo", queue="team-b", pods=2, gpus=8, priority=-1))
    decisions = admit(state, make_job("owner", gpus=8))
    preempt = next(d for d in decisions if isinstance(d, Preempt))
    assert preempt.cluster == "c1" and len(preempt.pods) == 2  # the whole gang stops
    assert next(d for d in decisions if isinstance(d, Admit)).victims == ("default/oppo",)
    assert state.phase["default/oppo"] is JobState.PREEMPTED
    assert not state.is_pending("default/oppo") and "default/oppo" not in state.running
    state.check_invariants()
    out = events.apply(state, events.Stopped("default/oppo"))
    assert moves(out) == [("default/oppo", JobState.PREEMPTED, Q)]
    assert state.is_pending("default/oppo")
    state.check_invariants()


@pytest.mark.parametrize("where", ["pending", "running", "stopping"])
def test_cancel_frees_what_the_job_holds_wherever_it_is(where: str) -> None:
    state = fresh()
    if where == "stopping":
        admit(state, make_job("a", queue="team-b", pods=2, gpus=8, priority=-1))
        admit(state, make_job("owner", gpus=8))
        key = "default/a"
    elif where == "running":
        admit(state, make_job("a", gpus=4))
        key = "default/a"
    else:
        events.apply(state, events.Submitted(make_job("a", gpus=4)))
        key = "default/a"
    out = events.apply(state, events.Cancelled(key, "user asked"))
    assert [t.new for t in out if isinstance(t, Transition)] == [JobState.CANCELLED]
    assert key not in state.phase and key not in state.running and key not in state.stopping
    assert not state.is_pending(key)
    state.check_invariants()


def test_an_evicted_job_alone_is_preempted_and_queued_once_stopped() -> None:
    state = fresh()
    admit(state, make_job("a", gpus=4), make_job("b", gpus=4))
    assert {k for k in state.running} == {"default/a", "default/b"}
    out = events.apply(state, events.Evicted("default/a", "its cells moved"))
    assert moves(out) == [("default/a", A, JobState.PREEMPTED)]
    assert [t.reason for t in out] == ["its cells moved"]
    assert "default/a" in state.stopping and set(state.running) == {"default/b"}
    assert not state.placers["c1"].holds("default/a")
    events.apply(state, events.Stopped("default/a"))
    assert state.is_pending("default/a")
    with pytest.raises(UnknownJob):
        events.apply(state, events.Evicted("default/a", "not running"))
    state.check_invariants()


def test_a_bad_node_takes_no_new_work_and_its_jobs_are_preempted() -> None:
    state = fresh()
    admit(state, make_job("a", gpus=8))
    node = state.running["default/a"].pods[0].node
    out = events.apply(state, events.NodeHealthChanged("c1", node, False, "ECC errors"))
    assert [(t.job, t.new) for t in out if isinstance(t, Transition)] == [
        ("default/a", JobState.PREEMPTED)
    ]
    assert [t.reason for t in out if isinstance(t, Transition)] == [
        f"node {node} of c1 went bad: ECC errors"
    ]
    assert "default/a" in state.stopping and "default/a" not in state.running
    events.apply(state, events.Stopped("default/a"))
    assert state.is_pending("default/a")
    decisions = admit(state, make_job("b", gpus=8))
    assert [d.pods[0].node for d in decisions if isinstance(d, Admit)] != [node]
    assert not [d for d in admit(state, make_job("c", gpus=8)) if isinstance(d, Admit)]
    events.apply(state, events.NodeHealthChanged("c1", node, healthy=True))
    state.check_invariants()


def test_a_removed_cluster_queues_its_running_jobs_again() -> None:
    state = fresh()
    admit(state, make_job("a", gpus=4))
    events.apply(state, events.ClusterAdded(CapacityPlacer("c2", make_nodes(1, gpus=8))))
    out = events.apply(state, events.ClusterRemoved("c1"))
    assert moves(out) == [("default/a", A, Q)]
    assert list(state.placers) == ["c2"]
    decisions = cycle(state)
    assert [(d.job, d.cluster) for d in decisions if isinstance(d, Admit)] == [("default/a", "c2")]
    with pytest.raises(KeyError):
        events.apply(state, events.ClusterRemoved("c1"))
    with pytest.raises(ValueError, match="already exists"):
        events.apply(state, events.ClusterAdded(CapacityPlacer("c2", make_nodes(1, gpus=8))))
    state.check_invariants()


def test_the_clock_never_goes_back_and_stamps_the_decisions() -> None:
    state = fresh()
    events.apply(state, events.ClockAdvanced(42.0))
    events.apply(state, events.Submitted(make_job("a", gpus=1)))
    assert [d.at for d in cycle(state)] == [42.0]
    with pytest.raises(ValueError, match="cannot go back"):
        events.apply(state, events.ClockAdvanced(41.0))


def routed(name: str, namespace: str, queue: str, **kw: object) -> object:
    job = make_job(name, namespace=namespace, queue=queue, **kw)  # type: ignore[arg-type]
    return dataclasses.replace(job, queue_from_namespace=True)


def test_moving_a_namespace_moves_its_pending_jobs_and_running_jobs_keep_their_charges() -> None:
    state = fresh()
    admit(state, routed("run", "vision", "team-b", gpus=4))
    events.apply(state, events.Submitted(routed("wait", "vision", "team-b", gpus=32)))  # type: ignore[arg-type]
    tree = {
        **TREE,
        "children": [
            {**TREE["children"][0], "namespaces": ["research", "vision"]},  # type: ignore[index, dict-item]
            {**TREE["children"][1], "namespaces": []},  # type: ignore[index, dict-item]
        ],
    }
    events.apply(state, events.QuotaTreeReplaced(make_node(tree)))
    assert [j.key for j in state.queues["team-a"].pending] == ["vision/wait"]
    assert state.running["vision/run"].job.queue == "team-b"
    assert state.tree.used("team-b")["nvidia.com/gpu"] == 4
    state.check_invariants()


def test_a_running_job_whose_leaf_is_removed_follows_its_namespace_at_the_same_cells() -> None:
    state = fresh()
    admit(state, routed("run", "vision", "team-b", gpus=4))
    pods = state.running["vision/run"].pods
    tree = {
        **TREE,
        "children": [
            {**TREE["children"][0], "namespaces": ["research", "vision"]},  # type: ignore[index, dict-item]
        ],
    }
    assert events.apply(state, events.QuotaTreeReplaced(make_node(tree))) == []
    run = state.running["vision/run"]
    assert (run.job.queue, run.pods) == ("team-a", pods)
    assert state.tree.used("team-a")["nvidia.com/gpu"] == 4
    state.check_invariants()


def test_a_job_no_leaf_takes_any_more_is_failed_with_the_reason() -> None:
    state = fresh()
    admit(state, make_job("run", queue="team-b", gpus=4))
    events.apply(state, events.Submitted(make_job("wait", queue="team-b", gpus=32)))
    tree = {**TREE, "children": [TREE["children"][0]]}  # type: ignore[index]
    out = events.apply(state, events.QuotaTreeReplaced(make_node(tree)))
    assert sorted((t.job, t.new) for t in out if isinstance(t, Transition)) == [
        ("default/run", JobState.FAILED),
        ("default/wait", JobState.FAILED),
    ]
    assert all("no" in t.reason for t in out if isinstance(t, Transition))
    assert list(state.queues) == ["team-a"] and not state.running
    state.check_invariants()


def test_a_lowered_max_keeps_running_work_and_admits_nothing_more() -> None:
    state = fresh()
    admit(state, make_job("a", gpus=8), make_job("b", gpus=4))
    events.apply(
        state, events.QuotaNodePatched("team-a", max=Resources.parse({"nvidia.com/gpu": 8}))
    )
    assert len(state.running) == 2
    state.check_invariants()  # usage above the new max is grandfathered
    decisions = admit(state, make_job("c", gpus=1))
    assert not [d for d in decisions if isinstance(d, Admit)]
    state.check_invariants()


def test_a_replaced_cluster_keeps_its_running_jobs_at_their_cells_or_changes_nothing() -> None:
    state = fresh()
    admit(state, make_job("a", gpus=8))
    node = state.running["default/a"].pods[0].node
    old = state.placers["c1"]
    smaller = CapacityPlacer("c1", {n: r for n, r in make_nodes(2, gpus=8).items() if n != node})
    with pytest.raises(events.ClusterInUse) as info:
        events.apply(state, events.ClusterReplaced(smaller))
    assert info.value.jobs == ["default/a"]
    assert state.placers["c1"] is old
    same = CapacityPlacer("c1", make_nodes(2, gpus=8))
    assert events.apply(state, events.ClusterReplaced(same)) == []
    assert state.placers["c1"] is same and same.holds("default/a")
    state.check_invariants()


def test_a_draining_cluster_admits_nothing_new_and_its_jobs_keep_running() -> None:
    state = fresh()
    events.apply(state, events.ClusterAdded(CapacityPlacer("c2", make_nodes(2, gpus=8))))
    admit(state, make_job("a", gpus=8, clusters=frozenset({"c1"})))
    events.apply(state, events.ClusterDraining("c1"))
    decisions = admit(state, make_job("b", gpus=8))
    assert [d.cluster for d in decisions if isinstance(d, Admit)] == ["c2"]
    assert "default/a" in state.running
    with pytest.raises(KeyError):
        events.apply(state, events.ClusterDraining("nope"))
    state.check_invariants()


def test_a_member_that_is_not_ready_admits_nothing_new_until_it_is_ready_again() -> None:
    state = fresh()
    events.apply(state, events.ClusterAdded(CapacityPlacer("c2", make_nodes(2, gpus=8))))
    admit(state, make_job("a", gpus=4, clusters=frozenset({"c1"})))
    events.apply(state, events.ClusterReadiness("c1", False))
    decisions = admit(state, make_job("b", gpus=4))
    assert [d.cluster for d in decisions if isinstance(d, Admit)] == ["c2"]
    assert "default/a" in state.running  # its jobs stay: failover decides
    waits = admit(state, make_job("c", gpus=4, clusters=frozenset({"c1"})))
    assert [d.reason for d in waits if isinstance(d, Wait)] == [
        "no allowed member cluster takes new jobs: c1 is not ready"
    ]
    events.apply(state, events.ClusterReadiness("c1", True))
    decisions = admit(state, make_job("d", gpus=4, clusters=frozenset({"c1"})))
    assert [(d.job, d.cluster) for d in decisions if isinstance(d, Admit)] == [
        ("default/c", "c1"),
        ("default/d", "c1"),
    ]
    with pytest.raises(KeyError):
        events.apply(state, events.ClusterReadiness("nope", True))
    state.check_invariants()


def test_a_failed_over_job_is_queued_again_without_its_member() -> None:
    state = fresh()
    events.apply(state, events.ClusterAdded(CapacityPlacer("c2", make_nodes(2, gpus=8))))
    admit(state, make_job("a", gpus=8, clusters=frozenset({"c1", "c2"})))
    first = state.running["default/a"].cluster
    out = events.apply(state, events.FailedOver("default/a", "member unreachable"))
    assert [(t.old, t.new) for t in out if isinstance(t, Transition)] == [
        (JobState.ADMITTED, JobState.QUEUED)
    ]
    decisions = cycle(state)
    again = [d for d in decisions if isinstance(d, Admit)]
    assert [d.cluster for d in again] == [next(c for c in ("c1", "c2") if c != first)]
    state.check_invariants()


def test_every_transition_of_a_run_says_what_happened_in_words() -> None:
    state = fresh()
    admit(state, make_job("a", gpus=4, pods=2))
    (dispatched,) = events.apply(state, events.Dispatched("default/a"))
    assert isinstance(dispatched, Transition)
    assert dispatched.reason == "created in cluster c1: 2 pods, 8 GPUs"
    events.apply(state, events.ClockAdvanced(30.0))
    (started,) = events.apply(state, events.Started("default/a"))
    assert isinstance(started, Transition)
    assert started.reason == "all 2 pods are running in cluster c1"
    events.apply(state, events.ClockAdvanced(3930.0))
    (failed,) = events.apply(state, events.Finished("default/a", succeeded=False, reason="OOM"))
    assert isinstance(failed, Transition)
    assert failed.reason == "failed after running 1h5m: OOM"
