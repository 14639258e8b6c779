"""Fair share with memory: decayed usage, weights, the entry penalty, the reclaim order."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from fleet.core import events
from fleet.core.cycle import Admit, Decision, Preempt, cycle
from fleet.core.fair_share import ENTRY_PENALTY_S, FairUsage
from fleet.core.quota import QuotaError
from fleet.core.state import SchedulerState
from fleet.manifests import convert
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

HOUR = 3600.0
GPU = "nvidia.com/gpu"


def tree(half_life: float | None = HOUR, weight_b: float | None = None) -> dict[str, Any]:
    """8 GPUs; team-a and team-b are guaranteed 2 each and may borrow up to 8: 4 GPUs
    are nobody's, and who borrows them is the fair order's question."""
    fair: dict[str, Any] = {} if half_life is None else {"halfLife": half_life}
    b: dict[str, Any] = {"name": "team-b", "min": {GPU: 2}, "max": {GPU: 8}}
    if weight_b is not None:
        b["fairSharing"] = {"weight": weight_b}
    return {
        "name": "root",
        "min": {GPU: 8},
        "max": {GPU: 8},
        "fairSharing": fair,
        "children": [{"name": "team-a", "min": {GPU: 2}, "max": {GPU: 8}}, b],
    }


def run(state: SchedulerState, now: float) -> list[Decision]:
    events.apply(state, events.ClockAdvanced(now))
    decisions = cycle(state, now)
    state.check_invariants()
    confirm_stops(state, decisions)
    return decisions


def started(decisions: list[Decision], queue: str) -> int:
    return sum(1 for d in decisions if isinstance(d, Admit) and d.queue == queue)


def burst(state: SchedulerState, tag: str, count: int = 8) -> None:
    for q in ("team-a", "team-b"):
        for i in range(count):
            submit(state, make_job(f"{tag}-{q}-{i}", queue=q, gpus=1))


def a_held_everything(state: SchedulerState, hours: float) -> float:
    """team-a holds all 8 GPUs for ``hours`` while team-b is idle; then they end."""
    for i in range(8):
        submit(state, make_job(f"night-{i}", queue="team-a", gpus=1))
    assert started(run(state, 0.0), "team-a") == 8
    end = hours * HOUR
    run(state, end)
    for i in range(8):
        finish(state, f"default/night-{i}")
    return end


def test_the_average_decays_by_half_each_half_life() -> None:
    state = make_state(tree(), {"c1": make_nodes(1, gpus=8)})
    submit(state, *(make_job(f"j{i}", queue="team-a", gpus=1) for i in range(4)))
    run(state, 0.0)
    # First seen at 0 holding nothing, then 4 GPUs held for one half-life.
    run(state, HOUR)
    held = state.fair.held(state.tree, "team-a")[GPU]
    penalty = 4 * (1 - 2 ** (-ENTRY_PENALTY_S / HOUR)) * 0.5  # the entry penalty, decayed
    assert held == pytest.approx(2.0 + penalty)
    for i in range(4):
        finish(state, f"default/j{i}")
    run(state, 2 * HOUR)
    assert state.fair.held(state.tree, "team-a")[GPU] == pytest.approx((2.0 + penalty) / 2)
    decayed = state.fair.decayed(state.tree, "team-a")[GPU]
    assert decayed == pytest.approx((2.0 + penalty) / 2 * HOUR / math.log(2))


def test_the_queue_that_held_nothing_borrows_first() -> None:
    state = make_state(tree(), {"c1": make_nodes(1, gpus=8)})
    now = a_held_everything(state, 4)
    burst(state, "day")
    decisions = run(state, now)
    # Each gets its min (2); team-b, which held nothing, borrows the 4 others.
    assert started(decisions, "team-a") == 2
    assert started(decisions, "team-b") == 6


def test_without_memory_the_same_history_counts_for_nothing() -> None:
    state = make_state(tree(half_life=None), {"c1": make_nodes(1, gpus=8)})
    now = a_held_everything(state, 4)
    burst(state, "day")
    decisions = run(state, now)
    assert started(decisions, "team-a") == 4
    assert started(decisions, "team-b") == 4


def test_half_life_zero_is_no_memory() -> None:
    state = make_state(tree(half_life=0.0), {"c1": make_nodes(1, gpus=8)})
    now = a_held_everything(state, 4)
    burst(state, "day")
    decisions = run(state, now)
    assert (started(decisions, "team-a"), started(decisions, "team-b")) == (4, 4)
    assert not state.tree.fair_any


def test_memory_fades_with_time() -> None:
    state = make_state(tree(), {"c1": make_nodes(1, gpus=8)})
    now = a_held_everything(state, 4)
    # Twenty half-lives later team-a's night is forgotten: they share again.
    run(state, now + 20 * HOUR)
    burst(state, "later")
    decisions = run(state, now + 20 * HOUR + 1)
    assert (started(decisions, "team-a"), started(decisions, "team-b")) == (4, 4)


def test_the_entry_penalty_lets_queues_take_turns_in_one_cycle() -> None:
    """Fresh queues with memory have the same (zero) decayed usage: without the
    penalty the first in order would borrow everything."""
    state = make_state(tree(), {"c1": make_nodes(1, gpus=8)})
    burst(state, "fresh")
    decisions = run(state, 0.0)
    assert (started(decisions, "team-a"), started(decisions, "team-b")) == (4, 4)


def test_a_weight_gives_a_larger_part_of_what_is_borrowed() -> None:
    state = make_state(tree(half_life=None, weight_b=3), {"c1": make_nodes(1, gpus=8)})
    burst(state, "day")
    decisions = run(state, 0.0)
    assert started(decisions, "team-b") == 6
    assert started(decisions, "team-a") == 2


def test_guarantees_are_untouched_by_memory() -> None:
    """team-a's min of 2 holds whatever it held before."""
    state = make_state(tree(), {"c1": make_nodes(1, gpus=8)})
    now = a_held_everything(state, 100)
    burst(state, "day")
    assert started(run(state, now), "team-a") == 2


def lenders_tree() -> dict[str, Any]:
    fair = {"halfLife": HOUR}
    return {
        "name": "root",
        "min": {GPU: 8},
        "max": {GPU: 8},
        "fairSharing": fair,
        "children": [
            {"name": "x", "min": {GPU: 1}, "max": {GPU: 8}},
            {"name": "y", "min": {GPU: 1}, "max": {GPU: 8}},
            {"name": "z", "min": {GPU: 6}, "max": {GPU: 8}},
        ],
    }


def test_reclaim_takes_first_from_the_borrower_with_the_most_decayed_usage() -> None:
    """x held 4 GPUs for hours, y only just started borrowing 3 (more than x
    borrows now); z reclaims 2: they come from x, whose past is heavier."""
    state = make_state(lenders_tree(), {"c1": make_nodes(1, gpus=8)})
    submit(state, *(make_job(f"x{i}", queue="x", gpus=1) for i in range(4)))
    run(state, 0.0)
    run(state, 5 * HOUR)
    # x now borrows 3 (4 held, min 1); y gets 4 (borrows 3 too), and y's
    # newest job is the newest of all.
    submit(state, *(make_job(f"y{i}", queue="y", gpus=1) for i in range(4)))
    assert started(run(state, 5 * HOUR + 1), "y") == 4
    finish(state, "default/x0")  # x borrows 2 now, y 3: y borrows most
    submit(state, *(make_job(f"z{i}", queue="z", gpus=1, priority=10) for i in range(2)))
    decisions = run(state, 5 * HOUR + 2)
    victims = sorted(d.job for d in decisions if isinstance(d, Preempt))
    assert victims and all(v.startswith("default/x") for v in victims), victims


def test_without_memory_reclaim_takes_from_the_queue_borrowing_most() -> None:
    spec = lenders_tree()
    spec["fairSharing"] = {}
    state = make_state(spec, {"c1": make_nodes(1, gpus=8)})
    submit(state, *(make_job(f"x{i}", queue="x", gpus=1) for i in range(4)))
    run(state, 0.0)
    run(state, 5 * HOUR)
    submit(state, *(make_job(f"y{i}", queue="y", gpus=1) for i in range(4)))
    run(state, 5 * HOUR + 1)
    finish(state, "default/x0")
    submit(state, *(make_job(f"z{i}", queue="z", gpus=1, priority=10) for i in range(2)))
    decisions = run(state, 5 * HOUR + 2)
    victims = sorted(d.job for d in decisions if isinstance(d, Preempt))
    assert victims and all(v.startswith("default/y") for v in victims), victims


def test_stored_usage_comes_back_and_decays_over_the_downtime() -> None:
    state = make_state(tree(), {"c1": make_nodes(1, gpus=8)})
    state.now = 10 * HOUR
    events.apply(state, events.FairUsageRestored({"team-a": {GPU: 8.0}}, 9 * HOUR))
    events.apply(state, events.ClockAdvanced(10 * HOUR))
    assert state.fair.held(state.tree, "team-a")[GPU] == pytest.approx(4.0)
    burst(state, "after")
    decisions = run(state, 10 * HOUR)
    assert started(decisions, "team-b") == 6


def test_a_new_tree_keeps_each_queue_s_memory_by_name() -> None:
    state = make_state(tree(), {"c1": make_nodes(1, gpus=8)})
    now = a_held_everything(state, 4)
    before = state.fair.held(state.tree, "team-a")[GPU]
    spec = tree()
    spec["children"][0]["max"] = {GPU: 7}
    events.apply(state, events.QuotaTreeReplaced(make_node(spec)))
    assert state.fair.held(state.tree, "team-a")[GPU] == before
    burst(state, "day")
    assert started(run(state, now), "team-b") == 6


def test_records_hold_only_the_tree_s_leaves_with_memory() -> None:
    fair = FairUsage()
    fair.restore({"team-a": {GPU: 1.0}, "gone": {GPU: 2.0}}, 5.0)
    assert fair.records(make_tree(tree())) == {"team-a": {GPU: 1.0}}
    assert fair.at == 5.0


@pytest.mark.parametrize(
    ("fair", "path"),
    [
        ({"halfLife": -1.0}, "spec.root.fairSharing.halfLife"),
        ({"halfLife": math.inf}, "spec.root.fairSharing.halfLife"),
        ({"weight": 0.0}, "spec.root.fairSharing.weight"),
    ],
)
def test_bad_fair_sharing_is_refused_at_its_path(fair: dict[str, float], path: str) -> None:
    spec = tree()
    spec["fairSharing"] = fair
    with pytest.raises(QuotaError) as e:
        make_tree(spec)
    assert e.value.path == path


def test_settings_are_inherited_and_overridden() -> None:
    spec = tree(weight_b=2)
    spec["children"][0]["fairSharing"] = {"halfLife": 60.0}
    t = make_tree(spec)
    assert t.fair_sharing("team-a") == (60.0, 1.0)
    assert t.fair_sharing("team-b") == (HOUR, 2.0)
    again = t.to_spec()
    assert again.children[1].fair_weight == 2 and again.children[1].fair_half_life is None


def test_the_example_tree_loads_with_its_memory_and_weight() -> None:
    text = (Path(__file__).resolve().parents[2] / "policies/quota/fair-tree.yaml").read_text()
    t, _ = convert.load_quota(text)
    assert t.fair_sharing("team-a") == (86400.0, 1.0)
    assert t.fair_sharing("team-b") == (86400.0, 2.0)
