"""Failover in the service loop on a virtual clock, on SQLite and PostgreSQL.

A simulated member made unreachable reports itself not ready; its running
job fails over exactly ``tolerationSeconds`` later, to another member, even
across a restart of the service (the first-unhealthy time is stored), and the
old copy is purged per ``purgeMode`` once the member answers again.
"""

from __future__ import annotations

import yaml
from sqlalchemy import select

from fleet.clock import VirtualClock
from fleet.clusters.sim import SimulatedCluster
from fleet.service.wiring import Service
from fleet.store.models import IntentRow, UnhealthyJobRow
from fleet.testing.documents import pytorchjob
from fleet.testing.running import running_service, settings
from tests.service.test_loop import settle, states, submit

#: team-c has a virtual cluster of one 8-GPU node in east and in edge.
KEY = "team-c/train"


def with_failover(text: str, toleration: int, purge_mode: str) -> str:
    policy, job = yaml.safe_load_all(text)
    policy["spec"]["failover"] = {
        "application": {
            "decisionConditions": {"tolerationSeconds": toleration},
            "purgeMode": purge_mode,
        }
    }
    return yaml.safe_dump_all([policy, job])


def sim(svc: Service, name: str) -> SimulatedCluster:
    member = svc.loop.members[name]
    assert isinstance(member, SimulatedCluster)
    return member


async def stored(svc: Service) -> list[tuple[str, float]]:
    async with svc.db.read() as session:
        rows = (await session.execute(select(UnhealthyJobRow))).scalars().all()
    return [(r.cluster, r.since) for r in rows]


async def open_purges(svc: Service) -> list[tuple[str, str]]:
    async with svc.db.read() as session:
        rows = (
            await session.execute(select(IntentRow).where(IntentRow.done_at.is_(None)))
        ).scalars()
        return [(r.kind, r.cluster) for r in rows]


async def test_the_failover_clock_survives_a_restart_and_directly_purges_the_old_copy(
    database_url: str,
) -> None:
    clock = VirtualClock(1000.0)
    text = with_failover(
        pytorchjob("train", namespace="team-c", workers=1, gpus=8, duration="10h"), 60, "Directly"
    )
    async with running_service(settings(database_url), clock) as svc:
        await submit(svc, text)
        await settle(svc, clock)
        first = svc.loop.state.running[KEY].cluster
        sim(svc, first).set_reachable(False, "partition")
        await settle(svc, clock, 5)
        assert await stored(svc) == [(first, 1000.0)]
        await settle(svc, clock, 30)
        assert svc.loop.state.running[KEY].cluster == first

    async with running_service(settings(database_url), clock) as svc:
        sim(svc, first).set_reachable(False, "still partitioned")
        await settle(svc, clock, 20)
        assert svc.loop.state.running[KEY].cluster == first  # 55 s unhealthy
        await settle(svc, clock, 5)  # 60 s after the first time, not after the restart
        run = svc.loop.state.running[KEY]
        assert run.cluster != first
        assert await states(svc) == {KEY: "Running"}
        assert await stored(svc) == []
        assert await open_purges(svc) == [("purge-directly", first)]
        # The old member was recreated at the restart (simulated jobs live in
        # the process): it answers again, the purge deletes the old copy.
        sim(svc, first).set_reachable(True)
        await settle(svc, clock, 5)
        assert await open_purges(svc) == []
        assert KEY not in sim(svc, first).running()
        assert KEY in sim(svc, run.cluster).running()
        assert svc.loop.state.running[KEY].cluster == run.cluster
        svc.loop.state.check_invariants()


async def test_a_member_back_in_time_stops_the_clock(database_url: str) -> None:
    clock = VirtualClock(0.0)
    text = with_failover(
        pytorchjob("train", namespace="team-c", workers=1, gpus=8, duration="10h"), 60, "Gracefully"
    )
    async with running_service(settings(database_url), clock) as svc:
        await submit(svc, text)
        await settle(svc, clock)
        first = svc.loop.state.running[KEY].cluster
        sim(svc, first).set_reachable(False)
        await settle(svc, clock, 55)
        sim(svc, first).set_reachable(True)
        await settle(svc, clock, 10)
        assert await stored(svc) == []
        sim(svc, first).set_reachable(False)
        await settle(svc, clock, 55)  # a new clock: 55 s, not 120
        assert svc.loop.state.running[KEY].cluster == first
        await settle(svc, clock, 10)
        assert svc.loop.state.running[KEY].cluster != first
        # Gracefully: the old copy goes once the new one runs (simulated jobs
        # run at once), as soon as the old member answers.
        assert await open_purges(svc) == [("purge-gracefully", first)]
        sim(svc, first).set_reachable(True)
        await settle(svc, clock, 5)
        assert await open_purges(svc) == []
        assert KEY not in sim(svc, first).running()


async def test_a_job_that_ends_while_unhealthy_leaves_no_clock_behind(database_url: str) -> None:
    clock = VirtualClock(0.0)
    text = with_failover(
        pytorchjob("short", namespace="team-c", workers=1, gpus=8, duration="30s"), 60, "Directly"
    )
    async with running_service(settings(database_url), clock) as svc:
        await submit(svc, text)
        await settle(svc, clock)
        first = svc.loop.state.running["team-c/short"].cluster
        sim(svc, first).set_reachable(False)  # simulated jobs run on
        await settle(svc, clock, 5)
        assert [c for c, _ in await stored(svc)] == [first]
        await settle(svc, clock, 30)
        assert await states(svc) == {"team-c/short": "Succeeded"}
        assert await stored(svc) == []
        assert await open_purges(svc) == []
