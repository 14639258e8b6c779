"""Group commit of submissions: each submission decided on its own, stored together.

A submission's policies are written in the same transaction as its jobs and
its audit record, only when it is accepted, and the service is told of them
after the commit.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

import pytest
from sqlalchemy import text

from fleet.clock import VirtualClock
from fleet.core.jobs import Job
from fleet.manifests import convert
from fleet.service import intake
from fleet.service.intake import Intake, NewJob, NewPolicy
from fleet.store import configuration
from fleet.store import jobs as job_rows
from fleet.store.database import Database, open_database
from fleet.testing.documents import gang_policy, pytorchjob
from fleet.testing.running import new_jobs, settings
from tests.databases import WriteTransactions


@pytest.fixture
async def db(database_url: str) -> Database:
    opened = await open_database(database_url)
    yield opened  # type: ignore[misc]
    await opened.close()


def jobs_of(text: str) -> list[NewJob]:
    """The jobs of a submission against the shipped tree and clusters."""
    shipped = settings("sqlite+aiosqlite:///unused.db")
    tree, _ = convert.load_quota(shipped.quota.read_text(encoding="utf-8"))
    clusters = convert.load_clusters(shipped.clusters.read_text(encoding="utf-8"))
    return new_jobs(text, tree, clusters)


class Told:
    """What the intake told the loop, batch by batch."""

    def __init__(self) -> None:
        self.batches: list[list[Job]] = []

    def __call__(self, jobs: Sequence[Job]) -> None:
        self.batches.append(list(jobs))


async def stored_names(db: Database) -> dict[str, int]:
    async with db.read() as session:
        rows = await job_rows.in_states(session, ["Queued"])
    return {f"{r.namespace}/{r.name}": r.id for r in rows}


async def test_submissions_that_arrive_together_are_one_transaction_each_decided_alone(
    db: Database,
) -> None:
    told = Told()
    writer = Intake(db, VirtualClock(0.0), told)
    first = jobs_of(pytorchjob("a", gpus=1))
    same_again = jobs_of(pytorchjob("a", gpus=1))
    changed = jobs_of(pytorchjob("a", gpus=2))
    other = jobs_of(pytorchjob("b", gpus=1))
    outcomes = await asyncio.gather(
        writer.accept(first),
        writer.accept(same_again),
        writer.accept(changed),
        writer.accept(other),
        return_exceptions=True,
    )
    # they arrived while nothing was being written: one transaction holds all four
    assert (writer.batches, writer.submissions) == (1, 4)
    a, again, refused, b = outcomes
    assert isinstance(a, list) and isinstance(again, list) and isinstance(b, list)
    assert isinstance(refused, intake.NameTaken) and refused.keys == ["team-a/a"]
    assert [x.created for x in a] == [True]
    assert [(x.head.id, x.created) for x in again] == [(a[0].head.id, False)]
    assert await stored_names(db) == {"team-a/a": a[0].head.id, "team-a/b": b[0].head.id}
    # the loop heard of each new job once, with its row id as its submission order
    heard = [(j.key, j.seq) for batch in told.batches for j in batch]
    assert heard == [("team-a/a", a[0].head.id), ("team-a/b", b[0].head.id)]


async def test_a_submission_the_database_refuses_does_not_fail_the_others(db: Database) -> None:
    told = Told()
    writer = Intake(db, VirtualClock(0.0), told)
    (good,) = jobs_of(pytorchjob("good", gpus=1))
    (bad,) = jobs_of(pytorchjob("bad", gpus=1))
    unstorable = dataclasses.replace(bad, manifest={"not json": {1, 2}})
    (later,) = jobs_of(pytorchjob("later", gpus=1))
    outcomes = await asyncio.gather(
        writer.accept([good]),
        writer.accept([later]),
        writer.accept([unstorable]),
        return_exceptions=True,
    )
    assert isinstance(outcomes[0], list) and isinstance(outcomes[1], list)
    assert isinstance(outcomes[2], Exception) and not isinstance(outcomes[2], intake.NameTaken)
    assert sorted(await stored_names(db)) == ["team-a/good", "team-a/later"]
    assert writer.batches == 2  # the refused batch, then each of its good submissions alone
    assert sorted(j.key for batch in told.batches for j in batch) == [
        "team-a/good",
        "team-a/later",
    ]


async def test_a_caller_that_goes_away_does_not_lose_the_batch(db: Database) -> None:
    writer = Intake(db, VirtualClock(0.0), Told())
    leaving = asyncio.ensure_future(writer.accept(jobs_of(pytorchjob("left", gpus=1))))
    staying = asyncio.ensure_future(writer.accept(jobs_of(pytorchjob("stays", gpus=1))))
    await asyncio.sleep(0)
    leaving.cancel()
    assert [a.head.name for a in await staying] == ["stays"]
    await writer.close()
    # what was handed to the writer is stored, as an acknowledged submission would be
    assert sorted(await stored_names(db)) == ["team-a/left", "team-a/stays"]


def new_policy(name: str, priority: int = 0) -> NewPolicy:
    document = gang_policy(name)
    document["spec"]["priority"] = priority
    return NewPolicy("team-a", name, document, author="ci-a")


async def test_policies_are_stored_in_the_transaction_of_their_submission_if_it_is_accepted(
    db: Database,
) -> None:
    told: list[dict[str, dict[str, object]]] = []
    writer = Intake(db, VirtualClock(5.0), Told(), on_policies=told.append)
    transactions = WriteTransactions(db.writer)
    try:
        (first,) = await writer.accept(jobs_of(pytorchjob("a", gpus=1)))
        audit = {
            "actor": "ci-a",
            "kind": "submission",
            "operation": "submitJobs",
            "method": "POST",
            "path": "/api/v1/submissions",
        }
        outcomes = await asyncio.gather(
            # a new job and its policy, and a policy the next submission stores again
            writer.accept(
                jobs_of(pytorchjob("b", gpus=1)),
                audit,
                policies=[new_policy("b"), new_policy("shared", 1)],
            ),
            # a taken name: none of its policies is stored
            writer.accept(
                jobs_of(pytorchjob("a", gpus=2)), audit, policies=[new_policy("refused")]
            ),
            # policies alone; the later submission's document of a name wins
            writer.accept([], audit, policies=[new_policy("shared", 2)]),
            return_exceptions=True,
        )
    finally:
        transactions.close()
    b, refused, alone = outcomes
    assert isinstance(b, list) and [x.created for x in b] == [True]
    assert isinstance(refused, intake.NameTaken) and alone == []
    # one transaction: the jobs, the policies and the audit records
    assert writer.batches == 2 and first.created
    (batch,) = transactions.committed[1:]
    assert {"jobs", "policies", "audit"} <= batch
    async with db.read() as session:
        rows = {r.name: r for r in await configuration.stored_policies(session)}
    assert sorted(rows) == ["b", "shared"]
    assert rows["b"].author == "ci-a" and rows["b"].created_at == 5.0
    assert rows["b"].api_version == "policy.one.alibabacloud.com/v1alpha1"
    assert '"priority":2' in rows["shared"].document
    # the service is told once, after the commit, of what was stored
    stored = {"team-a/b": new_policy("b"), "team-a/shared": new_policy("shared", 2)}
    assert told == [{key: p.document for key, p in stored.items()}]
    async with db.read() as session:
        audits = await session.execute(text("SELECT status FROM audit ORDER BY id"))
        assert [row[0] for row in audits] == [201, 409, 201]


async def test_submissions_stored_ahead_are_one_transaction_each_at_its_own_time(
    db: Database,
) -> None:
    transactions = WriteTransactions(db.writer)
    outcomes = await intake.accept_each(
        db,
        [
            (jobs_of(pytorchjob("a", gpus=1)), 10.0),
            (jobs_of(pytorchjob("b", gpus=1)), 20.0),
            (jobs_of(pytorchjob("a", gpus=2)), 30.0),  # a's name is taken by then
        ],
    )
    assert len(transactions.writing("jobs")) == 1
    a, b, refused = outcomes
    assert isinstance(a, list) and isinstance(b, list)
    assert isinstance(refused, intake.NameTaken) and refused.keys == ["team-a/a"]
    assert [(x.created, x.job is not None and x.job.seq == x.head.id) for x in a + b] == [
        (True, True),
        (True, True),
    ]
    async with db.read() as session:
        rows = await job_rows.by_ids(session, [a[0].head.id, b[0].head.id])
        events = [
            (e.time, e.reason) for row in rows for e in await job_rows.events_of(session, row.id)
        ]
    assert [(r.created_at, r.updated_at) for r in rows] == [(10.0, 10.0), (20.0, 20.0)]
    assert events == [(10.0, "Queued"), (20.0, "Queued")]


async def test_deleted_jobs_take_their_event_logs_with_them(db: Database) -> None:
    (a,) = await intake.accept(db, jobs_of(pytorchjob("a", gpus=1)), 0.0)
    (b,) = await intake.accept(db, jobs_of(pytorchjob("b", gpus=1)), 0.0)
    async with db.write() as session:
        await job_rows.delete_jobs(session, [a.head.id])
    async with db.read() as session:
        assert [r.id for r in await job_rows.by_ids(session, [a.head.id, b.head.id])] == [b.head.id]
        assert await job_rows.events_of(session, a.head.id) == []
        assert [e.reason for e in await job_rows.events_of(session, b.head.id)] == ["Queued"]
