"""The fleet over time: samples of every leaf queue's figures, kept for a while.

Theory of operation: plain repository functions over one session, like
:mod:`fleet.store.admin`.  :func:`add_samples` writes one sample (a row per
queue, and one for the whole fleet whose queue is :data:`FLEET`) and, in the
same transaction, deletes every row older than the retention, so the table
never holds more than the retention's worth of samples however long the
service runs; a sample taken at the very moment of a stored one replaces
it.  :func:`samples_since` reads them back in time order (the primary key,
``at`` first, serves the range read and both deletions).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from sqlalchemy import delete, select
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


async def samples_since(session: AsyncSession, since: float) -> list[tuple[float, Sample]]:
    """Every stored row from ``since`` on, oldest first, as ``(at, sample)``."""
    found = await session.execute(
        select(QueueSampleRow)
        .where(QueueSampleRow.at >= since)
        .order_by(QueueSampleRow.at, QueueSampleRow.queue)
    )
    return [
        (r.at, Sample(r.queue, r.gpus, r.running, r.pending, r.wait_p95, r.starts))
        for r in found.scalars()
    ]
