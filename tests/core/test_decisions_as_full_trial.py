"""The cycle's shortcuts must decide exactly what trying each job in full would.

Every shortcut (waiting a whole queue at once behind a full node, the
unfeasible-shape memo, the failed-reclaim memo, a cluster's remembered "does
not fit" answers) is checked alone and all together against the cycle with
none of them: the same admissions (job and cluster), preemptions and waits.
(A wait's reason may name another of the limits that stop the job.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fleet.core import events
from fleet.core.cycle import Admit, Preempt, cycle
from fleet.core.cycle_memory import ALL_SHORTCUTS, NO_SHORTCUTS, Shortcuts
from fleet.core.state import SchedulerState
from fleet.testing.cells import cell_placer
from tests.core.factories import (
    confirm_stops,
    make_job,
    make_nodes,
    make_state,
    make_tree,
    submit,
)

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


#: The same tree with per-user limits on two of its leaves (``limits.perUser``).
USER_TREE = {
    **TREE,
    "children": [
        {**TREE["children"][0], "limits": {"perUser": {"runningJobs": 2, "nvidia.com/gpu": 6}}},
        {**TREE["children"][1], "limits": {"perUser": {"nvidia.com/gpu": 4}}},
        TREE["children"][2],
    ],
}
#: Who submits the jobs of the trees with per-user limits, in turn (empty: nobody).
USERS = ("alice", "bob", "", "alice", "carol")


#: TREE with fair share's memory (a 10-minute half-life) and team-b weighing twice.
FAIR_TREE: dict[str, Any] = {
    "name": "root",
    "min": {"nvidia.com/gpu": 12},
    "max": {"nvidia.com/gpu": 16},
    "fairSharing": {"halfLife": 600.0},
    "children": [
        {"name": "team-a", "min": {"nvidia.com/gpu": 4}, "max": {"nvidia.com/gpu": 16}},
        {
            "name": "team-b",
            "min": {"nvidia.com/gpu": 4},
            "max": {"nvidia.com/gpu": 12},
            "fairSharing": {"weight": 2.0},
        },
        {"name": "team-c", "min": {"nvidia.com/gpu": 4}, "max": {"nvidia.com/gpu": 8}},
    ],
}


def fresh_state(tree: Mapping[str, Any] = TREE) -> SchedulerState:
    return make_state(tree, {"c1": make_nodes(2, gpus=8), "c2": make_nodes(1, gpus=4)})


def user_state() -> SchedulerState:
    return make_state(USER_TREE, {"c1": make_nodes(2, gpus=8), "c2": make_nodes(1, gpus=4)})


def outcome(
    state: SchedulerState,
    specs: list[tuple[str, int, int, int]],
    shortcuts: Shortcuts = ALL_SHORTCUTS,
    step: float = 0.0,
    users: tuple[str, ...] = ("",),
) -> list[object]:
    """Submit ``specs`` in three waves, a cycle after each; what each cycle decided.
    ``step``: seconds of the clock between two waves (fair share's memory moves)."""
    seen: list[object] = []
    per_wave = max(1, len(specs) // 3)
    for start in range(0, len(specs), per_wave):
        for n, (queue, pods, gpus, priority) in enumerate(specs[start : start + per_wave]):
            submit(
                state,
                make_job(
                    f"j{start + n}",
                    queue=queue,
                    pods=pods,
                    gpus=gpus,
                    priority=priority,
                    seq=start + n,
                    user=users[(start + n) % len(users)],
                ),
            )
        if step:
            events.apply(state, events.ClockAdvanced(start * step))
        decisions = cycle(state, float(start), shortcuts=shortcuts)
        state.check_invariants()
        confirm_stops(state, decisions)
        seen.append(sorted((d.job, d.cluster) for d in decisions if isinstance(d, Admit)))
        seen.append(sorted(d.job for d in decisions if isinstance(d, Preempt)))
        seen.append(waiting(state))
    return seen


def waiting(state: SchedulerState) -> list[str]:
    """The pending jobs the cycle left with a reason (a parked tail's jobs too)."""
    return sorted(j.key for j in state.pending() if state.waiting.reason_of(j))


SHORTCUTS = {
    "bulk-wait": Shortcuts(bulk_wait=True, shape_memo=False, reclaim_memo=False, nofit_memo=False),
    "shape-memo": Shortcuts(bulk_wait=False, shape_memo=True, reclaim_memo=False, nofit_memo=False),
    "reclaim-memo": Shortcuts(
        bulk_wait=False, shape_memo=False, reclaim_memo=True, nofit_memo=False
    ),
    "nofit-memo": Shortcuts(
        bulk_wait=False, shape_memo=False, reclaim_memo=False, nofit_memo=True, idle_groups=False
    ),
    "idle-groups": Shortcuts(
        bulk_wait=False, shape_memo=False, reclaim_memo=False, nofit_memo=False
    ),
    "owed-counts": Shortcuts(
        bulk_wait=False, shape_memo=False, reclaim_memo=False, nofit_memo=False, idle_groups=False
    ),
    "all": Shortcuts(),
}


#: A job that may borrow only by preempting guaranteed work of its own queue: with
#: those victims lifted off the tree to ask "what if", its queue's later jobs are
#: owed room they were not before (the kept owed counts must see the move).
OWED_AFTER_WHAT_IF = [
    ("team-a", 1, 1, -1),
    ("team-a", 1, 4, 10),
    ("team-a", 2, 4, 100),
    ("team-b", 1, 2, 10),
    ("team-c", 1, 2, 10),
    ("team-c", 1, 2, 10),
    ("team-c", 1, 2, 10),
    ("team-c", 1, 4, 100),
    ("team-a", 1, 1, -1),
    ("team-a", 1, 1, 10),
    ("team-a", 1, 1, -1),
    ("team-a", 1, 1, -1),
    ("team-a", 1, 1, -1),
    ("team-a", 1, 1, -1),
    ("team-a", 1, 1, 10),
    ("team-b", 1, 2, 10),
]


@pytest.mark.parametrize("name", list(SHORTCUTS))
@settings(max_examples=60, deadline=None)
@given(specs=st.lists(job_spec, min_size=1, max_size=30))
@example(specs=OWED_AFTER_WHAT_IF)
def test_each_shortcut_changes_no_decision(
    name: str, specs: list[tuple[str, int, int, int]]
) -> None:
    with_shortcut = outcome(fresh_state(), specs, SHORTCUTS[name])
    one_by_one = outcome(fresh_state(), specs, NO_SHORTCUTS)
    assert with_shortcut == one_by_one


@pytest.mark.parametrize("name", list(SHORTCUTS))
@settings(max_examples=40, deadline=None)
@given(specs=st.lists(job_spec, min_size=1, max_size=30))
@example(specs=OWED_AFTER_WHAT_IF)
def test_each_shortcut_changes_no_decision_with_fair_share_memory(
    name: str, specs: list[tuple[str, int, int, int]]
) -> None:
    with_shortcut = outcome(fresh_state(FAIR_TREE), specs, SHORTCUTS[name], step=120.0)
    one_by_one = outcome(fresh_state(FAIR_TREE), specs, NO_SHORTCUTS, step=120.0)
    assert with_shortcut == one_by_one


@pytest.mark.parametrize("name", list(SHORTCUTS))
@settings(max_examples=60, deadline=None)
@given(specs=st.lists(job_spec, min_size=1, max_size=30))
@example(specs=OWED_AFTER_WHAT_IF)
def test_each_shortcut_changes_no_decision_under_per_user_limits(
    name: str, specs: list[tuple[str, int, int, int]]
) -> None:
    """Jobs of several users, two leaves capping them: a job its user's cap stops
    makes no other job wait, with or without the shortcuts."""
    with_shortcut = outcome(user_state(), specs, SHORTCUTS[name], users=USERS)
    one_by_one = outcome(user_state(), specs, NO_SHORTCUTS, users=USERS)
    assert with_shortcut == one_by_one


def test_a_full_root_waits_the_rest_of_the_queue_with_the_limit_named() -> None:
    state = make_state(TREE, {"c1": make_nodes(2, gpus=8)})
    for i in range(4):
        submit(state, make_job(f"a{i}", queue="team-a", gpus=4, seq=i))
    cycle(state, 0.0)  # team-a takes the whole root max (16)
    for i in range(5):
        submit(state, make_job(f"b{i}", queue="team-b", gpus=8, seq=10 + i))
    cycle(state, 1.0)
    reasons = {j.key: state.waiting.reason_of(j) for j in state.pending()}
    assert all(
        "quota group root is full: 16 of 16 GPUs used" in reasons[f"default/b{i}"]
        for i in (2, 3, 4)
    )


mixed_spec = st.tuples(
    st.sampled_from(["team-a", "team-b", "team-c"]),
    st.integers(1, 4),  # pods
    st.sampled_from([1, 2, 4, 8]),  # GPUs per pod
    st.sampled_from([-1, 10, 100]),  # priority
    st.booleans(),  # gang
    st.integers(0, 3),  # min members
)


def cell_state() -> SchedulerState:
    """Cell placers with virtual clusters: a job's mode changes where it may go."""
    c1 = cell_placer("c1", racks=1, nodes=2, gpus=8, vcs={"team-a": [("RACK.NODE", 1)]})
    c2 = cell_placer("c2", racks=1, nodes=1, gpus=4, vcs={"team-c": [("RACK.NODE", 1)]})
    return SchedulerState(make_tree(TREE), {"c1": c1, "c2": c2})


def user_cell_state() -> SchedulerState:
    """:func:`cell_state` on the tree with per-user limits."""
    c1 = cell_placer("c1", racks=1, nodes=2, gpus=8, vcs={"team-a": [("RACK.NODE", 1)]})
    c2 = cell_placer("c2", racks=1, nodes=1, gpus=4, vcs={"team-c": [("RACK.NODE", 1)]})
    return SchedulerState(make_tree(USER_TREE), {"c1": c1, "c2": c2})


def mixed_outcome(
    state: SchedulerState,
    specs: list[tuple[str, int, int, int, bool, int]],
    shortcuts: Shortcuts,
    users: tuple[str, ...] = ("",),
) -> list[object]:
    seen: list[object] = []
    for n, (queue, pods, gpus, priority, gang, least) in enumerate(specs):
        job = make_job(
            f"j{n}",
            queue=queue,
            pods=pods,
            gpus=gpus,
            priority=priority,
            seq=n,
            gang=gang,
            min_members=least,
            user=users[n % len(users)],
        )
        submit(state, job)
        if n % 4 == 3 or n == len(specs) - 1:
            decisions = cycle(state, float(n), shortcuts=shortcuts)
            state.check_invariants()
            confirm_stops(state, decisions)
            seen.append(
                [(d.job, d.cluster, d.pods, d.unit) for d in decisions if isinstance(d, Admit)]
            )
            seen.append([(d.job, d.unit) for d in decisions if isinstance(d, Preempt)])
            seen.append(waiting(state))
    return seen


#: A guaranteed job of VC team-a preempts the first unit of an incremental job
#: (j4) whose growth step also keeps the VC cell bound; the cells placer used to
#: plan as if the growth step stayed, and its own bind refused the plan.
PREEMPTED_WITH_GROWTH = [
    ("team-a", 1, 1, -1, False, 0),
    ("team-a", 1, 1, -1, False, 0),
    ("team-a", 1, 4, -1, False, 0),
    ("team-a", 1, 8, 10, False, 0),
    ("team-a", 3, 1, 10, False, 0),
    ("team-a", 1, 1, -1, False, 0),
    ("team-b", 1, 4, 10, False, 0),
    ("team-c", 1, 2, 10, False, 0),
    ("team-a", 1, 1, -1, False, 0),
    ("team-a", 1, 1, -1, False, 0),
    ("team-a", 1, 1, -1, False, 0),
    ("team-a", 1, 1, -1, False, 0),
    ("team-a", 1, 1, 100, False, 0),
]


@pytest.mark.parametrize("placers", ["capacity", "cells"])
@settings(max_examples=60, deadline=None)
@given(specs=st.lists(mixed_spec, min_size=1, max_size=28))
@example(specs=PREEMPTED_WITH_GROWTH)
def test_the_shortcuts_change_no_decision_for_partial_and_incremental_jobs(
    placers: str, specs: list[tuple[str, int, int, int, bool, int]]
) -> None:
    fresh = cell_state if placers == "cells" else fresh_state
    assert mixed_outcome(fresh(), specs, ALL_SHORTCUTS) == mixed_outcome(
        fresh(), specs, NO_SHORTCUTS
    )


@pytest.mark.parametrize("placers", ["capacity", "cells"])
@settings(max_examples=60, deadline=None)
@given(specs=st.lists(mixed_spec, min_size=1, max_size=28))
@example(specs=PREEMPTED_WITH_GROWTH)
def test_the_shortcuts_change_no_decision_for_partial_jobs_under_per_user_limits(
    placers: str, specs: list[tuple[str, int, int, int, bool, int]]
) -> None:
    """Partial and incremental jobs of several users: starts narrowed by a cap and
    growth held to it decide the same with and without the shortcuts."""
    fresh = user_cell_state if placers == "cells" else user_state
    assert mixed_outcome(fresh(), specs, ALL_SHORTCUTS, USERS) == mixed_outcome(
        fresh(), specs, NO_SHORTCUTS, USERS
    )


def test_preempting_the_first_unit_of_a_grown_job_in_a_vc() -> None:
    specs = PREEMPTED_WITH_GROWTH
    seen = mixed_outcome(cell_state(), specs, NO_SHORTCUTS)
    assert seen == mixed_outcome(cell_state(), specs, ALL_SHORTCUTS)
    # Cycles after j3, j7, j11 and j12; each gives (admitted, preempted, waiting).
    second, last = seen[3], seen[9]
    assert [(a[1], a[3]) for a in second if a[0] == "default/j4"] == [
        ("c1", "default/j4"),
        ("c1", "default/j4#2"),  # j4 grew in the same cycle
    ]
    admitted, preempted = last, seen[10]
    assert [(job, cluster) for job, cluster, _, _ in admitted] == [("default/j12", "c1")]
    assert preempted == [("default/j4", "")]  # the whole job, growth step included


def test_non_preemptible_jobs_over_their_min_wait_together_with_their_own_reasons() -> None:
    reasons: dict[str, dict[str, str]] = {}
    for name, shortcuts in (("all", ALL_SHORTCUTS), ("none", NO_SHORTCUTS)):
        state = fresh_state()
        submit(state, make_job("fits", queue="team-a", gpus=4, preemptible=False, seq=0))
        for i, gpus in enumerate((4, 2, 1, 4), start=1):
            submit(state, make_job(f"r{i}", queue="team-a", gpus=gpus, preemptible=False, seq=i))
        submit(state, make_job("borrower", queue="team-a", gpus=4, seq=9))
        decisions = cycle(state, 0.0, shortcuts=shortcuts)
        assert sorted(d.job for d in decisions if isinstance(d, Admit)) == [
            "default/borrower",
            "default/fits",
        ]
        reasons[name] = {j.key: state.waiting.reason_of(j) for j in state.pending()}
    assert reasons["all"] == reasons["none"]
    assert reasons["all"]["default/r2"] == (
        "the guarantee (min) of queue team-a is full: 4 of 4 GPUs guaranteed in use; "
        "this job needs 2 and, not preemptible, runs only within the guarantee"
    )
    assert all("the guarantee (min) of queue team-a" in why for why in reasons["all"].values())


def test_opportunistic_groups_keep_the_queue_order_of_equal_jobs() -> None:
    # Same priority and submission number, different questions: the last pass
    # must try them in the pending list's order (as queued), not group by group.
    state = fresh_state()
    submit(state, make_job("y", queue="team-a", gpus=4, priority=-1, seq=1))
    submit(state, make_job("a", queue="team-a", gpus=8, priority=-1, seq=5))
    submit(state, make_job("b", queue="team-a", gpus=4, priority=-1, seq=5))
    queue = state.queues["team-a"]
    merged = sorted((j for g in queue.idle.values() for j in g), key=queue.idle_order)
    assert [j.key for j in merged] == ["default/y", "default/a", "default/b"]
    assert [j.key for j in queue.pending] == ["default/y", "default/a", "default/b"]
    state.check_invariants()
