"""The scheduler loop end to end on a virtual clock: submit, admit, run, finish, restart."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from sqlalchemy import event, text

from fleet.clock import VirtualClock
from fleet.service import intake, journal
from fleet.service.wiring import Service
from fleet.store import jobs as job_rows
from fleet.store.database import open_database
from fleet.testing import running
from fleet.testing.documents import pytorchjob
from fleet.testing.running import new_jobs, running_service, settings
from tests.databases import WriteTransactions


async def submit(svc: Service, text: str) -> list[int]:
    accepted = await svc.intake.accept(new_jobs(text, svc.tree, svc.clusters))
    return [a.head.id for a in accepted if a.created]


async def settle(svc: Service, clock: VirtualClock, seconds: float = 0.0) -> None:
    await running.settle(svc.loop, clock, seconds)


async def states(svc: Service) -> dict[str, str]:
    async with svc.db.read() as session:
        rows = await job_rows.in_states(
            session,
            [
                "Queued",
                "Admitted",
                "Dispatched",
                "Running",
                "Preempted",
                "Succeeded",
                "Failed",
                "Cancelled",
            ],
        )
    return {f"{r.namespace}/{r.name}": r.state for r in rows}


async def admitted_by_hand(svc: Service, name: str) -> None:
    """Stop the loop's task, submit ``name`` and run one iteration by hand: the job is
    admitted, persisted and created in its member, its move to Dispatched deferred."""
    await svc.loop.stop()
    await submit(svc, pytorchjob(name, gpus=1, duration="1h"))
    await svc.loop.iterate()


async def reasons_and_open_intents(svc: Service, name: str) -> tuple[list[str], list[str]]:
    """The event log reasons of team-a/``name`` and the kinds of the open intents."""
    async with svc.db.read() as session:
        row = await job_rows.by_name(session, "team-a", name)
        assert row is not None
        reasons = [e.reason for e in await job_rows.events_of(session, row.id)]
        return reasons, [i.kind for i in await job_rows.open_intents(session)]


async def states_of(
    database_url: str, asked: Sequence[str] = ("Queued", "Running", "Cancelled")
) -> dict[str, str]:
    """The stored states (of the jobs in one of ``asked``), read with no service running."""
    db = await open_database(database_url)
    try:
        async with db.read() as session:
            rows = await job_rows.in_states(session, asked)
        return {f"{r.namespace}/{r.name}": r.state for r in rows}
    finally:
        await db.close()


async def test_a_job_is_admitted_runs_for_its_duration_and_succeeds(database_url: str) -> None:
    clock = VirtualClock(1000.0)
    async with running_service(settings(database_url), clock) as svc:
        await submit(svc, pytorchjob("train", workers=2, gpus=4, duration="90s"))
        await settle(svc, clock)
        assert await states(svc) == {"team-a/train": "Running"}
        await settle(svc, clock, 89)
        assert await states(svc) == {"team-a/train": "Running"}
        await settle(svc, clock, 2)
        assert await states(svc) == {"team-a/train": "Succeeded"}
        async with svc.db.read() as session:
            row = await job_rows.by_name(session, "team-a", "train")
            assert row is not None
            events = [e.reason for e in await job_rows.events_of(session, row.id)]
        assert events == ["Queued", "Admitted", "Dispatched", "Running", "Succeeded"]
        assert svc.loop.state.tree.used("team-a")["nvidia.com/gpu"] == 0
        svc.loop.state.check_invariants()


async def test_after_a_restart_running_jobs_are_restored_and_carry_on(database_url: str) -> None:
    url = database_url
    clock = VirtualClock(0.0)
    async with running_service(settings(url), clock) as svc:
        await submit(svc, pytorchjob("long", workers=2, gpus=8, duration="1h"))
        # team-a's max is 32 GPUs: 16 + 24 does not fit, so this one waits.
        await submit(svc, pytorchjob("wait", workers=3, gpus=8, duration="1h"))
        await settle(svc, clock)
        before = await states(svc)
        placement = svc.loop.state.running["team-a/long"].pods

    async with running_service(settings(url), clock) as svc:
        await settle(svc, clock)
        assert await states(svc) == before
        assert svc.loop.state.running["team-a/long"].pods == placement
        assert svc.loop.state.is_pending("team-a/wait")
        svc.loop.state.check_invariants()
        await settle(svc, clock, 3601)
        after = await states(svc)
        assert after["team-a/long"] == "Succeeded"


async def test_a_simulated_job_restored_after_a_restart_keeps_its_start_time(
    database_url: str,
) -> None:
    clock = VirtualClock(0.0)
    async with running_service(settings(database_url), clock) as svc:
        await submit(svc, pytorchjob("hour", gpus=1, duration="1h"))
        await settle(svc, clock)  # it starts at 0
        await settle(svc, clock, 1800)

    async with running_service(settings(database_url), clock) as svc:
        await settle(svc, clock, 1799)
        assert await states(svc) == {"team-a/hour": "Running"}
        await settle(svc, clock, 2)  # an hour after it started, not after the restart
        assert await states(svc) == {"team-a/hour": "Succeeded"}


async def test_a_cancellation_accepted_before_a_stop_is_carried_out_after_the_restart(
    database_url: str,
) -> None:
    clock = VirtualClock(0.0)
    async with running_service(settings(database_url), clock) as svc:
        (running,) = await submit(svc, pytorchjob("running", workers=2, gpus=8, duration="1h"))
        (queued,) = await submit(svc, pytorchjob("queued", workers=3, gpus=8, duration="1h"))
        await settle(svc, clock)
        assert await states(svc) == {"team-a/running": "Running", "team-a/queued": "Queued"}
        # acknowledged, but the loop stops before it gets to them
        await svc.loop.cancel(running, "team-a/running")
        await svc.loop.cancel(queued, "team-a/queued")
    assert await states_of(database_url) == {
        "team-a/running": "Running",
        "team-a/queued": "Queued",
    }

    async with running_service(settings(database_url), clock) as svc:
        await settle(svc, clock)
        assert await states(svc) == {"team-a/running": "Cancelled", "team-a/queued": "Cancelled"}
        assert svc.loop.state.tree.used("team-a")["nvidia.com/gpu"] == 0
        async with svc.db.read() as session:
            assert await job_rows.open_intents(session) == []


async def test_resubmitting_is_idempotent_and_a_changed_spec_is_refused(database_url: str) -> None:
    clock = VirtualClock(0.0)
    async with running_service(settings(database_url), clock) as svc:
        first = await submit(svc, pytorchjob("same", gpus=1))
        assert len(first) == 1
        again = await intake.accept(
            svc.db, new_jobs(pytorchjob("same", gpus=1), svc.tree, svc.clusters), clock.now()
        )
        assert [(a.head.id, a.created) for a in again] == [(first[0], False)]
        with pytest.raises(intake.NameTaken, match="team-a/same"):
            await intake.accept(
                svc.db, new_jobs(pytorchjob("same", gpus=2), svc.tree, svc.clusters), clock.now()
            )
        assert list(await states(svc)) == ["team-a/same"]  # one job, whatever its state


async def test_a_job_stored_before_the_loop_heard_of_it_is_scheduled_when_submitted_again(
    database_url: str,
) -> None:
    clock = VirtualClock(0.0)
    async with running_service(settings(database_url), clock) as svc:
        text = pytorchjob("lost-answer", gpus=1)
        # stored by a commit whose answer never came back: nobody told the loop
        (stored,) = await intake.accept(svc.db, new_jobs(text, svc.tree, svc.clusters), 0.0)
        await settle(svc, clock)
        assert await states(svc) == {"team-a/lost-answer": "Queued"}
        (again,) = await svc.intake.accept(new_jobs(text, svc.tree, svc.clusters))
        assert (again.head.id, again.created) == (stored.head.id, False)
        await settle(svc, clock)
        assert await states(svc) == {"team-a/lost-answer": "Running"}


async def test_a_preempted_job_is_queued_again_once_its_pods_are_gone(database_url: str) -> None:
    clock = VirtualClock(0.0)
    async with running_service(settings(database_url), clock) as svc:
        # sandbox runs opportunistic work on every GPU of the three clusters (six
        # 8-GPU nodes); team-a's two-node job takes its guaranteed share back.
        for n in range(6):
            await submit(
                svc,
                pytorchjob(
                    f"oppo-{n}",
                    namespace="sandbox",
                    workers=1,
                    gpus=8,
                    priority_class="oppo",
                    duration="2h",
                ),
            )
        await settle(svc, clock)
        assert set((await states(svc)).values()) == {"Running"}
        await submit(svc, pytorchjob("owner", workers=2, gpus=8, duration="1h"))
        await settle(svc, clock)
        seen = await states(svc)
        assert seen["team-a/owner"] == "Running"
        victims = [k for k, v in seen.items() if k.startswith("sandbox/") and v == "Queued"]
        assert len(victims) == 2
        async with svc.db.read() as session:
            row = await job_rows.by_name(session, *victims[0].split("/"))
            assert row is not None
            reasons = [e.reason for e in await job_rows.events_of(session, row.id)]
        assert reasons[-2:] == ["Preempted", "Queued"]
        svc.loop.state.check_invariants()


async def test_what_creating_a_job_leaves_to_record_goes_with_the_next_transaction(
    database_url: str,
) -> None:
    clock = VirtualClock(0.0)
    async with running_service(settings(database_url), clock) as svc:
        await admitted_by_hand(svc, "train")
        assert svc.loop.state.phase["team-a/train"].value == "Dispatched"
        assert await states(svc) == {"team-a/train": "Admitted"}
        assert (await reasons_and_open_intents(svc, "train"))[1] == ["create"]
        await svc.loop.flush()
        assert await states(svc) == {"team-a/train": "Dispatched"}
        events, intents = await reasons_and_open_intents(svc, "train")
        assert intents == []
        assert events == ["Queued", "Admitted", "Dispatched"]


async def test_an_end_a_member_reports_is_written_with_the_admissions_it_makes_room_for(
    database_url: str,
) -> None:
    clock = VirtualClock(0.0)
    logged: list[list[str]] = [[]]  # event reasons inserted, per committed transaction

    def inserted(
        _conn: Any, _cursor: Any, statement: str, params: Any, _ctx: Any, many: bool
    ) -> None:
        if statement.startswith("INSERT INTO job_events"):
            rows = params if many else [params]
            logged[-1] += [row[3] for row in rows]  # (job_id, time, type, reason, message)

    def committed(_conn: Any) -> None:
        logged.append([])

    async with running_service(settings(database_url), clock) as svc:
        engine = svc.db.writer.sync_engine
        event.listen(engine, "after_cursor_execute", inserted)
        event.listen(engine, "commit", committed)
        try:
            # team-a's max is 32 GPUs: the second job starts when the first one ends.
            await submit(svc, pytorchjob("first", workers=2, gpus=8, duration="90s"))
            await submit(svc, pytorchjob("second", workers=3, gpus=8, duration="1h"))
            await settle(svc, clock)
            assert await states(svc) == {"team-a/first": "Running", "team-a/second": "Queued"}
            del logged[:-1]
            await settle(svc, clock, 91)
            assert await states(svc) == {"team-a/first": "Succeeded", "team-a/second": "Running"}
            assert [t for t in logged if t] == [
                ["Succeeded", "Admitted"],  # the end, with the admission: one transaction
                ["Dispatched", "Running"],
            ]
        finally:
            event.remove(engine, "after_cursor_execute", inserted)
            event.remove(engine, "commit", committed)


async def test_a_loop_that_writes_behind_records_what_it_did_not_act_on_when_flushed(
    database_url: str,
) -> None:
    clock = VirtualClock(0.0)
    async with running_service(settings(database_url), clock) as svc:
        svc.loop.journal.write_behind = True
        await submit(svc, pytorchjob("train", gpus=1, duration="90s"))
        await settle(svc, clock)
        assert svc.loop.state.phase["team-a/train"].value == "Running"
        assert await states(svc) == {"team-a/train": "Admitted"}  # decided: written at once
        await svc.loop.flush()
        assert await states(svc) == {"team-a/train": "Running"}
        assert (await reasons_and_open_intents(svc, "train")) == (
            ["Queued", "Admitted", "Dispatched", "Running"],
            [],
        )
        await settle(svc, clock, 91)
        assert await states(svc) == {"team-a/train": "Running"}  # its end waits too
    # and is written when the loop stops
    assert await states_of(database_url, ["Succeeded"]) == {"team-a/train": "Succeeded"}


async def test_a_crash_before_the_deferred_record_creates_the_job_again_and_records_it_once(
    database_url: str,
) -> None:
    clock = VirtualClock(0.0)
    async with running_service(settings(database_url), clock) as svc:
        await admitted_by_hand(svc, "train")
        svc.loop.journal._deferred.clear()  # the process dies before its next transaction
    assert await states_of(database_url) == {}  # Admitted: none of the states asked
    async with running_service(settings(database_url), clock) as svc:
        await settle(svc, clock)
        assert await states(svc) == {"team-a/train": "Running"}
        events, intents = await reasons_and_open_intents(svc, "train")
        assert intents == []
        assert events == ["Queued", "Admitted", "Dispatched", "Running"]


async def test_a_loop_whose_decisions_wait_too_writes_nothing_until_flushed_and_no_intent(
    database_url: str,
) -> None:
    clock = VirtualClock(0.0)
    async with running_service(settings(database_url), clock) as svc:
        svc.loop.journal.write_behind = True
        svc.loop.journal.decisions_behind = True
        ids = [
            i
            for n in ("train", "other")
            for i in await submit(svc, pytorchjob(n, gpus=1, duration="90s"))
        ]
        written = WriteTransactions(svc.db.writer)
        await settle(svc, clock)
        assert {k: p.value for k, p in svc.loop.state.phase.items()} == {
            "team-a/train": "Running",
            "team-a/other": "Running",
        }
        assert written.committed == []  # decided, created, started: nothing written yet
        assert await states(svc) == {"team-a/train": "Queued", "team-a/other": "Queued"}
        # both were created from heads read in one go, ahead of their turn
        assert svc.loop.journal._read_to >= max(ids)
        await svc.loop.flush()
        assert len(written.committed) == 1
        assert await states(svc) == {"team-a/train": "Running", "team-a/other": "Running"}
        assert (await reasons_and_open_intents(svc, "train")) == (
            ["Queued", "Admitted", "Dispatched", "Running"],
            [],
        )
        async with svc.db.read() as session:
            assert await job_rows.open_intents(session) == []
            intents = await session.execute(text("SELECT count(*) FROM intents"))
            assert intents.scalar() == 0  # none was ever written


async def test_records_written_behind_wait_until_a_bounded_number_of_batches_waits(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal, "MAX_BEHIND", 2)
    clock = VirtualClock(0.0)
    async with running_service(settings(database_url), clock) as svc:
        svc.loop.journal.write_behind = True
        assert not svc.loop.journal.due
        svc.loop.journal.defer(svc.loop.state, [], [], 0.0)
        assert not svc.loop.journal.due
        svc.loop.journal.defer(svc.loop.state, [], [], 0.0)
        assert svc.loop.journal.due
