"""What the simulator reads of a store: a replay's outcome, a forecast's starting point.

Theory of operation: the simulator (:mod:`fleet.sim`) replays jobs through
the service's own loop and store, and reads stores in bulk where the
service reads row by row, so its statements live here, apart from the
service's (:mod:`fleet.store.jobs`); like those, every function takes a
session the caller opened.  Three readers use them:

* a replay's results (:func:`fleet.sim.engine.replay`): every job's outcome
  columns and the whole event log, in id order, as columns rather than ORM
  objects (a trace is a hundred thousand rows), and why each job was
  preempted (:func:`preemption_reasons`, the one place a replay reads
  preemption reasons from: the cause of each record of ``jobs.preemptions``);
* a forecast (:func:`fleet.sim.forecast.forecast`): copies of the jobs that
  hold cells and of those that wait (:func:`holding_copies`,
  :func:`waiting_copies`), their documents as JSON *text*, which the worker
  thread decodes rather than the service's event loop; the jobs that hold
  cells are read in parts (:func:`holding_copies`'s ``part``) so that the
  event loop serves requests between them; when each started running
  (:func:`running_since`); and the recent finished runs per queue
  (:func:`last_finished`, :func:`run_events`), whose median is a job's
  expected run;
* a quota change's comparison (:func:`fleet.sim.forecast.compare`): the
  queue of each job in some states (:func:`queues_of`).

Rows are SQLAlchemy rows: read by column name (``row.namespace``), or
unpacked as tuples in the order each function names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, TypeAlias

from sqlalchemy import Row, Text, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from fleet.store.models import JobEventRow, JobRow

#: The reasons of the events that start and end a run (for expected runs).
_RUN_REASONS: Final = ("Running", "Succeeded", "Failed")

#: The reason of a preemption whose record does not say why.
UNKNOWN_REASON: Final = "unknown"

#: What a forecast copies of a job: its documents as JSON text.
_COPY: Final = select(
    JobRow.id,
    JobRow.uid,
    JobRow.namespace,
    JobRow.name,
    JobRow.spec_hash,
    cast(JobRow.manifest, Text).label("manifest"),
    cast(JobRow.policy, Text).label("policy"),
    cast(JobRow.record, Text).label("record"),
    cast(JobRow.units, Text).label("units"),
    JobRow.queue,
    JobRow.priority_class,
    JobRow.priority,
    JobRow.state,
    JobRow.cluster,
    JobRow.mode,
    JobRow.created_at,
).order_by(JobRow.id)
#: One job as :data:`_COPY` reads it (its columns by name).
Copy: TypeAlias = "Row[*tuple[Any, ...]]"  # not evaluated: 2.0's Row takes one tuple


async def outcomes(
    session: AsyncSession,
) -> Sequence[Row[int, str, str, float, str, str | None, str | None]]:
    """(id, namespace, name, created_at, state, cluster, mode) of every job, by id."""
    found = await session.execute(
        select(
            JobRow.id,
            JobRow.namespace,
            JobRow.name,
            JobRow.created_at,
            JobRow.state,
            JobRow.cluster,
            JobRow.mode,
        ).order_by(JobRow.id)
    )
    return found.all()


async def event_log(session: AsyncSession) -> Sequence[Row[int, float, str]]:
    """(job id, time, reason) of every job event, in the order they were recorded."""
    found = await session.execute(
        select(JobEventRow.job_id, JobEventRow.time, JobEventRow.reason).order_by(JobEventRow.id)
    )
    return found.all()


async def preemption_reasons(session: AsyncSession) -> dict[int, list[str]]:
    """Job id -> the reason of each of its preemptions, in order (jobs preempted at least once):
    the cause its preemption record names (:data:`fleet.core.decisions.CAUSES`), or
    :data:`UNKNOWN_REASON` for a record without one.
    """
    found = await session.execute(select(JobRow.id, JobRow.preemptions).order_by(JobRow.id))
    out: dict[int, list[str]] = {}
    for job_id, records in found:
        for record in records or ():
            reason = record.get("reason") if isinstance(record, dict) else None
            out.setdefault(job_id, []).append(reason if isinstance(reason, str) else UNKNOWN_REASON)
    return out


async def waiting_copies(
    session: AsyncSession, states: Sequence[str], limit: int
) -> Sequence[Copy]:
    """Copies of the first ``limit`` jobs in ``states``, by id.  (A job stored as
    ``suspended`` before such jobs were refused was queued and run all the same.)"""
    found = await session.execute(_COPY.where(JobRow.state.in_(states)).limit(limit))
    return found.all()


async def holding_copies(session: AsyncSession, states: Sequence[str], part: int) -> list[Copy]:
    """Copies of every job in ``states``, by id, read ``part`` rows at a time."""
    parts = await session.stream(
        _COPY.where(JobRow.state.in_(states)).execution_options(yield_per=part)
    )
    return [row async for row in parts]


async def running_since(session: AsyncSession, states: Sequence[str]) -> dict[int, float]:
    """Job id -> when it last began running, for the jobs in ``states`` that did."""
    found = await session.execute(
        select(JobEventRow.job_id, func.max(JobEventRow.time))
        .where(
            # a subquery, not thousands of ids as parameters
            JobEventRow.job_id.in_(select(JobRow.id).where(JobRow.state.in_(states))),
            JobEventRow.reason == "Running",
        )
        .group_by(JobEventRow.job_id)
    )
    return {job_id: at for job_id, at in found}


async def last_finished(session: AsyncSession, limit: int) -> Sequence[Row[int, str]]:
    """(id, queue) of the last ``limit`` jobs that succeeded or failed, newest first."""
    found = await session.execute(
        select(JobRow.id, JobRow.queue)
        .where(JobRow.state.in_(("Succeeded", "Failed")))
        .order_by(JobRow.id.desc())
        .limit(limit)
    )
    return found.all()


async def run_events(
    session: AsyncSession, job_ids: Sequence[int]
) -> Sequence[Row[int, float, str]]:
    """(job id, time, reason) of the events that start or end these jobs' runs, in order."""
    found = await session.execute(
        select(JobEventRow.job_id, JobEventRow.time, JobEventRow.reason)
        .where(JobEventRow.job_id.in_(job_ids), JobEventRow.reason.in_(_RUN_REASONS))
        .order_by(JobEventRow.id)
    )
    return found.all()


async def queues_of(session: AsyncSession, states: Sequence[str]) -> Sequence[Row[str, str, str]]:
    """(namespace, name, queue) of every job in ``states``, by id."""
    found = await session.execute(
        select(JobRow.namespace, JobRow.name, JobRow.queue)
        .where(JobRow.state.in_(states))
        .order_by(JobRow.id)
    )
    return found.all()
