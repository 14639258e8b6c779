"""The benchmarks' synthetic backlog: a quota tree of groups and leaf queues, random gangs.

``bench/bench_cycle.py`` measures the scheduling cycle on it, and tests that
need its scale (``tests/core/test_reasons_in_borrowing_pass.py``) build the same
workload from here.  Every job asks whole GPUs only; the shapes and priorities
are drawn from the given ``random.Random`` with the weights below, so a seed
gives the same backlog everywhere.
"""

from __future__ import annotations

import random

from fleet.core.capacity import CapacityPlacer
from fleet.core.jobs import Job, ReplicaGroup
from fleet.core.placement import Placer
from fleet.core.quota import QuotaNodeSpec, QuotaTree
from fleet.core.resources import GPU, Resources


def build_tree(groups: int, leaves_per_group: int, total_gpus: int) -> QuotaTree:
    """A root holding ``total_gpus`` (min = max), ``groups`` groups of
    ``leaves_per_group`` leaves: each leaf owes an equal share of the GPUs as its
    ``min`` and may borrow up to four times that, each group up to twice its own."""
    leaf_min = total_gpus // (groups * leaves_per_group)
    children = []
    for g in range(groups):
        leaves = tuple(
            QuotaNodeSpec(
                name=f"team-{g}-{i}",
                min=Resources({GPU: leaf_min}),
                max=Resources({GPU: leaf_min * 4}),
                namespaces=(f"ns-{g}-{i}",),
            )
            for i in range(leaves_per_group)
        )
        children.append(
            QuotaNodeSpec(
                name=f"group-{g}",
                min=Resources({GPU: leaf_min * leaves_per_group}),
                max=Resources({GPU: leaf_min * leaves_per_group * 2}),
                children=leaves,
            )
        )
    root = QuotaNodeSpec(
        name="root",
        min=Resources({GPU: total_gpus}),
        max=Resources({GPU: total_gpus}),
        children=tuple(children),
    )
    return QuotaTree.build(root)


SHAPES = [(1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (4, 8), (8, 8)]  # (pods, gpus per pod)
SHAPE_WEIGHTS = [20, 15, 15, 20, 15, 10, 5]
PRIORITIES = [10, 100, -1, 120]
PRIORITY_WEIGHTS = [70, 22, 5, 3]


def make_jobs(rng: random.Random, n: int, queues: list[str], start: int) -> list[Job]:
    """``n`` gangs numbered from ``start`` (``ns/job-<i>``, submission order ``i``), each
    of a drawn shape and priority in a drawn queue; priority 120 is not preemptible."""
    groups_cache: dict[tuple[int, int], tuple[ReplicaGroup, ...]] = {}
    jobs = []
    for i in range(start, start + n):
        shape = rng.choices(SHAPES, SHAPE_WEIGHTS)[0]
        groups = groups_cache.get(shape)
        if groups is None:
            groups = (ReplicaGroup("Worker", shape[0], Resources({GPU: shape[1]})),)
            groups_cache[shape] = groups
        priority = rng.choices(PRIORITIES, PRIORITY_WEIGHTS)[0]
        jobs.append(
            Job(
                key=f"ns/job-{i}",
                queue=rng.choice(queues),
                priority=priority,
                seq=i,
                groups=groups,
                preemptible=priority != 120,
            )
        )
    return jobs


def capacity_placers(clusters: int, nodes: int) -> dict[str, Placer]:
    """``clusters`` member clusters of ``nodes`` 8-GPU nodes each, capacity placers."""
    node_cap = Resources({GPU: 8})
    return {
        f"cluster-{c:02d}": CapacityPlacer(
            f"cluster-{c:02d}", {f"c{c}-node-{n}": node_cap for n in range(nodes)}
        )
        for c in range(clusters)
    }
