"""Exact restore: the scheduler state as plain records, and back.

Theory of operation: the database records every known job, its lifecycle
state, and for each running job its cluster and units (the unit's charge:
key, mode, request; its pods: node names and GPU indices).  :func:`take`
produces exactly those records; :func:`restore` rebuilds a
:class:`~fleet.core.state.SchedulerState` from them on a fresh tree and
fresh placers, never re-planning: every unit is held again at its recorded
cells (``Placer.restore``) and charged again to the tree.  Jobs are restored
in :func:`~fleet.core.placement.restore_order` (placers give the same result
in any order, and are fastest in that one); a placement that no longer
exists, or that two units claim, raises
:class:`~fleet.core.placement.RestoreError` naming them.  Pending jobs
are queued again in their own order (priority, then submission).
:func:`to_plain` and :func:`from_plain` turn a snapshot into JSON-ready
values and back.

Run time (:mod:`fleet.core.run_limits`): a job's deadline is part of its
record (written only when it has one); the seconds a job ran in earlier runs
are kept per record (``RunningRecord.ran``, ``Snapshot.ran`` for the jobs
that wait), and in a running job's plain units as ``ran`` on its first unit
(:func:`units_to_plain`, written only when not zero), so records written
before read the same.  A restored running job's current run counts from its
first unit's ``since``, as before the restart.

A job of several GPU types is recorded as it asks (its types, none chosen);
a running one is restored narrowed to the type its first unit is charged for
(``gpu.fleet.io/<type>``: :func:`running_job`), as the cycle left it.  A
record written before jobs had several types reads as a job of one type or
none.  A job's user (:attr:`~fleet.core.jobs.Job.user`) is written only when
it names one, so a record written before jobs had one reads as a job of none.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fleet.core.charges import Charge, step_of
from fleet.core.jobs import Job, Mode, ReplicaGroup
from fleet.core.lifecycle import JobState
from fleet.core.placement import Placer, PodPlacement, RestoreError, restore_order
from fleet.core.quota import QuotaTree
from fleet.core.resources import Resources, typed_gpu
from fleet.core.state import Running, SchedulerState, Unit

__all__ = [
    "RunningRecord",
    "Snapshot",
    "Unit",
    "from_plain",
    "job_from_plain",
    "job_to_plain",
    "ran_of_units",
    "restore",
    "take",
    "to_plain",
    "unit_from_plain",
    "unit_to_plain",
    "units_to_plain",
]


@dataclass(frozen=True, slots=True)
class RunningRecord:
    """A running job as recorded: its cluster, lifecycle state and units, and the
    seconds it ran in earlier runs."""

    job: Job
    cluster: str
    phase: JobState
    units: tuple[Unit, ...]
    ran: float = 0.0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything the core needs to continue after a restart."""

    now: float
    pending: tuple[Job, ...]
    stopping: tuple[Job, ...]
    running: tuple[RunningRecord, ...]
    #: pending or stopping job key -> seconds it ran in earlier runs (not zero)
    ran: Mapping[str, float] = field(default_factory=dict)


def take(state: SchedulerState) -> Snapshot:
    """The records of ``state`` (what the database holds)."""
    running = tuple(
        RunningRecord(
            run.job, run.cluster, state.phase[key], tuple(run.units), state.ran.get(key, 0.0)
        )
        for key, run in sorted(state.running.items())
    )
    return Snapshot(
        state.now,
        tuple(state.pending()),
        tuple(job for _, job in sorted(state.stopping.items())),
        running,
        {k: v for k, v in sorted(state.ran.items()) if v and k not in state.running},
    )


def restore(
    snapshot: Snapshot,
    tree: QuotaTree,
    placers: Mapping[str, Placer],
    *,
    strict_fifo: Iterable[str] = (),
) -> SchedulerState:
    """A state rebuilt from ``snapshot`` on an empty ``tree`` and empty ``placers``."""
    state = SchedulerState(tree, placers, strict_fifo=strict_fifo, now=snapshot.now)
    claimed: dict[str, str] = {}
    state.ran.update((k, v) for k, v in snapshot.ran.items() if v)
    # Placers restore fastest in restore order (earlier submission first); the
    # result does not depend on the order either way.
    records = sorted(snapshot.running, key=lambda r: restore_order(r.job))
    for record in records:
        if record.job.key in claimed:
            raise RestoreError(f"job {record.job.key} is recorded twice")
        claimed[record.job.key] = record.cluster
        placer = state.placers.get(record.cluster)
        if placer is None:
            raise RestoreError(f"{record.job.key}: member cluster {record.cluster} is unknown")
        run = Running(running_job(record.job, record.units), record.cluster)
        if record.ran:
            state.ran[record.job.key] = record.ran  # before its units: its due time
        for unit in sorted(record.units, key=lambda u: step_of(u.charge.key)):
            placer.restore(run.job_for(unit), unit.charge, unit.pods)
            state.hold(run, unit.charge, unit.pods)
        run.units.sort(key=lambda u: step_of(u.charge.key))
        state.track(run)
        state.phase[record.job.key] = record.phase
    tree.grandfather()
    for job in sorted(snapshot.stopping, key=lambda j: j.key):
        state.stopping[job.key] = job
        state.phase[job.key] = JobState.PREEMPTED
    for job in snapshot.pending:
        state.enqueue(job)
        state.phase[job.key] = JobState.QUEUED
    return state


def running_job(job: Job, units: Iterable[Unit]) -> Job:
    """``job`` narrowed to the GPU type its first unit is charged for, when it has
    several types and none is chosen yet (as the cycle admitted it); else ``job``."""
    if not job.gpu_skus or job.gpu_sku:
        return job
    first = min(units, key=lambda u: step_of(u.charge.key), default=None)
    if first is None:
        return job
    for sku in job.gpu_skus:
        if first.charge.request[typed_gpu(sku)]:
            return job.on(sku)
    return job


# Plain values ---------------------------------------------------------------------


def job_to_plain(job: Job) -> dict[str, Any]:
    """``job`` as JSON-ready values (what the database keeps of it)."""
    return {
        "key": job.key,
        "queue": job.queue,
        "priority": job.priority,
        "seq": job.seq,
        # a group's first index is written only when it is not 0 (records
        # written before groups had one read the same)
        "groups": [
            [g.role, g.count, dict(g.per_pod), g.first]
            if g.first
            else [g.role, g.count, dict(g.per_pod)]
            for g in job.groups
        ],
        "min_members": job.min_members,
        "gang": job.gang,
        "preemptible": job.preemptible,
        "gpu_sku": job.gpu_sku,
        "clusters": None if job.clusters is None else sorted(job.clusters),
        "priority_class": job.priority_class,
        "pinned_cell_id": job.pinned_cell_id,
        "target": job.target,
        "queue_from_namespace": job.queue_from_namespace,
        # several GPU types and their terms are written only when there are some
        # (records written before jobs had them read the same)
        **({"gpu_skus": list(job.gpu_skus)} if job.gpu_skus else {}),
        **({"gpu_terms": job.gpu_terms} if job.gpu_terms else {}),
        # the user likewise (records written before jobs named one read the same)
        **({"user": job.user} if job.user else {}),
        # a deadline is written only when the job has one
        **({"active_deadline": job.active_deadline} if job.active_deadline is not None else {}),
    }


def job_from_plain(d: Mapping[str, Any], seq: int | None = None) -> Job:
    """The job :func:`job_to_plain` described (with submission order ``seq``, if given)."""
    return Job(
        key=d["key"],
        queue=d["queue"],
        priority=d["priority"],
        seq=d["seq"] if seq is None else seq,
        groups=tuple(ReplicaGroup(g[0], g[1], Resources(g[2]), *g[3:4]) for g in d["groups"]),
        min_members=d["min_members"],
        gang=d["gang"],
        preemptible=d["preemptible"],
        gpu_sku=d["gpu_sku"],
        clusters=None if d["clusters"] is None else frozenset(d["clusters"]),
        priority_class=d["priority_class"],
        pinned_cell_id=d["pinned_cell_id"],
        target=d["target"],
        queue_from_namespace=d["queue_from_namespace"],
        gpu_skus=tuple(d.get("gpu_skus", ())),
        gpu_terms=d.get("gpu_terms", ""),
        user=d.get("user", ""),
        active_deadline=None if d.get("active_deadline") is None else float(d["active_deadline"]),
    )


def unit_to_plain(unit: Unit) -> dict[str, Any]:
    """A running unit as JSON-ready values: its charge key, mode, request and pods."""
    c = unit.charge
    return {
        "key": c.key,
        "mode": c.mode.value,
        "request": dict(c.request),
        "pods": [[p.pod, p.node, list(p.gpus)] for p in unit.pods],
        "since": c.since,
    }


def units_to_plain(units: Iterable[Unit], ran: float = 0.0) -> list[dict[str, Any]]:
    """A running job's units as plain values; ``ran`` (the seconds of its earlier
    runs) goes on its first unit, when not zero."""
    out = [unit_to_plain(u) for u in units]
    if ran:
        for plain in out:
            if step_of(plain["key"]) == 1:
                plain["ran"] = ran
    return out


def ran_of_units(units: Iterable[Mapping[str, Any]]) -> float:
    """The seconds of earlier runs that :func:`units_to_plain` wrote (0: none)."""
    return sum(float(u.get("ran", 0.0)) for u in units)


def unit_from_plain(job: Job, d: Mapping[str, Any]) -> Unit:
    """The unit of ``job`` that :func:`unit_to_plain` described."""
    charge = Charge(
        d["key"],
        job.key,
        job.queue,
        job.priority,
        job.seq,
        job.preemptible,
        Mode(d["mode"]),
        Resources(d["request"]),
        float(d.get("since", 0.0)),  # records written before minimum runtimes: unprotected
        job.user,
    )
    return Unit(charge, tuple(PodPlacement(p, n, tuple(g)) for p, n, g in d["pods"]))


def to_plain(snapshot: Snapshot) -> dict[str, Any]:
    """``snapshot`` as JSON-ready values (str, int, float, bool, None, list, dict)."""
    return {
        "now": snapshot.now,
        "pending": [job_to_plain(j) for j in snapshot.pending],
        "stopping": [job_to_plain(j) for j in snapshot.stopping],
        "running": [
            {
                "job": job_to_plain(r.job),
                "cluster": r.cluster,
                "phase": r.phase.value,
                "units": units_to_plain(r.units, r.ran),
            }
            for r in snapshot.running
        ],
        **({"ran": dict(snapshot.ran)} if snapshot.ran else {}),
    }


def from_plain(d: Mapping[str, Any]) -> Snapshot:
    """The snapshot :func:`to_plain` described."""
    running = []
    for r in d["running"]:
        job = job_from_plain(r["job"])
        units = tuple(unit_from_plain(job, u) for u in r["units"])
        ran = ran_of_units(r["units"])
        running.append(RunningRecord(job, r["cluster"], JobState(r["phase"]), units, ran))
    return Snapshot(
        float(d["now"]),
        tuple(job_from_plain(j) for j in d["pending"]),
        tuple(job_from_plain(j) for j in d["stopping"]),
        tuple(running),
        {k: float(v) for k, v in d.get("ran", {}).items()},
    )
