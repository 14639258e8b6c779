"""Group commit of submissions: each submission decided on its own, stored together."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

import pytest

from fleet.clock import VirtualClock
from fleet.core.jobs import Job
from fleet.manifests import convert
from fleet.service import intake
from fleet.service.intake import Intake, NewJob
from fleet.store import jobs as job_rows
from fleet.store.database import Database, open_database
from fleet.testing.documents import pytorchjob
from fleet.testing.running import new_jobs, settings


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
