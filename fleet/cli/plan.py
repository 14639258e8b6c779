"""``fleet plan``: run the scheduling cycle offline and say who starts where.

Theory of operation: the quota tree, the member clusters and the jobs are
loaded with the same loaders the service uses, and each cluster's placer
(``--placer``: the cell allocator or the capacity baseline) is built by the
one builder of placers, :mod:`fleet.manifests.placers`.  Jobs of ``--running`` are
submitted first and the cycle is run until nothing changes: they are the jobs
already running.  Then the jobs of ``--jobs`` are submitted in document order
and the cycle is run again until nothing changes (at most
:data:`MAX_CYCLES` cycles).  The report lists every job exactly once in
``admitted`` (running at the end, with node and GPU indices per replica;
``already_running`` marks jobs of ``--running``) or ``waiting`` (with the
reason of the last cycle), plus the running jobs that were preempted on the
way (they also appear in ``waiting``: they are queued again) and every leaf
queue's usage.  The table's queue columns are ``fleet get queues``' own
(:mod:`fleet.service.columns`: GPUS used/min/max, BORROWED, RUNNING, PENDING),
then CPU, MEMORY and the other resources.  The table says so in words where a
section is empty: ``no running job preempted`` (when ``--running`` holds jobs),
``no job waits``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from fleet.cli.inputs import InputError, read_input
from fleet.core import events
from fleet.core.cycle import Admit, Decision, Preempt, cycle
from fleet.core.jobs import Job
from fleet.core.placement import Placer
from fleet.core.quota import QuotaTree
from fleet.core.state import SchedulerState
from fleet.manifests import convert
from fleet.manifests import placers as placer_builder
from fleet.manifests.errors import SpecError
from fleet.service import columns

MAX_CYCLES = 100
_T = TypeVar("_T")


def settle(state: SchedulerState, start: float) -> tuple[list[Decision], float]:
    """Run cycles until one admits and preempts nothing; return every decision."""
    now = start
    seen: list[Decision] = []
    for _ in range(MAX_CYCLES):
        decisions = cycle(state, now)
        seen.extend(decisions)
        for d in decisions:  # offline, a preempted job stops at once
            if isinstance(d, Preempt) and not d.unit:
                events.apply(state, events.Stopped(d.job))
        now += 1.0
        if not any(isinstance(d, (Admit, Preempt)) for d in decisions):
            break
    return seen, now


def plan(
    tree: QuotaTree,
    placers: Mapping[str, Placer],
    jobs: Sequence[Job],
    running: Sequence[Job] = (),
) -> dict[str, Any]:
    """The plan as the JSON document ``fleet plan -o json`` prints."""
    state = SchedulerState(tree, placers)
    for job in running:
        events.apply(state, events.Submitted(job))
    _, now = settle(state, 0.0)
    already = set(state.running)
    for job in jobs:
        events.apply(state, events.Submitted(job))
    decisions, _ = settle(state, now)

    preempted: list[dict[str, str]] = []
    for d in decisions:
        if isinstance(d, Preempt):
            preempted.append({"job": d.job, "reason": d.reason})

    admitted: list[dict[str, Any]] = []
    waiting: list[dict[str, Any]] = []
    for job in [*running, *jobs]:
        run = state.running.get(job.key)
        if run is not None:
            entry: dict[str, Any] = {
                "job": job.key,
                "queue": job.queue,
                "cluster": run.cluster,
                "mode": str(run.mode),
                "priority": job.priority,
                "replicas": [
                    {"replica": p.pod, "node": p.node, "gpus": list(p.gpus)} for p in run.pods
                ],
            }
            if job.key in already:
                entry["already_running"] = True
            admitted.append(entry)
        else:
            reason = state.waiting.reason_of(job) if state.is_pending(job.key) else ""
            reason = reason or "not considered"
            waiting.append({"job": job.key, "queue": job.queue, "reason": reason})

    queues = []
    for leaf in tree.leaves():
        limit = tree.max_of(leaf)
        queues.append(
            {
                "name": leaf,
                "used": tree.used(leaf).to_quantities(),
                "min": tree.min_of(leaf).to_quantities(),
                "max": limit.to_quantities() if limit is not None else {},
                "pending": len(state.queues[leaf].pending),
            }
        )
    return {"admitted": admitted, "preempted": preempted, "waiting": waiting, "queues": queues}


def _table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def _count(quantity: str | None) -> int:
    return int(float(quantity)) if quantity else 0


def render_table(result: Mapping[str, Any]) -> str:
    out: list[str] = []
    rows = [["JOB", "QUEUE", "CLUSTER", "MODE", "PRIORITY", "PLACEMENT"]]
    for a in result["admitted"]:
        placement = " ".join(
            f"{r['replica']}@{r['node']}"
            + (f"[{','.join(map(str, r['gpus']))}]" if r["gpus"] else "")
            for r in a["replicas"]
        )
        mode = a["mode"] + (" (running)" if a.get("already_running") else "")
        rows.append([a["job"], a["queue"], a["cluster"], mode, str(a["priority"]), placement])
    out.append(f"ADMITTED ({len(result['admitted'])})\n" + _table(rows))
    if result["preempted"]:
        rows = [["JOB", "REASON"]] + [[p["job"], p["reason"]] for p in result["preempted"]]
        out.append(f"PREEMPTED ({len(result['preempted'])})\n" + _table(rows))
    elif any(a.get("already_running") for a in result["admitted"]):
        out.append("PREEMPTED (0)\nno running job preempted")
    if result["waiting"]:
        rows = [["JOB", "QUEUE", "REASON"]]
        rows += [[w["job"], w["queue"], w["reason"]] for w in result["waiting"]]
        out.append(f"WAITING ({len(result['waiting'])})\n" + _table(rows))
    else:
        out.append("WAITING (0)\nno job waits")
    # The queue columns of `fleet get queues` (fleet.service.columns), in its order.
    running: dict[str, int] = {}
    for a in result["admitted"]:
        running[a["queue"]] = running.get(a["queue"], 0) + 1
    rows = [["QUEUE", "GPUS", "BORROWED", "RUNNING", "PENDING", "CPU", "MEMORY", "OTHER"]]
    for q in result["queues"]:
        used, low, high = q["used"], q["min"], q["max"]
        gpus = [_count(v.get(columns.GPU)) for v in (used, low)]
        top = _count(high[columns.GPU]) if columns.GPU in high else None
        others = sorted(
            r
            for r in {*used, *low, *high}
            if r not in (columns.GPU, columns.CPU, columns.MEMORY) and not columns.internal(r)
        )
        rows.append(
            [
                q["name"],
                columns.gpu_triple(gpus[0], gpus[1], top),
                columns.borrowed(gpus[0] - gpus[1]),
                str(running.get(q["name"], 0)),
                str(q["pending"]),
                *(columns.triple(used.get(r), low.get(r), high.get(r)) for r in ("cpu", "memory")),
                ",".join(
                    f"{r}={columns.triple(used.get(r), low.get(r), high.get(r))}" for r in others
                )
                or columns.NONE,
            ]
        )
    out.append("QUEUES\n" + _table(rows))
    return "\n\n".join(out)


def _quantities(values: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in values.items()) or "-"


class PlanInputError(Exception):
    """An input file of ``fleet plan`` that cannot be used; the message names it."""


def _load(path: str, what: str, loader: Callable[[str], _T], max_size: int) -> _T:
    """Read and load one input file; every error names the file."""
    try:
        text = read_input(path, max_size)
    except InputError as e:
        raise PlanInputError(f"error: {path}: cannot read the {what} file: {e.reason}") from e
    try:
        return loader(text)
    except SpecError as e:
        raise PlanInputError("\n".join(f"error: {path}: {issue}" for issue in e.issues)) from e


def run(args: argparse.Namespace) -> int:
    """Entry point of ``fleet plan`` (see :mod:`fleet.cli.main`)."""
    try:
        size = args.max_input_size
        tree, warnings = _load(args.quota, "quota", convert.load_quota, size)
        clusters = _load(args.clusters, "clusters", convert.load_clusters, size)
        running: list[Job] = []
        if args.running:
            running = _load(
                args.running,
                "running jobs",
                lambda text: convert.load_submission(text, tree, clusters, first_seq=0),
                size,
            )
        jobs = _load(
            args.jobs,
            "jobs",
            lambda text: convert.load_submission(text, tree, clusters, first_seq=len(running)),
            size,
        )
        both = sorted({j.key for j in running} & {j.key for j in jobs})
        if both:
            raise PlanInputError(
                f"error: {args.jobs}: job(s) {', '.join(both)} are also in {args.running}: "
                "a job is either running or submitted, not both"
            )
        placers = placer_builder.placers(clusters, args.placer)
    except PlanInputError as e:
        print(e, file=sys.stderr)
        return 1
    for w in warnings:
        print(f"warning: {args.quota}: {w}", file=sys.stderr)
    result = plan(tree, placers, jobs, running)
    if args.output == "json":
        print(json.dumps(result, indent=2))
    else:
        print(render_table(result))
    return 0
