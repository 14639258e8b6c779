"""Two ways the cycle settles a whole queue's kind of job at once.

* Non-preemptible jobs that their queue's ``min`` stops: when the least any
  group of them asks of some resource is already over what the ``min``
  leaves, no group is asked (``QueueState.rigid_least``,
  ``QuotaTree.stops_every_rigid``).
* Opportunistic jobs in the last pass: when no cluster answers any question
  of a qualifying queue, found from the scheduler's index of groups
  (``SchedulerState.idle_index``), no queue's groups are gone through.

Either way the cycle decides and words what the full scan does.
"""

from __future__ import annotations

from typing import Any

from fleet.core.cycle import Wait, cycle
from fleet.core.cycle_memory import Shortcuts
from fleet.core.resources import Resources
from fleet.core.state import SchedulerState
from tests.core.factories import cancel, finish, make_job, make_nodes, make_state, submit

GPU = "nvidia.com/gpu"
MAX_JOBS = "kube-queue/max-jobs"
TREE: dict[str, Any] = {
    "name": "root",
    "min": {GPU: 16},
    "max": {GPU: 16},
    "children": [
        {"name": "team-a", "min": {GPU: 6}, "max": {GPU: 16}},
        {"name": "team-b", "min": {GPU: 6}, "max": {GPU: 16}},
        {"name": "team-c", "min": {GPU: 2}, "max": {GPU: 16, MAX_JOBS: 20}},
        {"name": "team-d", "min": {GPU: 2}, "max": {GPU: 16}},
    ],
}
SCAN = Shortcuts(parking=False)


def fresh() -> SchedulerState:
    return make_state(TREE, {"c1": make_nodes(2, gpus=8)}, strict_fifo=("team-b",))


def test_the_least_rigid_request_is_kept_as_rigid_jobs_come_and_go() -> None:
    state = fresh()
    queue = state.queues["team-a"]
    assert queue.rigid_least() == {}
    submit(state, make_job("r4", gpus=4, priority=120, preemptible=False, seq=1))
    submit(state, make_job("r8", pods=2, gpus=4, priority=120, preemptible=False, seq=2))
    assert queue.rigid_least() == {GPU: 4, MAX_JOBS: 1}
    submit(state, make_job("r1", gpus=1, priority=120, preemptible=False, seq=3))
    assert queue.rigid_least() == {GPU: 1, MAX_JOBS: 1}
    cancel(state, "default/r1")
    cancel(state, "default/r4")
    assert queue.rigid_least() == {GPU: 8, MAX_JOBS: 1}


def test_every_group_is_stopped_when_the_least_is() -> None:
    state = fresh()
    submit(state, make_job("used", gpus=4, seq=0))
    cycle(state, 0.0)  # team-a holds 4 of its min of 6 as guaranteed
    tree = state.tree
    for least in (1, 2, 3, 4):
        request = Resources({GPU: least, MAX_JOBS: 1})
        every = tree.stops_every_rigid("team-a", {GPU: least, MAX_JOBS: 1})
        assert every == tree.stops_rigid("team-a", request) == (least > 2)
        for more in range(least, 9):
            if every:
                assert tree.stops_rigid("team-a", Resources({GPU: more, MAX_JOBS: 1}))


def run_both(steps: list[list[Any]]) -> None:
    """The same submissions and endings into a parked and a scanning state; after
    every cycle the same admissions and preemptions and the same reasons."""
    parked, scan = fresh(), fresh()
    kept: dict[str, str] = {}
    for t, step in enumerate(steps):
        for what in step:
            for state in (parked, scan):
                if isinstance(what, str):
                    finish(state, what)
                else:
                    submit(state, what)
        a = cycle(parked, float(t))
        b = cycle(scan, float(t), shortcuts=SCAN)
        assert [d for d in a if not isinstance(d, Wait)] == [
            d for d in b if not isinstance(d, Wait)
        ]
        kept.update({d.job: d.reason for d in b if isinstance(d, Wait)})
        assert {j.key: parked.waiting.reason_of(j) for j in parked.pending()} == {
            j.key: kept.get(j.key, "") for j in scan.pending()
        }


def test_opportunistic_jobs_nobody_can_take_wait_by_queue_as_the_scan_says() -> None:
    # team-a's guaranteed usage is its min (6); team-c borrows the rest of the
    # cluster.  team-b is StrictFIFO and team-c's path limits max-jobs: neither
    # qualifies for the opportunistic groups.
    fill = [
        make_job("a0", queue="team-a", gpus=3, priority=10, seq=0),
        make_job("a1", queue="team-a", gpus=3, priority=10, seq=1),
        make_job("c0", queue="team-c", gpus=2, priority=10, seq=2),
        make_job("c1", queue="team-c", gpus=8, priority=10, seq=3),
    ]
    opportunistic = [
        make_job(f"o{q}{i}", queue=f"team-{q}", gpus=g, priority=-1, seq=10 + i)
        for q in "abcd"
        for i, g in enumerate((1, 2, 4))
    ]
    rigid = [
        make_job(f"r{i}", queue="team-a", gpus=g, priority=120, preemptible=False, seq=20 + i)
        for i, g in enumerate((4, 8, 2))
    ]
    run_both(
        [
            fill,  # the cluster is full
            opportunistic + rigid,  # no cluster answers; the min stops every rigid job
            [],
            ["default/c1"],  # 8 GPUs free: some questions are answered now
            [],
        ]
    )


def test_a_queue_of_opportunistic_jobs_only_is_indexed_and_forgotten() -> None:
    state = fresh()
    submit(state, make_job("o1", queue="team-c", gpus=1, priority=-1, seq=1))
    assert list(state.idle_index.values()) == [{"team-c": None}]
    cancel(state, "default/o1")
    assert state.idle_index == {}


def rigid(name: str, gpus: int, seq: int) -> Any:
    return make_job(name, queue="team-a", gpus=gpus, priority=120, preemptible=False, seq=seq)


def test_a_rigid_head_the_min_stops_waits_whole_as_the_scan_says() -> None:
    # team-a holds 5 of its min of 6 as guaranteed: no rigid job fits what is left.
    fill = [
        make_job("a0", queue="team-a", gpus=3, seq=0),
        make_job("a1", queue="team-a", gpus=2, seq=1),
    ]
    run_both(
        [
            fill,
            [rigid("r4", 4, 10), rigid("r2", 2, 11), rigid("r3", 3, 12)],
            [],
            ["default/a1"],  # 3 left: r2 and then r3 fit, r4 still waits
            [],
        ]
    )


def test_a_rigid_head_parked_whole_reports_its_first_job_only_when_its_reason_changes() -> None:
    state = fresh()
    for job in (
        make_job("a0", queue="team-a", gpus=3, seq=0),
        make_job("a1", queue="team-a", gpus=2, seq=1),
    ):
        submit(state, job)
    cycle(state, 0.0)
    for job in (rigid("r4", 4, 10), rigid("r3", 3, 11)):
        submit(state, job)

    def waits(now: float) -> list[tuple[str, str]]:
        return [(d.job, d.reason) for d in cycle(state, now) if isinstance(d, Wait)]

    first = waits(1.0)
    # The head, first job and all, is one parked run: nothing waits one by one.
    assert [j.key for j in state.pending()] == ["default/r4", "default/r3"]
    assert not state.waiting.single
    [run] = state.waiting.runs["team-a"]
    assert run.stop is None
    assert first == [("default/r4", state.waiting.reason_of(state.pending()[0]))]
    assert "5 of 6 GPUs guaranteed in use; this job needs 4" in first[0][1]
    assert waits(2.0) == []  # nothing changed: nothing reported
    finish(state, "default/a0")  # 2 of 6 in use: r4 fits
    submit(state, make_job("a2", queue="team-a", gpus=1, seq=20))
    assert waits(3.0) == [
        (
            "default/r3",
            "the guarantee (min) of queue team-a is full: 6 of 6 GPUs guaranteed in use; "
            "this job needs 3 and, not preemptible, runs only within the guarantee",
        )
    ]
