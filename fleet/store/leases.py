"""The scheduler's lease and the leader's inbox of jobs (PostgreSQL only).

Theory of operation (decision 0021): one row of ``leases`` names the replica
that leads the scheduler, its ``term`` and until when its lease runs, in
seconds of the *database's* clock (``clock_timestamp()``), so replicas whose
clocks disagree still agree on who leads.  A replica takes an expired lease
after locking the row ``FOR UPDATE``, with one conditional ``UPDATE`` that
also adds one to the term; the leader extends it with another that names its
term.  Every write transaction of the leader starts with :func:`hold`, which
reads the row ``FOR KEY SHARE`` under the leader's name, term and an
unexpired lease: that lock keeps any taker out until the transaction ends
(while the leader's renewals, which change no key, go on), and a transaction
whose term is over finds no row and is rolled back.  So the writes of term
N all land before term N+1 begins.  A leader paused inside a transaction
cannot hold the row forever: :func:`hold` also sets
``idle_in_transaction_session_timeout`` for that transaction, after which
PostgreSQL ends the session and its locks.

``job_inbox`` holds the ids of jobs that any replica stored; the leader
takes them (``DELETE ... RETURNING`` in a fenced transaction) and reads
those still Queued.
A ``NOTIFY`` on :data:`CHANNEL` (:func:`notify`) in the same transaction
as the submission, or as a stored cancellation, wakes the leader, which
``LISTEN``s on a driver connection of its own (:func:`listen`); the inbox
itself is what makes the hand-over exact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

import asyncpg  # type: ignore[import-untyped]
from sqlalchemy import CursorResult, Table, delete, exc, exists, insert, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession

from fleet.store.models import IntentRow, JobInboxRow, JobRow, LeaseRow

#: The lease of the scheduler loop (the table could hold others).
SCHEDULER: Final = "scheduler"
#: What a submission NOTIFYs in its transaction (the leader LISTENs).
CHANNEL: Final = "fleet_jobs"
#: The database's clock, in seconds since the epoch.
_NOW: Final = "extract(epoch from clock_timestamp())::float8"

_LEASES = cast(Table, LeaseRow.__table__)
_INBOX = cast(Table, JobInboxRow.__table__)
_JOBS = cast(Table, JobRow.__table__)
_INTENTS = cast(Table, IntentRow.__table__)


@dataclass(frozen=True, slots=True)
class Lease:
    """The lease as the database holds it now."""

    holder: str
    term: int
    address: str
    #: whether it has not expired (by the database's clock)
    live: bool
    #: seconds until it expires (negative: since it expired)
    remaining: float


def lock_timed_out(error: BaseException) -> bool:
    """Whether ``error`` is PostgreSQL's ``lock_not_available`` (a leader's transaction
    held the lease row longer than the statement would wait), as the database
    library raises it (any other error: False)."""
    if not isinstance(error, exc.DBAPIError):
        return False
    seen: BaseException | None = error
    while seen is not None:
        if getattr(seen, "sqlstate", None) == "55P03":
            return True
        seen = seen.__cause__ or getattr(seen, "orig", None)
        if seen is error:
            return False
    return False


async def _lock_timeout(session: AsyncSession, ms: int) -> None:
    """Wait at most ``ms`` for a row lock in this transaction."""
    await session.execute(text("SELECT set_config('lock_timeout', :ms, true)"), {"ms": str(ms)})


async def ensure(session: AsyncSession, name: str = SCHEDULER) -> None:
    """Create the lease row (held by nobody, term 0, expired) unless it exists."""
    await session.execute(
        pg_insert(_LEASES)
        .values(name=name, holder="", term=0, expires_at=0.0, address="")
        .on_conflict_do_nothing(index_elements=["name"])
    )


async def acquire(
    session: AsyncSession,
    holder: str,
    address: str,
    seconds: float,
    *,
    wait_ms: int,
    name: str = SCHEDULER,
) -> int | None:
    """Take the lease if it has expired, or if it was taken at ``address`` (a former
    process at this replica's own address, which is gone since this one may use the
    address now): the new term, or None (someone else holds it).

    Waits at most ``wait_ms`` for a leader's transaction that holds the row.
    """
    await _lock_timeout(session, wait_ms)
    # FOR UPDATE waits for every leader transaction that holds the row (FOR KEY SHARE).
    await session.execute(
        text("SELECT term FROM leases WHERE name = :name FOR UPDATE"), {"name": name}
    )
    found = await session.execute(
        text(
            "UPDATE leases SET holder = :holder, term = term + 1, address = :address, "
            f"expires_at = {_NOW} + :seconds "
            f"WHERE name = :name AND (expires_at <= {_NOW} OR address = :address) "
            "RETURNING term"
        ),
        {"holder": holder, "address": address, "seconds": seconds, "name": name},
    )
    term = found.scalar_one_or_none()
    return None if term is None else int(term)


async def renew(
    session: AsyncSession,
    holder: str,
    term: int,
    seconds: float,
    *,
    wait_ms: int,
    name: str = SCHEDULER,
) -> bool:
    """Extend the lease of ``holder`` in ``term`` if it still runs; whether it did.

    A plain ``UPDATE`` of columns outside the key: it does not wait for the
    leader's own transactions (FOR KEY SHARE), however busy they keep the row.
    """
    await _lock_timeout(session, wait_ms)
    found = await session.execute(
        text(
            f"UPDATE leases SET expires_at = {_NOW} + :seconds "
            f"WHERE name = :name AND holder = :holder AND term = :term AND expires_at > {_NOW} "
            "RETURNING term"
        ),
        {"holder": holder, "term": term, "seconds": seconds, "name": name},
    )
    return found.scalar_one_or_none() is not None


async def release(session: AsyncSession, holder: str, term: int, name: str = SCHEDULER) -> None:
    """End the lease of ``holder`` in ``term`` now (a replica that stops hands over at once)."""
    await session.execute(
        text(
            f"UPDATE leases SET expires_at = {_NOW} "
            "WHERE name = :name AND holder = :holder AND term = :term"
        ),
        {"holder": holder, "term": term, "name": name},
    )


async def hold(
    session: AsyncSession, holder: str, term: int, *, idle_ms: int, name: str = SCHEDULER
) -> bool:
    """The fencing statement: whether ``holder`` still leads in ``term`` (see the docstring).

    True: the lease row is locked FOR KEY SHARE until the transaction ends, so
    no other replica can take the lease (a taker locks it FOR UPDATE first)
    before this transaction commits; the leader's renewals do not wait for it.
    """
    found = await session.execute(
        text(
            "SELECT l.term FROM leases AS l, "
            "(SELECT set_config('idle_in_transaction_session_timeout', :idle, true)) AS s "
            "WHERE l.name = :name AND l.holder = :holder AND l.term = :term "
            f"AND l.expires_at > {_NOW} FOR KEY SHARE OF l"
        ),
        {"holder": holder, "term": term, "name": name, "idle": str(idle_ms)},
    )
    return found.scalar_one_or_none() is not None


async def current(session: AsyncSession, name: str = SCHEDULER) -> Lease | None:
    """The lease as it is now (None: no row yet)."""
    found = await session.execute(
        text(
            f"SELECT holder, term, address, expires_at - {_NOW} AS remaining "
            "FROM leases WHERE name = :name"
        ),
        {"name": name},
    )
    row = found.one_or_none()
    if row is None:
        return None
    remaining = float(row.remaining)
    return Lease(row.holder, int(row.term), row.address, remaining > 0, remaining)


# The leader's inbox --------------------------------------------------------------------------


async def post(session: AsyncSession, job_ids: Sequence[int]) -> None:
    """Put stored jobs in the leader's inbox and wake it (at commit)."""
    if not job_ids:
        return
    await session.execute(insert(_INBOX), [{"job_id": i} for i in job_ids])
    await notify(session)


async def notify(session: AsyncSession) -> None:
    """Wake the leader (at commit): the inbox or the open cancellations changed."""
    await session.execute(text("SELECT pg_notify(:channel, '')"), {"channel": CHANNEL})


async def inbox_holds_jobs(session: AsyncSession) -> bool:
    """Whether the leader's inbox holds any job (a cheap read)."""
    return bool(await session.scalar(select(exists().where(_INBOX.c.job_id > 0))))


class Listener:
    """A driver connection of its own that ``LISTEN``s on :data:`CHANNEL` (see :func:`listen`)."""

    def __init__(self, connection: Any) -> None:
        self._connection = connection  # an asyncpg connection

    def is_closed(self) -> bool:
        """Whether the connection is gone (listen again)."""
        return bool(self._connection.is_closed())

    async def close(self, timeout: float) -> None:
        await self._connection.close(timeout=timeout)


async def listen(url: str, notified: Callable[..., None]) -> Listener:
    """Call ``notified`` at every ``NOTIFY`` on :data:`CHANNEL` of the database at ``url``.

    A connection outside the engine's pool (a pooled one would be handed to
    transactions); raises what connecting raises.
    """
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    connection = await asyncpg.connect(dsn)
    await connection.add_listener(CHANNEL, notified)
    return Listener(connection)


async def take(session: AsyncSession, limit: int) -> list[int]:
    """Take up to ``limit`` jobs out of the inbox, lowest ids first; their ids."""
    oldest = select(_INBOX.c.job_id).order_by(_INBOX.c.job_id).limit(limit).scalar_subquery()
    result = cast(
        CursorResult[Any],
        await session.execute(
            delete(_INBOX).where(_INBOX.c.job_id.in_(oldest)).returning(_INBOX.c.job_id)
        ),
    )
    return sorted(int(r[0]) for r in result)


async def queued(session: AsyncSession, job_ids: Sequence[int]) -> list[tuple[int, dict[str, Any]]]:
    """(id, core record) of those jobs still Queued, in id order."""
    if not job_ids:
        return []
    rows = await session.execute(
        select(_JOBS.c.id, _JOBS.c.record)
        .where(_JOBS.c.id.in_(job_ids), _JOBS.c.state == "Queued")
        .order_by(_JOBS.c.id)
    )
    return [(int(r[0]), r[1]) for r in rows]


async def open_cancels(session: AsyncSession) -> list[tuple[int, str]]:
    """(intent id, ``namespace/name``) of cancellations the loop has not carried out."""
    rows = await session.execute(
        select(_INTENTS.c.id, _JOBS.c.namespace, _JOBS.c.name)
        .join(_JOBS, _JOBS.c.id == _INTENTS.c.job_id)
        .where(_INTENTS.c.kind == "cancel", _INTENTS.c.done_at.is_(None))
        .order_by(_INTENTS.c.id)
    )
    return [(int(r[0]), f"{r[1]}/{r[2]}") for r in rows]
