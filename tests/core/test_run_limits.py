"""Run-time limits: a job's own deadline and its queue's maxRuntime, on a fake clock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleet.core import events, run_limits, snapshot
from fleet.core.capacity import CapacityPlacer
from fleet.core.cycle import Admit, cycle
from fleet.core.lifecycle import JobState
from fleet.core.quota import MaxRuntimeAction, QuotaError
from fleet.core.run_limits import DEADLINE_EXCEEDED, MAX_RUNTIME_EXCEEDED, DueTimes
from fleet.core.state import SchedulerState, Transition
from fleet.manifests import convert
from fleet.manifests.errors import SpecError
from tests.core.factories import make_job, make_node, make_nodes, make_state, make_tree

GPU = "nvidia.com/gpu"
EXAMPLE = Path(__file__).resolve().parents[2] / "policies" / "quota" / "bounded-tree.yaml"


def tree(**team_a: Any) -> dict[str, Any]:
    """16 GPUs; team-a (8 guaranteed) and team-b (8 guaranteed)."""
    return {
        "name": "root",
        "min": {GPU: 16},
        "max": {GPU: 16},
        "children": [
            {"name": "team-a", "min": {GPU: 8}, "max": {GPU: 16}, **team_a},
            {"name": "team-b", "min": {GPU: 8}, "max": {GPU: 16}},
        ],
    }


def state_of(spec: dict[str, Any]) -> SchedulerState:
    return make_state(spec, {"c1": make_nodes(2, gpus=8)})


def at(state: SchedulerState, now: float) -> list[Transition]:
    """Move the clock to ``now`` (what it ended), then run a cycle."""
    out = events.apply(state, events.ClockAdvanced(now))
    cycle(state)
    state.check_invariants()
    return out


def started(state: SchedulerState, *jobs: Any, now: float) -> None:
    for job in jobs:
        events.apply(state, events.Submitted(job))
    events.apply(state, events.ClockAdvanced(now))
    admitted = [d.job for d in cycle(state) if isinstance(d, Admit)]
    assert admitted == [j.key for j in jobs]
    for job in jobs:
        events.apply(state, events.Dispatched(job.key))
        events.apply(state, events.Started(job.key))


def test_a_job_fails_when_its_run_time_reaches_its_own_deadline() -> None:
    state = state_of(tree())
    started(state, make_job("a", gpus=8, deadline=100.0), now=10.0)
    assert state.dues.next() == 110.0
    assert at(state, 109.0) == []
    (ended,) = at(state, 110.0)
    assert (ended.job, ended.old, ended.new) == ("default/a", JobState.RUNNING, JobState.FAILED)
    assert ended.event == DEADLINE_EXCEEDED
    assert (
        "ran 1m40s" in ended.reason and "deadline of 1m40s (activeDeadlineSeconds)" in ended.reason
    )
    assert "default/a" not in state.phase and not state.running
    assert state.tree.used("team-a")[GPU] == 0 and state.dues.next() is None


def test_a_queues_max_runtime_fails_a_job_by_default() -> None:
    state = state_of(tree(maxRuntime=60.0))
    started(state, make_job("a", gpus=8), make_job("b", gpus=8, queue="team-b"), now=0.0)
    (ended,) = at(state, 75.0)  # a tick past the due time ends it all the same
    assert (ended.job, ended.new, ended.event) == (
        "default/a",
        JobState.FAILED,
        MAX_RUNTIME_EXCEEDED,
    )
    assert (
        ended.reason == "the job ran 1m15s, reaching the 1m queue team-a allows a job (maxRuntime)"
    )
    assert list(state.running) == ["default/b"]  # team-b has no maxRuntime


def test_requeue_preempts_the_job_and_its_count_starts_afresh() -> None:
    state = state_of(tree(maxRuntime=60.0, maxRuntimeAction="Requeue"))
    started(state, make_job("a", gpus=8), now=0.0)
    (ended,) = at(state, 60.0)
    assert (ended.new, ended.event) == (JobState.PREEMPTED, MAX_RUNTIME_EXCEEDED)
    assert "Requeue" in ended.reason
    assert "default/a" in state.stopping and "default/a" not in state.ran
    events.apply(state, events.Stopped("default/a"))
    events.apply(state, events.ClockAdvanced(100.0))
    assert [d.job for d in cycle(state) if isinstance(d, Admit)] == ["default/a"]
    assert state.dues.next() == 160.0  # a fresh count: 60 s from the new admission
    assert at(state, 159.0) == []
    assert [t.new for t in at(state, 160.0)] == [JobState.PREEMPTED]


def test_run_time_accumulates_across_a_preemption() -> None:
    state = state_of(tree())
    started(state, make_job("a", gpus=8, deadline=100.0), now=0.0)
    node = state.running["default/a"].pods[0].node
    events.apply(state, events.ClockAdvanced(60.0))
    events.apply(state, events.NodeHealthChanged("c1", node, False, "disk"))
    assert state.ran["default/a"] == 60.0
    events.apply(state, events.Stopped("default/a"))
    events.apply(state, events.ClockAdvanced(200.0))
    assert [d.job for d in cycle(state) if isinstance(d, Admit)] == ["default/a"]
    assert state.run_time("default/a") == 60.0
    assert state.dues.next() == 240.0  # 40 s left of its 100
    (ended,) = at(state, 240.0)
    assert ended.event == DEADLINE_EXCEEDED and "ran 1m40s" in ended.reason


def test_the_earlier_limit_ends_the_job() -> None:
    state = state_of(tree(maxRuntime=100.0, maxRuntimeAction="Requeue"))
    started(state, make_job("own", gpus=8, deadline=50.0), make_job("q", gpus=8), now=0.0)
    assert [(t.job, t.event) for t in at(state, 50.0)] == [("default/own", DEADLINE_EXCEEDED)]
    assert [(t.job, t.new) for t in at(state, 100.0)] == [("default/q", JobState.PREEMPTED)]


def test_at_the_same_figure_the_jobs_own_deadline_ends_it() -> None:
    limit = run_limits.first_limit(60.0, 60.0, MaxRuntimeAction.REQUEUE)
    assert limit == run_limits.Limit(60.0, DEADLINE_EXCEEDED, MaxRuntimeAction.FAIL)
    assert run_limits.first_limit(None, 0.0, MaxRuntimeAction.FAIL) is None


def test_a_restored_running_job_keeps_its_accumulated_run_time() -> None:
    state = state_of(tree())
    started(state, make_job("a", gpus=8, deadline=100.0), now=0.0)
    node = state.running["default/a"].pods[0].node
    events.apply(state, events.ClockAdvanced(30.0))
    events.apply(state, events.Evicted("default/a", f"{node} gone"))
    events.apply(state, events.Stopped("default/a"))
    events.apply(state, events.ClockAdvanced(50.0))
    cycle(state)
    taken = snapshot.take(state)
    plain = snapshot.to_plain(taken)
    assert plain["running"][0]["units"][0]["ran"] == 30.0
    placers = {"c1": CapacityPlacer("c1", make_nodes(2, gpus=8))}
    again = snapshot.restore(snapshot.from_plain(plain), make_tree(tree()), placers)
    again.check_invariants()
    assert again.ran == {"default/a": 30.0} and again.dues.next() == 120.0
    events.apply(again, events.ClockAdvanced(119.0))
    assert events.apply(again, events.ClockAdvanced(120.0))[0].event == DEADLINE_EXCEEDED


def test_a_waiting_jobs_run_time_is_in_its_snapshot() -> None:
    state = state_of(tree())
    started(state, make_job("a", gpus=8, deadline=100.0), now=0.0)
    events.apply(state, events.ClockAdvanced(30.0))
    events.apply(state, events.Evicted("default/a", "gone"))
    plain = snapshot.to_plain(snapshot.take(state))
    assert plain["ran"] == {"default/a": 30.0}
    assert plain["stopping"][0]["active_deadline"] == 100.0
    placers = {"c1": CapacityPlacer("c1", make_nodes(2, gpus=8))}
    again = snapshot.restore(snapshot.from_plain(plain), make_tree(tree()), placers)
    assert again.ran == {"default/a": 30.0}
    assert again.stopping["default/a"].active_deadline == 100.0


def test_a_record_without_a_deadline_reads_as_before() -> None:
    job = make_job("a", gpus=8)
    plain = snapshot.job_to_plain(job)
    assert "active_deadline" not in plain
    assert snapshot.job_from_plain(plain) == job
    assert "ran" not in snapshot.units_to_plain([], 0.0)


def test_a_tree_change_sets_the_due_times_of_running_jobs() -> None:
    state = state_of(tree())
    started(state, make_job("a", gpus=8), now=0.0)
    assert state.dues.next() is None
    events.apply(state, events.QuotaTreeReplaced(make_node(tree(maxRuntime=300.0))))
    assert state.dues.next() == 300.0
    events.apply(state, events.QuotaTreeReplaced(make_node(tree())))
    assert state.dues.next() is None and at(state, 1000.0) == []


def test_max_runtime_is_inherited_and_a_child_may_set_its_own() -> None:
    spec = {
        "name": "root",
        "maxRuntime": 3600.0,
        "maxRuntimeAction": "Requeue",
        "children": [
            {"name": "org", "children": [{"name": "a"}, {"name": "b", "maxRuntime": 600.0}]},
            {"name": "c", "maxRuntimeAction": "Fail"},
        ],
    }
    built = make_tree(spec)
    assert built.max_runtime("a") == (3600.0, MaxRuntimeAction.REQUEUE)
    assert built.max_runtime("b") == (600.0, MaxRuntimeAction.REQUEUE)
    assert built.max_runtime("c") == (3600.0, MaxRuntimeAction.FAIL)
    assert make_tree({"name": "root"}).max_runtime("root") == (0.0, MaxRuntimeAction.FAIL)
    assert built.to_spec() == make_node(spec)
    assert built.copy().max_runtime("b") == (600.0, MaxRuntimeAction.REQUEUE)


@pytest.mark.parametrize("seconds", [0.0, -5.0, float("inf")])
def test_a_max_runtime_that_is_not_a_positive_finite_duration_is_refused(seconds: float) -> None:
    with pytest.raises(QuotaError) as raised:
        make_tree({"name": "root", "children": [{"name": "a", "maxRuntime": seconds}]})
    assert raised.value.path == "spec.root.children[0].maxRuntime"


QUOTA = """
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {name: t}
spec:
  root:
    name: root
    maxRuntime: 24h
    children:
      - {name: a, namespaces: [a], maxRuntime: 1h30m, maxRuntimeAction: Requeue}
      - {name: b, namespaces: [b]}
"""


def test_the_tree_document_takes_max_runtime_and_its_action() -> None:
    built, _ = convert.load_quota(QUOTA)
    assert built.max_runtime("a") == (5400.0, MaxRuntimeAction.REQUEUE)
    assert built.max_runtime("b") == (86400.0, MaxRuntimeAction.FAIL)


def test_the_example_tree_bounds_its_queues_as_its_comments_say() -> None:
    built, _ = convert.load_quota((EXAMPLE).read_text(encoding="utf-8"))
    assert built.max_runtime("team-a") == (168 * 3600.0, MaxRuntimeAction.FAIL)
    assert built.max_runtime("team-c") == (24 * 3600.0, MaxRuntimeAction.FAIL)
    assert built.max_runtime("sandbox") == (2 * 3600.0, MaxRuntimeAction.REQUEUE)


@pytest.mark.parametrize(
    ("old", "new", "path", "words"),
    [
        ("maxRuntime: 1h30m", "maxRuntime: soon", "maxRuntime", "not a duration"),
        ("maxRuntime: 1h30m", "maxRuntime: 0s", "maxRuntime", "above zero"),
        ("maxRuntimeAction: Requeue", "maxRuntimeAction: Kill", "maxRuntimeAction", "Requeue"),
    ],
)
def test_a_bad_max_runtime_is_an_error_at_its_field(
    old: str, new: str, path: str, words: str
) -> None:
    with pytest.raises(SpecError) as raised:
        convert.load_quota(QUOTA.replace(old, new))
    issues = raised.value.issues
    assert [i.path for i in issues] == [f"spec.root.children[0].{path}"]
    assert words in issues[0].message, issues[0].message


def test_due_times_pop_only_what_is_due_and_skip_stale_entries() -> None:
    dues = DueTimes()
    for i in range(200):
        dues.set(f"j{i:03}", float(i))
    for i in range(0, 200, 2):
        dues.drop(f"j{i:03}")  # stopped running
    dues.set("j001", 500.0)  # due later now
    assert dues.next() == 3.0
    assert dues.pop_due(9.0) == ["j003", "j005", "j007", "j009"]
    assert len(dues) == 96 and dues.next() == 11.0
    for i in range(1000):
        dues.set("again", float(1000 + i))  # entries replaced many times: compacted
    assert len(dues._heap) <= 2 * len(dues) + 64
    assert dues.pop_due(2000.0)[-3:] == ["j199", "j001", "again"]
