"""Where a job is in a queue's sorted lists, and taking admitted jobs out of them.

The cycle finds jobs in a queue's sorted lists with
:func:`fleet.core.jobs.position` (a bisection in queue order that reads the
fields), looks for a rigid job only in part of ``rigid_jobs``
(:meth:`~fleet.core.state.QueueState.rigid_rank`), and drops the jobs it
admitted from the pending list at the positions it took them from
(:meth:`~fleet.core.state.SchedulerState.drop_pending`), checking each.
"""

from __future__ import annotations

import bisect
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.core.jobs import Job, position
from fleet.core.state import QueueState
from tests.core.factories import make_job, make_nodes, make_state, submit

GPU = "nvidia.com/gpu"
TREE: dict[str, Any] = {
    "name": "root",
    "min": {GPU: 8},
    "max": {GPU: 16},
    "children": [{"name": "team-a", "min": {GPU: 8}, "max": {GPU: 16}}],
}


def _jobs(orders: list[tuple[int, int]]) -> list[Job]:
    return sorted(
        make_job(f"j{i}", priority=priority, seq=seq) for i, (priority, seq) in enumerate(orders)
    )


orders = st.lists(st.tuples(st.integers(-2, 3), st.integers(0, 6)), max_size=30)


@settings(max_examples=200, deadline=None)
@given(orders, st.tuples(st.integers(-2, 3), st.integers(0, 6)), st.data())
def test_position_is_bisect_left_in_queue_order(
    queued: list[tuple[int, int]], probe: tuple[int, int], data: st.DataObject
) -> None:
    jobs = _jobs(queued)
    job = make_job("probe", priority=probe[0], seq=probe[1])
    assert position(jobs, job) == bisect.bisect_left(jobs, job)
    lo = data.draw(st.integers(0, len(jobs)))
    hi = data.draw(st.integers(lo, len(jobs)))
    assert position(jobs, job, lo, hi) == bisect.bisect_left(jobs, job, lo, hi)


def test_rigid_rank_looks_only_where_it_is_told() -> None:
    state = make_state(TREE, {"c1": make_nodes(1, gpus=8)})
    rigid = [make_job(f"r{i}", gpus=1, priority=120, preemptible=False) for i in range(6)]
    submit(state, *rigid)
    queue = state.queues["team-a"]
    assert queue.rigid_jobs == rigid
    for i, job in enumerate(rigid):
        assert queue.rigid_rank(job) == i
        assert queue.rigid_rank(job, 0, i + 1) == i
        assert queue.rigid_rank(job, i, 6) == i
        # Not in the part looked at: its end.
        assert queue.rigid_rank(job, 0, i) == i
        if i + 1 < 6:
            assert queue.rigid_rank(job, i + 1, 6) == 6


# The jobs are dropped as the cycle drops those it started, without starting
# them here: their phases say Queued while no queue holds them.
@pytest.mark.corrupts_state
def test_drop_pending_checks_the_positions_it_is_given() -> None:
    rng = random.Random(7)
    for _ in range(50):
        state = make_state(TREE, {"c1": make_nodes(1, gpus=8)})
        jobs = [
            make_job(
                f"j{i}",
                gpus=rng.choice((1, 2)),
                priority=rng.choice((10, 100, 120, -1)),
                preemptible=rng.random() < 0.8,
            )
            for i in range(12)
        ]
        submit(state, *jobs)
        queue = state.queues["team-a"]
        pending = list(queue.pending)
        dropped = set(rng.sample([j.key for j in pending], 4))
        # Some positions right, some stale (one off, past the end), some missing.
        where: dict[str, int] = {}
        for i, job in enumerate(pending):
            if job.key in dropped:
                where[job.key] = rng.choice((i, i, i + 1, i - 1, len(pending) + 3, -1))
        state.drop_pending("team-a", dropped, where)
        assert [j.key for j in queue.pending] == [j.key for j in pending if j.key not in dropped]
        # The counters and groups as if the rest had been queued alone.
        again = QueueState("team-a")
        for job in queue.pending:
            again.add(job)
        assert {r: c for r, c in queue.needs.items() if c} == again.needs
        assert (queue.rigid, queue.rigid_jobs) == (again.rigid, again.rigid_jobs)
        assert queue.rigid_groups == again.rigid_groups
        assert queue.idle == again.idle
        assert sorted(queue.stamps) == sorted(again.stamps)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([-1, 10, 100, 120]), st.booleans(), st.integers(0, 40)),
        max_size=25,
    )
)
def test_the_rigid_head_is_kept_as_jobs_come_and_go(steps: list[tuple[int, bool, int]]) -> None:
    """Jobs queued (any priority, preemptible or not) and taken out at some
    position: the queue keeps how many of its first jobs are rigid."""
    queue = QueueState("team-a")
    for n, (priority, preemptible, out) in enumerate(steps):
        queue.add(make_job(f"j{n}", priority=priority, preemptible=preemptible, seq=n % 7))
        if out % 3 == 0 and queue.pending:
            queue.remove_at(out % len(queue.pending))
        rigid = [not j.preemptible and not j.opportunistic for j in queue.pending]
        assert queue.rigid_head == (rigid.index(False) if False in rigid else len(rigid))
        assert queue.pending[: queue.rigid_head] == queue.rigid_jobs[: queue.rigid_head]
