"""The fleet over time: samples of every leaf queue's figures, kept for a while.

Theory of operation: plain repository functions over one session, like
:mod:`fleet.store.admin`.  :func:`add_samples` writes one sample (a row per
queue, and one for the whole fleet whose queue is :data:`FLEET`) and, in the
same transaction, deletes every row older than the retention, so the table
never holds more than the retention's worth of samples however long the
service runs; a sample taken at the very moment of a stored one replaces
it.  :func:`samples_since` reads them back in time order (the primary key,
``at`` first, serves the range read and both deletions), merged into
stretches of a given width when a long range is asked for.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from sqlalchemy import Integer, cast, delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from fleet.store.models import QueueSampleRow

#: The queue name of the whole fleet's row of a sample.
FLEET: Final = ""


@dataclass(frozen=True, slots=True)
class Sample:
    """One queue's figures at one moment (``queue`` :data:`FLEET`: the whole fleet's)."""

    queue: str
    gpus: int
    running: int
    pending: int
    #: p95 of the admission waits of the last hour, seconds (None: no admission)
    wait_p95: float | None
    starts: int


async def add_samples(
    session: AsyncSession, at: float, samples: Iterable[Sample], *, keep_after: float
) -> int:
    """Store ``samples`` as of ``at`` (in place of any taken at that very moment) and
    delete the rows from before ``keep_after``; the number of rows deleted."""
    await session.execute(delete(QueueSampleRow).where(QueueSampleRow.at == at))
    for s in samples:
        session.add(
            QueueSampleRow(
                at=at,
                queue=s.queue,
                gpus=s.gpus,
                running=s.running,
                pending=s.pending,
                wait_p95=s.wait_p95,
                starts=s.starts,
            )
        )
    result = await session.execute(delete(QueueSampleRow).where(QueueSampleRow.at < keep_after))
    return int(getattr(result, "rowcount", 0) or 0)


async def samples_since(
    session: AsyncSession, since: float, *, width: float = 0.0
) -> list[tuple[float, Sample]]:
    """Every stored row from ``since`` on, oldest first, as ``(at, sample)``; with a
    ``width``, one row per queue and stretch of ``width`` seconds instead, at the time of
    the stretch's last sample, with the largest figures of the stretch (and its
    admissions in all), so that a long range reads as a bounded number of points."""
    if width <= 0:
        found = await session.execute(
            select(QueueSampleRow)
            .where(QueueSampleRow.at >= since)
            .order_by(QueueSampleRow.at, QueueSampleRow.queue)
        )
        return [
            (r.at, Sample(r.queue, r.gpus, r.running, r.pending, r.wait_p95, r.starts))
            for r in found.scalars()
        ]
    t = QueueSampleRow
    # Whole seconds divided as integers: the same stretches on SQLite and PostgreSQL.
    stretch = cast(t.at, Integer) // max(1, int(width))
    merged = await session.execute(
        select(
            func.max(t.at),
            t.queue,
            func.max(t.gpus),
            func.max(t.running),
            func.max(t.pending),
            func.max(t.wait_p95),
            func.sum(t.starts),
        )
        .where(t.at >= since)
        .group_by(stretch, t.queue)
        .order_by(func.max(t.at), t.queue)
    )
    return [
        (float(at), Sample(str(q), int(g), int(r), int(p), None if w is None else float(w), int(n)))
        for at, q, g, r, p, w, n in merged.all()
    ]
