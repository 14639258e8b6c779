"""The borrowing pass words a refusal for owed room as a job tried in full would.

In the borrowing pass a job that would borrow is first asked whether the room
is owed to guaranteed jobs still ahead in the pass (ADR 0030), and that answer
moves as the pass goes on.  The shape memory keys an answer by the job's shape
and its quota verdict, not by the owed room, so a placement failure it kept
for one job was given to a later job of the same shape even once the room had
become owed.  It is not used in that pass (ADR 0038): every job refused for
owed room says so, with the memory on as with it off.

The workload is ``bench/bench_cycle.py``'s at 10,000 pending gangs of 1 to
64 GPUs (:mod:`fleet.sim.backlog`: 1,000 leaf queues under 20 groups, 20
clusters of 500 eight-GPU nodes): the refusal that the memory used to word
after a placement failure shows in its first cycle.
"""

from __future__ import annotations

import random

from fleet.core import events
from fleet.core.cycle import cycle
from fleet.core.cycle_memory import ALL_SHORTCUTS, Shortcuts
from fleet.core.state import SchedulerState
from fleet.sim.backlog import build_tree, capacity_placers, make_jobs

GROUPS, LEAVES, CLUSTERS, NODES = 20, 50, 20, 500


def first_cycle_reasons(shortcuts: Shortcuts) -> dict[str, str]:
    quota = build_tree(GROUPS, LEAVES, CLUSTERS * NODES * 8)
    state = SchedulerState(quota, capacity_placers(CLUSTERS, NODES))
    for job in make_jobs(random.Random(1), 10_000, quota.leaves(), 0):
        events.apply(state, events.Submitted(job))
    cycle(state, 0.0, shortcuts=shortcuts)
    return {job.key: state.waiting.reason_of(job) for job in state.pending()}


def test_a_refusal_for_owed_room_is_worded_as_without_the_shape_memory() -> None:
    fresh = first_cycle_reasons(Shortcuts(shape_memo=False))
    remembered = first_cycle_reasons(ALL_SHORTCUTS)
    owed = {key: why for key, why in fresh.items() if "owed to guaranteed jobs still queued" in why}
    assert owed, "the workload no longer refuses any job for owed room"
    assert {key: remembered[key] for key in owed} == owed
