"""A reclaim through the HTTP API: the victim's detail and events say who, why and through
which quota, and ``/metrics`` counts it, with the quota's figures and why jobs wait."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from fleet.api import keys
from fleet.api.app import create_app
from fleet.clock import VirtualClock
from fleet.core import waiting
from fleet.testing import running
from fleet.testing.documents import pytorchjob
from fleet.testing.running import settings

Client = TestClient[web.Request, web.Application]
YAML = {"Content-Type": "application/yaml"}
GPU = "nvidia.com/gpu"


@pytest.fixture
async def api(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]], database_url: str
) -> AsyncIterator[tuple[Client, VirtualClock]]:
    clock = VirtualClock(1_000.0)
    app = create_app(settings(database_url), clock=clock)
    client = await aiohttp_client(app)
    yield client, clock


async def settle(client: Client, clock: VirtualClock, seconds: float = 0.0) -> None:
    await running.settle(client.app[keys.SERVICE].loop, clock, seconds)


async def ok(resp: Any, status: int = 200) -> Any:
    body = await resp.json()
    assert resp.status == status, body
    return body


async def metrics(client: Client) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = await (await client.get("/metrics")).text()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    found = [v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= set(ls)]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else 0.0


async def test_a_reclaim_shows_in_the_victims_detail_events_and_metrics(
    api: tuple[Client, VirtualClock],
) -> None:
    client, clock = api
    # team-b (min 16, max 48) takes the whole 48-GPU fleet, 32 GPUs of it borrowed.
    borrowers = "---\n".join(
        pytorchjob(f"b{i}", namespace="team-b", gpus=8, duration="10h") for i in range(6)
    )
    await ok(await client.post("/api/v1/submissions", data=borrowers, headers=YAML), 201)
    await settle(client, clock)
    jobs = (await ok(await client.get("/api/v1/jobs?namespace=team-b")))["items"]
    assert {j["state"] for j in jobs} == {"Running"}, jobs
    # team-a asks for 8 GPUs of its own min: a borrowed team-b job is reclaimed.
    claim = pytorchjob("claim", namespace="team-a", gpus=8, duration="10h")
    await ok(await client.post("/api/v1/submissions", data=claim, headers=YAML), 201)
    await settle(client, clock)
    await settle(client, clock, 5)

    jobs = (await ok(await client.get("/api/v1/jobs?namespace=team-b")))["items"]
    victims = [j["name"] for j in jobs if j["state"] in ("Preempted", "Queued")]
    assert len(victims) == 1, jobs
    victim = await ok(await client.get(f"/api/v1/jobs/team-b/{victims[0]}"))
    (record,) = victim["preemptions"]
    assert record["preemptor"] == "team-a/claim"
    assert record["reason"] == "Reclaim"
    assert record["quotaPath"] == ["team-b", "research", "team-a"]
    assert record["time"].startswith("1970-01-01T00:16:40")  # the virtual clock's 1000 s
    message = record["message"]
    assert "reclaimed for team-a/claim" in message
    assert "Reclaim" in message and "team-b > research > team-a" in message
    preempted = [e for e in victim["events"] if e["reason"] == "Preempted"]
    assert [e["message"] for e in preempted] == [message]
    claimed = await ok(await client.get("/api/v1/jobs/team-a/claim"))
    assert claimed["state"] == "Running" and claimed["preemptions"] == []

    samples = await metrics(client)
    assert value(samples, "fleet_preempted_workloads_total", queue="team-b", reason="Reclaim") == 1
    assert value(samples, "fleet_cluster_queue_nominal_quota", queue="team-a", resource=GPU) == 16
    assert value(samples, "fleet_cluster_queue_nominal_quota", queue="sandbox", resource=GPU) == 0
    assert value(samples, "fleet_cluster_queue_borrowing_limit", queue="team-a", resource=GPU) == 16
    assert value(samples, "fleet_cluster_queue_borrowing_limit", queue="team-b", resource=GPU) == 32
    assert value(samples, "fleet_cluster_queue_borrowing_limit", queue="root", resource=GPU) == 0
    unadmitted = {
        dict(labels)["reason"]: v
        for (name, labels), v in samples.items()
        if name == "fleet_unadmitted_workloads"
    }
    assert set(unadmitted) == set(waiting.CATEGORIES)
    view = client.app[keys.SERVICE].loop.view
    assert sum(unadmitted.values()) == sum(len(p) for p in view.pending.values())
    # Fair share (no memory in the shipped tree): team-b holds 48 over a min of 16.
    assert value(samples, "fleet_cluster_queue_weighted_share", queue="team-b") == 40 / 16
    assert value(samples, "fleet_cluster_queue_weighted_share", queue="team-a") == 8 / 16
    assert not [name for name, _ in samples if name == "fleet_cluster_queue_decayed_usage"]
