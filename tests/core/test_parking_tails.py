"""A queue's tail behind a full ``max`` whose own lower priorities could make room is
tried, and parked tails say what one by one trial says (``fleet.core.bulk_wait.wait_all``)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.core.cycle import Admit, Preempt, Wait, cycle
from fleet.core.cycle_memory import ALL_SHORTCUTS, Shortcuts
from fleet.core.resources import GPU
from fleet.core.state import SchedulerState
from tests.core.factories import make_job, make_nodes, make_state, submit

TREE: dict[str, Any] = {
    "name": "root",
    "min": {GPU: 12},
    "max": {GPU: 24},
    "children": [
        {"name": "team-a", "min": {GPU: 4}, "max": {GPU: 8}},
        {"name": "team-b", "min": {GPU: 4}, "max": {GPU: 12}},
        {"name": "team-c", "min": {GPU: 4}, "max": {GPU: 8}},
    ],
}
SCAN = Shortcuts(parking=False)


def fresh() -> SchedulerState:
    return make_state(TREE, {"c1": make_nodes(4, gpus=16)})


def reasons(state: SchedulerState, kept: dict[str, str]) -> dict[str, str]:
    """Every pending job's reason: the book's (parked) or the last reported (scan)."""
    return {j.key: state.waiting.reason_of(j) or kept.get(j.key, "") for j in state.pending()}


def test_a_tail_whose_own_lower_priorities_could_make_room_is_tried() -> None:
    # low holds 4 GPUs: too few for big (8), enough for p1 (4) behind it, which
    # preempts low; p2 then waits (nothing lower is left).
    state = fresh()
    submit(
        state,
        make_job("low", queue="team-a", gpus=4, priority=10, seq=0),
        make_job("high", queue="team-a", gpus=4, priority=100, seq=1),
    )
    cycle(state, 0.0)
    submit(
        state,
        make_job("big", queue="team-a", gpus=8, priority=100, seq=2),
        make_job("p1", queue="team-a", gpus=4, priority=100, seq=3),
        make_job("p2", queue="team-a", gpus=4, priority=100, seq=4),
    )
    decisions = cycle(state, 1.0)
    assert [d.job for d in decisions if isinstance(d, Admit)] == ["default/p1"]
    assert [d.job for d in decisions if isinstance(d, Preempt)] == ["default/low"]
    (p2,) = (j for j in state.pending() if j.key == "default/p2")
    assert "queue team-a is full" in state.waiting.reason_of(p2)


spec = st.tuples(
    st.sampled_from(["team-a", "team-b", "team-c"]),
    st.sampled_from([1, 2, 4]),  # GPUs
    st.sampled_from([10, 50, 100]),  # priority
)


@settings(max_examples=80, deadline=None)
@given(waves=st.lists(st.lists(spec, max_size=10), min_size=1, max_size=4))
def test_parked_tails_say_what_a_scan_says(waves: list[list[tuple[str, int, int]]]) -> None:
    """Waves of jobs of mixed priorities, no minimum runtime anywhere: after every
    cycle the parked book and the scan's reported reasons agree, and so do the
    admissions and preemptions."""
    parked, scan = fresh(), fresh()
    kept: dict[str, str] = {}
    seq = 0
    for t, wave in enumerate(waves):
        for queue, gpus, priority in wave:
            job = make_job(f"j{seq}", queue=queue, gpus=gpus, priority=priority, seq=seq)
            submit(parked, job)
            submit(scan, job)
            seq += 1
        a = cycle(parked, float(t), shortcuts=ALL_SHORTCUTS)
        b = cycle(scan, float(t), shortcuts=SCAN)
        assert [d for d in a if not isinstance(d, Wait)] == [
            d for d in b if not isinstance(d, Wait)
        ]
        kept.update({d.job: d.reason for d in b if isinstance(d, Wait)})
        assert reasons(parked, {}) == {j.key: kept.get(j.key, "") for j in scan.pending()}
