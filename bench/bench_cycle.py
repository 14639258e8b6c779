"""Scheduling-cycle throughput and memory: many queues, many pending gangs, many clusters.

Setup (defaults): a 3-level quota tree (root, 20 groups, 1,000 leaf queues),
100,000 pending gang jobs of 1-64 GPUs with mixed priorities, 20 member
clusters of 500 nodes x 8 GPUs each, placed by the capacity-only placer.

Printed figures:
* full cycle: one cycle over the whole backlog (admissions/s);
* steady state: a share of running jobs finishes and as many new jobs arrive,
  then one cycle (admissions/s, median over several rounds);
* peak memory per pending job (tracemalloc over building + queueing them).

Target: >= 10,000 admissions/s and <= 2 KiB per pending job on one core.
After the backlog is queued the benchmark calls ``gc.freeze()``, as a
long-running scheduler would after start-up (``--no-gc-freeze`` to compare).
The figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
import tracemalloc

from fleet.core import events
from fleet.core.capacity import CapacityPlacer
from fleet.core.cycle import Admit, cycle
from fleet.core.jobs import Job, ReplicaGroup
from fleet.core.quota import QuotaNodeSpec, QuotaTree
from fleet.core.resources import Resources
from fleet.core.state import SchedulerState

GPU = "nvidia.com/gpu"
TARGET_RATE = 10_000
TARGET_BYTES = 2048


def build_tree(groups: int, leaves_per_group: int, total_gpus: int) -> QuotaTree:
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


def build_state(tree: QuotaTree, clusters: int, nodes: int) -> SchedulerState:
    node_cap = Resources({GPU: 8})
    placers = {
        f"cluster-{c:02d}": CapacityPlacer(
            f"cluster-{c:02d}", {f"c{c}-node-{n}": node_cap for n in range(nodes)}
        )
        for c in range(clusters)
    }
    return SchedulerState(tree, placers)


def timed_cycle(state: SchedulerState, now: float) -> tuple[int, float]:
    t0 = time.perf_counter()
    decisions = cycle(state, now)
    elapsed = time.perf_counter() - t0
    return sum(1 for d in decisions if isinstance(d, Admit)), elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--clusters", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--leaves-per-group", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--churn", type=float, default=0.05, help="share of running jobs ending")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-gc-freeze", action="store_true", help="leave the GC as it is")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    total_gpus = args.clusters * args.nodes * 8
    tree = build_tree(args.groups, args.leaves_per_group, total_gpus)
    state = build_state(tree, args.clusters, args.nodes)
    queues = tree.leaves()

    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    jobs = make_jobs(rng, args.jobs, queues, 0)
    for job in jobs:
        events.apply(state, events.Submitted(job))
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del jobs
    per_job = (peak - base) / args.jobs

    if not args.no_gc_freeze:
        # A long-running scheduler does this after start-up: the objects it
        # keeps for good are left out of every later full garbage collection.
        gc.collect()
        gc.freeze()
    admitted, elapsed = timed_cycle(state, 0.0)
    print(
        f"setup: {len(queues)} leaf queues, {args.jobs} pending gangs, "
        f"{args.clusters} clusters x {args.nodes} nodes x 8 GPUs, capacity placer, "
        f"gc.freeze {'off' if args.no_gc_freeze else 'on'}"
    )
    print(
        f"full cycle: {admitted} admissions in {elapsed:.3f} s = {admitted / elapsed:,.0f} /s "
        f"({state.pending_count()} still pending)"
    )

    rates = []
    next_seq = args.jobs
    for r in range(args.rounds):
        keys = sorted(state.running)
        ending = rng.sample(keys, max(1, int(len(keys) * args.churn)))
        for key in ending:
            events.apply(state, events.Dispatched(key))
            events.apply(state, events.Finished(key))
        for job in make_jobs(rng, len(ending), queues, next_seq):
            events.apply(state, events.Submitted(job))
        next_seq += len(ending)
        admitted, elapsed = timed_cycle(state, float(r + 1))
        rates.append(admitted / elapsed if elapsed else 0.0)
        print(f"steady round {r + 1}: {admitted} admissions in {elapsed:.3f} s")
    median = statistics.median(rates)
    print(f"steady-state cycle: median {median:,.0f} admissions/s (target >= {TARGET_RATE:,})")
    print(f"memory: {per_job:,.0f} bytes per pending job (peak; target <= {TARGET_BYTES})")
    print(
        "baseline: Kueue, one head per queue per cycle, admitted 9.6 workloads/min "
        "(0.16/s) on 1,300 nodes with a 536-deep queue in production (Kueue issue #14477)"
    )


if __name__ == "__main__":
    main()
