"""Per-user limits inside a team (``limits.perUser`` on a leaf): caps by jobs and by
GPUs, other users unaffected, no preemption, growth held to the cap, the counters."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.core import snapshot
from fleet.core.checks import InvariantError
from fleet.core.cycle import Admit, Decision, Preempt, cycle
from fleet.core.quota import QuotaError
from fleet.core.resources import GPU, MAX_JOBS
from fleet.core.state import SchedulerState
from tests.core.factories import (
    confirm_stops,
    finish,
    make_job,
    make_node,
    make_nodes,
    make_state,
    make_tree,
    submit,
)


def tree(per_user: dict[str, int], team_max: int = 16) -> dict[str, Any]:
    return {
        "name": "root",
        "min": {GPU: 16},
        "max": {GPU: 16},
        "children": [
            {
                "name": "team-a",
                "min": {GPU: 8},
                "max": {GPU: team_max},
                "limits": {"perUser": per_user},
            },
            {"name": "team-b", "min": {GPU: 8}, "max": {GPU: 16}},
        ],
    }


def state_with(per_user: dict[str, int], team_max: int = 16) -> SchedulerState:
    return make_state(tree(per_user, team_max), {"c1": make_nodes(2, gpus=8)})


def run(state: SchedulerState, now: float = 0.0) -> list[Decision]:
    decisions = cycle(state, now)
    state.check_invariants()
    confirm_stops(state, decisions)
    state.check_invariants()
    return decisions


def started(decisions: list[Decision]) -> list[str]:
    return sorted(d.job for d in decisions if isinstance(d, Admit) and not d.grown)


def reason(state: SchedulerState, key: str) -> str:
    job = next(j for j in state.pending() if j.key == key)
    return state.waiting.reason_of(job)


def test_a_user_at_the_running_jobs_cap_waits_and_other_users_jobs_behind_start() -> None:
    state = state_with({"runningJobs": 2})
    submit(
        state,
        make_job("a1", gpus=1, user="alice"),
        make_job("a2", gpus=1, user="alice"),
        make_job("a3", gpus=1, user="alice"),
        make_job("b1", gpus=1, user="bob"),
        make_job("n1", gpus=1),
    )
    assert started(run(state)) == ["default/a1", "default/a2", "default/b1", "default/n1"]
    assert reason(state, "default/a3") == (
        "user alice runs the most jobs queue team-a allows one user: 2 of 2 jobs running "
        "(limits.perUser.runningJobs)"
    )
    assert state.users.of("team-a", "alice") == {MAX_JOBS: 2, GPU: 2}
    finish(state, "default/a1")
    assert state.users.of("team-a", "alice") == {MAX_JOBS: 1, GPU: 1}
    assert started(run(state, 1.0)) == ["default/a3"]


def test_a_user_at_the_gpu_cap_waits_with_the_figures() -> None:
    state = state_with({GPU: 4})
    submit(
        state,
        make_job("a1", gpus=2, user="alice"),
        make_job("a2", gpus=2, user="alice"),
        make_job("a3", gpus=2, user="alice"),
        make_job("b1", gpus=4, user="bob"),
    )
    assert started(run(state)) == ["default/a1", "default/a2", "default/b1"]
    assert reason(state, "default/a3") == (
        "user alice's share of queue team-a is full: 4 of 4 GPUs held "
        "(limits.perUser.nvidia.com/gpu); this job needs 2"
    )


def test_a_job_over_its_users_cap_preempts_nobody() -> None:
    # team-a is full of other low-priority work (no user named): alice's
    # high-priority job would preempt one of them, but she is at her cap.
    state = state_with({"runningJobs": 1}, team_max=8)
    submit(state, make_job("a1", gpus=1, user="alice", priority=10))
    submit(state, *(make_job(f"b{i}", gpus=1, priority=10) for i in range(7)))
    assert len(started(run(state))) == 8
    submit(state, make_job("a2", gpus=1, user="alice", priority=100))
    decisions = run(state, 1.0)
    assert not [d for d in decisions if isinstance(d, Preempt)]
    assert "user alice runs the most jobs queue team-a allows one user: 1 of 1 job" in reason(
        state, "default/a2"
    )
    # Without a cap the same job preempts one of them.
    free = state_with({"runningJobs": 5}, team_max=8)
    submit(free, make_job("a1", gpus=1, user="alice", priority=10))
    submit(free, *(make_job(f"b{i}", gpus=1, priority=10) for i in range(7)))
    run(free)
    submit(free, make_job("a2", gpus=1, user="alice", priority=100))
    assert [d for d in run(free, 1.0) if isinstance(d, Preempt)]


def test_a_job_that_cannot_start_anyway_keeps_its_own_reason() -> None:
    state = state_with({"runningJobs": 1}, team_max=8)
    submit(state, make_job("a1", gpus=8, user="alice"), make_job("a2", gpus=1, user="alice"))
    run(state)
    assert "is full" in reason(state, "default/a2") and "GPUs" in reason(state, "default/a2")
    assert "perUser" not in reason(state, "default/a2")


def test_a_start_is_narrowed_to_the_cap_and_growth_is_held_to_it() -> None:
    state = state_with({GPU: 3})
    submit(state, make_job("small", gpus=1, user="alice"))
    submit(state, make_job("grows", pods=4, gpus=1, gang=False, user="alice"))
    decisions = run(state)
    pods = {d.job: len(d.pods) for d in decisions if isinstance(d, Admit)}
    assert pods == {"default/small": 1, "default/grows": 2}
    assert state.users.of("team-a", "alice")[GPU] == 3
    finish(state, "default/small")
    grown = [d for d in run(state, 1.0) if isinstance(d, Admit) and d.grown]
    assert [len(d.pods) for d in grown] == [1]
    assert state.users.of("team-a", "alice") == {MAX_JOBS: 1, GPU: 3}
    assert [len(d.pods) for d in run(state, 2.0) if isinstance(d, Admit)] == []


def test_the_counters_follow_preemption_and_restore() -> None:
    state = state_with({"runningJobs": 4}, team_max=8)
    submit(state, *(make_job(f"a{i}", gpus=2, user="alice", priority=10) for i in range(4)))
    run(state)
    assert state.users.of("team-a", "alice") == {MAX_JOBS: 4, GPU: 8}
    submit(state, make_job("b1", gpus=2, user="bob", priority=100))
    decisions = run(state, 1.0)
    assert [d.job for d in decisions if isinstance(d, Preempt)] == ["default/a3"]
    assert state.users.of("team-a", "alice") == {MAX_JOBS: 3, GPU: 6}
    assert state.users.users("team-a") == {
        "alice": {MAX_JOBS: 3, GPU: 6},
        "bob": {MAX_JOBS: 1, GPU: 2},
    }
    records = snapshot.from_plain(snapshot.to_plain(snapshot.take(state)))
    fresh = state_with({"runningJobs": 4}, team_max=8)
    restored = snapshot.restore(records, make_tree(tree({"runningJobs": 4}, 8)), fresh.placers)
    restored.check_invariants()
    assert restored.users.held == state.users.held
    assert {r.job.user for r in restored.running.values()} == {"alice", "bob"}


def test_a_job_without_a_user_is_recorded_as_before() -> None:
    plain = snapshot.job_to_plain(make_job("n"))
    assert "user" not in plain
    assert snapshot.job_from_plain(plain).user == ""
    named = snapshot.job_to_plain(make_job("u", user="alice"))
    assert named["user"] == "alice"
    assert snapshot.job_from_plain(named).user == "alice"


@pytest.mark.corrupts_state
def test_drifted_per_user_counters_are_caught() -> None:
    state = state_with({"runningJobs": 2})
    submit(state, make_job("a1", gpus=1, user="alice"))
    run(state)
    state.users.held["team-a"]["alice"][GPU] = 5
    with pytest.raises(InvariantError, match="per-user counters drifted"):
        state.check_invariants()


def test_per_user_limits_belong_on_leaves() -> None:
    spec = tree({"runningJobs": 2})
    spec["limits"] = {"perUser": {"runningJobs": 1}}
    with pytest.raises(QuotaError) as caught:
        make_tree(spec)
    assert caught.value.path == "spec.root.limits.perUser"
    assert "leaves only" in str(caught.value)


def test_a_negative_per_user_limit_is_an_error_at_its_field() -> None:
    with pytest.raises(QuotaError) as caught:
        make_tree(tree({"runningJobs": -1}))
    assert caught.value.path == "spec.root.children[0].limits.perUser.runningJobs"


def test_the_tree_keeps_its_per_user_limits() -> None:
    built = make_tree(tree({"runningJobs": 2, GPU: 4}))
    again = built.copy().to_spec()
    assert (
        again.children[0].per_user
        == make_node(tree({"runningJobs": 2, GPU: 4})).children[0].per_user
    )
    assert built.per_user("team-b") is None
    assert built.has_per_user()
