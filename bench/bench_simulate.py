"""Replay speed of ``fleet simulate`` on the Philly trace or the openb pods: jobs per second.

Setup (defaults): the clusters and quota tree ``fleet simulate gen-clusters``
sizes from the trace (Philly: 353 8-GPU nodes in racks, 12 virtual
clusters; ``--trace openb``: the nodes of ``openb_node_list_gpu_node.csv``
and one queue per QoS class), and the first ``--jobs`` jobs of the trace
(``data/traces/philly-vc/philly_vc_jobs.csv``, or the GPU pods of
``data/traces/alibaba-openb-2023/openb_pod_list_default.csv``) by submission
time, replayed to the end under each ``--policies`` policy through the
scheduler loop, its store (a throwaway SQLite file) and the simulated
members on a virtual clock.

Printed figures per policy: jobs, loop iterations, wall seconds, jobs
simulated per second, and the wall time the whole trace would take at that
rate, and the CPU time the replay used (on a machine shared with other
work, jobs per CPU-second says more than the wall time).  ``--jobs 0``
replays the whole trace.  Target: the whole trace in at most 2 minutes per
policy (:data:`TARGET_S`).  The figures are printed, never asserted; the
figures before the replay's write path batched (:data:`BASELINE`) are
printed first.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from fleet.sim import engine, layout, traces

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
TRACES = {
    "philly": DATA / "philly-vc" / "philly_vc_jobs.csv",
    "openb": DATA / "alibaba-openb-2023" / "openb_pod_list_default.csv",
}
READERS = {"philly": traces.read_philly, "openb": traces.read_openb}
TARGET_S = 120.0
#: Before the replay stored its submissions ahead and its decisions behind
#: (docs/design/members.md, the simulator): the whole Philly trace per policy.
BASELINE = (
    "whole Philly trace, each policy: 4.4-5.1 min on a quiet machine (issue 34); fleet on "
    "the shared 2-core machine under load: 1,746 s wall, 489 s CPU (224 jobs per CPU-second); "
    "first 20,000 Philly jobs, fleet: 56.6 s wall, 55.2 s CPU; openb pods, fleet: "
    "39.7 s wall, 24.6 s CPU"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3000, help="first N jobs (0: all)")
    parser.add_argument("--policies", default="fleet", help="comma-separated policies")
    parser.add_argument("--trace", choices=sorted(TRACES), default="philly", help="which trace")
    args = parser.parse_args()
    trace = TRACES[args.trace]
    generated = layout.generate(trace, args.trace)
    every = READERS[args.trace](trace.read_text(encoding="utf-8"))
    jobs = every[: args.jobs] if args.jobs else every
    print(f"Baseline: {BASELINE}")
    print(f"{args.trace} replay: {len(jobs):,} of {len(every):,} jobs")
    for policy in args.policies.split(","):
        cpu = time.process_time()
        result = engine.run(jobs, generated.quota, generated.clusters, policy)
        cpu = time.process_time() - cpu
        rate = len(result.jobs) / result.wall_s
        whole = len(every) / rate
        print(
            f"  {policy:<9} {len(result.jobs):>7,} jobs  {result.iterations:>8,} iterations  "
            f"{result.wall_s:8.1f} s  {rate:8.1f} jobs/s  "
            f"whole trace ~{whole:.0f} s (target {TARGET_S:.0f} s)  "
            f"[CPU {cpu:.1f} s: {len(result.jobs) / cpu:.1f} jobs per CPU-second]",
            flush=True,
        )


if __name__ == "__main__":
    main()
