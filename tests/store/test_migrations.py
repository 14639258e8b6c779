"""One migration tree for both databases: upgrade, check, downgrade, upgrade again."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect

from fleet.store.database import alembic_config, downgrade, open_database, upgrade

TABLES = {
    "alembic_version",
    "audit",
    "clusters",
    "intents",
    "job_events",
    "job_inbox",
    "jobs",
    "leases",
    "node_health",
    "policies",
    "queue_samples",
    "queue_usage",
    "quota_cuts",
    "quota_trees",
    "training_runtimes",
    "unhealthy_jobs",
}


async def tables(url: str) -> set[str]:
    db = await open_database(url, migrate=False)
    try:
        async with db.reader.connect() as conn:
            return set(await conn.run_sync(lambda c: inspect(c).get_table_names()))
    finally:
        await db.close()


async def test_upgrade_check_downgrade_upgrade(database_url: str) -> None:
    db = await open_database(database_url)
    try:
        assert await tables(database_url) == TABLES
        async with db.writer.connect() as conn:
            # The models and the migrations describe the same schema.
            await conn.run_sync(lambda c: command.check(alembic_config(c)))
        await downgrade(db, "base")
        assert await tables(database_url) == {"alembic_version"}
        await upgrade(db)
        assert await tables(database_url) == TABLES
    finally:
        await db.close()


async def test_opening_twice_migrates_once(database_url: str) -> None:
    first = await open_database(database_url)
    second = await open_database(database_url)
    try:
        await second.ping()
    finally:
        await first.close()
        await second.close()


async def test_sqlite_runs_with_wal_foreign_keys_and_a_busy_timeout(tmp_path: object) -> None:
    db = await open_database(f"sqlite+aiosqlite:///{tmp_path}/f.db")
    try:
        async with db.reader.connect() as conn:
            wal = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar()
            fks = (await conn.exec_driver_sql("PRAGMA foreign_keys")).scalar()
            busy = (await conn.exec_driver_sql("PRAGMA busy_timeout")).scalar()
        assert (wal, fks, busy) == ("wal", 1, 10_000)
    finally:
        await db.close()
