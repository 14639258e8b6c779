"""How far estimated start times are from actual starts, on Philly and Alibaba replays.

Setup (defaults): the first ``--jobs`` jobs of the Philly trace on the
clusters ``fleet simulate gen-clusters`` sizes from it, every virtual
cluster shrunk to ``--scale`` of its nodes (at least one), and the first
``--jobs`` GPU pods of Alibaba's openb trace on its GPU nodes shrunk the same
way (at least one node per tenant and pool), so that jobs queue.  The replay
runs the service's loop; every ``--every`` of virtual time the estimator
does what the live service does in the background (``fleet.sim.forecast``):
forecast the waiting jobs from the replay's store, learn from the starts seen
since the last forecast (:class:`fleet.sim.forecast.Calibration`) and give
each estimate its range.  At the end every estimate is compared with the
job's actual first start.

Two runs per trace: jobs that declare their true run time
(``fleet.io/expected-duration`` as in the trace: an upper bound on what
estimates can do; new submissions still move starts), and jobs that declare
nothing (the queue's recent runs are assumed: what a site gets without
declarations, and what Slurm's ``squeue --start`` faces with wall-time limits
that users overstate).

Printed figures per run, over all forecasts and then per quarter of the
replay (the moments the estimates were made): estimates compared, jobs with
no estimate within the forecast's bounds, the median and 90th percentile of
|estimate - actual| in minutes and of |estimate - actual| over the actual
wait (waits under a minute count as a minute), the share of jobs that started
inside the range shown, and how many estimates a reader would have seen in
the past ``--shown-after`` seconds after the forecast (the API's answer
between two refreshes, :func:`fleet.sim.forecast.shown`) while the job still
waited.  The figures are printed, never asserted.  Baseline (0.39.0, whose
estimates had no range and were shown as forecast): see ``BASELINE``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from fleet.manifests import convert
from fleet.sim import engine, forecast, layout, load, traces
from fleet.sim.traces import TraceJob
from fleet.store.database import Database

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
PHILLY = DATA / "philly-vc" / "philly_vc_jobs.csv"
OPENB = DATA / "alibaba-openb-2023" / "openb_pod_list_default.csv"
#: Forecasts over an openb replay.
MOMENTS = 24

BASELINE = """\
0.39.0 on the same defaults (its estimates had no range and were shown as forecast):
  philly declared:  1273 estimates,  886 without; |error| p50      0.0 min, p90      0.0 min;
                    relative p50 0.00, p90 0.00; in the past    0
  philly medians :  2085 estimates,   74 without; |error| p50   5446.1 min, p90  24008.4 min;
                    relative p50 1.00, p90 1.00; in the past 1475
  openb declared:    292 estimates,    0 without; |error| p50      1.6 min, p90     15.1 min;
                    relative p50 0.02, p90 0.76; in the past    3
  openb medians :    292 estimates,    0 without; |error| p50     40.7 min, p90     57.4 min;
                    relative p50 1.00, p90 1.00; in the past  165"""


@dataclasses.dataclass(frozen=True, slots=True)
class Seen:
    """One estimate: of which job, made when, and as shown ``shown_after`` later."""

    key: str
    asked: float
    estimate: forecast.Estimate
    shown: forecast.Estimate


def _p(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, -(-round(q * 100) * len(ordered) // 100) - 1)]


def _report(label: str, seen: Sequence[Seen], started: dict[str, float], after: float) -> str:
    errors: list[float] = []
    relative: list[float] = []
    early = 0
    inside = ranged = past = unknown = 0
    for s in seen:
        start = started.get(s.key)
        if s.estimate.start is None:
            unknown += 1
            continue
        if start is None or start < s.asked:
            continue
        error = abs(s.estimate.start - start)
        early += s.estimate.start < start
        errors.append(error)
        relative.append(error / max(start - s.asked, 60.0))
        if s.estimate.earliest is not None and s.estimate.latest is not None:
            ranged += 1
            inside += s.estimate.earliest <= start <= s.estimate.latest
        shown_at = s.asked + after
        if start > shown_at and s.shown.start is not None and s.shown.start < shown_at:
            past += 1
    if not errors:
        return f"  {label}: no job waited ({unknown} without an estimate)"
    share = f"{inside / ranged:6.1%}" if ranged else "   n/a"
    return (
        f"  {label}: {len(errors):>5} estimates, {unknown:>4} without; |error| p50 "
        f"{statistics.median(errors) / 60:8.1f} min, p90 {_p(errors, 0.9) / 60:8.1f} min; "
        f"relative p50 {statistics.median(relative):5.2f}, p90 {_p(relative, 0.9):6.2f}; "
        f"inside range {share}; early {early / len(errors):4.0%}; in the past {past}"
    )


async def run(
    name: str,
    jobs: list[TraceJob],
    quota: str,
    clusters: str,
    every: float,
    after: float,
    declared: bool,
) -> None:
    seen: list[Seen] = []
    calibration = forecast.Calibration()

    async def observe(db: Database, now: float) -> None:
        # what the service's Estimator does at each refresh
        found = await forecast.forecast(db, quota, clusters, now, wall_limit=None)
        await calibration.learn(db, now)
        found = calibration.ranged(found)
        calibration.record(found)
        seen.extend(
            Seen(key, now, e, forecast.shown(e, now + after))
            for key, e in sorted(found.estimates.items())
        )

    if declared:
        jobs = [dataclasses.replace(j, declared=True) for j in jobs]
    wall, cpu = time.perf_counter(), time.process_time()
    result = await engine.replay(
        jobs, quota, clusters, "fleet", sample_every=every, observe=observe
    )
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    started = {j.key: j.start for j in result.jobs if j.start is not None}
    mode = "declared" if declared else "medians "
    print(f"{_report(f'{name} {mode}', seen, started, after)}  ({wall:.0f} s, CPU {cpu:.0f} s)")
    moments = sorted({s.asked for s in seen})
    if len(moments) >= 4:
        for q in range(4):
            part = set(moments[q * len(moments) // 4 : (q + 1) * len(moments) // 4])
            label = f"  quarter {q + 1}     "
            print("  " + _report(label, [s for s in seen if s.asked in part], started, after))


def _philly(n: int, scale: float) -> tuple[list[TraceJob], layout.Layout]:
    jobs = traces.read_philly(PHILLY.read_text(encoding="utf-8"))[:n]
    nodes_file = PHILLY.parent / layout.PHILLY_NODES_FILE
    counts = layout.philly_node_counts(nodes_file.read_text(encoding="utf-8"), str(nodes_file))
    scaled = {vc: max(1, round(c * scale)) for vc, c in counts.items()}
    return jobs, layout.philly(jobs, scaled, "the Philly trace, scaled")


def _openb(n: int, scale: float, offered: float) -> tuple[list[TraceJob], layout.Layout]:
    jobs = traces.read_openb(OPENB.read_text(encoding="utf-8"))[:n]
    nodes_file = OPENB.parent / layout.OPENB_NODES_FILE
    groups = layout.openb_nodes(nodes_file.read_text(encoding="utf-8"), str(nodes_file))
    tenants = traces.OPENB_TENANTS
    kept = [
        dataclasses.replace(g, names=g.names[: max(tenants, round(len(g.names) * scale))])
        for g in groups
    ]
    generated = layout.openb(kept, "the openb nodes, scaled")
    gpus = engine.cluster_gpus(convert.load_clusters(generated.clusters))
    # the pods are short and sparse: brought to an offered load that makes them queue
    jobs, _ = load.scaled(jobs, gpus, offered)
    return jobs, generated


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=400, help="first N jobs of each trace")
    parser.add_argument("--scale", type=float, default=0.1, help="share of the nodes kept")
    parser.add_argument("--every", type=float, default=6 * 3600.0, help="seconds between forecasts")
    parser.add_argument(
        "--shown-after", type=float, default=90.0, help="seconds after a forecast it is read"
    )
    parser.add_argument("--openb-jobs", type=int, default=2000, help="first N openb pods")
    parser.add_argument(
        "--openb-scale", type=float, default=0.01, help="share of the openb nodes kept"
    )
    parser.add_argument(
        "--openb-load", type=float, default=3.0, help="offered load the openb pods come at"
    )
    parser.add_argument("--trace", choices=("philly", "openb", "both"), default="both")
    args = parser.parse_args()
    print(
        f"Estimated vs actual starts: the first {args.jobs} Philly jobs on {args.scale:.0%} "
        f"of the nodes, the first {args.openb_jobs} openb pods on {args.openb_scale:.0%} at "
        f"offered load {args.openb_load:g}; a forecast every {args.every:g} s of Philly and "
        f"{MOMENTS} over openb, read {args.shown_after:g} s later"
    )
    chosen = ("philly", "openb") if args.trace == "both" else (args.trace,)
    for name in chosen:
        if name == "philly":
            jobs, generated = _philly(args.jobs, args.scale)
        else:
            jobs, generated = _openb(args.openb_jobs, args.openb_scale, args.openb_load)
        # openb: a forecast at each of MOMENTS moments of its (rescaled) span
        every = args.every if name == "philly" else max(60.0, load.span(jobs) / MOMENTS)
        for declared in (True, False):
            asyncio.run(
                run(
                    name,
                    jobs,
                    generated.quota,
                    generated.clusters,
                    every,
                    args.shown_after,
                    declared,
                )
            )
    print(BASELINE)


if __name__ == "__main__":
    main()
