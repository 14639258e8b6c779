"""Victims found, and placements that failed with them released, until the next change.

Jobs of one queue, priority and request that fail one after the other in the
same way (the queue's lower priorities would make room in quota, but no
cluster then fits the gang) ask the same questions; the cycle keeps the
answers until something changes (:class:`fleet.core.cycle_memory.VictimMemo`)
and decides exactly what it decides with the memory off.
"""

from __future__ import annotations

from typing import Any

from fleet.core.cycle import Admit, Preempt, Wait, cycle
from fleet.core.cycle_memory import NO_SHORTCUTS, Shortcuts, VictimMemo
from fleet.core.resources import Resources
from fleet.core.state import SchedulerState
from tests.core.factories import make_job, make_nodes, make_state, submit
from tests.core.test_decisions_as_full_trial import fresh_state, mixed_outcome

GPU = "nvidia.com/gpu"
TREE: dict[str, Any] = {
    "name": "root",
    "min": {GPU: 16},
    "max": {GPU: 16},
    "children": [{"name": "team-a", "min": {GPU: 4}, "max": {GPU: 16}}],
}


def scenario(shortcuts: Shortcuts) -> tuple[SchedulerState, list[object]]:
    """Two one-node clusters of 8 GPUs full of the queue's 1-GPU jobs (dealt to the
    less loaded cluster, so they alternate), then three 8-GPU jobs of higher
    priority: the newest eight small jobs would free the quota, four GPUs in
    each cluster, and no cluster fits an 8-GPU pod."""
    state = make_state(TREE, {"c1": make_nodes(1, gpus=8), "c2": make_nodes(1, gpus=8)})
    submit(state, *(make_job(f"small{i}", gpus=1, seq=i) for i in range(16)))
    first = cycle(state, 0.0, shortcuts=shortcuts)
    submit(state, *(make_job(f"big{i}", gpus=8, priority=100, seq=100 + i) for i in range(3)))
    second = cycle(state, 1.0, shortcuts=shortcuts)
    state.check_invariants()
    return state, [first, second]


def test_repeated_failures_after_preemption_decide_as_without_the_memory() -> None:
    state, decided = scenario(Shortcuts())
    full, full_decided = scenario(Shortcuts(reclaim_memo=False))
    plain, plain_decided = scenario(NO_SHORTCUTS)
    first, second = decided
    assert sorted(d.cluster for d in first if isinstance(d, Admit)) == ["c1"] * 8 + ["c2"] * 8
    assert not [d for d in second if isinstance(d, Admit | Preempt)]
    waits = {d.job: d.reason for d in second if isinstance(d, Wait)}
    assert sorted(waits) == [f"default/big{i}" for i in range(3)]
    assert all(
        "after preemption: no cluster can hold all the job's pods" in why for why in waits.values()
    )
    assert decided == full_decided == plain_decided
    for other in (full, plain):
        assert {j.key: state.waiting.reason_of(j) for j in state.pending()} == {
            j.key: other.waiting.reason_of(j) for j in other.pending()
        }


def test_the_memory_answers_only_at_the_change_count_it_was_found_at() -> None:
    memo = VictimMemo()
    key = ("team-a", 100, Resources({GPU: 8}))
    memo.found[key] = (3, ("default/small15",))
    memo.unplaced[("shape",)] = (3, "no cluster fits")
    assert memo.victims(key, 3) == ("default/small15",)
    assert memo.place_failed(("shape",), 3) == "no cluster fits"
    assert memo.victims(key, 4) is None
    assert memo.place_failed(("shape",), 4) is None
    assert memo.victims(("team-a", 10, Resources({GPU: 8})), 3) is None
    memo.on = False
    assert memo.victims(key, 3) is None
    assert memo.place_failed(("shape",), 3) is None


#: An incremental job (j3) grew into a second unit; a job of its queue with a
#: higher priority (j4) needs one unit's worth.  Both units tie on priority and
#: submission: the growth step goes first, whatever order the records were
#: charged in (a planning query's "what if" charges them again, at the end).
GROWN = [
    ("team-a", 1, 1, -1, False, 0),
    ("team-a", 1, 1, -1, False, 0),
    ("team-a", 1, 1, -1, False, 0),
    ("team-b", 2, 4, 10, False, 0),
    ("team-b", 1, 8, 100, False, 0),
]


def test_a_growth_step_is_taken_before_its_job_whatever_was_asked_before() -> None:
    with_memory = mixed_outcome(fresh_state(), GROWN, Shortcuts())
    assert with_memory == mixed_outcome(fresh_state(), GROWN, Shortcuts(reclaim_memo=False))
    assert with_memory == mixed_outcome(fresh_state(), GROWN, NO_SHORTCUTS)
    preempted = with_memory[4]
    assert preempted == [("default/j3", "default/j3#2")]
