"""A job's detail gives what ``describe`` shows: requests per pod set, start and run
times, and a message on every event."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from fleet.api.routes import run_times
from fleet.store.models import JobEventRow
from fleet.testing.documents import pytorchjob
from tests.admin.conftest import YAML, Api


async def test_a_running_job_shows_its_totals_start_and_run_time_and_worded_events(
    api: Api,
) -> None:
    text = pytorchjob("timed", workers=2, gpus=4, duration="1h")
    await api.call("POST", "/api/v1/submissions", data=text, headers=YAML, status=201)
    await api.settle()
    await api.settle(300)
    job = await api.call("GET", "/api/v1/jobs/team-a/timed", status=200)
    assert job["state"] == "Running"
    totals = {s["role"]: s["total"] for s in job["podSets"]}
    assert totals["Worker"]["nvidia.com/gpu"] == "8"
    assert job["firstStartedAt"] is not None and job["lastStartedAt"] == job["firstStartedAt"]
    assert 299.0 <= job["runTimeSeconds"] <= 301.0
    messages = {e["reason"]: e["message"] for e in job["events"]}
    assert all(messages.values()), messages
    assert messages["Admitted"].startswith("admitted to ")
    assert "in queue team-a: 8 GPUs" in messages["Admitted"]
    assert "2 pods, 8 GPUs" in messages["Dispatched"]
    assert messages["Running"].startswith("all 2 pods are running in cluster ")
    await api.settle(3600)
    done = await api.call("GET", "/api/v1/jobs/team-a/timed", status=200)
    assert done["state"] == "Succeeded"
    last = done["events"][-1]
    assert last["reason"] == "Succeeded" and last["message"].startswith(
        "succeeded after running 1h"
    )
    assert 3599.0 <= done["runTimeSeconds"] <= 3601.0


def _event(reason: str, time: float) -> JobEventRow:
    return cast(JobEventRow, SimpleNamespace(reason=reason, time=time, type="Normal"))


def test_run_time_adds_every_run_and_the_current_one_until_now() -> None:
    events: list[Any] = [
        _event("Queued", 0.0),
        _event("Admitted", 10.0),
        _event("Dispatched", 11.0),
        _event("Running", 20.0),
        _event("Preempted", 110.0),
        _event("Queued", 120.0),
        _event("Admitted", 200.0),
        _event("Grew", 210.0),
        _event("Running", 230.0),
    ]
    first, last, ran = run_times(events, now=260.0)
    assert (first, last) == (20.0, 230.0)
    assert ran == 100.0 + 60.0
    assert run_times(events[:1], now=50.0) == (None, None, 0.0)
