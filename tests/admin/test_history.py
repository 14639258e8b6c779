"""``GET /api/v1/history``: the samples the leader stores, readable by every token."""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from fleet.api import keys, routes
from fleet.core.view import LoopView, QueueView
from fleet.service.history import p95, samples
from fleet.testing.documents import pytorchjob
from tests.admin.conftest import YAML, Api


def test_a_sample_has_a_row_per_leaf_and_one_for_the_fleet() -> None:
    def leaf(name: str, gpus: str, admitted: int, pending: int) -> QueueView:
        used = {"nvidia.com/gpu": gpus} if gpus else {}
        return QueueView(name, "root", True, (name,), {}, None, used, {}, admitted, pending)

    root = QueueView("root", None, False, (), {}, None, {"nvidia.com/gpu": "12"}, {}, 3, 2)
    view = LoopView(ready=True, queues=(root, leaf("team-b", "4", 1, 2), leaf("team-a", "8", 2, 0)))
    waits = [("team-a", float(s)) for s in range(1, 21)] + [("team-b", 500.0)]
    rows = samples(view, waits)
    assert [r.queue for r in rows] == ["team-a", "team-b", ""]
    team_a, team_b, fleet = rows
    assert (team_a.gpus, team_a.running, team_a.pending, team_a.starts) == (8, 2, 0, 20)
    assert team_a.wait_p95 == 19.0  # nearest rank: the 19th of 20
    assert (team_b.gpus, team_b.wait_p95) == (4, 500.0)
    assert (fleet.gpus, fleet.running, fleet.pending, fleet.starts) == (12, 3, 2, 21)
    assert fleet.wait_p95 == 20.0
    assert p95([]) is None


async def test_the_history_of_the_queues_as_any_token_reads_it(
    api_with: Callable[..., Awaitable[Api]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Sampled by hand, one interval at a time (the sampler's own timer is checked below).
    api = await api_with(history_interval=0, history_retention=600.0, estimate_interval=0)
    sampler = api.client.app[keys.SAMPLER]
    await api.settle()
    assert await sampler.take()
    for i in range(2):
        await api.call(
            "POST",
            "/api/v1/submissions",
            "team-a",
            data=pytorchjob(f"big-{i}", namespace="team-a", gpus=8, duration="1h"),
            headers=YAML,
            status=201,
        )
    for _ in range(3):
        await api.settle(60.0)
        assert await sampler.take()
    found = await api.call("GET", "/api/v1/history?series=gpus", "team-b", status=200)
    assert found["unit"] == "GPUs" and found["retention"] == 600.0
    # Every token sees every queue, as GET /api/v1/queues shows them.
    assert found["queues"] == ["sandbox", "team-a", "team-b", "team-c"]
    assert len(found["points"]) == 4
    last = found["points"][-1]
    assert last["queues"]["team-a"] == 16.0 and last["queues"]["team-b"] == 0.0
    assert last["fleet"] == 16.0
    pending = await api.call("GET", "/api/v1/history?series=pending&since=60", status=200)
    assert len(pending["points"]) == 2  # the samples of the last minute, its ends included
    wait = await api.call("GET", "/api/v1/history?series=wait", "team-a", status=200)
    assert wait["unit"] == "seconds" and wait["points"][-1]["queues"]["team-a"] is not None
    # The retention: after 20 more minutes nothing older than 10 minutes is left.
    for _ in range(20):
        await api.settle(60.0)
        await sampler.take()
    kept = await api.call("GET", "/api/v1/history?series=running&since=3600", status=200)
    now = datetime.datetime.fromtimestamp(api.clock.now(), datetime.UTC)
    times = [datetime.datetime.fromisoformat(p["time"]) for p in kept["points"]]
    assert min(times) == now - datetime.timedelta(seconds=600)
    assert len(times) == 11
    assert kept["points"][-1]["queues"]["team-a"] == 2.0  # its two running jobs
    # A range of more samples than the answer holds is merged into stretches.
    monkeypatch.setattr(routes, "HISTORY_POINTS", 5)
    merged = await api.call("GET", "/api/v1/history?series=running&since=600", status=200)
    assert 5 <= len(merged["points"]) <= 6
    assert merged["points"][-1] == kept["points"][-1]  # the last stretch ends at the last one
    anonymous = await api.client.get("/api/v1/history?series=gpus")
    assert anonymous.status == 401
    bad = await api.call("GET", "/api/v1/history?series=cpu", status=400)
    assert "series must be" in bad["detail"]
    await api.call("GET", "/api/v1/history", status=400)


async def test_the_leader_samples_every_interval_on_its_own(
    api_with: Callable[..., Awaitable[Api]],
) -> None:
    api = await api_with(history_interval=60.0, estimate_interval=0)
    points: list[dict[str, Any]] = []
    for _ in range(40):  # a write takes real time while the virtual clock runs on
        await api.settle(30.0)
        found = await api.call("GET", "/api/v1/history?series=pending", "team-a", status=200)
        points = found["points"]
        if len(points) >= 2:
            break
    assert found["interval"] == 60.0
    assert len(points) >= 2
    assert set(points[-1]["queues"]) == {"sandbox", "team-a", "team-b", "team-c"}
