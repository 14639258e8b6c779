"""Changing the quota tree under running work: the dry-run preview and the cut's effects."""

from __future__ import annotations

import copy
from typing import Any

from fleet.core import events
from fleet.core.cycle import Admit, Preempt, Wait, cycle
from fleet.core.jobs import Mode
from fleet.core.quota_change import preview
from fleet.core.state import SchedulerState
from tests.core.factories import finish, make_job, make_node, make_nodes, make_state, make_tree
from tests.core.quota_factories import Ledger, req, res

GPU = "nvidia.com/gpu"

TREE: dict[str, Any] = {
    "name": "root",
    "max": {"nvidia.com/gpu": 32},
    "children": [
        {"name": "team-a", "max": {"nvidia.com/gpu": 16}, "namespaces": ["research"]},
        {"name": "team-b", "max": {"nvidia.com/gpu": 16}, "namespaces": ["vision"]},
    ],
}


def cut(max_a: int, *, drop_b: bool = False) -> dict[str, Any]:
    tree = copy.deepcopy(TREE)
    tree["children"][0]["max"] = {"nvidia.com/gpu": max_a}
    if drop_b:
        del tree["children"][1]
    return tree


def busy() -> SchedulerState:
    """team-a runs three 4-GPU jobs (a1 oldest); b1 waits in team-b."""
    state = make_state(TREE, {"c1": make_nodes(4, gpus=8)})
    for name in ("a1", "a2", "a3"):
        events.apply(state, events.Submitted(make_job(name, gpus=4)))
    assert all(isinstance(d, Admit) for d in cycle(state))
    return state


def test_the_preview_names_the_over_limit_queue_and_its_newest_jobs_and_changes_nothing() -> None:
    state = busy()
    effect = preview(state, make_tree(cut(4)))
    assert [(b.node, b.kind, b.used, b.limit) for b in effect.over_limit] == [
        ("team-a", "over-max", 12, 4)
    ]
    assert effect.reclaimable == {"team-a": ("default/a3", "default/a2")}
    assert state.tree.max_of("team-a") == {"nvidia.com/gpu": 16}
    assert state.tree.used("team-a")["nvidia.com/gpu"] == 12
    assert state.tree.over_limits() == []
    state.check_invariants()


def test_the_preview_names_jobs_that_no_leaf_would_take() -> None:
    state = busy()
    events.apply(state, events.Submitted(make_job("b1", queue="team-b", gpus=4)))
    effect = preview(state, make_tree(cut(16, drop_b=True)))
    assert [f.job for f in effect.failed] == ["default/b1"]
    assert "no leaf of the quota tree takes queue team-b" in effect.failed[0].reason
    assert effect.over_limit == ()


def test_after_a_cut_running_jobs_keep_running_and_the_queue_admits_nothing_new() -> None:
    state = busy()
    out = events.apply(state, events.QuotaTreeReplaced(make_node(cut(4))))
    assert out == []
    assert sorted(state.running) == ["default/a1", "default/a2", "default/a3"]
    events.apply(state, events.Submitted(make_job("a4", gpus=0, cpu="1")))
    events.apply(state, events.Submitted(make_job("b1", queue="team-b", gpus=4)))
    decisions = cycle(state)
    waits = {d.job: d.reason for d in decisions if isinstance(d, Wait)}
    assert "is over its max since a quota change" in waits["default/a4"]
    assert [d.job for d in decisions if isinstance(d, Admit)] == ["default/b1"]
    for key in ("default/a3", "default/a2"):
        finish(state, key)
    assert state.tree.over_limits() == []  # 4/4: within the new max again
    assert [d.job for d in cycle(state) if isinstance(d, Admit)] == ["default/a4"]
    state.check_invariants()


def test_the_cut_survives_a_copy_of_the_tree_and_a_preview_of_the_same_tree_agrees() -> None:
    state = busy()
    effect = preview(state, make_tree(cut(4)))
    events.apply(state, events.QuotaTreeReplaced(make_node(cut(4))))
    assert [b.node for b in state.tree.over_limits()] == [b.node for b in effect.over_limit]
    assert state.tree.over_limit_victims("team-a") == list(effect.reclaimable["team-a"])


def test_the_time_of_a_cut_is_kept_while_the_node_stays_over_and_dropped_after() -> None:
    state = busy()
    events.apply(state, events.ClockAdvanced(100.0))
    events.apply(state, events.QuotaTreeReplaced(make_node(cut(8))))
    assert state.cut_since == {"team-a": 100.0}
    events.apply(state, events.ClockAdvanced(200.0))
    events.apply(state, events.QuotaTreeReplaced(make_node(cut(4))))
    assert state.cut_since == {"team-a": 100.0}  # over since the first cut
    for key in ("default/a3", "default/a2"):
        finish(state, key)
    events.apply(state, events.ClockAdvanced(300.0))
    assert state.cut_since == {}


def test_restored_cut_times_are_kept_for_nodes_still_over_and_the_grace_applies() -> None:
    """After a restart the shell hands the stored cut times and the grace in as an event."""
    state = busy()
    events.apply(state, events.ClockAdvanced(700.0))
    events.apply(state, events.QuotaTreeReplaced(make_node(cut(4))))
    assert state.cut_since == {"team-a": 700.0}
    stored = {"team-a": 100.0, "team-b": 50.0}  # team-b is within its limits now
    assert events.apply(state, events.QuotaCutsRestored(600.0, stored)) == []
    assert (state.cut_grace, state.cut_since) == (600.0, {"team-a": 100.0})
    preempted = [d.job for d in cycle(state) if isinstance(d, Preempt)]
    assert preempted == ["default/a3", "default/a2"]  # cut at 100, 600 s of grace passed


def test_over_limit_jobs_are_the_first_reclaim_victims() -> None:
    spec: dict[str, Any] = {
        "name": "root",
        "min": {"nvidia.com/gpu": 16},
        "max": {"nvidia.com/gpu": 16},
        "children": [
            {"name": "team-a", "min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 16}},
            {"name": "team-b", "min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 16}},
        ],
    }
    ledger = Ledger(make_tree(spec))
    ledger.admit("team-b", req({GPU: 8}), key="b/guaranteed", expect=Mode.GUARANTEED)
    ledger.admit("team-b", req({GPU: 4}), key="b/cheap", priority=10, expect=Mode.BORROWED)
    ledger.admit("team-b", req({GPU: 4}), key="b/newest", priority=100, expect=Mode.BORROWED)
    tree = ledger.tree
    # Without a cut, reclaim takes the cheapest borrowed job first.
    assert tree.reclaim_victims("team-a", req({GPU: 4})) == ["b/cheap"]
    tree.set_node("team-b", max=res({GPU: 12}))
    # After the cut, the job that keeps team-b over its max goes first.
    assert tree.reclaim_victims("team-a", req({GPU: 4})) == ["b/newest"]
    # More than the over-limit job frees: the usual order takes the rest.
    assert tree.reclaim_victims("team-a", req({GPU: 8})) == ["b/newest", "b/cheap"]
    tree.check_invariants()


def test_after_the_grace_the_newest_over_limit_jobs_are_preempted_until_within_limits() -> None:
    state = busy()
    state.cut_grace = 600.0
    events.apply(state, events.ClockAdvanced(100.0))
    events.apply(state, events.QuotaTreeReplaced(make_node(cut(4))))
    events.apply(state, events.ClockAdvanced(699.0))
    assert not [d for d in cycle(state) if isinstance(d, Preempt)]
    events.apply(state, events.ClockAdvanced(700.0))
    preempted = [d for d in cycle(state) if isinstance(d, Preempt)]
    assert [d.job for d in preempted] == ["default/a3", "default/a2"]
    assert "still over its quota limits 10m after a quota change" in preempted[0].reason
    assert sorted(state.running) == ["default/a1"]
    assert state.tree.over_limits() == []
    events.apply(state, events.ClockAdvanced(701.0))
    assert state.cut_since == {}
    state.check_invariants()


def test_without_a_grace_a_cut_never_preempts() -> None:
    state = busy()
    events.apply(state, events.QuotaTreeReplaced(make_node(cut(4))))
    events.apply(state, events.ClockAdvanced(1e9))
    assert not [d for d in cycle(state) if isinstance(d, Preempt)]
    assert len(state.running) == 3
