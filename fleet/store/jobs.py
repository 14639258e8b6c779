"""Reading and writing jobs and their event log.

Theory of operation: every function takes a session the caller opened
(:meth:`fleet.store.database.Database.write` or ``read``), so that one
transaction can hold a whole submission or a whole scheduling cycle's
decisions.  Lists are paged by the job's ``id`` (its submission order): the
``continue`` token is the last id of the previous page, opaque to clients
(:mod:`fleet.store.paging`, which reads it strictly).

**Runs.**  A name's current run is the row with ``superseded = 0``; when a
name is submitted again after its job was cancelled (or ended, with another
spec), the old row is superseded (:func:`supersede`) and a new one takes the
name.  Reads by name and lists see current runs only; a run's uid finds it
whatever became of its name (:func:`by_uid`, ``JobFilter.uid``).

**Kinds.**  A job's ``apiVersion`` and ``kind`` are its stored document's
(``manifest``), never copied to a column: :func:`kinds_in_queue` reads them
for a queue's live jobs by JSON path, the same statement on SQLite and
PostgreSQL.

**The hub's reads.**  The hub controller (:mod:`fleet.hub`) follows many
jobs by name: :func:`current_by_names` reads their current runs in one
statement per namespace, and :func:`events_after` the event log from an id
on, across jobs, with each event's job name and uid; :func:`recent_events`
the newest events, across jobs or of one namespace or job (``fleet get events``).

**Preemptions.**  A job's ``preemptions`` column lists its preemptions as
data (:func:`preemption_record`); a :class:`JobUpdate` that carries one
appends it (:func:`update_jobs` reads the lists it extends in the same
transaction).

**Failover's clocks.**  Since when a running job has been unhealthy in its
member is one row per job (:func:`unhealthy`, :func:`add_unhealthy`,
:func:`forget_unhealthy`), so that a restart keeps the clock
(:mod:`fleet.service.failover`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import (
    Select,
    Table,
    Update,
    bindparam,
    delete,
    func,
    insert,
    literal_column,
    select,
    update,
)
from sqlalchemy.ext.asyncio import AsyncSession

from fleet.core import lifecycle
from fleet.store import paging
from fleet.store.models import IntentRow, JobEventRow, JobRow, UnhealthyJobRow

#: Job states in which a job holds quota and cells in its member cluster.
HOLDING_STATES = tuple(sorted(s.value for s in lifecycle.HOLDING))
#: Job states of a job that has not ended.
LIVE_STATES = tuple(sorted(s.value for s in lifecycle.JobState if s not in lifecycle.TERMINAL))


@dataclass(frozen=True, slots=True)
class JobFilter:
    """What ``GET /api/v1/jobs`` may filter on (None: any)."""

    queue: str | None = None
    state: str | None = None
    namespace: str | None = None
    cluster: str | None = None
    #: one run by its uid, current or superseded (the other filters still apply)
    uid: str | None = None


def encode_continue(last_id: int) -> str:
    return paging.encode("job", last_id)


def decode_continue(token: str) -> int:
    """The last job id of the page before (raises :class:`paging.BadContinueToken`)."""
    return paging.decode("job", token)


@dataclass(frozen=True, slots=True)
class JobHead:
    """What identifies a stored job, without its documents."""

    id: int
    uid: str
    namespace: str
    name: str
    queue: str
    spec_hash: str
    state: str


@dataclass(frozen=True, slots=True)
class JobUpdate:
    """Columns of stored job ``id`` to set; a field left at None is not written.

    ``placement`` is (cluster, mode): where the job holds cells, or (None,
    None) when it holds none any more; ``units`` its pods' placements as
    plain values (``fleet.core.snapshot.unit_to_plain``).
    """

    id: int
    state: str | None = None
    updated_at: float | None = None
    placement: tuple[str | None, str | None] | None = None
    units: Sequence[Mapping[str, Any]] | None = None
    reason: str | None = None
    #: a preemption to append to the job's ``preemptions`` (:func:`preemption_record`)
    preemption: Mapping[str, Any] | None = None

    def columns(self) -> dict[str, Any]:
        """The columns it sets, by name (``id`` included)."""
        columns: dict[str, Any] = {"id": self.id}
        if self.state is not None:
            columns["state"] = self.state
        if self.updated_at is not None:
            columns["updated_at"] = self.updated_at
        if self.placement is not None:
            columns["cluster"], columns["mode"] = self.placement
        if self.units is not None:
            columns["units"] = list(self.units)
        if self.reason is not None:
            columns["reason"] = self.reason
        return columns


def preemption_record(
    time: float, cause: str, preemptor: str, quota_path: Sequence[str], message: str
) -> dict[str, Any]:
    """One entry of a job's ``preemptions``: when, which job needed the room ("" when
    none did), the cause (:data:`fleet.core.decisions.CAUSES`), the quota path and
    the message its Preempted event carries."""
    return {
        "time": time,
        "preemptor": preemptor,
        "reason": cause,
        "quota_path": list(quota_path),
        "message": message,
    }


@dataclass(frozen=True, slots=True)
class EventValues:
    """One entry of a job's event log, to be inserted."""

    job_id: int
    time: float
    reason: str
    message: str = ""
    warning: bool = False


_JOBS = cast(Table, JobRow.__table__)
_EVENTS = cast(Table, JobEventRow.__table__)
_INTENTS = cast(Table, IntentRow.__table__)
_HEAD = (
    _JOBS.c.id,
    _JOBS.c.uid,
    _JOBS.c.namespace,
    _JOBS.c.name,
    _JOBS.c.queue,
    _JOBS.c.spec_hash,
    _JOBS.c.state,
)


# The loop's and the intake's statements are built once: building one (and its
# cache key) costs more than running it on SQLite.  Lists are expanding parameters.
# By namespace, then names: SQLite plans a row-value IN over its values as a
# scan of the table, but a name list within one namespace as index lookups.
_HEADS_BY_NAMES = select(*_HEAD).where(
    _JOBS.c.namespace == bindparam("namespace"),
    _JOBS.c.name.in_(bindparam("names", expanding=True)),
    _JOBS.c.superseded == literal_column("0"),
)
_DISPATCH_HEADS = select(*_HEAD, _JOBS.c.manifest).where(
    _JOBS.c.id.in_(bindparam("ids", expanding=True))
)
_DISPATCH_RANGE = select(*_HEAD, _JOBS.c.manifest).where(
    _JOBS.c.id > bindparam("after"), _JOBS.c.id <= bindparam("upto")
)
_RECORDS = select(_JOBS.c.id, _JOBS.c.record).where(
    _JOBS.c.id.in_(bindparam("ids", expanding=True))
)
_INSERT_JOBS = insert(_JOBS).returning(_JOBS.c.id, sort_by_parameter_order=True)
_INSERT_EVENTS = insert(_EVENTS)
_INSERT_INTENTS = insert(_INTENTS).returning(_INTENTS.c.id, sort_by_parameter_order=True)
_FINISH_INTENTS = (
    update(_INTENTS)
    .where(_INTENTS.c.id.in_(bindparam("ids", expanding=True)))
    .values(done_at=bindparam("time"))
)
#: columns set -> the statement that sets them by id (built when first needed)
_UPDATES: dict[tuple[str, ...], Update] = {}


def _update_of(columns: tuple[str, ...]) -> Update:
    statement = _UPDATES.get(columns)
    if statement is None:
        statement = (
            update(_JOBS)
            .where(_JOBS.c.id == bindparam("v_id"))
            .values({c: bindparam(f"v_{c}", type_=_JOBS.c[c].type) for c in columns})
        )
        _UPDATES[columns] = statement
    return statement


async def heads_by_names(
    session: AsyncSession, keys: Iterable[tuple[str, str]]
) -> dict[str, JobHead]:
    """Heads of the given (namespace, name) pairs that exist, by ``namespace/name``."""
    by_namespace: dict[str, list[str]] = {}
    for namespace, name in dict.fromkeys(keys):
        by_namespace.setdefault(namespace, []).append(name)
    found: dict[str, JobHead] = {}
    for namespace in sorted(by_namespace):
        rows = await session.execute(
            _HEADS_BY_NAMES, {"namespace": namespace, "names": by_namespace[namespace]}
        )
        found.update((f"{r.namespace}/{r.name}", JobHead(*r)) for r in rows)
    return found


async def current_by_names(
    session: AsyncSession, keys: Iterable[tuple[str, str]]
) -> dict[str, JobRow]:
    """Current runs of the given (namespace, name) pairs that exist, by ``namespace/name``."""
    by_namespace: dict[str, list[str]] = {}
    for namespace, name in dict.fromkeys(keys):
        by_namespace.setdefault(namespace, []).append(name)
    found: dict[str, JobRow] = {}
    for namespace in sorted(by_namespace):
        names = by_namespace[namespace]
        for start in range(0, len(names), 500):
            rows = await session.execute(
                select(JobRow).where(
                    JobRow.namespace == namespace,
                    JobRow.name.in_(names[start : start + 500]),
                    JobRow.superseded == 0,
                )
            )
            found.update((f"{r.namespace}/{r.name}", r) for r in rows.scalars())
    return found


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """One entry of a job's event log, with the job's name and uid."""

    id: int
    namespace: str
    name: str
    job_uid: str
    time: float
    type: str
    reason: str
    message: str


async def events_after(session: AsyncSession, after: int, limit: int) -> list[LoggedEvent]:
    """At most ``limit`` logged events with an id above ``after``, oldest first."""
    rows = await session.execute(
        _logged().where(_EVENTS.c.id > after).order_by(_EVENTS.c.id).limit(limit)
    )
    return [LoggedEvent(*r) for r in rows]


def _logged() -> Select[Any]:
    """The columns of a :class:`LoggedEvent`: each event with its job's names."""
    return select(
        _EVENTS.c.id,
        _JOBS.c.namespace,
        _JOBS.c.name,
        _JOBS.c.uid,
        _EVENTS.c.time,
        _EVENTS.c.type,
        _EVENTS.c.reason,
        _EVENTS.c.message,
    ).join(_JOBS, _JOBS.c.id == _EVENTS.c.job_id)


async def recent_events(
    session: AsyncSession,
    *,
    limit: int,
    namespace: str | None = None,
    name: str | None = None,
    namespaces: Iterable[str] | None = None,
) -> list[LoggedEvent]:
    """The newest ``limit`` logged events, newest first: of one ``namespace`` (and
    job ``name``) when given, and only in ``namespaces`` when given (a team's)."""
    query = _logged()
    if namespace is not None:
        query = query.where(_JOBS.c.namespace == namespace)
    if name is not None:
        query = query.where(_JOBS.c.name == name, _JOBS.c.superseded == 0)
    if namespaces is not None:
        query = query.where(_JOBS.c.namespace.in_(list(namespaces)))
    rows = await session.execute(query.order_by(_EVENTS.c.id.desc()).limit(limit))
    return [LoggedEvent(*r) for r in rows]


async def last_event_id(session: AsyncSession) -> int:
    """The id of the newest logged event (0: none)."""
    found = await session.execute(select(func.max(_EVENTS.c.id)))
    return int(found.scalar() or 0)


async def insert_jobs(session: AsyncSession, rows: Sequence[Mapping[str, Any]]) -> list[int]:
    """Insert job rows (column values) in one statement; their ids, in order."""
    if not rows:
        return []
    found = await session.execute(_INSERT_JOBS, list(rows))
    return [r.id for r in found]


async def insert_events(session: AsyncSession, events: Sequence[EventValues]) -> None:
    """Append to job event logs (one statement)."""
    if events:
        await session.execute(
            _INSERT_EVENTS,
            [
                {
                    "job_id": e.job_id,
                    "time": e.time,
                    "type": "Warning" if e.warning else "Normal",
                    "reason": e.reason,
                    "message": e.message,
                }
                for e in events
            ],
        )


async def update_jobs(session: AsyncSession, changes: Sequence[JobUpdate]) -> None:
    """Set columns of jobs (:class:`JobUpdate`).

    Changes apply in order: a job's changes become one (a later value of a
    column wins), then jobs whose changes set the same columns are one
    statement with many parameter sets (in whatever order: each job is in one).
    A change's ``preemption`` is appended to the job's ``preemptions``, read in
    the same transaction (one more statement, only when a change has one).
    """
    by_job: dict[int, dict[str, Any]] = {}
    appended: dict[int, list[Mapping[str, Any]]] = {}
    for change in changes:
        by_job.setdefault(change.id, {}).update(change.columns())
        if change.preemption is not None:
            appended.setdefault(change.id, []).append(change.preemption)
    if appended:  # rare: read the lists they extend, in this transaction
        found = await session.execute(
            select(_JOBS.c.id, _JOBS.c.preemptions).where(_JOBS.c.id.in_(sorted(appended)))
        )
        for job_id, before in found:
            by_job[job_id]["preemptions"] = [*(before or []), *appended[job_id]]
    groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
    for values in by_job.values():
        columns = tuple(sorted(k for k in values if k != "id"))
        groups.setdefault(columns, []).append({f"v_{k}": v for k, v in values.items()})
    for columns, params in groups.items():
        await session.execute(_update_of(columns), params)


async def insert_intents(
    session: AsyncSession, intents: Sequence[tuple[int, str, str]], time: float
) -> list[int]:
    """Record that the loop will (job id, ``create`` or ``delete``, cluster); their ids."""
    if not intents:
        return []
    found = await session.execute(
        _INSERT_INTENTS,
        [{"job_id": j, "kind": k, "cluster": c, "created_at": time} for j, k, c in intents],
    )
    return [r.id for r in found]


async def dispatch_heads(
    session: AsyncSession, ids: Sequence[int]
) -> dict[int, tuple[JobHead, dict[str, Any]]]:
    """Heads and manifests of jobs to create in a member, by id."""
    if not ids:
        return {}
    rows = await session.execute(_DISPATCH_HEADS, {"ids": list(ids)})
    return {r.id: (JobHead(*r[:7]), r.manifest) for r in rows}


async def dispatch_heads_between(
    session: AsyncSession, after: int, upto: int
) -> dict[int, tuple[JobHead, dict[str, Any]]]:
    """Heads and manifests of the jobs whose id is above ``after`` and at most ``upto``."""
    rows = await session.execute(_DISPATCH_RANGE, {"after": after, "upto": upto})
    return {r.id: (JobHead(*r[:7]), r.manifest) for r in rows}


async def records(session: AsyncSession, ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    """Job id -> its core record (jobs that exist)."""
    if not ids:
        return {}
    rows = await session.execute(_RECORDS, {"ids": list(ids)})
    return {row[0]: row[1] for row in rows}


async def last_event_times(
    session: AsyncSession, ids: Sequence[int], reason: str
) -> dict[int, float]:
    """Job id -> the time of its latest event with ``reason`` (jobs that have one)."""
    if not ids:
        return {}
    rows = await session.execute(
        select(_EVENTS.c.job_id, func.max(_EVENTS.c.time))
        .where(_EVENTS.c.job_id.in_(ids), _EVENTS.c.reason == reason)
        .group_by(_EVENTS.c.job_id)
    )
    return {row[0]: row[1] for row in rows}


async def by_name(session: AsyncSession, namespace: str, name: str) -> JobRow | None:
    """The current run of ``namespace/name`` (None: the name was never used)."""
    found = await session.execute(
        select(JobRow).where(
            JobRow.namespace == namespace, JobRow.name == name, JobRow.superseded == 0
        )
    )
    return found.scalar_one_or_none()


async def by_uid(session: AsyncSession, uid: str) -> JobRow | None:
    """The run with ``uid``, current or superseded."""
    found = await session.execute(select(JobRow).where(JobRow.uid == uid))
    return found.scalar_one_or_none()


async def supersede(session: AsyncSession, ids: Sequence[int]) -> None:
    """Free the names of the runs ``ids`` (ended jobs): each keeps its row and events,
    findable by its uid, and the name takes a new run."""
    if ids:
        await session.execute(
            update(_JOBS).where(_JOBS.c.id.in_(ids)).values(superseded=_JOBS.c.id)
        )


async def delete_jobs(session: AsyncSession, ids: Sequence[int]) -> None:
    """Delete jobs and their event logs (a replay's jobs stored ahead of a submission
    time the replay did not reach)."""
    for start in range(0, len(ids), 500):
        part = list(ids[start : start + 500])
        await session.execute(delete(_EVENTS).where(_EVENTS.c.job_id.in_(part)))
        await session.execute(delete(_JOBS).where(_JOBS.c.id.in_(part)))


async def by_ids(session: AsyncSession, ids: Sequence[int]) -> list[JobRow]:
    if not ids:
        return []
    rows = await session.execute(select(JobRow).where(JobRow.id.in_(ids)).order_by(JobRow.id))
    return list(rows.scalars())


async def page(
    session: AsyncSession, where: JobFilter, *, limit: int, after: str | None
) -> tuple[list[JobRow], str | None]:
    """One page of jobs in submission order, and the token of the next page (None: last)."""
    query = select(JobRow)
    if where.queue is not None:
        query = query.where(JobRow.queue == where.queue)
    if where.state is not None:
        query = query.where(JobRow.state == where.state)
    if where.namespace is not None:
        query = query.where(JobRow.namespace == where.namespace)
    if where.cluster is not None:
        query = query.where(JobRow.cluster == where.cluster)
    if where.uid is not None:
        query = query.where(JobRow.uid == where.uid)
    else:
        query = query.where(JobRow.superseded == 0)
    if after is not None:
        query = query.where(JobRow.id > decode_continue(after))
    rows = list((await session.execute(query.order_by(JobRow.id).limit(limit + 1))).scalars())
    if len(rows) > limit:
        return rows[:limit], encode_continue(rows[limit - 1].id)
    return rows, None


async def kinds_in_queue(session: AsyncSession, queue: str) -> dict[str, tuple[str, str]]:
    """``namespace/name`` -> the document's (apiVersion, kind) of the current runs of
    leaf ``queue`` that have not ended, read from the stored documents (JSON paths,
    on SQLite and PostgreSQL alike; the documents themselves are not loaded)."""
    manifest = _JOBS.c.manifest
    query = select(
        _JOBS.c.namespace,
        _JOBS.c.name,
        manifest["apiVersion"].as_string(),
        manifest["kind"].as_string(),
    ).where(
        _JOBS.c.queue == queue,
        _JOBS.c.state.in_(LIVE_STATES),
        _JOBS.c.superseded == 0,
    )
    rows = await session.execute(query)
    return {f"{ns}/{name}": (api or "", kind or "") for ns, name, api, kind in rows}


async def in_states(session: AsyncSession, states: Sequence[str]) -> list[JobRow]:
    """Every job in one of ``states``, in submission order."""
    rows = await session.execute(select(JobRow).where(JobRow.state.in_(states)).order_by(JobRow.id))
    return list(rows.scalars())


async def events_of(session: AsyncSession, job_id: int) -> list[JobEventRow]:
    rows = await session.execute(
        select(JobEventRow).where(JobEventRow.job_id == job_id).order_by(JobEventRow.id)
    )
    return list(rows.scalars())


async def started_times(session: AsyncSession, job_ids: Sequence[int]) -> dict[int, float]:
    """Job id -> when it last started running (its last ``Running`` event), for the jobs
    of ``job_ids`` that ever ran (one query, by the events' ``job_id`` index)."""
    if not job_ids:
        return {}
    found = await session.execute(
        select(JobEventRow.job_id, func.max(JobEventRow.time))
        .where(JobEventRow.job_id.in_(list(job_ids)), JobEventRow.reason == "Running")
        .group_by(JobEventRow.job_id)
    )
    return {int(job_id): float(t) for job_id, t in found.all()}


def add_event(
    session: AsyncSession,
    job_id: int,
    time: float,
    reason: str,
    message: str = "",
    *,
    warning: bool = False,
) -> None:
    session.add(
        JobEventRow(
            job_id=job_id,
            time=time,
            type="Warning" if warning else "Normal",
            reason=reason,
            message=message,
        )
    )


def add_intent(
    session: AsyncSession, job_id: int, kind: str, cluster: str, time: float
) -> IntentRow:
    """Record that the loop will ``kind`` (create or delete) the job in ``cluster``."""
    intent = IntentRow(job_id=job_id, kind=kind, cluster=cluster, created_at=time)
    session.add(intent)
    return intent


async def finish_intents(session: AsyncSession, ids: Sequence[int], time: float) -> None:
    """Mark intents done."""
    if ids:
        await session.execute(_FINISH_INTENTS, {"ids": list(ids), "time": time})


async def open_intents(session: AsyncSession) -> list[IntentRow]:
    rows = await session.execute(
        select(IntentRow).where(IntentRow.done_at.is_(None)).order_by(IntentRow.id)
    )
    return list(rows.scalars())


def plain(row: JobRow) -> dict[str, Any]:
    """The row's columns as plain values (for logs and debugging)."""
    return {c.name: getattr(row, c.name) for c in JobRow.__table__.columns}


async def holding_in(session: AsyncSession, cluster: str) -> list[JobRow]:
    """Every job that holds cells in member ``cluster`` (admitted, dispatched or running)."""
    rows = await session.execute(
        select(JobRow)
        .where(JobRow.cluster == cluster, JobRow.state.in_(HOLDING_STATES))
        .order_by(JobRow.id)
    )
    return list(rows.scalars())


# Failover's clocks ---------------------------------------------------------------------------


async def unhealthy(session: AsyncSession) -> list[UnhealthyJobRow]:
    """Every stored clock: since when a job has been unhealthy in its member."""
    rows = await session.execute(select(UnhealthyJobRow))
    return list(rows.scalars().all())


async def forget_unhealthy(session: AsyncSession, job_ids: Sequence[int]) -> None:
    """Delete the clocks of these jobs (now, in the caller's transaction)."""
    await session.execute(delete(UnhealthyJobRow).where(UnhealthyJobRow.job_id.in_(job_ids)))


def add_unhealthy(
    session: AsyncSession, job_id: int, cluster: str, since: float, reason: str
) -> None:
    """Store since when job ``job_id`` has been unhealthy in ``cluster``, and why."""
    session.add(UnhealthyJobRow(job_id=job_id, cluster=cluster, since=since, reason=reason))
