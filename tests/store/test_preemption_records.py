"""A job's preemptions as data: migration 0008 and the records updates append, both databases."""

from __future__ import annotations

from sqlalchemy import column, insert, inspect, select, table

from fleet.store import jobs as job_rows
from fleet.store.database import downgrade, open_database, upgrade
from fleet.store.models import JobRow
from tests.store.test_inline_sqlite import job_row


def record(time: float, preemptor: str, cause: str = "Reclaim") -> dict[str, object]:
    path = ["team-b", "research", "team-a"] if preemptor else []
    return job_rows.preemption_record(time, cause, preemptor, path, f"stopped at {time:g}")


async def test_updates_append_preemptions_in_order(database_url: str) -> None:
    db = await open_database(database_url)
    try:
        async with db.write() as session:
            first, second = await job_rows.insert_jobs(session, [job_row("a"), job_row("b")])
        async with db.write() as session:
            await job_rows.update_jobs(
                session,
                [
                    job_rows.JobUpdate(first, "Preempted", 10.0, preemption=record(10, "t/x")),
                    job_rows.JobUpdate(second, "Running", 10.0),
                    job_rows.JobUpdate(first, "Queued", 11.0),
                ],
            )
        async with db.write() as session:
            await job_rows.update_jobs(
                session,
                [
                    job_rows.JobUpdate(first, preemption=record(20, "", "NodeHealth")),
                    job_rows.JobUpdate(first, reason="why", preemption=record(21, "t/y")),
                ],
            )
        async with db.read() as session:
            rows = (await session.execute(select(JobRow).order_by(JobRow.id))).scalars().all()
        assert [(r.state, r.reason) for r in rows] == [("Queued", "why"), ("Running", "")]
        assert rows[1].preemptions == []
        assert rows[0].preemptions == [
            record(10, "t/x"),
            record(20, "", "NodeHealth"),
            record(21, "t/y"),
        ]
        assert rows[0].preemptions[0] == {
            "time": 10,
            "preemptor": "t/x",
            "reason": "Reclaim",
            "quota_path": ["team-b", "research", "team-a"],
            "message": "stopped at 10",
        }
    finally:
        await db.close()


async def test_migration_0008_adds_the_preemptions_of_every_job(database_url: str) -> None:
    def columns(sync: object) -> set[str]:
        return {c["name"] for c in inspect(sync).get_columns("jobs")}

    db = await open_database(database_url)
    try:
        async with db.writer.connect() as conn:
            assert "preemptions" in await conn.run_sync(columns)
        await downgrade(db, "0007")
        async with db.writer.connect() as conn:
            found = await conn.run_sync(columns)
        assert "preemptions" not in found and "policy_source" in found
        old = job_row("old")
        types = JobRow.__table__.c
        before = table("jobs", *(column(n, types[n].type) for n in old))  # 0007's columns
        async with db.write() as session:  # a job stored before the column was there
            await session.execute(insert(before).values(old))
        await upgrade(db)
        async with db.read() as session:
            (row,) = (await session.execute(select(JobRow))).scalars().all()
        assert row.name == "old" and row.preemptions == []
    finally:
        await db.close()
