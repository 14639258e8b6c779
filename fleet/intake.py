"""Accepting submitted jobs: idempotent, all or nothing, written before the loop hears of them.

Theory of operation: a submission has already been parsed and validated into
:class:`NewJob` values.  :func:`accept` opens one write transaction: a job
whose ``namespace/name`` exists with the same spec hash is returned as it is
(a resubmission, not a new job); with another hash the whole submission is
refused with :class:`NameTaken` and nothing is written.  New jobs get a row
(state ``Queued``), whose id is their submission order (the core job's
``seq``), a uid, and a first event.  Only after the commit is the loop told
their ids, so the loop never sees a job the database does not hold.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fleet.core import snapshot
from fleet.core.jobs import Job
from fleet.core.lifecycle import JobState
from fleet.store import jobs as job_rows
from fleet.store.database import Database
from fleet.store.models import JobRow


@dataclass(frozen=True, slots=True)
class NewJob:
    """One validated job of a submission."""

    job: Job  # its ``seq`` is replaced by the row id
    manifest: dict[str, Any]
    policy: dict[str, Any] | None
    spec_hash: str
    suspended: bool = False

    @property
    def namespace(self) -> str:
        return self.job.namespace

    @property
    def name(self) -> str:
        return self.job.key.partition("/")[2]


@dataclass(frozen=True, slots=True)
class Accepted:
    """A job of the submission as stored: new, or the same job submitted before."""

    row: JobRow
    created: bool


class NameTaken(Exception):
    """Jobs of the submission exist already with another spec."""

    def __init__(self, keys: Sequence[str]) -> None:
        super().__init__(
            f"job(s) {', '.join(keys)} exist already with another spec; "
            "delete them or choose other names"
        )
        self.keys = list(keys)


async def accept(db: Database, new: Sequence[NewJob], now: float) -> list[Accepted]:
    """Store the submission (see the module docstring); the stored jobs in order."""
    async with db.write() as session:
        existing = await job_rows.by_names(session, [(n.namespace, n.name) for n in new])
        taken = [
            n.job.key
            for n in new
            if n.job.key in existing and existing[n.job.key].spec_hash != n.spec_hash
        ]
        if taken:
            raise NameTaken(taken)
        out: list[Accepted] = []
        for item in new:
            row = existing.get(item.job.key)
            if row is not None:
                out.append(Accepted(row, created=False))
                continue
            job = item.job
            row = JobRow(
                uid=str(uuid.uuid4()),
                namespace=item.namespace,
                name=item.name,
                spec_hash=item.spec_hash,
                manifest=item.manifest,
                policy=item.policy,
                record={},
                queue=job.queue,
                priority_class=job.priority_class,
                priority=job.priority,
                state=JobState.QUEUED.value,
                units=[],
                reason="",
                suspended=item.suspended,
                created_at=now,
                updated_at=now,
            )
            session.add(row)
            await session.flush()
            row.record = snapshot.job_to_plain(dataclasses.replace(job, seq=row.id))
            job_rows.add_event(
                session, row.id, now, JobState.QUEUED.value, f"queued in {job.queue}"
            )
            out.append(Accepted(row, created=True))
    return out
