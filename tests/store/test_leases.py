"""The scheduler's lease on a real PostgreSQL: election, renewal, and fencing by term."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import exc, select

from fleet.clock import VirtualClock
from fleet.manifests import convert
from fleet.service.intake import Intake
from fleet.service.leadership import Leadership
from fleet.service.settings import POLICIES
from fleet.store import admin as admin_rows
from fleet.store import leases
from fleet.store.database import Database, Fenced, open_database
from fleet.store.models import QuotaCutRow
from fleet.testing.documents import pytorchjob, read
from fleet.testing.running import new_jobs
from tests.databases import fresh_postgres_database

pytestmark = pytest.mark.postgresql

LEASE = 1.0
RENEW = 0.2


@pytest.fixture
async def db(postgres_url: str) -> AsyncIterator[Database]:
    async with fresh_postgres_database(postgres_url) as url:
        opened = await open_database(url)
        try:
            yield opened
        finally:
            await opened.close()


class Replica:
    """A Leadership whose lead/follow calls are recorded."""

    def __init__(self, db: Database, name: str) -> None:
        self.calls: list[str] = []
        self.leadership = Leadership(
            db,
            identity=name,
            address=f"http://{name}:8080",
            lease=LEASE,
            renew=RENEW,
            lead=self._lead,
            follow=self._follow,
        )
        self.db = db.fenced(self.leadership.fence)

    async def _lead(self, term: int) -> None:
        self.calls.append(f"lead {term}")

    async def _follow(self) -> None:
        self.calls.append("follow")

    async def leads_within(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.leadership.leading:
            assert time.monotonic() < deadline, f"{self.leadership.identity} did not lead"
            await asyncio.sleep(0.02)

    def pause(self) -> None:
        """As a paused process: no more renewals, and it still believes it leads."""
        task = self.leadership._task
        assert task is not None
        task.cancel()
        self.leadership._valid_until = time.monotonic() + 3600


async def cuts(db: Database) -> list[str]:
    async with db.read() as session:
        return list((await session.execute(select(QuotaCutRow.node))).scalars())


async def test_one_replica_leads_and_the_next_takes_over_with_the_next_term(
    db: Database,
) -> None:
    a, b = Replica(db, "a"), Replica(db, "b")
    await a.leadership.start()
    await a.leads_within(5)
    await b.leadership.start()
    await asyncio.sleep(LEASE * 2)  # a renews: b never leads meanwhile
    assert not b.leadership.leading
    assert b.leadership.leader_address() == "http://a:8080"
    await a.leadership.stop()  # hands the lease back
    await b.leads_within(2)
    assert (a.calls, b.calls) == (["lead 1", "follow"], ["lead 2"])
    await b.leadership.stop()


async def test_a_write_of_a_term_that_is_over_is_refused_by_the_database(db: Database) -> None:
    a, b = Replica(db, "a"), Replica(db, "b")
    await a.leadership.start()
    await a.leads_within(5)
    async with a.db.write() as session:
        await admin_rows.replace_quota_cuts(session, {"written-in-term-1": 1.0})
    a.pause()
    await asyncio.sleep(LEASE + 0.2)
    await b.leadership.start()
    await b.leads_within(5)
    with pytest.raises(Fenced):
        async with a.db.write() as session:
            await admin_rows.replace_quota_cuts(session, {"written-late": 2.0})
    assert await cuts(db) == ["written-in-term-1"]
    await asyncio.sleep(0.1)
    assert not a.leadership.leading and a.calls == ["lead 1", "follow"]
    async with b.db.write() as session:  # the new leader writes
        await admin_rows.replace_quota_cuts(session, {"written-in-term-2": 3.0})
    assert await cuts(db) == ["written-in-term-2"]
    await b.leadership.stop()
    await a.leadership.stop()


async def test_a_transaction_of_the_leader_keeps_the_lease_until_it_ends(db: Database) -> None:
    a, b = Replica(db, "a"), Replica(db, "b")
    await a.leadership.start()
    await a.leads_within(5)
    a.pause()
    async with a.db.write() as session:
        # The lease expires while this transaction runs: nobody may take it yet.
        await asyncio.sleep(LEASE + 0.2)
        with pytest.raises(exc.DBAPIError) as waited:
            async with db.write() as other:
                await leases.acquire(other, "b", "", LEASE, wait_ms=200)
        assert leases.lock_timed_out(waited.value)
        await admin_rows.replace_quota_cuts(session, {"inside-term-1": 1.0})
    assert await cuts(db) == ["inside-term-1"]
    await b.leadership.start()  # the lease is free once the transaction ended
    await b.leads_within(2)
    await b.leadership.stop()
    await a.leadership.stop()


async def test_the_leader_renews_while_its_own_transactions_hold_the_row(db: Database) -> None:
    a = Replica(db, "a")
    await a.leadership.start()
    await a.leads_within(5)
    async with a.db.write() as session:
        async with db.write() as other:  # as the renewal task does, meanwhile
            renewed = await leases.renew(other, "a", a.leadership.term, LEASE, wait_ms=200)
        assert renewed
        await admin_rows.replace_quota_cuts(session, {"while-renewing": 1.0})
    assert await cuts(db) == ["while-renewing"]
    await a.leadership.stop()


async def test_a_leader_paused_inside_a_transaction_loses_it_to_the_database(
    db: Database,
) -> None:
    a, b = Replica(db, "a"), Replica(db, "b")
    await a.leadership.start()
    await a.leads_within(5)
    a.pause()
    with pytest.raises(exc.DBAPIError):
        async with a.db.write() as session:
            await admin_rows.replace_quota_cuts(session, {"never": 1.0})
            # Idle in the transaction past a lease: PostgreSQL ends the session.
            await asyncio.sleep(LEASE * 2 + 0.5)
    await b.leadership.start()
    await b.leads_within(3)
    assert await cuts(db) == []
    await b.leadership.stop()
    await a.leadership.stop()


async def test_submissions_go_to_the_inbox_and_each_is_taken_once(db: Database) -> None:
    tree, _ = convert.load_quota(read(POLICIES / "quota" / "team-tree.yaml"))
    clusters = convert.load_clusters(read(POLICIES / "clusters" / "example.yaml"))
    told: list[int] = []
    intake = Intake(db, VirtualClock(0.0), lambda jobs: told.extend(j.seq for j in jobs))
    intake.also = leases.post
    ids = []
    for name in ("a", "b", "c"):
        (accepted,) = await intake.accept(new_jobs(pytorchjob(name), tree, clusters))
        ids.append(accepted.head.id)
    await intake.accept(new_jobs(pytorchjob("a"), tree, clusters))  # again: not a new job
    async with db.write() as session:
        first = await leases.take(session, 2)
    async with db.write() as session:
        second = await leases.take(session, 10)
        queued = await leases.queued(session, first + second)
    assert first + second == ids
    assert [i for i, _ in queued] == ids
    async with db.write() as session:
        assert await leases.take(session, 10) == []
