"""Replay speed of ``fleet simulate`` on the Philly trace: jobs simulated per second.

Setup (defaults): the clusters and quota tree ``fleet simulate gen-clusters``
sizes from the trace (353 8-GPU nodes in racks, 12 virtual clusters), and the
first ``--jobs`` jobs of ``data/traces/philly-vc/philly_vc_jobs.csv`` by
submission time, replayed to the end under each ``--policies`` policy through
the scheduler loop, its store (a throwaway SQLite file) and the simulated
members on a virtual clock.

Printed figures per policy: jobs, loop iterations, wall seconds, jobs
simulated per second, and the wall time the whole trace (109,532 jobs) would
take at that rate, and the CPU time the replay used (on a machine shared
with other work, jobs per CPU-second says more than the wall time).
``--jobs 0`` replays the whole trace.  Target: the whole
trace in under 5 minutes per policy on one core (365 jobs/s).  The figures
are printed, never asserted.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from fleet.sim import engine, layout, traces

TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "philly-vc" / "philly_vc_jobs.csv"
TARGET_S = 300.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3000, help="first N jobs (0: all)")
    parser.add_argument("--policies", default="fleet", help="comma-separated policies")
    args = parser.parse_args()
    generated = layout.generate(TRACE, "philly")
    every = traces.read_philly(TRACE.read_text(encoding="utf-8"))
    jobs = every[: args.jobs] if args.jobs else every
    print(f"Philly replay: {len(jobs):,} of {len(every):,} jobs")
    for policy in args.policies.split(","):
        cpu = time.process_time()
        result = engine.run(jobs, generated.quota, generated.clusters, policy)
        cpu = time.process_time() - cpu
        rate = len(result.jobs) / result.wall_s
        whole = len(every) / rate
        print(
            f"  {policy:<9} {len(result.jobs):>7,} jobs  {result.iterations:>8,} iterations  "
            f"{result.wall_s:8.1f} s  {rate:8.1f} jobs/s  "
            f"whole trace ~{whole / 60:.1f} min (target {TARGET_S / 60:.0f} min)  "
            f"[CPU {cpu:.1f} s: {len(result.jobs) / cpu:.1f} jobs per CPU-second]"
        )


if __name__ == "__main__":
    main()
