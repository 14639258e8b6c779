"""The loop's start: the core's state rebuilt from the store, and the work left open.

Theory of operation: :func:`rebuild` reads the jobs that hold cells, wait for
their pods to stop or wait in a queue, and restores the core's state exactly
(:mod:`fleet.core.snapshot`): running jobs at their recorded cells, with the
run time of their earlier runs (their units' ``ran``), preempted jobs waiting
for their pods to stop, pending jobs in submission order.  A job that waits
is restored without the run time of its earlier runs (its record keeps none).
:func:`open_work` says what the previous run left to do: create every
holding job in its member again and redo unfinished deletions (both
idempotent in a member, so this is safe whether or not the previous run got
to act: a crash between "decided" and "created" neither loses nor doubles a
job, and members that live in this process, simulated ones, get their jobs
back, still counted from when they started), carry out the cancellations
users asked for, and mark the create intents done.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from fleet.core import snapshot
from fleet.core.jobs import Job
from fleet.core.lifecycle import HOLDING, JobState
from fleet.core.placement import Placer
from fleet.core.quota import QuotaTree
from fleet.core.state import SchedulerState
from fleet.service.effects import Action, Create, Delete
from fleet.service.inbox import Cancel
from fleet.store import jobs as job_rows
from fleet.store.database import Database

log = logging.getLogger("fleet.service.restart")


async def rebuild(
    db: Database, tree: QuotaTree, placers: Mapping[str, Placer], now: float
) -> tuple[SchedulerState, dict[str, int]]:
    """The core's state as the store holds it, and the row id of each job in it."""
    holding = [s.value for s in HOLDING]
    async with db.read() as session:
        rows = await job_rows.in_states(
            session, [*holding, JobState.PREEMPTED.value, JobState.QUEUED.value]
        )
    ids: dict[str, int] = {}
    running: list[snapshot.RunningRecord] = []
    stopping: list[Job] = []
    pending: list[Job] = []
    for row in rows:
        job = snapshot.job_from_plain(row.record, seq=row.id)
        ids[job.key] = row.id
        if row.state in holding and row.cluster is not None:
            units = tuple(snapshot.unit_from_plain(job, u) for u in row.units)
            ran = snapshot.ran_of_units(row.units)  # earlier runs' seconds
            running.append(
                snapshot.RunningRecord(job, row.cluster, JobState(row.state), units, ran)
            )
        elif row.state == JobState.PREEMPTED.value:
            stopping.append(job)
        else:
            pending.append(job)
    records = snapshot.Snapshot(now, tuple(pending), tuple(stopping), tuple(running))
    state = snapshot.restore(records, tree, placers)
    log.info(
        "state rebuilt: %d running, %d preempted, %d pending",
        len(running),
        len(stopping),
        len(pending),
    )
    return state, ids


@dataclass(frozen=True, slots=True)
class OpenWork:
    """What the previous run left to do."""

    actions: list[Action]
    cancels: list[Cancel]
    #: create intents, done once every holding job is created again
    creates: list[int]


async def open_work(db: Database) -> OpenWork:
    """The member actions, cancellations and intents the previous run left open."""
    async with db.read() as session:
        intents = await job_rows.open_intents(session)
        holding = await job_rows.in_states(session, [s.value for s in HOLDING])
        started = await job_rows.last_event_times(
            session, [r.id for r in holding], JobState.RUNNING.value
        )
        deleting = {
            r.id: r
            for r in await job_rows.by_ids(
                session, sorted({i.job_id for i in intents if i.kind in ("delete", "cancel")})
            )
        }
    actions: list[Action] = [
        Create(
            None,
            job_rows.JobHead(r.id, r.uid, r.namespace, r.name, r.queue, r.spec_hash, r.state),
            r.manifest,
            started.get(r.id),
        )
        for r in holding
    ]
    cancels: list[Cancel] = []
    for intent in intents:
        row = deleting.get(intent.job_id)
        if row is None:
            continue
        key = f"{row.namespace}/{row.name}"
        if intent.kind == "delete":
            actions.append(Delete(intent.id, key, intent.cluster))
        elif intent.kind == "cancel":  # requested before the previous run stopped
            cancels.append(Cancel(key, "cancelled by the user", intent.id))
    creates = [i.id for i in intents if i.kind == "create"]
    return OpenWork(actions, cancels, creates)
