"""The borrowing pass keeps the room that guaranteed jobs still ahead in it are owed."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.core.cycle import Admit, Decision, Preempt, Wait, cycle
from fleet.core.jobs import Mode
from fleet.core.state import SchedulerState
from tests.core.factories import confirm_stops, make_job, make_nodes, make_state, submit
from tests.core.test_decisions_as_full_trial import TREE as TREE_3


def tree(root_max: int | None = 16) -> dict[str, Any]:
    root: dict[str, Any] = {
        "name": "root",
        "min": {"nvidia.com/gpu": 16},
        "children": [
            {"name": "team-a", "min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 16}},
            {"name": "team-b", "min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 16}},
        ],
    }
    if root_max is not None:
        root["max"] = {"nvidia.com/gpu": root_max}
    return root


def run(state: SchedulerState) -> list[Decision]:
    decisions = cycle(state, 0.0)
    state.check_invariants()
    confirm_stops(state, decisions)
    return decisions


def admitted(decisions: list[Decision]) -> list[str]:
    return [d.job for d in decisions if isinstance(d, Admit)]


def reasons(state: SchedulerState) -> dict[str, str]:
    return {j.key: state.waiting.reason_of(j) or "" for j in state.pending()}


def borrower_and_owner(state: SchedulerState, *, owner_head_fits: bool = False) -> None:
    """team-a: a1 must borrow (16 GPUs over a min of 8).  team-b: b1 must borrow too
    (one 16-GPU pod: no node holds it unless ``owner_head_fits``), so b2 behind it,
    within team-b's min, is served in the borrowing pass."""
    submit(
        state,
        make_job("a1", queue="team-a", pods=2, gpus=8, priority=100, seq=1),
        make_job("b1", queue="team-b", pods=1, gpus=8 if owner_head_fits else 16, priority=100),
        make_job("b2", queue="team-b", pods=1, gpus=8, priority=10, seq=3),
    )


def test_a_borrowed_job_is_not_started_on_room_a_guaranteed_job_of_the_pass_reclaims() -> None:
    state = make_state(tree(), {"c1": make_nodes(4, gpus=8)})
    borrower_and_owner(state)
    decisions = run(state)
    # Without the kept room a1 borrowed the root's 16 GPUs first (team-a comes
    # first in the fair order), then b2 reclaimed them: a1 started and was withdrawn.
    assert admitted(decisions) == ["default/b2"]
    assert not [d for d in decisions if isinstance(d, Preempt)]
    assert not [d for d in decisions if isinstance(d, Wait) and "displaced" in d.reason]
    assert reasons(state)["default/a1"] == (
        "quota group root has room, but it is owed to guaranteed jobs still queued: "
        "0 of 16 GPUs used; this job needs 16 and would borrow it"
    )


def test_a_borrowed_job_starts_when_the_room_holds_it_and_the_owed_demand() -> None:
    state = make_state(tree(root_max=24), {"c1": make_nodes(4, gpus=8)})
    borrower_and_owner(state)
    decisions = run(state)
    assert sorted(admitted(decisions)) == ["default/a1", "default/b2"]
    assert not [d for d in decisions if isinstance(d, Preempt)]


def test_the_kept_room_is_the_owed_demand_not_the_whole_unused_min() -> None:
    # team-b has 8 GPUs of min unused but only a 2-GPU job that fits it: the root
    # keeps 2, and a1 borrows 14.
    state = make_state(tree(), {"c1": make_nodes(4, gpus=8)})
    submit(
        state,
        make_job("a1", queue="team-a", pods=7, gpus=2, priority=100, seq=1),
        make_job("b1", queue="team-b", pods=1, gpus=16, priority=100, seq=2),
        make_job("b2", queue="team-b", pods=1, gpus=2, priority=10, seq=3),
    )
    decisions = run(state)
    assert sorted(admitted(decisions)) == ["default/a1", "default/b2"]


def test_a_queues_own_guaranteed_jobs_behind_do_not_stop_its_borrowing_head() -> None:
    # a2 could only reclaim other queues' borrowed work, never a1 of its own
    # queue, and a1 comes first in team-a's order: a1 borrows, a2 waits.
    state = make_state(tree(), {"c1": make_nodes(4, gpus=8)})
    submit(
        state,
        make_job("a1", queue="team-a", pods=2, gpus=8, priority=100, seq=1),
        make_job("a2", queue="team-a", pods=1, gpus=8, priority=10, seq=2),
    )
    decisions = run(state)
    assert admitted(decisions) == ["default/a1"]
    assert "queue team-a is full: 16 of 16 GPUs used" in reasons(state)["default/a2"]


def test_a_strict_fifo_queue_owes_nothing_behind_a_head_that_must_borrow() -> None:
    # team-b is StrictFIFO: b2 is served only if b1 starts, and b1 cannot
    # (no node holds a 16-GPU pod), so nothing is kept for b2.
    state = make_state(tree(), {"c1": make_nodes(4, gpus=8)}, strict_fifo=("team-b",))
    borrower_and_owner(state)
    decisions = run(state)
    assert admitted(decisions) == ["default/a1"]
    assert (
        "behind default/b1: queue team-b starts its jobs in order" in reasons(state)["default/b2"]
    )


def test_only_the_queues_under_a_limited_node_are_owed_its_room() -> None:
    spec = {
        "name": "root",
        "min": {"nvidia.com/gpu": 24},
        "children": [
            {
                "name": "group-x",
                "min": {"nvidia.com/gpu": 16},
                "max": {"nvidia.com/gpu": 16},
                "children": [
                    {"name": "team-a", "min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 16}},
                    {"name": "team-b", "min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 16}},
                ],
            },
            {
                "name": "group-y",
                "min": {"nvidia.com/gpu": 8},
                "max": {"nvidia.com/gpu": 16},
                "children": [
                    {"name": "team-c", "min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 16}}
                ],
            },
        ],
    }
    state = make_state(spec, {"c1": make_nodes(6, gpus=8)})
    submit(
        state,
        make_job("a1", queue="team-a", pods=2, gpus=8, priority=100, seq=1),
        make_job("c1", queue="team-c", pods=1, gpus=16, priority=100, seq=2),
        make_job("c2", queue="team-c", pods=1, gpus=8, priority=10, seq=3),
    )
    decisions = run(state)
    # team-c's guaranteed c2 is owed room under group-y only; group-x has none to keep.
    assert sorted(admitted(decisions)) == ["default/a1", "default/c2"]


def unplaceable_owner_and_borrower(state: SchedulerState, owner: str, borrower: str) -> None:
    """``owner``: o1 must borrow and o2 fits its min, neither fits a 4-GPU node;
    ``borrower``: x1 must borrow 16 GPUs in 4-GPU pods."""
    submit(
        state,
        make_job("o1", queue=owner, pods=1, gpus=16, priority=100, seq=1),
        make_job("o2", queue=owner, pods=1, gpus=8, priority=10, seq=2),
        make_job("x1", queue=borrower, pods=4, gpus=4, priority=100, seq=3),
    )


def test_the_room_is_kept_only_while_the_guaranteed_job_is_still_ahead() -> None:
    # team-a is served first (equal shares, tree order): o2 finds no node and
    # waits; once it has been served it is owed nothing, and x1 borrows.
    state = make_state(tree(), {"c1": make_nodes(8, gpus=4)})
    unplaceable_owner_and_borrower(state, owner="team-a", borrower="team-b")
    decisions = run(state)
    assert admitted(decisions) == ["default/x1"]


def test_the_kept_room_is_quota_a_guaranteed_job_ahead_keeps_it_even_if_it_finds_no_cells() -> None:
    # team-a's x1 is served first, while o2 (within team-b's min) is still
    # ahead: the root keeps o2's 8 GPUs, as a quota reservation would, though
    # o2 then finds no node.  x1 tries again in the next cycle.
    state = make_state(tree(), {"c1": make_nodes(8, gpus=4)})
    unplaceable_owner_and_borrower(state, owner="team-b", borrower="team-a")
    decisions = run(state)
    assert admitted(decisions) == []
    assert "it is owed to guaranteed jobs still queued" in reasons(state)["default/x1"]
    assert reasons(state)["default/o2"].startswith("no cluster can hold all the job's pods")


def test_the_room_a_borrower_leaves_holds_its_own_queues_guaranteed_jobs_too() -> None:
    """team-c's c5 would borrow 4 of the root's last 6 GPUs, leaving 2: enough for
    team-a's a6 (1 GPU, owed).  But team-c's own c7 (2 GPUs, within its min) comes
    later and is never kept out: it would take the 2 first, and a6, finding the
    root full, would reclaim c5 in the very cycle that started it.  So c5 waits
    and the guaranteed jobs of both queues start (and a3 borrows what is left)."""
    state = make_state(TREE_3, {"c1": make_nodes(8, gpus=16)})
    submit(state, make_job("a0", queue="team-a", pods=3, gpus=2, priority=10, seq=0))
    assert admitted(run(state)) == ["default/a0"]  # team-a borrows 2 of its 6
    submit(
        state,
        make_job("a1", queue="team-a", pods=1, gpus=1, priority=10, seq=1),
        make_job("a2", queue="team-a", pods=1, gpus=2, priority=10, seq=2),
        make_job("a3", queue="team-a", pods=1, gpus=2, priority=10, seq=3),
        make_job("c4", queue="team-c", pods=1, gpus=1, priority=10, seq=4),
        make_job("c5", queue="team-c", pods=1, gpus=4, priority=10, seq=5),
        make_job("a6", queue="team-a", pods=1, gpus=1, priority=10, seq=6),
        make_job("c7", queue="team-c", pods=1, gpus=2, priority=10, seq=7),
    )
    decisions = run(state)
    assert not [d for d in decisions if isinstance(d, Wait) and "displaced" in d.reason]
    assert sorted(admitted(decisions)) == [
        "default/a1",
        "default/a2",
        "default/a3",
        "default/a6",
        "default/c4",
        "default/c7",
    ]
    assert "owed to guaranteed jobs still queued" in reasons(state)["default/c5"]


job_spec = st.tuples(
    st.sampled_from(["team-a", "team-b", "team-c"]),
    st.integers(1, 3),  # pods
    st.sampled_from([1, 2, 4]),  # GPUs per pod
    st.sampled_from([10, 100]),  # priority
)


@settings(max_examples=150, deadline=None)
@given(waves=st.lists(st.lists(job_spec, max_size=8), min_size=1, max_size=4))
def test_with_room_for_every_pod_a_start_is_withdrawn_only_after_its_reclaimers_queue_borrowed(
    waves: list[list[tuple[str, int, int, int]]],
) -> None:
    """The quota is what binds here (the cluster holds far more than the root's
    ``max``), so a start withdrawn in its own cycle was reclaimed by a guaranteed
    job.  Its room had been kept for that job, unless the job's own queue took it
    first in the same pass: by borrowing (its head comes first in its order) or
    by preempting its own lower priorities (the queue's guaranteed usage fell)."""
    state = make_state(TREE_3, {"c1": make_nodes(8, gpus=16)})
    seq = 0
    for wave in waves:
        for queue, pods, gpus, priority in wave:
            submit(
                state,
                make_job(f"j{seq}", queue=queue, pods=pods, gpus=gpus, priority=priority, seq=seq),
            )
            seq += 1
        decisions = run(state)
        queue_of = {d.job: d.queue for d in decisions if isinstance(d, Admit)}
        borrowed = {d.queue for d in decisions if isinstance(d, Admit) and d.mode is Mode.BORROWED}
        preempted = {d.queue for d in decisions if isinstance(d, Preempt)}
        for d in decisions:
            if isinstance(d, Wait) and d.reason.startswith("displaced by "):
                reclaimer = d.reason.removeprefix("displaced by ").split()[0]
                assert queue_of[reclaimer] in borrowed | preempted, (d, decisions)
