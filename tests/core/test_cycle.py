"""The scheduling cycle: order, quota, gangs, preemption and reasons."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from fleet.core.capacity import CapacityPlacer
from fleet.core.charges import Charge
from fleet.core.cycle import Admit, Decision, Preempt, Wait, cycle
from fleet.core.jobs import Job, Mode
from fleet.core.placement import BindError, Fit
from fleet.core.state import SchedulerState
from tests.core.factories import (
    confirm_stops,
    finish,
    make_job,
    make_nodes,
    make_state,
    submit,
)

GPU_TREE = {
    "name": "root",
    "min": {"nvidia.com/gpu": 16},
    "max": {"nvidia.com/gpu": 32},
    "children": [
        {"name": "team-a", "min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 16}},
        {"name": "team-b", "min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 16}},
    ],
}


def run(state: SchedulerState, now: float = 0.0) -> list[Decision]:
    decisions = cycle(state, now)
    state.check_invariants()
    confirm_stops(state, decisions)
    state.check_invariants()
    return decisions


def admitted(decisions: list[Decision]) -> list[str]:
    return [d.job for d in decisions if isinstance(d, Admit)]


def waits(decisions: list[Decision]) -> dict[str, str]:
    return {d.job: d.reason for d in decisions if isinstance(d, Wait)}


def running_per_queue(state: SchedulerState) -> dict[str, int]:
    counts = Counter(run.job.queue for run in state.running.values())
    return {q: counts.get(q, 0) for q in state.queues}


# ACK's capacity-scheduling walkthrough ------------------------------------------------

ACK_TREE = {
    "name": "root",
    "min": {"cpu": 40},
    "max": {"cpu": 40},
    "children": [
        {
            "name": "a",
            "min": {"cpu": 20},
            "max": {"cpu": 40},
            "children": [
                {"name": "a.1", "min": {"cpu": 10}, "max": {"cpu": 20}, "namespaces": ["ns-a1"]},
                {"name": "a.2", "min": {"cpu": 10}, "max": {"cpu": 20}, "namespaces": ["ns-a2"]},
            ],
        },
        {
            "name": "b",
            "min": {"cpu": 20},
            "max": {"cpu": 40},
            "children": [
                {"name": "b.1", "min": {"cpu": 10}, "max": {"cpu": 20}, "namespaces": ["ns-b1"]},
                {"name": "b.2", "min": {"cpu": 10}, "max": {"cpu": 20}, "namespaces": ["ns-b2"]},
            ],
        },
    ],
}


def run_until_stable(state: SchedulerState) -> None:
    for _ in range(10):
        decisions = run(state)
        if not any(isinstance(d, (Admit, Preempt)) for d in decisions):
            return
    raise AssertionError("the cycle did not settle")


def test_ack_walkthrough_reclaim_brings_every_leaf_back_to_its_min() -> None:
    state = make_state(ACK_TREE, {"c1": make_nodes(4, cpu=10)})
    seen = []
    for leaf in ("a.1", "a.2", "b.1", "b.2"):
        ns = "ns-" + leaf.replace(".", "")
        for i in range(5):
            submit(state, make_job(f"{leaf}-{i}", queue=leaf, namespace=ns, cpu="5"))
        run_until_stable(state)
        seen.append([n for n in running_per_queue(state).values() if n])
    assert seen == [[4], [4, 4], [3, 3, 2], [2, 2, 2, 2]]


def test_reclaim_victims_are_borrowed_jobs_and_are_queued_again() -> None:
    state = make_state(ACK_TREE, {"c1": make_nodes(4, cpu=10)})
    for i in range(4):
        submit(state, make_job(f"a-{i}", queue="a.1", cpu="5"))
        submit(state, make_job(f"b-{i}", queue="a.2", cpu="5"))
    run_until_stable(state)
    modes = {k: r.mode for k, r in state.running.items()}
    submit(state, make_job("reclaimer", queue="b.1", cpu="5"))
    decisions = run(state)
    preempted = [d.job for d in decisions if isinstance(d, Preempt)]
    assert len(preempted) == 1
    assert modes[preempted[0]] is Mode.BORROWED
    assert "reclaimed for default/reclaimer" in next(
        d.reason for d in decisions if isinstance(d, Preempt)
    )
    assert state.is_pending(preempted[0])
    assert "default/reclaimer" in admitted(decisions)


# Many admissions, gangs, clusters ------------------------------------------------


def test_admits_many_gangs_in_one_cycle() -> None:
    state = make_state(GPU_TREE, {"c1": make_nodes(4, gpus=8)})
    for i in range(4):
        submit(state, make_job(f"a{i}", queue="team-a", gpus=4))
        submit(state, make_job(f"b{i}", queue="team-b", gpus=4))
    decisions = run(state)
    assert len(admitted(decisions)) == 8


def test_gang_is_admitted_whole_or_not_at_all() -> None:
    state = make_state(GPU_TREE, {"c1": make_nodes(2, gpus=8)})
    submit(state, make_job("filler", queue="team-b", gpus=8))
    run(state)
    submit(state, make_job("gang", queue="team-a", pods=2, gpus=8))
    decisions = run(state)
    assert admitted(decisions) == []
    assert "default/gang" in waits(decisions)
    assert not any(p.holds("default/gang") for p in state.placers.values())


def test_gang_never_spans_two_clusters() -> None:
    state = make_state(GPU_TREE, {"c1": make_nodes(1, gpus=8), "c2": make_nodes(1, gpus=8)})
    submit(state, make_job("gang", queue="team-a", pods=2, gpus=8))
    decisions = run(state)
    assert admitted(decisions) == []
    reason = waits(decisions)["default/gang"]
    assert "c1" in reason and "c2" in reason


def test_policy_affinity_limits_the_clusters() -> None:
    state = make_state(GPU_TREE, {"c1": make_nodes(1, gpus=8), "c2": make_nodes(1, gpus=8)})
    submit(state, make_job("pinned", queue="team-a", gpus=1, clusters=frozenset({"c2"})))
    decisions = run(state)
    assert [d.cluster for d in decisions if isinstance(d, Admit)] == ["c2"]


def test_no_allowed_cluster_is_a_clear_reason() -> None:
    state = make_state(GPU_TREE, {"c1": make_nodes(1, gpus=8)})
    submit(state, make_job("lost", queue="team-a", gpus=1, clusters=frozenset({"mars"})))
    assert "no member cluster is allowed" in waits(run(state))["default/lost"]


def test_least_loaded_cluster_wins_among_equally_tight_fits() -> None:
    state = make_state(GPU_TREE, {"c1": make_nodes(2, gpus=8), "c2": make_nodes(2, gpus=8)})
    submit(state, make_job("first", queue="team-a", gpus=4, clusters=frozenset({"c1"})))
    run(state)
    submit(state, make_job("second", queue="team-a", gpus=4))
    decisions = run(state)
    assert [d.cluster for d in decisions if isinstance(d, Admit)] == ["c2"]


def test_every_placement_names_node_and_gpus_per_replica() -> None:
    state = make_state(GPU_TREE, {"c1": make_nodes(2, gpus=8)})
    submit(state, make_job("gang", queue="team-a", pods=2, masters=1, gpus=4))
    (decision,) = [d for d in run(state) if isinstance(d, Admit)]
    assert [p.pod for p in decision.pods] == ["Master-0", "Worker-0"]
    gpus = [(p.node, g) for p in decision.pods for g in p.gpus]
    assert len(gpus) == 8 and len(set(gpus)) == 8


# Queue order and FIFO policies ----------------------------------------------------


@pytest.mark.parametrize(
    ("strict", "small_admitted"),
    [
        pytest.param(True, False, id="strict-fifo-blocks"),
        pytest.param(False, True, id="besteffort"),
    ],
)
def test_head_that_does_not_fit(strict: bool, small_admitted: bool) -> None:
    strict_fifo = ("team-a",) if strict else ()
    state = make_state(GPU_TREE, {"c1": make_nodes(1, gpus=8)}, strict_fifo=strict_fifo)
    submit(state, make_job("big", queue="team-a", pods=2, gpus=8))
    submit(state, make_job("small", queue="team-a", gpus=2))
    decisions = run(state)
    assert ("default/small" in admitted(decisions)) is small_admitted
    if strict:
        assert (
            "behind default/big: queue team-a starts its jobs in order"
            in waits(decisions)["default/small"]
        )


def test_higher_priority_goes_first_then_submission_order() -> None:
    state = make_state(GPU_TREE, {"c1": make_nodes(1, gpus=8)})
    submit(state, make_job("early-low", queue="team-a", gpus=8, priority=10))
    submit(state, make_job("late-high", queue="team-a", gpus=8, priority=100))
    submit(state, make_job("later-high", queue="team-a", gpus=8, priority=100))
    assert admitted(run(state)) == ["default/late-high"]


def test_wait_reason_names_the_quota_limit() -> None:
    state = make_state(GPU_TREE, {"c1": make_nodes(4, gpus=8)})
    submit(state, make_job("a", queue="team-a", gpus=8, pods=2))
    submit(state, make_job("b", queue="team-a", gpus=8))
    reason = waits(run(state))["default/b"]
    assert "queue team-a is full" in reason and "16 of 16 GPUs" in reason


def test_fair_share_serves_the_queue_furthest_below_its_share() -> None:
    state = make_state(GPU_TREE, {"c1": make_nodes(2, gpus=8)})
    for i in range(8):
        submit(state, make_job(f"a{i}", queue="team-a", gpus=2))
    for i in range(8):
        submit(state, make_job(f"b{i}", queue="team-b", gpus=2))
    run(state)
    assert running_per_queue(state) == {"team-a": 4, "team-b": 4}


def test_fair_share_takes_turns_between_queues_that_borrow() -> None:
    """Above their ``min`` both queues borrow; after each admission the queue now
    further above its share waits for the other's turn."""
    state = make_state(GPU_TREE, {"c1": make_nodes(3, gpus=8)})
    for i in range(8):
        submit(state, make_job(f"a{i}", queue="team-a", gpus=2))
    for i in range(8):
        submit(state, make_job(f"b{i}", queue="team-b", gpus=2))
    decisions = run(state)
    assert running_per_queue(state) == {"team-a": 6, "team-b": 6}
    # The borrowing pass alternates: a, b, a, b (ties go to the tree's order).
    assert admitted(decisions)[-4:] == ["default/a4", "default/b4", "default/a5", "default/b5"]


# Preemption ----------------------------------------------------------------------------


def test_higher_priority_preempts_lower_priority_of_the_same_queue() -> None:
    state = make_state(GPU_TREE, {"c1": make_nodes(4, gpus=8)})
    submit(state, make_job("low", queue="team-a", gpus=8, pods=2, priority=10))
    run(state)
    submit(state, make_job("high", queue="team-a", gpus=8, priority=100))
    decisions = run(state)
    assert [d.job for d in decisions if isinstance(d, Preempt)] == ["default/low"]
    assert admitted(decisions) == ["default/high"]
    assert state.is_pending("default/low")


def test_equal_priority_never_preempts() -> None:
    state = make_state(GPU_TREE, {"c1": make_nodes(4, gpus=8)})
    submit(state, make_job("first", queue="team-a", gpus=8, pods=2))
    run(state)
    submit(state, make_job("second", queue="team-a", gpus=8))
    decisions = run(state)
    assert not [d for d in decisions if isinstance(d, Preempt)]


def test_opportunistic_jobs_soak_up_idle_gpus_and_go_first() -> None:
    tree = {
        "name": "root",
        "min": {"nvidia.com/gpu": 16},
        "children": [
            {"name": "team-a", "min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 8}},
            {"name": "team-b", "min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 8}},
        ],
    }
    state = make_state(tree, {"c1": make_nodes(2, gpus=8)})
    submit(state, make_job("oppo", queue="team-a", gpus=8, pods=2, priority=-1))
    decisions = run(state)
    assert [d.mode for d in decisions if isinstance(d, Admit)] == [Mode.OPPORTUNISTIC]
    assert state.tree.used("team-a")["nvidia.com/gpu"] == 0
    submit(state, make_job("owner", queue="team-b", gpus=8))
    decisions = run(state)
    assert [d.job for d in decisions if isinstance(d, Preempt)] == ["default/oppo"]
    assert admitted(decisions) == ["default/owner"]


def test_non_preemptible_job_is_admitted_only_within_min() -> None:
    state = make_state(GPU_TREE, {"c1": make_nodes(4, gpus=8)})
    submit(state, make_job("crit-1", queue="team-a", gpus=8, priority=120, preemptible=False))
    submit(state, make_job("crit-2", queue="team-a", gpus=8, priority=120, preemptible=False))
    decisions = run(state)
    assert admitted(decisions) == ["default/crit-1"]
    assert "not preemptible" in waits(decisions)["default/crit-2"]


# Partial and incremental starts ------------------------------------------------------


def test_gang_minimum_starts_when_the_whole_job_does_not_fit() -> None:
    state = make_state(GPU_TREE, {"c1": make_nodes(2, gpus=8)})
    submit(state, make_job("elastic", queue="team-a", pods=4, gpus=8, min_members=2))
    (decision,) = [d for d in run(state) if isinstance(d, Admit)]
    assert len(decision.pods) == 2


def test_incremental_job_starts_partially_and_grows_when_room_appears() -> None:
    state = make_state(GPU_TREE, {"c1": make_nodes(2, gpus=8)})
    submit(state, make_job("blocker", queue="team-b", gpus=8))
    run(state)
    submit(state, make_job("inc", queue="team-a", pods=2, gpus=8, gang=False))
    first = [d for d in run(state) if isinstance(d, Admit)]
    assert [(d.job, len(d.pods), d.grown) for d in first] == [("default/inc", 1, False)]
    finish(state, "default/blocker")
    grown = [d for d in run(state) if isinstance(d, Admit)]
    assert [(d.job, len(d.pods), d.grown) for d in grown] == [("default/inc", 1, True)]
    assert state.running["default/inc"].complete


# Determinism ----------------------------------------------------------------------------


def build_busy_state() -> SchedulerState:
    state = make_state(GPU_TREE, {"c1": make_nodes(2, gpus=8), "c2": make_nodes(2, gpus=8)})
    for i in range(12):
        queue = "team-a" if i % 3 else "team-b"
        submit(
            state, make_job(f"j{i}", queue=queue, gpus=1 + i % 8, priority=[10, 100][i % 2], seq=i)
        )
    return state


def test_same_input_gives_the_same_decisions() -> None:
    assert run(build_busy_state(), 5.0) == run(build_busy_state(), 5.0)


def test_decisions_carry_the_time_they_were_made() -> None:
    decisions = run(build_busy_state(), 42.0)
    assert decisions and {d.at for d in decisions} == {42.0}


@pytest.mark.parametrize(("clusters", "rest"), [(3, ""), (4, "; and 1 more"), (6, "; and 3 more")])
def test_no_cluster_fits_names_three_clusters_and_counts_the_rest(clusters: int, rest: str) -> None:
    nodes = {f"c{i}": make_nodes(1, gpus=8, prefix=f"c{i}-node") for i in range(clusters)}
    state = make_state(GPU_TREE, nodes)
    submit(state, make_job("wide", queue="team-a", gpus=8, pods=2))
    decisions = run(state)
    assert waits(decisions)["default/wide"] == (
        "no cluster can hold all the job's pods now: c0: not enough free capacity; "
        "c1: not enough free capacity; c2: not enough free capacity" + rest
    )


def test_no_cluster_fits_names_three_placers_answers_and_counts_the_rest() -> None:
    nodes = {f"c{i}": make_nodes(2, gpus=4, prefix=f"c{i}-node") for i in range(4)}
    state = make_state(GPU_TREE, nodes)
    submit(state, make_job("whole", queue="team-a", gpus=8))
    decisions = run(state)
    miss = "1 pod with 8 GPUs does not fit on its nodes (8 GPUs free in all)"
    assert waits(decisions)["default/whole"] == (
        "no cluster can hold all the job's pods now: "
        f"c0: {miss}; c1: {miss}; c2: {miss}; and 1 more"
    )


def test_opportunistic_jobs_take_what_is_left_after_the_other_jobs() -> None:
    state = make_state(GPU_TREE, {"c1": make_nodes(2, gpus=8)})
    submit(state, make_job("oppo", queue="team-a", gpus=8, pods=2, priority=-1))
    submit(state, make_job("owner", queue="team-b", gpus=8))
    decisions = run(state)
    assert admitted(decisions) == ["default/owner"]
    assert not [d for d in decisions if isinstance(d, Preempt)]
    # Parked with the other jobs of its question: the book gives its reason.
    (oppo,) = state.pending()
    assert state.waiting.reason_of(oppo).startswith("no cluster can hold all the job's pods")


def test_borrowing_waits_until_every_queue_had_its_guaranteed_turn() -> None:
    state = make_state(GPU_TREE, {"c1": make_nodes(2, gpus=8)})
    submit(state, make_job("borrower", queue="team-a", gpus=8, pods=2))
    submit(state, make_job("owner", queue="team-b", gpus=8))
    decisions = run(state)
    assert admitted(decisions) == ["default/owner"]
    assert not [d for d in decisions if isinstance(d, Preempt)]
    assert "default/borrower" in waits(decisions)


def test_a_job_displaced_in_the_cycle_that_started_it_is_never_reported_as_started() -> None:
    state = make_state(GPU_TREE, {"c1": make_nodes(2, gpus=8)})
    submit(state, make_job("a1", queue="team-a", gpus=8, pods=2, priority=100))
    submit(state, make_job("b1", queue="team-b", gpus=8, pods=2, priority=100))
    submit(state, make_job("b2", queue="team-b", gpus=8, priority=10))
    decisions = run(state)
    # a1 borrows the whole cluster in the borrowing pass, then b2 (within team-b's
    # min, queued behind b1) needs its cells: a1 never started after all.
    assert admitted(decisions) == ["default/b2"]
    assert not [d for d in decisions if isinstance(d, Preempt)]
    assert "displaced by default/b2" in waits(decisions)["default/a1"]
    assert state.is_pending("default/a1")


class RefusingPlacer(CapacityPlacer):
    """A placer whose fits that plan preemption are refused at bind time (or every fit)."""

    def __init__(self, *args: Any, refuse_all: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refuse_all = refuse_all

    def bind(self, job: Job, charge: Charge, fit: Fit) -> None:
        if fit.victims or self.refuse_all:
            raise BindError(f"{job.key}: refused")
        super().bind(job, charge, fit)


@pytest.mark.interpreted_core
@pytest.mark.parametrize("refuse_all", [False, True], ids=["victims-refused", "all-refused"])
def test_a_placement_refused_after_preemption_neither_admits_nor_preempts(
    refuse_all: bool,
) -> None:
    state = make_state(GPU_TREE, {})
    placer = RefusingPlacer("c1", make_nodes(1, gpus=8))
    state.placers["c1"] = placer
    submit(state, make_job("oppo", queue="team-a", gpus=8, priority=-1))
    run(state)
    placer.refuse_all = refuse_all
    submit(state, make_job("owner", queue="team-b", gpus=8))
    decisions = run(state)
    # The victim is put back where it was: no Preempt without its Admit.
    assert [d for d in decisions if isinstance(d, Preempt)] == []
    assert admitted(decisions) == []
    assert "refused the placement" in waits(decisions)["default/owner"]
    assert state.running["default/oppo"].pods[0].gpus == tuple(range(8))
    assert state.is_pending("default/owner")


def test_room_freed_by_a_preemption_is_seen_by_the_next_job_of_the_same_shape() -> None:
    state = make_state(GPU_TREE, {"c1": make_nodes(1, gpus=8)})
    submit(state, make_job("oppo", queue="team-a", gpus=8, priority=-1))
    run(state)
    submit(state, make_job("x", queue="team-b", gpus=4))
    submit(state, make_job("y", queue="team-b", gpus=4))
    decisions = run(state)
    assert [d.job for d in decisions if isinstance(d, Preempt)] == ["default/oppo"]
    assert admitted(decisions) == ["default/x", "default/y"]
