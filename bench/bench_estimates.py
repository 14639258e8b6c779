"""How far estimated start times are from actual starts, on a Philly replay.

Setup (defaults): the first ``--jobs`` jobs of the Philly trace on the
clusters ``fleet simulate gen-clusters`` sizes from it, every virtual
cluster shrunk to ``--scale`` of its nodes (at least one) so that jobs
queue.  The replay runs the service's loop; every ``--every`` of virtual
time the estimator (``fleet.sim.forecast``, what the live service runs in
the background) forecasts the waiting jobs from the replay's store.  At the
end every estimate is compared with the job's actual first start.

Two runs: jobs that declare their true run time (``fleet.io/expected-duration``
as in the trace: an upper bound on what estimates can do), and jobs that
declare nothing (the queue's recent median run is assumed: what a site gets
without declarations, and what Slurm's ``squeue --start`` faces with wall-time
limits that users overstate).

Printed figures per run: estimates compared, jobs with no estimate within the
forecast's bounds, and the median and 90th percentile of |estimate - actual|.
The figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
from pathlib import Path

from fleet.sim import engine, forecast, layout, traces
from fleet.sim.traces import TraceJob
from fleet.store.database import Database

TRACE = Path(__file__).resolve().parents[1] / "data" / "traces" / "philly-vc" / "philly_vc_jobs.csv"


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, -(-9 * len(ordered) // 10) - 1)]


async def run(
    jobs: list[TraceJob], quota: str, clusters: str, every: float, declared: bool
) -> None:
    seen: list[tuple[str, float, float | None]] = []  # job, when asked, estimate

    async def observe(db: Database, now: float) -> None:
        result = await forecast.forecast(db, quota, clusters, now, wall_limit=30.0)
        seen.extend((key, now, e.start) for key, e in sorted(result.estimates.items()))

    if declared:
        jobs = [dataclasses.replace(j, declared=True) for j in jobs]
    result = await engine.replay(
        jobs, quota, clusters, "fleet", sample_every=every, observe=observe
    )
    started = {j.key: j.start for j in result.jobs}
    errors = [
        abs(estimate - start)
        for key, asked, estimate in seen
        if estimate is not None and (start := started.get(key)) is not None and start >= asked
    ]
    unknown = sum(1 for _, _, e in seen if e is None)
    label = "declared run times" if declared else "queue medians    "
    if errors:
        print(
            f"  {label}: {len(errors):>5} estimates, {unknown:>4} without one; "
            f"|error| median {statistics.median(errors) / 60:7.1f} min, "
            f"p90 {_p90(errors) / 60:7.1f} min"
        )
    else:
        print(f"  {label}: no job waited ({unknown} without an estimate)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=400, help="first N jobs of the trace")
    parser.add_argument("--scale", type=float, default=0.1, help="share of each VC's nodes")
    parser.add_argument("--every", type=float, default=6 * 3600.0, help="seconds between forecasts")
    args = parser.parse_args()
    jobs = traces.read_philly(TRACE.read_text(encoding="utf-8"))[: args.jobs]
    nodes_file = TRACE.parent / layout.PHILLY_NODES_FILE
    counts = layout.philly_node_counts(nodes_file.read_text(encoding="utf-8"), str(nodes_file))
    scaled = {vc: max(1, round(n * args.scale)) for vc, n in counts.items()}
    generated = layout.philly(jobs, scaled, "the Philly trace, scaled")
    print(
        f"Estimated vs actual starts: {len(jobs)} Philly jobs, "
        f"VCs at {args.scale:.0%} of their nodes"
    )
    for declared in (True, False):
        asyncio.run(run(jobs, generated.quota, generated.clusters, args.every, declared))


if __name__ == "__main__":
    main()
