"""Scheduling-cycle throughput and memory: many queues, many pending gangs, many clusters.

Setup (defaults): a 3-level quota tree (root, 20 groups, 1,000 leaf queues),
100,000 pending gang jobs of 1-64 GPUs with mixed priorities, 20 member
clusters of 500 nodes x 8 GPUs each, placed by each placer in turn
(``--placer capacity`` or ``--placer cells`` for one):

* ``capacity``: the capacity-only placer (free GPUs per node);
* ``cells``: the HiveD cell allocator, each cluster 50 racks of 10 nodes of
  4 PCIe pairs of 2 GPUs; the leaf queues are dealt round robin to the
  clusters (leaf ``i`` to cluster ``i mod 20``) and each owes its ``min``
  (80 GPUs: 10 whole nodes) as ``RACK.NODE`` virtual cells there, so every
  node is owed to some VC and borrowed and opportunistic jobs use the VCs'
  idle cells.

Printed figures, per placer:
* full cycle: one cycle over the whole backlog (admissions/s);
* steady state: the backlog is topped up to its nominal size after the full
  cycle; then, each round, a share of running jobs finishes, as many new jobs
  arrive, and one cycle runs (admissions/s and cycle time, median over the
  rounds);
* peak memory per pending job (tracemalloc over building + queueing them);
* the decision digests of the placer's stream (the full cycle and the steady
  rounds): one over every Admit and Preempt (job, queue, cluster, mode,
  pods, victims, reason), one over every Wait (job, reason), so that a change
  meant to keep the decisions can be checked against the figures before it;
* with ``--scale``: the steady-state cycle time at 10,000 / 100,000 /
  1,000,000 pending jobs, with the admissions it made and the CPU per
  admission (a round's churn frees about the same GPUs at every size, and a
  deeper backlog has more small jobs to fill them with, so a cycle at 1M
  admits about 1.4 times as many jobs as one at 10k), each backlog measured
  in turn ``--scale-passes`` times (4), every other pass from the largest
  backlog down, and the 1M-to-10k ratios given as the medians of the
  passes', since the machine's speed drifts within and between the passes;
  ``--profile`` prints a
  pyinstrument profile of the steady rounds (if pyinstrument is installed).

Targets: >= 10,000 admissions/s (capacity) and >= 3,000 (cells) in steady
state at 100k pending, <= 50 us of CPU per admission (capacity: a steady
cycle's CPU over the jobs it admits, so its waits count too), the cycle time
at 1M within 1.5x of 10k, and <= 2 KiB per pending job.
After the backlog is queued the benchmark calls ``gc.freeze()``, follows
the full collections as ``fleet serve`` does (:class:`fleet.service.collector.FollowGrowth`:
what survives one is frozen), and runs each cycle as the service's loop does,
with automatic collection paused and the youngest generation collected right
after when due, on the cycle's clock (:func:`fleet.service.collector.cycle_paused`);
``--no-gc-freeze`` leaves the collector as it is, to compare.
The figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import hashlib
import random
import statistics
import time
import tracemalloc
from typing import Any

from fleet import compiled_core
from fleet.core import events
from fleet.core.cells.config import load_cell_config
from fleet.core.cells.placer import CellPlacer
from fleet.core.cycle import Admit, Decision, Preempt, cycle
from fleet.core.placement import Placer
from fleet.core.quota import QuotaTree
from fleet.core.state import SchedulerState
from fleet.service.collector import FollowGrowth, cycle_paused
from fleet.sim.backlog import build_tree, capacity_placers, make_jobs
from fleet.testing.cells import rack_config

GPU = "nvidia.com/gpu"
TARGET_RATE = 10_000
TARGET_CELLS_RATE = 3_000
RACK_NODES = 10
SCALE = (10_000, 100_000, 1_000_000)
HIVED_PEER = (
    "HiveD's Go allocator on the same HiveD stream, measured side by side: "
    "300-380 jobs/s, multi-pod gang placement p99 18-36 ms"
)
TARGET_BYTES = 2048
TARGET_US_PER_ADMISSION = 50


def build_state(
    tree: QuotaTree, clusters: int, nodes: int, placer: str = "capacity"
) -> SchedulerState:
    if placer == "cells":
        return SchedulerState(tree, cell_placers(tree, clusters, nodes))
    return SchedulerState(tree, capacity_placers(clusters, nodes))


def cell_placers(tree: QuotaTree, clusters: int, nodes: int) -> dict[str, Placer]:
    """One HiveD cell hierarchy per cluster, the leaf queues' VCs spread across them.

    Each cluster: racks of ``RACK_NODES`` nodes, a node of 4 PCIe pairs of 2
    GPUs (``bench_cells.py``'s cell types).  The leaf queues are dealt to the
    clusters in tree order, round robin, and each owes its queue's ``min`` in
    whole 8-GPU nodes (``RACK.NODE`` virtual cells) in its cluster, as far as
    the cluster has nodes left; what no VC is owed is the shared pool.
    """
    leaves = tree.leaves()
    names = [f"cluster-{c:02d}" for c in range(clusters)]
    owed: dict[str, dict[str, int]] = {name: {} for name in names}
    left = dict.fromkeys(names, nodes)
    for i, leaf in enumerate(leaves):
        name = names[i % clusters]
        want = min(tree.min_of(leaf)[GPU] // 8, left[name])
        if want > 0:
            owed[name][leaf] = want
            left[name] -= want
    racks = max(1, nodes // RACK_NODES)
    placers: dict[str, Placer] = {}
    for c, name in enumerate(names):
        vcs = {vc: [("RACK.NODE", count)] for vc, count in owed[name].items()}
        address = f"c{c}-" + "r{r:03d}-n{n}"
        config = rack_config(racks, RACK_NODES, 8, vcs, pairs=True, address=address)
        placers[name] = CellPlacer(name, load_cell_config(config))
    return placers


#: CPU seconds of each timed cycle (the machine may be shared: wall time is noisier)
CPU_TIMES: list[float] = []


class Digests:
    """SHA-256 over a stream's decisions: admissions and preemptions, and waits."""

    def __init__(self) -> None:
        self.moves = hashlib.sha256()
        self.waits = hashlib.sha256()

    def add(self, decisions: list[Decision]) -> None:
        for d in decisions:
            if isinstance(d, Admit):
                pods = tuple((p.pod, p.node, tuple(p.gpus)) for p in d.pods)
                line = ("A", d.job, d.queue, d.cluster, d.mode.value, d.priority, pods)
                self.moves.update(repr((*line, d.grown, d.unit, tuple(d.victims))).encode())
            elif isinstance(d, Preempt):
                pods = tuple((p.pod, p.node, tuple(p.gpus)) for p in d.pods)
                line = ("P", d.job, d.queue, d.cluster, pods, d.reason, d.unit)
                self.moves.update(repr(line).encode())
            else:
                self.waits.update(repr(("W", d.job, d.queue, d.reason)).encode())

    def __str__(self) -> str:
        return f"{self.moves.hexdigest()[:16]} / {self.waits.hexdigest()[:16]}"


#: the digests of the stream being measured (one per ``measure``)
DIGESTS = [Digests()]


GC_AS_SERVED = "as fleet serve (freeze, FollowGrowth, paused in each cycle)"
#: whether cycles run as the service's loop runs them (``--no-gc-freeze`` turns it off)
AS_SERVED = [True]


def timed_cycle(state: SchedulerState, now: float) -> tuple[int, float]:
    c0 = time.process_time()
    t0 = time.perf_counter()
    with cycle_paused() if AS_SERVED[0] else contextlib.nullcontext():
        decisions = cycle(state, now)
    elapsed = time.perf_counter() - t0
    CPU_TIMES.append(time.process_time() - c0)
    DIGESTS[0].add(decisions)
    return sum(1 for d in decisions if isinstance(d, Admit)), elapsed


def steady_rounds(
    state: SchedulerState,
    rng: random.Random,
    queues: list[str],
    rounds: int,
    churn: float,
    next_seq: int,
    quiet: bool = False,
) -> list[tuple[int, float]]:
    """``rounds`` times: ``churn`` of the running jobs end, as many arrive, one cycle."""
    out = []
    for r in range(rounds):
        keys = sorted(state.running)
        ending = rng.sample(keys, max(1, int(len(keys) * churn))) if keys else []
        for key in ending:
            events.apply(state, events.Dispatched(key))
            events.apply(state, events.Finished(key))
        for job in make_jobs(rng, len(ending), queues, next_seq):
            events.apply(state, events.Submitted(job))
        next_seq += len(ending)
        admitted, elapsed = timed_cycle(state, float(r + 1))
        out.append((admitted, elapsed))
        if not quiet:
            print(f"  steady round {r + 1}: {admitted} admissions in {elapsed:.3f} s")
    return out


def measure(
    args: argparse.Namespace, placer: str, jobs: int, quiet: bool = False
) -> dict[str, float]:
    """Queue ``jobs``, one full cycle, then steady rounds; the figures."""
    rng = random.Random(args.seed)
    total_gpus = args.clusters * args.nodes * 8
    tree = build_tree(args.groups, args.leaves_per_group, total_gpus)
    t0 = time.perf_counter()
    state = build_state(tree, args.clusters, args.nodes, placer)
    built = time.perf_counter() - t0
    queues = tree.leaves()

    gc.collect()
    tracemalloc.start()
    base, _ = tracemalloc.get_traced_memory()
    new = make_jobs(rng, jobs, queues, 0)
    for job in new:
        events.apply(state, events.Submitted(job))
    _current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del new
    per_job = (peak - base) / jobs

    collector = FollowGrowth()
    DIGESTS[0] = Digests()
    AS_SERVED[0] = not args.no_gc_freeze
    if not args.no_gc_freeze:
        # As `fleet serve` does: what survives a full garbage collection is left
        # out of the later ones (fleet.service.collector), starting with the backlog.
        gc.collect()
        gc.freeze()
        collector.install()
    admitted, elapsed = timed_cycle(state, 0.0)
    if not quiet:
        print(
            f"[{placer}] setup: {len(queues)} leaf queues, {jobs} pending gangs, "
            f"{args.clusters} clusters x {args.nodes} nodes x 8 GPUs (built in {built:.1f} s), "
            f"gc: {'as it is' if args.no_gc_freeze else GC_AS_SERVED}"
        )
        print(
            f"[{placer}] full cycle: {admitted} admissions in {elapsed:.3f} s = "
            f"{admitted / elapsed:,.0f} /s ({state.pending_count()} still pending; "
            f"topped up to {jobs} for the steady rounds)"
        )
    full_rate = admitted / elapsed if elapsed else 0.0
    # The steady rounds run at the nominal backlog: what the full cycle admitted
    # is queued again (new jobs of the same mix), so "N pending" holds for them.
    topped = make_jobs(rng, jobs - state.pending_count(), queues, jobs)
    for job in topped:
        events.apply(state, events.Submitted(job))
    next_seq = jobs + len(topped)
    del topped
    profiler = _profiler() if args.profile and not quiet else None
    if profiler is not None:
        profiler.start()
    first = len(CPU_TIMES)
    rounds = steady_rounds(state, rng, queues, args.rounds, args.churn, next_seq, quiet)
    cpu = statistics.median(CPU_TIMES[first:])
    per_admission = statistics.median(
        c / a for c, (a, _) in zip(CPU_TIMES[first:], rounds, strict=True) if a
    )
    if profiler is not None:
        profiler.stop()
        print(profiler.output_text(unicode=False, color=False))
    collector.remove()  # and unfreezes
    rate = statistics.median(a / t if t else 0.0 for a, t in rounds)
    cycle_time = statistics.median(t for _, t in rounds)
    if not quiet:
        target = TARGET_RATE if placer == "capacity" else TARGET_CELLS_RATE
        print(
            f"[{placer}] steady-state cycle: median {rate:,.0f} admissions/s "
            f"(target >= {target:,}), median cycle {cycle_time * 1000:,.1f} ms "
            f"(CPU {cpu * 1000:,.1f} ms) over {len(rounds)} rounds"
        )
        each = f"[{placer}] CPU per admission: median {per_admission * 1e6:,.1f} us"
        if placer == "capacity":
            each += f" (target <= {TARGET_US_PER_ADMISSION})"
        print(each + ", the whole steady cycle's CPU over the jobs it admits")
        print(
            f"[{placer}] memory: {per_job:,.0f} bytes per pending job "
            f"(peak; target <= {TARGET_BYTES})"
        )
        print(f"[{placer}] decision digests (admissions and preemptions / waits): {DIGESTS[0]}")
    return {
        "full": full_rate,
        "steady": rate,
        "cycle": cycle_time,
        "cpu": cpu,
        "per_admission": per_admission,
        "admitted": statistics.median(a for a, _ in rounds),
        "bytes": per_job,
    }


def _profiler() -> Any:
    try:
        from pyinstrument import Profiler  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        print("(--profile needs pyinstrument: .venv/bin/pip install pyinstrument)")
        return None
    return Profiler(interval=0.0005)


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
    parser.add_argument(
        "--placer",
        choices=["capacity", "cells"],
        action="append",
        help="capacity (the baseline) or cells (the HiveD allocator); default both",
    )
    parser.add_argument(
        "--scale",
        action="store_true",
        help="also a table of the steady-state cycle time at 10k / 100k / 1M pending jobs",
    )
    parser.add_argument(
        "--scale-passes",
        type=int,
        default=4,
        help="with --scale: measure every backlog this many times, in turn, every "
        "other pass from the largest down (the ratio is the median of the passes': "
        "the machine's speed drifts)",
    )
    parser.add_argument("--profile", action="store_true", help="pyinstrument the steady rounds")
    parser.add_argument("--no-gc-freeze", action="store_true", help="leave the GC as it is")
    args = parser.parse_args()
    placers = args.placer or ["capacity", "cells"]
    print(compiled_core.describe())

    for placer in placers:
        measure(args, placer, args.jobs)
    if args.scale:
        passes = max(1, args.scale_passes)
        print(
            "steady-state cycle time by backlog (median of the rounds; "
            f"{passes} pass{'es' if passes > 1 else ''}, each backlog in turn):"
        )
        for placer in placers:
            ratios: list[tuple[float, float, float]] = []
            for n in range(passes):
                times: dict[int, float] = {}
                cpus: dict[int, float] = {}
                each: dict[int, float] = {}
                # Every other pass goes from the largest backlog down, so that a
                # drift of the machine's speed within a pass leans neither way.
                for jobs in SCALE if n % 2 == 0 else SCALE[::-1]:
                    figures = measure(args, placer, jobs, quiet=True)
                    times[jobs] = figures["cycle"]
                    cpus[jobs] = figures["cpu"]
                    each[jobs] = figures["per_admission"]
                    print(
                        f"  [{placer}] pass {n + 1}: {jobs:>9,} pending: "
                        f"{figures['cycle'] * 1000:9,.1f} ms "
                        f"(CPU {figures['cpu'] * 1000:,.1f} ms) for {figures['admitted']:,.0f} "
                        f"admissions, {figures['per_admission'] * 1e6:,.0f} us of CPU each, "
                        f"{figures['steady']:9,.0f} admissions/s, "
                        f"{figures['bytes']:,.0f} bytes/job",
                        flush=True,
                    )
                ratios.append(
                    (
                        times[SCALE[-1]] / times[SCALE[0]] if times[SCALE[0]] else 0.0,
                        cpus[SCALE[-1]] / cpus[SCALE[0]] if cpus[SCALE[0]] else 0.0,
                        each[SCALE[-1]] / each[SCALE[0]] if each[SCALE[0]] else 0.0,
                    )
                )
            ratio, cpu_ratio, each_ratio = (
                statistics.median(r[i] for r in ratios) for i in range(3)
            )
            per_pass = ", ".join(f"{r[0]:.2f}x" for r in ratios)
            print(
                f"  [{placer}] {SCALE[-1]:,} vs {SCALE[0]:,} pending: {ratio:.2f}x "
                f"the cycle time, {cpu_ratio:.2f}x its CPU time (target <= 1.5x; medians "
                f"of the passes, cycle time by pass: {per_pass}); {each_ratio:.2f}x the CPU "
                "per admission (the same churn frees about the same GPUs at every size; a "
                "deeper backlog fills them with more, smaller jobs)"
            )
    print(
        "baseline: Kueue, one head per queue per cycle, admitted 9.6 workloads/min "
        "(0.16/s) on 1,300 nodes with a 536-deep queue in production (Kueue issue #14477)"
    )
    print(f"baseline: {HIVED_PEER} (bench_cells.py, on its HiveD stream)")


if __name__ == "__main__":
    main()
