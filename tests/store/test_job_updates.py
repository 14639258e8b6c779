"""Job column changes written together land as if written one after another."""

from __future__ import annotations

from sqlalchemy import select

from fleet.store import jobs as job_rows
from fleet.store.database import open_database
from fleet.store.models import JobRow
from tests.store.test_inline_sqlite import job_row


def running(row_id: int) -> job_rows.JobUpdate:
    units = [{"pod": "worker-0", "node": "n1", "gpus": [0]}]
    return job_rows.JobUpdate(row_id, "Running", placement=("c1", "guaranteed"), units=units)


def ended(row_id: int) -> job_rows.JobUpdate:
    return job_rows.JobUpdate(row_id, "Succeeded", units=[])


async def test_a_jobs_later_change_wins_whatever_columns_the_changes_set(
    database_url: str,
) -> None:
    db = await open_database(database_url)
    try:
        async with db.write() as session:
            first, second = await job_rows.insert_jobs(session, [job_row("a"), job_row("b")])
        # a ends; b starts and ends: b's end sets the same columns as a's end,
        # which comes first, and fewer than its start, which comes between.
        async with db.write() as session:
            await job_rows.update_jobs(
                session,
                [
                    ended(first),
                    running(second),
                    ended(second),
                    job_rows.JobUpdate(first, reason="x"),
                ],
            )
        async with db.read() as session:
            rows = (await session.execute(select(JobRow).order_by(JobRow.id))).scalars().all()
        assert [(r.state, r.cluster, r.units, r.reason) for r in rows] == [
            ("Succeeded", None, [], "x"),
            ("Succeeded", "c1", [], ""),
        ]
    finally:
        await db.close()
