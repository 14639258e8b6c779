"""Reading and writing jobs and their event log.

Theory of operation: every function takes a session the caller opened
(:meth:`fleet.store.database.Database.write` or ``read``), so that one
transaction can hold a whole submission or a whole scheduling cycle's
decisions.  Lists are paged by the job's ``id`` (its submission order): the
``continue`` token is the last id of the previous page, opaque to clients.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, tuple_, update
from sqlalchemy.ext.asyncio import AsyncSession

from fleet.store.models import IntentRow, JobEventRow, JobRow

#: Job states in which a job holds quota and cells in its member cluster.
HOLDING_STATES = ("Admitted", "Dispatched", "Running")


class BadContinueToken(ValueError):
    """A ``continue`` token this store did not issue."""


@dataclass(frozen=True, slots=True)
class JobFilter:
    """What ``GET /api/v1/jobs`` may filter on (None: any)."""

    queue: str | None = None
    state: str | None = None
    namespace: str | None = None
    cluster: str | None = None


def encode_continue(last_id: int) -> str:
    return base64.urlsafe_b64encode(f"job:{last_id}".encode()).decode().rstrip("=")


def decode_continue(token: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError) as e:
        raise BadContinueToken("continue token is not valid") from e
    kind, _, number = raw.partition(":")
    if kind != "job" or not number.isdigit() or len(number) > 18:
        raise BadContinueToken("continue token is not valid")
    return int(number)


async def by_name(session: AsyncSession, namespace: str, name: str) -> JobRow | None:
    found = await session.execute(
        select(JobRow).where(JobRow.namespace == namespace, JobRow.name == name)
    )
    return found.scalar_one_or_none()


async def by_names(session: AsyncSession, keys: Iterable[tuple[str, str]]) -> dict[str, JobRow]:
    """Rows of the given (namespace, name) pairs that exist, by ``namespace/name`` (one query)."""
    wanted = list(dict.fromkeys(keys))
    if not wanted:
        return {}
    rows = await session.execute(
        select(JobRow).where(tuple_(JobRow.namespace, JobRow.name).in_(wanted))
    )
    return {f"{r.namespace}/{r.name}": r for r in rows.scalars()}


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
    if after is not None:
        query = query.where(JobRow.id > decode_continue(after))
    rows = list((await session.execute(query.order_by(JobRow.id).limit(limit + 1))).scalars())
    if len(rows) > limit:
        return rows[:limit], encode_continue(rows[limit - 1].id)
    return rows, None


async def in_states(session: AsyncSession, states: Sequence[str]) -> list[JobRow]:
    """Every job in one of ``states``, in submission order."""
    rows = await session.execute(select(JobRow).where(JobRow.state.in_(states)).order_by(JobRow.id))
    return list(rows.scalars())


async def events_of(session: AsyncSession, job_id: int) -> list[JobEventRow]:
    rows = await session.execute(
        select(JobEventRow).where(JobEventRow.job_id == job_id).order_by(JobEventRow.id)
    )
    return list(rows.scalars())


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
        await session.execute(update(IntentRow).where(IntentRow.id.in_(ids)).values(done_at=time))


async def open_intents(session: AsyncSession) -> list[IntentRow]:
    rows = await session.execute(
        select(IntentRow).where(IntentRow.done_at.is_(None)).order_by(IntentRow.id)
    )
    return list(rows.scalars())


def plain(row: JobRow) -> dict[str, Any]:
    """The row's columns as plain values (for logs and debugging)."""
    return {c.name: getattr(row, c.name) for c in JobRow.__table__.columns}
