"""Run-time limits through the service: the HTTP API, the loop, simulated members."""

from __future__ import annotations

from fleet.api import keys
from fleet.clock import VirtualClock
from fleet.core import events
from fleet.core.lifecycle import JobState
from fleet.service.loop import SchedulerLoop
from fleet.store import jobs as job_rows
from fleet.testing import running
from fleet.testing.documents import pytorchjob
from fleet.testing.running import new_jobs, running_service, settings
from tests.admin.conftest import YAML, Api


def running_in_members(api: Api, key: str) -> bool:
    members = api.client.app[keys.SERVICE].loop.members
    return any(key in m.running() for m in members.values())


async def test_a_job_past_its_own_deadline_fails_with_the_reason_and_its_pods_stop(
    api: Api,
) -> None:
    text = pytorchjob("short", duration="1h", deadline=600)
    await api.call("POST", "/api/v1/submissions", data=text, headers=YAML, status=201)
    await api.settle()
    job = await api.call("GET", "/api/v1/jobs/team-a/short", status=200)
    assert job["state"] == "Running" and running_in_members(api, "team-a/short")
    await api.settle(599)
    assert (await api.call("GET", "/api/v1/jobs/team-a/short", status=200))["state"] == "Running"
    await api.settle(1)  # the loop wakes at the job's due time by itself
    job = await api.call("GET", "/api/v1/jobs/team-a/short", status=200)
    assert job["state"] == "Failed"
    assert "deadline of 10m (activeDeadlineSeconds)" in job["reason"], job["reason"]
    reasons = [e["reason"] for e in job["events"]]
    assert reasons[-2:] == ["DeadlineExceeded", "Failed"], reasons
    assert not running_in_members(api, "team-a/short")
    loop = api.client.app[keys.SERVICE].loop
    assert loop.state.tree.used("team-a")["nvidia.com/gpu"] == 0
    loop.state.check_invariants()


async def test_a_queues_max_runtime_requeues_a_job_that_runs_again_afresh(api: Api) -> None:
    patch = {"maxRuntime": "10m", "maxRuntimeAction": "Requeue"}
    await api.call("PATCH", "/api/v1/quota-tree/nodes/team-a", json=patch, status=200)
    text = pytorchjob("long", duration="1h")
    await api.call("POST", "/api/v1/submissions", data=text, headers=YAML, status=201)
    await api.settle()
    assert (await api.call("GET", "/api/v1/jobs/team-a/long", status=200))["state"] == "Running"
    await api.settle(600)
    job = await api.call("GET", "/api/v1/jobs/team-a/long", status=200)
    reasons = [e["reason"] for e in job["events"]]
    assert reasons.count("MaxRuntimeExceeded") == 1, reasons
    at = reasons.index("MaxRuntimeExceeded")
    assert reasons[at + 1 : at + 3] == ["Preempted", "Queued"], reasons
    assert job["state"] == "Running"  # queued again, and started again at once
    loop = api.client.app[keys.SERVICE].loop
    assert loop.state.run_time("team-a/long") == 0.0  # a fresh count
    await api.settle(600)
    job = await api.call("GET", "/api/v1/jobs/team-a/long", status=200)
    assert [e["reason"] for e in job["events"]].count("MaxRuntimeExceeded") == 2
    bad = await api.call(
        "PATCH", "/api/v1/quota-tree/nodes/team-a", json={"maxRuntime": "0s"}, status=422
    )
    assert bad["errors"][0]["path"].endswith(".maxRuntime"), bad


async def test_a_restored_job_keeps_the_run_time_of_its_earlier_runs(database_url: str) -> None:
    clock = VirtualClock(0.0)
    key = "team-a/twice"
    async with running_service(settings(database_url), clock) as svc:
        await svc.intake.accept(
            new_jobs(pytorchjob("twice", duration="1h", deadline=600), svc.tree, svc.clusters)
        )
        await running.settle(svc.loop, clock, 200)

        async def evict(loop: SchedulerLoop) -> None:
            cluster = loop.state.running[key].cluster
            out = events.apply(loop.state, events.Evicted(key, "its node went away"))
            await loop.commit(out, deletes=[(key, cluster)])

        await svc.loop.exclusive(evict)
        await running.settle(svc.loop, clock)  # stopped, queued again, started again
        assert svc.loop.state.phase[key] is JobState.RUNNING
        assert svc.loop.state.ran[key] == 200.0
        await running.settle(svc.loop, clock, 100)

    async with running_service(settings(database_url), clock) as svc:
        await running.settle(svc.loop, clock)
        assert svc.loop.state.ran == {key: 200.0}
        assert svc.loop.state.run_time(key) == 300.0
        await running.settle(svc.loop, clock, 299)
        assert svc.loop.state.phase[key] is JobState.RUNNING
        await running.settle(svc.loop, clock, 1)  # 200 s before, 400 s in this run
        assert key not in svc.loop.state.phase
        async with svc.db.read() as session:
            row = await job_rows.by_name(session, "team-a", "twice")
            assert row is not None and row.state == "Failed"
            assert "ran 10m" in (row.reason or "")
