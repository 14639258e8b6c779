"""Start-time estimates: the simulator run forward from a live service's state."""

from __future__ import annotations

import datetime
import os
import signal
from collections.abc import AsyncIterator
from concurrent.futures.process import BrokenProcessPool
from contextlib import asynccontextmanager
from typing import Any

import pytest
import yaml

from fleet.api import keys
from fleet.api.app import create_app
from fleet.cli import remote
from fleet.cli.main import main
from fleet.clock import VirtualClock
from fleet.service.settings import POLICIES
from fleet.service.wiring import Service
from fleet.sim import forecast
from fleet.sim.worker import ForecastWorker, reachable_from_another_process
from fleet.store import jobs as job_rows
from fleet.testing import running
from fleet.testing.documents import pytorchjob
from fleet.testing.running import new_jobs, running_service

T0 = 1000.0
YAML = {"Content-Type": "application/yaml"}


def job(
    name: str, *, gpus: int, run: str, expected: str | None = None, queue: str | None = None
) -> str:
    """A lab job of ``gpus`` 1-GPU workers that runs ``run`` and declares ``expected``."""
    docs = list(
        yaml.safe_load_all(
            pytorchjob(
                name,
                namespace="lab-vc1" if queue == "vc1" else "lab",
                workers=gpus,
                gpus=1,
                duration=run,
                queue=queue,
            )
        )
    )
    if expected is not None:
        docs[1]["metadata"]["annotations"]["fleet.io/expected-duration"] = expected
    return yaml.safe_dump_all(docs)


@asynccontextmanager
async def lab_service(database_url: str) -> AsyncIterator[tuple[Service, VirtualClock]]:
    """The service on lab-2's two GPUs and a clock at T0; stopped when the block ends."""
    clock = VirtualClock(T0)
    settings = running.settings(
        database_url,
        clusters=POLICIES / "clusters" / "lab-2.yaml",
        quota=POLICIES / "lab" / "quota-one-vc.yaml",
    )
    async with running_service(settings, clock) as svc:
        yield svc, clock


async def submit(svc: Service, text: str) -> None:
    await svc.intake.accept(new_jobs(text, svc.tree, svc.clusters))


async def run_until(svc: Service, clock: VirtualClock, t: float) -> None:
    """Move the clock to ``t`` one deadline at a time, letting the loop settle at each."""
    while clock.now() < t:
        deadline = clock.next_deadline()
        step = t if deadline is None else min(deadline, t)
        await running.settle(svc.loop, clock, step - clock.now())


async def started_at(svc: Service, name: str) -> float:
    async with svc.db.read() as session:
        row = await job_rows.by_name(session, "lab", name)
        assert row is not None
        events = await job_rows.events_of(session, row.id)
    return next(e.time for e in events if e.reason == "Running")


async def test_estimates_match_the_starts_of_a_scenario_worked_out_by_hand(
    database_url: str,
) -> None:
    async with lab_service(database_url) as (svc, clock):
        # Two GPUs.  a (1h) and b (30m) run; the gang c needs both GPUs; d needs one.
        await submit(svc, job("a", gpus=1, run="1h", expected="1h"))
        await submit(svc, job("b", gpus=1, run="30m", expected="30m"))
        await submit(svc, job("c", gpus=2, run="10m", expected="10m"))
        await submit(svc, job("d", gpus=1, run="20m", expected="20m"))
        await running.settle(svc.loop, clock)
        tree, clusters = (
            svc.tree_document,
            "\n---\n".join(
                yaml.safe_dump(c.model_dump(mode="json", by_alias=True, exclude_none=True))
                for c in svc.clusters
            ),
        )
        result = await forecast.forecast(svc.db, tree, clusters, clock.now())
        # b ends at 30m and d takes its GPU (c does not fit one GPU); a ends at 1h
        # and d at 50m, so c starts at 1h with both GPUs.
        assert {k: e.start for k, e in result.estimates.items()} == {
            "lab/c": T0 + 3600,
            "lab/d": T0 + 1800,
        }
        assert result.estimates["lab/c"].assumes == "runs 10m (fleet.io/expected-duration)"
        assert result.preempted == {}
        # The live service then does what the forecast said.
        await run_until(svc, clock, T0 + 3601)
        assert await started_at(svc, "d") == T0 + 1800
        assert await started_at(svc, "c") == T0 + 3600


async def test_without_a_declared_duration_the_queues_median_run_is_assumed(
    database_url: str,
) -> None:
    async with lab_service(database_url) as (svc, clock):
        for name in ("h1", "h2", "h3"):
            await submit(svc, job(name, gpus=2, run="20m"))
        await running.settle(svc.loop, clock)
        await run_until(svc, clock, T0 + 3 * 1200 + 1)  # all three ran 20m each
        await submit(svc, job("long", gpus=2, run="2h"))  # no expected-duration: 20m assumed
        await submit(svc, job("next", gpus=1, run="5m", expected="5m"))
        await running.settle(svc.loop, clock)
        tree = svc.tree_document
        clusters = (POLICIES / "clusters" / "lab-2.yaml").read_text(encoding="utf-8")
        now = clock.now()
        result = await forecast.forecast(svc.db, tree, clusters, now)
        assert result.estimates["lab/next"].start == now + 1200
        assert result.estimates["lab/next"].assumes == "runs 5m (fleet.io/expected-duration)"
        nothing = await forecast.forecast(svc.db, tree, clusters, now, horizon=600)
        assert nothing.estimates["lab/next"].start is None  # beyond the horizon


@pytest.mark.parametrize("estimate_process", [True, False], ids=["process", "thread"])
async def test_the_api_shows_estimated_starts_with_their_assumptions(
    aiohttp_client: Any, database_url: str, estimate_process: bool
) -> None:
    clock = VirtualClock(T0)
    settings = running.settings(
        database_url,
        clusters=POLICIES / "clusters" / "lab-2.yaml",
        quota=POLICIES / "lab" / "quota-one-vc.yaml",
        estimate_interval=0,  # refreshed by hand below
        estimate_process=estimate_process,
    )
    client = await aiohttp_client(create_app(settings, clock=clock))
    svc = client.app[keys.SERVICE]
    text = job("a", gpus=2, run="1h", expected="1h") + "---\n" + job("b", gpus=1, run="5m")
    resp = await client.post("/api/v1/submissions", data=text, headers=YAML)
    assert resp.status == 201, await resp.text()
    await running.settle(svc.loop, clock)
    detail = await (await client.get("/api/v1/jobs/lab/b")).json()
    assert detail["state"] == "Queued" and detail["estimatedStart"] is None  # no forecast yet
    await client.app[keys.ESTIMATOR].refresh()
    detail = await (await client.get("/api/v1/jobs/lab/b")).json()
    estimate = detail["estimatedStart"]
    assert datetime.datetime.fromisoformat(estimate["time"]).timestamp() == T0 + 3600
    assert estimate["assumes"].startswith("runs 1h (no duration declared, no history); ")
    assert "no new submissions" in estimate["assumes"]
    queue = await (await client.get("/api/v1/queues/default")).json()
    assert [p["estimatedStart"]["time"] for p in queue["pending"]] == [estimate["time"]]
    started = await (await client.get("/api/v1/jobs/lab/a")).json()
    assert started["state"] == "Running" and started["estimatedStart"] is None
    worker = client.app[keys.ESTIMATOR].worker
    assert (worker is not None) == estimate_process
    if worker is not None:  # the forecast ran in a process of its own, stopped with the app
        (pid,) = worker.pids()
        assert pid != os.getpid()
        await client.close()
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


async def dry_run_client(
    aiohttp_client: Any, database_url: str, estimate_process: bool = False
) -> Any:
    """lab-1 with quota-two-vcs: vc1 (at most 1 GPU) runs vc1-0 and holds vc1-1 back."""
    clock = VirtualClock(T0)
    settings = running.settings(
        database_url,
        clusters=POLICIES / "clusters" / "lab-1.yaml",
        quota=POLICIES / "lab" / "quota-two-vcs.yaml",
        estimate_interval=0,
        estimate_process=estimate_process,
    )
    client = await aiohttp_client(create_app(settings, clock=clock))
    text = "---\n".join(
        job(n, gpus=1, run="1h", expected="1h", queue="vc1") for n in ("vc1-0", "vc1-1")
    )
    resp = await client.post("/api/v1/submissions", data=text, headers=YAML)
    assert resp.status == 201, await resp.text()
    await running.settle(client.app[keys.SERVICE].loop, clock)
    return client


@pytest.mark.parametrize("estimate_process", [True, False], ids=["process", "thread"])
async def test_a_dry_run_of_a_tree_that_lets_vc1_borrow_starts_its_job_sooner(
    aiohttp_client: Any, database_url: str, estimate_process: bool
) -> None:
    client = await dry_run_client(aiohttp_client, database_url, estimate_process)
    proposed = (POLICIES / "lab" / "quota-two-vcs-borrowing.yaml").read_text(encoding="utf-8")
    resp = await client.post("/api/v1/quota-tree?dryRun=Simulate", data=proposed, headers=YAML)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    (change,) = body["jobs"]
    assert change["job"] == "lab-vc1/vc1-1" and change["change"] == "sooner"
    assert datetime.datetime.fromisoformat(change["current"]).timestamp() == T0 + 3600
    assert datetime.datetime.fromisoformat(change["proposed"]).timestamp() == T0
    assert body["queues"] == [
        {"name": "vc1", "currentWaitSeconds": 3600.0, "proposedWaitSeconds": 0.0}
    ]
    assert body["preempted"] == []
    tree = await client.get("/api/v1/quota-tree")
    assert "max: {nvidia.com/gpu: 1}" in await tree.text()  # nothing was applied


async def test_a_dry_run_refuses_what_it_cannot_simulate(
    aiohttp_client: Any, database_url: str
) -> None:
    client = await dry_run_client(aiohttp_client, database_url)
    tree = (POLICIES / "lab" / "quota-two-vcs-borrowing.yaml").read_text(encoding="utf-8")
    resp = await client.post("/api/v1/quota-tree", data=tree, headers=YAML)
    assert resp.status == 400
    assert "dryRun=Simulate" in (await resp.json())["detail"]
    bad = tree.replace("max: {nvidia.com/gpu: 2}", "max: {nvidia.com/gpu: x}")
    resp = await client.post("/api/v1/quota-tree?dryRun=Simulate", data=bad, headers=YAML)
    assert resp.status == 422
    assert resp.content_type == "application/problem+json"
    assert any("max" in e["path"] for e in (await resp.json())["errors"])
    without_vc1 = (POLICIES / "lab" / "quota-one-vc.yaml").read_text(encoding="utf-8")
    resp = await client.post("/api/v1/quota-tree?dryRun=Simulate", data=without_vc1, headers=YAML)
    assert resp.status == 422
    assert "no leaf for the queue of job(s) lab-vc1/vc1-0 (vc1)" in (await resp.json())["detail"]
    resp = await client.post(
        "/api/v1/quota-tree?dryRun=Simulate&horizon=5", data=tree, headers=YAML
    )
    assert resp.status == 400


async def test_the_estimator_refreshes_only_after_the_live_state_changed() -> None:
    clock = VirtualClock(T0)
    calls: list[float] = []
    state = {"version": 1}

    async def fake(db: Any, tree: str, clusters: str, now: float) -> forecast.Forecast:
        calls.append(now)
        return forecast.Forecast(now, 3600.0)

    estimator = forecast.Estimator(
        db=None,  # type: ignore[arg-type]  # the fake forecast does not read it
        clock=clock,
        documents=lambda: ("tree", "clusters"),
        interval=30.0,
        changed=lambda: state["version"],
        run=fake,
    )
    estimator.start()
    try:
        await clock.advance(0)
        assert calls == [T0]
        await clock.advance(60)  # nothing changed: no new forecast
        assert calls == [T0]
        state["version"] = 2
        await clock.advance(30)
        assert calls == [T0, T0 + 90]
        assert estimator.latest == forecast.Forecast(T0 + 90, 3600.0)
    finally:
        await estimator.stop()


async def test_after_a_long_forecast_the_next_waits_until_forecasts_take_a_tenth() -> None:
    clock = VirtualClock(T0)
    calls: list[float] = []

    async def slow(db: Any, tree: str, clusters: str, now: float) -> forecast.Forecast:
        calls.append(now)
        await clock.sleep(10)  # each forecast takes 10 s of the service's time
        return forecast.Forecast(now, 3600.0)

    estimator = forecast.Estimator(
        db=None,  # type: ignore[arg-type]  # the fake forecast does not read it
        clock=clock,
        documents=lambda: ("tree", "clusters"),
        interval=30.0,
        run=slow,  # no change marker: every turn refreshes
    )
    estimator.start()
    try:
        await clock.advance(0)
        await clock.advance(200)
        # 10 s forecasting, then 90 s waiting (not the 30 s interval): 10 % of the time
        assert calls == [T0, T0 + 100, T0 + 200]
    finally:
        await estimator.stop()


def test_describe_job_prints_the_estimated_start_and_its_assumptions(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    job_doc = {
        "name": "b",
        "namespace": "lab",
        "state": "Queued",
        "placement": [],
        "events": [],
        "estimatedStart": {
            "time": "2026-01-01T01:00:00Z",
            "assumes": "runs 5m (fleet.io/expected-duration); no new submissions",
            "computedAt": "2026-01-01T00:00:00Z",
        },
    }
    monkeypatch.setattr(remote, "request", lambda *a, **k: (200, job_doc))
    half_past = datetime.datetime(2026, 1, 1, 0, 30, tzinfo=datetime.UTC).timestamp()
    monkeypatch.setattr(remote.time, "time", lambda: half_past)
    assert main(["describe", "job", "lab/b", "--server", "http://fleet.invalid"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        "Estimated start: in 30m (at 01:00 UTC; "
        "assumes runs 5m (fleet.io/expected-duration); no new submissions; computed 30m ago)"
    ) in lines


async def test_a_forecast_in_the_worker_process_is_the_forecast_made_in_a_thread(
    database_url: str,
) -> None:
    async with lab_service(database_url) as (svc, clock):
        worker = ForecastWorker()
        try:
            await submit(svc, job("a", gpus=1, run="1h", expected="1h"))
            await submit(svc, job("b", gpus=1, run="30m", expected="30m"))
            await submit(svc, job("c", gpus=2, run="10m", expected="10m"))
            await submit(svc, job("d", gpus=1, run="20m"))
            await running.settle(svc.loop, clock)
            tree = svc.tree_document
            clusters = (POLICIES / "clusters" / "lab-2.yaml").read_text(encoding="utf-8")
            here = await forecast.forecast(svc.db, tree, clusters, clock.now())
            assert not worker.pids()  # started by the first forecast
            there = await forecast.forecast(svc.db, tree, clusters, clock.now(), worker=worker)
            assert there == here
            assert there.estimates["lab/d"].assumes == "runs 1h (no duration declared, no history)"
            assert there.estimates["lab/c"].start is not None
            (pid,) = worker.pids()
            assert pid != os.getpid()
            # The process is reused, and stopped with the worker.
            again = await forecast.forecast(svc.db, tree, clusters, clock.now(), worker=worker)
            assert again == here
            assert worker.pids() == [pid] and worker.started == 1
            worker.close()
            assert not worker.pids()
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
        finally:
            worker.close()


async def test_a_worker_process_that_died_is_replaced_by_the_next_forecast(
    database_url: str,
) -> None:
    async with lab_service(database_url) as (svc, clock):
        worker = ForecastWorker()
        try:
            await submit(svc, job("a", gpus=2, run="1h", expected="1h"))
            await submit(svc, job("b", gpus=1, run="5m", expected="5m"))
            await running.settle(svc.loop, clock)
            tree = svc.tree_document
            clusters = (POLICIES / "clusters" / "lab-2.yaml").read_text(encoding="utf-8")
            first = await forecast.forecast(svc.db, tree, clusters, clock.now(), worker=worker)
            assert first.estimates["lab/b"].start == T0 + 3600
            (pid,) = worker.pids()
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(BrokenProcessPool):
                await forecast.forecast(svc.db, tree, clusters, clock.now(), worker=worker)
            again = await forecast.forecast(svc.db, tree, clusters, clock.now(), worker=worker)
            assert again == first
            assert worker.started == 2 and worker.pids() != [pid]
        finally:
            worker.close()


def test_only_a_database_another_process_can_open_is_forecast_in_the_worker() -> None:
    assert reachable_from_another_process("sqlite+aiosqlite:///./fleet.db")
    assert reachable_from_another_process("postgresql+asyncpg://u@h:5432/fleet")
    assert not reachable_from_another_process("sqlite+aiosqlite://")
    assert not reachable_from_another_process("sqlite+aiosqlite:///:memory:")


async def test_a_job_queued_by_suspension_scheduling_gets_an_estimate_never_in_the_past(
    aiohttp_client: Any, database_url: str
) -> None:
    """ACK One's ``suspension.scheduling: true`` queues a job: it is estimated as any
    other; once its estimated start has passed it is overdue, starting now, with a range
    reaching past now, never a time in the past."""
    clock = VirtualClock(T0)
    settings = running.settings(
        database_url,
        clusters=POLICIES / "clusters" / "lab-2.yaml",
        quota=POLICIES / "lab" / "quota-one-vc.yaml",
        estimate_interval=0,
    )
    client = await aiohttp_client(create_app(settings, clock=clock))
    svc = client.app[keys.SERVICE]
    queued = list(yaml.safe_load_all(job("b", gpus=1, run="5m")))
    queued[0]["spec"]["suspension"] = {"scheduling": True}
    # a declares 1 h but runs 2 h
    text = job("a", gpus=2, run="2h", expected="1h") + "---\n" + yaml.safe_dump_all(queued)
    resp = await client.post("/api/v1/submissions", data=text, headers=YAML)
    assert resp.status == 201, await resp.text()
    await running.settle(svc.loop, clock)
    await client.app[keys.ESTIMATOR].refresh()
    detail = await (await client.get("/api/v1/jobs/lab/b")).json()
    assert detail["suspended"] is False
    estimate = detail["estimatedStart"]
    assert datetime.datetime.fromisoformat(estimate["time"]).timestamp() == T0 + 3600
    assert estimate["declared"] is False  # b's own run time is not declared
    assert not estimate["overdue"]
    earliest = datetime.datetime.fromisoformat(estimate["earliest"]).timestamp()
    latest = datetime.datetime.fromisoformat(estimate["latest"]).timestamp()
    assert T0 <= earliest <= T0 + 3600 <= latest
    await running.settle(svc.loop, clock, 3600 + 600)  # a runs on past its declaration
    detail = await (await client.get("/api/v1/jobs/lab/b")).json()
    assert detail["state"] == "Queued"
    shown = detail["estimatedStart"]
    now = T0 + 4200
    assert shown["overdue"] is True
    assert datetime.datetime.fromisoformat(shown["time"]).timestamp() == now
    assert datetime.datetime.fromisoformat(shown["latest"]).timestamp() > now
    await client.app[keys.ESTIMATOR].refresh()  # a is now expected to run on
    again = (await (await client.get("/api/v1/jobs/lab/b")).json())["estimatedStart"]
    assert datetime.datetime.fromisoformat(again["time"]).timestamp() > now
    assert again["overdue"] is False
