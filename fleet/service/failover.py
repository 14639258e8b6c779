"""Failover's reads and writes: the clocks, rules and purges of :mod:`fleet.core.failover`, stored.

Theory of operation: the decisions are the core's (:class:`~fleet.core.failover.FailoverBook`:
when a job is unhealthy, when its time is up, which old copy to purge when);
:class:`Failover` keeps the book and does the I/O around it.  At start it
restores the stored clocks (a table row per unhealthy job, read and written
through :mod:`fleet.store.jobs`, so a restart of Fleet does not reset a
clock; a clock left by a job that ended is dropped) and the open purge
intents.  Each iteration (:meth:`Failover.turn`) it reads the rules of the
jobs that became unhealthy (their PropagationPolicies), asks the book what
is due, and writes the clocks that changed and the notes the book took.
:meth:`Failover.write` stores, in the caller's transaction, the failed-over
jobs' narrowed records and their purge intents; :meth:`Failover.purge` asks
old members to delete the copies the book says may go.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from fleet.clusters.base import ClusterError, MemberCluster
from fleet.core import snapshot
from fleet.core.failover import (
    PURGE_KINDS,
    Clock,
    Due,
    FailoverBook,
    Purge,
    Turn,
    pending_job,
    rule_of,
)
from fleet.core.state import SchedulerState
from fleet.store import jobs as job_rows
from fleet.store.database import Database, Session
from fleet.store.models import JobRow

log = logging.getLogger("fleet.service.failover")


class Failover:
    """The failover book and its store; see the module docstring.  Only the loop calls it."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.book = FailoverBook()
        self._stored: dict[str, int] = {}  # key -> job row id, for the keys with a clock row

    async def load(self, ids: Mapping[str, int], now: float) -> None:
        """Stored clocks of the running jobs (``ids``: key -> row id) and open purges."""
        keys = {row_id: key for key, row_id in ids.items()}
        async with self.db.read() as session:
            rows = await job_rows.unhealthy(session)
            intents = await job_rows.open_intents(session)
            purging = [i for i in intents if i.kind in PURGE_KINDS]
            named = {
                r.id: f"{r.namespace}/{r.name}"
                for r in await job_rows.by_ids(session, sorted({i.job_id for i in purging}))
            }
        clocks: dict[str, Clock] = {}
        orphans: list[int] = []
        for row in rows:
            key = keys.get(row.job_id)
            if key is not None:
                clocks[key] = Clock(row.cluster, row.since, row.reason)
                self._stored[key] = row.job_id
            else:
                orphans.append(row.job_id)  # the job ended before its clock was cleared
        if orphans:
            async with self.db.write() as session:
                await job_rows.forget_unhealthy(session, orphans)
        purges = [
            Purge(i.id, named[i.job_id], i.cluster, i.kind) for i in purging if i.job_id in named
        ]
        self.book.restore(clocks, purges, now)
        if clocks or purges:
            log.info("failover: %d clocks and %d purges restored", len(clocks), len(purges))

    async def turn(self, state: SchedulerState, ids: Mapping[str, int], now: float) -> Turn:
        """Read the rules wanted, let the book decide, store its clocks and notes."""
        unhealthy = self.book.unhealthy(state)
        wanted = [ids[k] for k in unhealthy if k not in self.book.rules and k in ids]
        if wanted:
            async with self.db.read() as session:
                rows: list[JobRow] = await job_rows.by_ids(session, wanted)
            for row in rows:
                self.book.rules[f"{row.namespace}/{row.name}"] = rule_of(row.policy)
        turn = self.book.due(state, now, unhealthy)
        if turn.clocks or turn.notes:
            async with self.db.write() as session:
                for note in turn.notes:
                    if note.key in ids:
                        job_rows.add_event(
                            session, ids[note.key], note.at, note.reason, note.message, warning=True
                        )
                for key, clock in sorted(turn.clocks.items()):
                    stored = self._stored.pop(key, None)
                    if stored is not None:
                        await job_rows.forget_unhealthy(session, [stored])
                    row_id = ids.get(key)
                    if clock is not None and row_id is not None:
                        job_rows.add_unhealthy(
                            session, row_id, clock.cluster, clock.since, clock.why[:2000]
                        )
                        self._stored[key] = row_id
        return turn

    async def write(
        self,
        session: Session,
        done: Sequence[Due],
        state: SchedulerState,
        ids: Mapping[str, int],
        now: float,
    ) -> None:
        """Store the failed-over jobs' new allowed clusters and their purge intents
        (in the caller's transaction, with the jobs' transitions)."""
        rows = {
            r.id: r
            for r in await job_rows.by_ids(session, [ids[d.key] for d in done if d.key in ids])
        }
        for d in done:
            row = rows.get(ids.get(d.key, -1))
            if row is None:
                continue
            job = pending_job(state, d.key)
            if job is not None:
                row.record = snapshot.job_to_plain(job)
            if d.purge is not None:
                intent = job_rows.add_intent(session, row.id, d.purge, d.cluster, now)
                await session.flush()
                self.book.purges.append(Purge(intent.id, d.key, d.cluster, d.purge))

    async def purge(self, state: SchedulerState, members: Mapping[str, MemberCluster]) -> list[int]:
        """Ask old members to delete the old copies the book lets go; the intents done."""
        ask, done = self.book.purges_due(state, members)
        for purge in ask:
            try:
                stopping = await members[purge.cluster].delete(purge.key)
            except ClusterError as e:
                log.info("purging %s in %s: %s; retrying", purge.key, purge.cluster, e)
                continue
            if stopping:
                purge.asked = True
                log.info("purging the old copy of %s in %s", purge.key, purge.cluster)
            else:
                done.append(purge.intent)
        self.book.purges_finished(done)
        return done
