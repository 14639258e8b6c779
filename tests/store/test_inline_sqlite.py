"""SQLite run on the event loop's thread (a replay's store) behaves as the service's store."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import exc, select, text

from fleet.store import jobs as job_rows
from fleet.store.database import DatabaseError, Durability, open_database
from fleet.store.models import JobRow


def job_row(name: str) -> dict[str, Any]:
    return {
        "uid": f"uid-{name}",
        "namespace": "team-a",
        "name": name,
        "spec_hash": "h",
        "manifest": {"kind": "PyTorchJob"},
        "policy": {},
        "record": {},
        "queue": "team-a",
        "priority_class": "",
        "priority": 0,
        "state": "Queued",
        "units": [],
        "reason": "",
        "suspended": False,
        "created_at": 1.0,
        "updated_at": 1.0,
    }


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "aiosqlite"])
async def test_writes_commit_roll_back_and_read_back_alike(tmp_path: Path, inline: bool) -> None:
    db = await open_database(
        f"sqlite+aiosqlite:///{tmp_path}/r.db", durability=Durability.FAST, inline=inline
    )
    try:
        async with db.write() as session:
            ids = await job_rows.insert_jobs(session, [job_row("a"), job_row("b")])
        assert len(ids) == 2 and ids[0] < ids[1]
        # A transaction that fails on the unique name leaves nothing behind.
        with pytest.raises(exc.IntegrityError):
            async with db.write() as session:
                await job_rows.insert_jobs(session, [job_row("c")])
                await job_rows.insert_jobs(session, [job_row("a")])
        async with db.read() as session:
            names = (await session.execute(select(JobRow.name).order_by(JobRow.id))).scalars()
            assert list(names) == ["a", "b"]
        async with db.reader.connect() as conn:
            wal = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar()
            sync = (await conn.exec_driver_sql("PRAGMA synchronous")).scalar()
            fks = (await conn.exec_driver_sql("PRAGMA foreign_keys")).scalar()
        assert (wal, sync, fks) == ("wal", 0, 1)  # synchronous=OFF: a throwaway file
    finally:
        await db.close()


async def test_inline_statements_run_on_the_event_loops_thread(tmp_path: Path) -> None:
    db = await open_database(f"sqlite+aiosqlite:///{tmp_path}/r.db", inline=True)
    seen: list[int] = []
    try:
        async with db.writer.connect() as conn:
            raw = await conn.get_raw_connection()
            driver: Any = raw.driver_connection
            driver._conn.create_function("whose", 0, lambda: seen.append(threading.get_ident()))
            await conn.execute(text("SELECT whose()"))
        assert seen == [threading.get_ident()]
    finally:
        await db.close()


async def test_looking_jobs_up_by_name_uses_the_unique_index_on_sqlite(tmp_path: Path) -> None:
    db = await open_database(f"sqlite+aiosqlite:///{tmp_path}/r.db", inline=True)
    try:
        async with db.read() as session:
            conn = await session.connection()
            sql = str(
                job_rows._HEADS_BY_NAMES.params(namespace="team-a", names=["a", "b"]).compile(
                    dialect=conn.dialect, compile_kwargs={"render_postcompile": True}
                )
            )
            plan = await conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", ("team-a", "a", "b"))
            details = " ".join(str(row[-1]) for row in plan)
        assert "USING" in details and "INDEX" in details, details
        assert "SCAN jobs" not in details, details
    finally:
        await db.close()


async def test_an_inline_database_must_be_a_file() -> None:
    with pytest.raises(DatabaseError, match="must be a file"):
        await open_database("sqlite+aiosqlite:///:memory:", inline=True)
