"""Every preemption says why: its cause, its preemptor and the quota path.

The cycle's preemptions (reclaim, priority inside a queue, opportunistic cells,
growth steps taken back, the quota cut) carry them on their ``Preempt``; the
preemptions events cause (a bad node, evicted cells, a failover, a removed
member) carry them on their transition.  And every waiting reason has a
category, which the published view counts.
"""

from __future__ import annotations

from typing import Any

from fleet.core import decisions, events, waiting
from fleet.core.cycle import Admit, Preempt, Wait, cycle
from fleet.core.decisions import Preemption, explain
from fleet.core.lifecycle import JobState
from fleet.core.state import SchedulerState
from fleet.core.view import LoopView, project
from tests.core.factories import make_job, make_node, make_nodes, make_state, submit
from tests.core.test_cycle import ACK_TREE, run, run_until_stable
from tests.core.test_quota_change import busy, cut
from tests.core.test_regressions import LEAF8

GPU = "nvidia.com/gpu"


def preempts(decided: list[Any]) -> list[Preempt]:
    return [d for d in decided if isinstance(d, Preempt)]


def test_a_reclaim_names_its_preemptor_and_the_path_through_the_tree() -> None:
    state = make_state(ACK_TREE, {"c1": make_nodes(4, cpu=10)})
    for i in range(4):
        submit(state, make_job(f"a-{i}", queue="a.1", cpu="5"))
        submit(state, make_job(f"b-{i}", queue="a.2", cpu="5"))
    run_until_stable(state)
    submit(state, make_job("reclaimer", queue="b.1", cpu="5"))
    (stop,) = preempts(run(state))
    victim_leaf = "a.1" if stop.job.startswith("default/a-") else "a.2"
    assert stop.cause == decisions.RECLAIM
    assert stop.preemptor == "default/reclaimer"
    assert stop.quota_path == (victim_leaf, "a", "root", "b", "b.1")
    assert stop.reason.startswith("reclaimed for default/reclaimer")  # as it always was
    assert stop.message == (
        f"{stop.reason} [Reclaim; preemptor default/reclaimer; "
        f"quota path {victim_leaf} > a > root > b > b.1]"
    )


def test_a_priority_preemption_inside_a_queue_has_the_leaf_as_its_path() -> None:
    state = make_state(LEAF8, {"c1": make_nodes(2, gpus=8)})
    submit(state, make_job("low", queue="team-a", gpus=8, priority=1))
    run(state)
    submit(state, make_job("urgent", queue="team-a", gpus=8, priority=100))
    (stop,) = preempts(run(state))
    assert (stop.job, stop.cause, stop.preemptor, stop.quota_path) == (
        "default/low",
        decisions.IN_QUEUE_PRIORITY,
        "default/urgent",
        ("team-a",),
    )


def test_an_opportunistic_job_gives_its_cells_back_to_another_queue() -> None:
    tree = {
        "name": "root",
        "min": {GPU: 16},
        "children": [
            {"name": "team-a", "min": {GPU: 8}, "max": {GPU: 8}},
            {"name": "team-b", "min": {GPU: 8}, "max": {GPU: 8}},
        ],
    }
    state = make_state(tree, {"c1": make_nodes(2, gpus=8)})
    submit(state, make_job("oppo", queue="team-a", gpus=8, pods=2, priority=-1))
    run(state)
    submit(state, make_job("owner", queue="team-b", gpus=8))
    (stop,) = preempts(run(state))
    assert (stop.job, stop.cause, stop.preemptor, stop.quota_path) == (
        "default/oppo",
        decisions.OPPORTUNISTIC,
        "default/owner",
        ("team-a", "root", "team-b"),
    )


def test_a_growth_step_taken_back_says_why_as_a_whole_job_would() -> None:
    state = make_state(LEAF8, {"c1": make_nodes(4, gpus=4)})
    submit(state, make_job("elastic", queue="team-a", pods=3, gpus=4, gang=False))
    cycle(state, 0.0)
    submit(state, make_job("owner", queue="team-b", pods=2, gpus=4))
    (stop,) = preempts(cycle(state, 1.0))
    assert stop.unit == "default/elastic#2"
    assert (stop.cause, stop.preemptor, stop.quota_path) == (
        decisions.RECLAIM,
        "default/owner",
        ("team-a", "root", "team-b"),
    )
    assert stop.reason.startswith("growth step taken back: reclaimed for default/owner")


def test_the_quota_cut_names_no_preemptor_and_the_path_up_to_the_cut_node() -> None:
    state = busy()
    state.cut_grace = 600.0
    events.apply(state, events.ClockAdvanced(100.0))
    events.apply(state, events.QuotaTreeReplaced(make_node(cut(4))))
    events.apply(state, events.ClockAdvanced(700.0))
    stops = preempts(cycle(state))
    assert [(d.job, d.cause, d.preemptor, d.quota_path) for d in stops] == [
        ("default/a3", decisions.QUOTA_CUT, "", ("team-a",)),
        ("default/a2", decisions.QUOTA_CUT, "", ("team-a",)),
    ]
    assert stops[0].message == f"{stops[0].reason} [QuotaCut; quota path team-a]"


def running_job(queue: str = "team-a") -> SchedulerState:
    tree = {"name": "root", "children": [{"name": "team-a"}]}
    state = make_state(tree, {"c1": make_nodes(2, gpus=8)})
    submit(state, make_job("j", queue=queue, gpus=8))
    assert [d.job for d in cycle(state) if isinstance(d, Admit)] == ["default/j"]
    return state


def test_events_that_stop_a_running_job_carry_why_on_its_transition() -> None:
    state = running_job()
    node = state.running["default/j"].pods[0].node
    (moved,) = events.apply(state, events.NodeHealthChanged("c1", node, False, "ECC errors"))
    assert moved.new is JobState.PREEMPTED
    assert moved.preemption == Preemption(decisions.NODE_HEALTH, "team-a")
    # No preemptor and no quota path: the message is the reason as it was.
    assert explain(moved.reason, decisions.NODE_HEALTH, "", ()) == moved.reason

    state = running_job()
    (moved,) = events.apply(state, events.Evicted("default/j", "its cells moved"))
    assert moved.preemption == Preemption(decisions.EVICTED, "team-a")

    state = running_job()
    events.apply(state, events.Dispatched("default/j"))
    events.apply(state, events.Started("default/j"))
    (moved,) = events.apply(state, events.FailedOver("default/j", "unhealthy for 10m"))
    assert moved.new is JobState.QUEUED
    assert moved.preemption == Preemption(decisions.FAILOVER, "team-a")

    state = running_job()
    events.apply(state, events.Dispatched("default/j"))
    (moved,) = events.apply(state, events.ClusterRemoved("c1"))
    assert moved.preemption == Preemption(decisions.CLUSTER_REMOVED, "team-a")


def test_a_failover_of_a_job_its_member_never_created_is_no_preemption() -> None:
    state = running_job()  # admitted, not yet dispatched: the member refused the name
    (moved,) = events.apply(state, events.FailedOver("default/j", "not created in c1"))
    assert moved.new is JobState.QUEUED and moved.preemption is None


def test_every_cause_is_listed_once_max_runtime_included() -> None:
    assert len(set(decisions.CAUSES)) == len(decisions.CAUSES)
    assert decisions.MAX_RUNTIME == "MaxRuntime" and decisions.MAX_RUNTIME in decisions.CAUSES


# Waiting reasons by category --------------------------------------------------------


def categories(state: SchedulerState) -> dict[str, str]:
    """Each pending job's category, as the book answers it."""
    book = state.waiting
    return {
        job.key: book.category_of(job, book.reason_of(job))
        for q in state.queues.values()
        for job in q.pending
    }


def test_each_waiting_reason_has_its_category_and_the_view_counts_them() -> None:
    tree = {
        "name": "root",
        "children": [{"name": "team-a", "max": {GPU: 8}}, {"name": "team-b"}, {"name": "team-c"}],
    }
    state = make_state(tree, {"c1": make_nodes(2, gpus=8)})
    submit(state, make_job("a1", queue="team-a", gpus=8))
    for i in range(3):
        submit(state, make_job(f"a-more-{i}", queue="team-a", gpus=8))  # over team-a's max
    submit(state, make_job("big", queue="team-b", gpus=8, pods=3))  # no cluster has 24
    submit(state, make_job("nowhere", queue="team-c", gpus=1, clusters=frozenset({"c9"})))
    decided = cycle(state)
    waits = {d.job: d.reason for d in decided if isinstance(d, Wait)}
    assert "default/a-more-0" in waits
    found = categories(state)
    assert found["default/a-more-0"] == waiting.QUOTA_MAX
    assert found["default/a-more-2"] == waiting.QUOTA_MAX  # parked or not, the same
    assert found["default/big"] == waiting.NO_CLUSTER_FITS
    assert found["default/nowhere"] == waiting.INADMISSIBLE
    submit(state, make_job("late", queue="team-b", gpus=1))
    assert categories(state)["default/late"] == waiting.NOT_TRIED

    view, _ = project(state, {}, LoopView(), (), {})
    assert set(view.unadmitted) >= set(waiting.CATEGORIES)
    assert {k: v for k, v in view.unadmitted.items() if v} == {
        waiting.QUOTA_MAX: 3,
        waiting.NO_CLUSTER_FITS: 1,
        waiting.INADMISSIBLE: 1,
        waiting.NOT_TRIED: 1,
    }
    assert sum(view.unadmitted.values()) == sum(len(q.pending) for q in state.queues.values())


def test_a_member_that_is_not_ready_and_owed_room_have_their_categories() -> None:
    tree = {"name": "root", "children": [{"name": "team-a"}]}
    state = make_state(tree, {"c1": make_nodes(1, gpus=8)})
    events.apply(state, events.ClusterReadiness("c1", False))
    submit(state, make_job("j", gpus=1))
    cycle(state)
    assert categories(state) == {"default/j": waiting.CLUSTER_NOT_READY}


def test_a_kept_tail_waits_on_owed_room_and_a_full_max_on_quota() -> None:
    from fleet.core.quota import MAX, QuotaBlock

    block = QuotaBlock("team-a", GPU, 4, 1, 8, MAX, True)
    assert waiting.tail_category(block, 2) == waiting.OWED_TO_GUARANTEED
    assert waiting.tail_category(block, 6) == waiting.QUOTA_MAX
    assert "owed to guaranteed jobs still queued" in waiting.tail_reason(block, 2)
