"""The audit log's writer: every write through the API, recorded with group commit.

Theory of operation: :class:`AuditLog` takes one record per answered write
(who, when, which route, the outcome) from the access middleware
(:mod:`fleet.api.auth`).  The records of the requests answered while a batch
is being written go in the next batch: one transaction and one multi-row
insert, instead of a write transaction per request (which, on SQLite, every
submission would otherwise queue behind).  A request waits until its record
is stored, so a client that reads ``GET /api/v1/audit`` after an answer finds
it there.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fleet.store import admin as admin_rows
from fleet.store.database import Database

log = logging.getLogger("fleet.api")


class AuditLog:
    """Audit records written with group commit; see the module docstring."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._waiting: list[tuple[dict[str, Any], asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def record(self, values: dict[str, Any]) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((values, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_all(), name="fleet-audit")
        await asyncio.shield(done)

    async def close(self) -> None:
        """Wait for the records handed in so far to be written."""
        if self._writer is not None:
            await self._writer

    async def _write_all(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            try:
                async with self.db.write() as session:
                    await admin_rows.insert_audits(session, [values for values, _ in batch])
            except Exception:  # the answers stand; the log says which records are missing
                for values, _ in batch:
                    log.exception(
                        "audit record lost: %s %s by %s answered %d",
                        values["method"],
                        values["path"][:200],
                        values["actor"],
                        values["status"],
                    )
            for _, done in batch:
                if not done.done():
                    done.set_result(None)
