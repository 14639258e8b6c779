"""The borrowing pass words a refusal for owed room as a job tried in full would.

In the borrowing pass a job that would borrow is first asked whether the room
is owed to guaranteed jobs still ahead in the pass (ADR 0030), and that answer
moves as the pass goes on.  The shape memory keys an answer by the job's shape
and its quota verdict, not by the owed room, so a placement failure it kept
for one job was given to a later job of the same shape even once the room had
become owed.  It is not used in that pass (ADR 0038): every job refused for
owed room says so, with the memory on as with it off.

The workload is ``bench/bench_cycle.py``'s at 10,000 pending gangs of 1 to
64 GPUs (1,000 leaf queues under 20 groups, 20 clusters of 500 eight-GPU
nodes), built here again: the refusal that the memory used to word after a
placement failure shows in its first cycle.
"""

from __future__ import annotations

import random

from fleet.core import events
from fleet.core.capacity import CapacityPlacer
from fleet.core.cycle import cycle
from fleet.core.cycle_memory import ALL_SHORTCUTS, Shortcuts
from fleet.core.jobs import Job, ReplicaGroup
from fleet.core.placement import Placer
from fleet.core.quota import QuotaNodeSpec, QuotaTree
from fleet.core.resources import GPU, Resources
from fleet.core.state import SchedulerState

GROUPS, LEAVES, CLUSTERS, NODES = 20, 50, 20, 500
SHAPES = [(1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (4, 8), (8, 8)]  # (pods, GPUs per pod)
SHAPE_WEIGHTS = [20, 15, 15, 20, 15, 10, 5]
PRIORITIES = [10, 100, -1, 120]
PRIORITY_WEIGHTS = [70, 22, 5, 3]


def tree() -> QuotaTree:
    total = CLUSTERS * NODES * 8
    leaf_min = total // (GROUPS * LEAVES)
    groups = tuple(
        QuotaNodeSpec(
            name=f"group-{g}",
            min=Resources({GPU: leaf_min * LEAVES}),
            max=Resources({GPU: leaf_min * LEAVES * 2}),
            children=tuple(
                QuotaNodeSpec(
                    name=f"team-{g}-{i}",
                    min=Resources({GPU: leaf_min}),
                    max=Resources({GPU: leaf_min * 4}),
                    namespaces=(f"ns-{g}-{i}",),
                )
                for i in range(LEAVES)
            ),
        )
        for g in range(GROUPS)
    )
    root = QuotaNodeSpec(
        name="root",
        min=Resources({GPU: total}),
        max=Resources({GPU: total}),
        children=groups,
    )
    return QuotaTree.build(root)


def jobs(rng: random.Random, count: int, queues: list[str]) -> list[Job]:
    out = []
    for i in range(count):
        pods, gpus = rng.choices(SHAPES, SHAPE_WEIGHTS)[0]
        priority = rng.choices(PRIORITIES, PRIORITY_WEIGHTS)[0]
        out.append(
            Job(
                key=f"ns/job-{i}",
                queue=rng.choice(queues),
                priority=priority,
                seq=i,
                groups=(ReplicaGroup("Worker", pods, Resources({GPU: gpus})),),
                preemptible=priority != 120,
            )
        )
    return out


def first_cycle_reasons(shortcuts: Shortcuts) -> dict[str, str]:
    quota = tree()
    node = Resources({GPU: 8})
    placers: dict[str, Placer] = {
        f"cluster-{c:02d}": CapacityPlacer(
            f"cluster-{c:02d}", {f"c{c}-node-{n}": node for n in range(NODES)}
        )
        for c in range(CLUSTERS)
    }
    state = SchedulerState(quota, placers)
    for job in jobs(random.Random(1), 10_000, quota.leaves()):
        events.apply(state, events.Submitted(job))
    cycle(state, 0.0, shortcuts=shortcuts)
    return {job.key: state.waiting.reason_of(job) for job in state.pending()}


def test_a_refusal_for_owed_room_is_worded_as_without_the_shape_memory() -> None:
    fresh = first_cycle_reasons(Shortcuts(shape_memo=False))
    remembered = first_cycle_reasons(ALL_SHORTCUTS)
    owed = {key: why for key, why in fresh.items() if "are owed the room" in why}
    assert owed, "the workload no longer refuses any job for owed room"
    assert {key: remembered[key] for key in owed} == owed
