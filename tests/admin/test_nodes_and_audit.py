"""Node health over HTTP, the audit log, and what a team token may see."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from fleet.api import keys
from fleet.api.app import create_app
from fleet.clock import VirtualClock
from fleet.testing import running
from fleet.testing.documents import pytorchjob
from fleet.testing.tokens import write_tokens_file
from tests.admin.conftest import YAML, Api, Client


async def running_on(api: Api, name: str) -> str:
    await api.call(
        "POST",
        "/api/v1/submissions",
        data=pytorchjob(name, gpus=8, duration="1h"),
        headers=YAML,
        status=201,
    )
    await api.settle()
    job = await api.call("GET", f"/api/v1/jobs/team-a/{name}", status=200)
    assert job["state"] == "Running"
    return f"{job['cluster']}/{job['placement'][0]['node']}"


async def test_a_bad_node_preempts_its_jobs_which_run_again_elsewhere(api: Api) -> None:
    where = await running_on(api, "train")
    cluster, node = where.split("/")
    result = await api.call(
        "PUT",
        f"/api/v1/clusters/{cluster}/nodes/{node}/health",
        json={"healthy": False, "reason": "ECC errors"},
        status=200,
    )
    assert result["preempted"] == ["team-a/train"]
    clusters = await api.call("GET", "/api/v1/clusters", status=200)
    bad = {c["name"]: c["badNodes"] for c in clusters["items"]}
    assert bad[cluster] == [node]
    await api.settle()
    job = await api.call("GET", "/api/v1/jobs/team-a/train", status=200)
    reasons = [(e["reason"], e["message"]) for e in job["events"]]
    assert ("Preempted", f"node {node} of {cluster} went bad: ECC errors") in reasons
    assert job["state"] == "Running"
    assert job["placement"][0]["node"] != node
    await api.call(
        "PUT", f"/api/v1/clusters/{cluster}/nodes/{node}/health", json={"healthy": True}, status=200
    )
    clusters = await api.call("GET", "/api/v1/clusters", status=200)
    assert {c["name"]: c["badNodes"] for c in clusters["items"]}[cluster] == []


async def test_node_health_refuses_what_it_cannot_use(api: Api) -> None:
    base = "/api/v1/clusters/east/nodes"
    await api.call("PUT", f"{base}/nope/health", json={"healthy": False}, status=404)
    await api.call(
        "PUT", "/api/v1/clusters/nope/nodes/x/health", json={"healthy": False}, status=404
    )
    bad = await api.call("PUT", f"{base}/east-node-0/health", json={"healthy": "no"}, status=422)
    assert bad["errors"][0]["path"] == "healthy"
    extra = await api.call(
        "PUT", f"{base}/east-node-0/health", json={"healthy": True, "x": 1}, status=422
    )
    assert extra["errors"][0]["path"] == "x"
    await api.call(
        "PUT",
        f"{base}/east-node-0/health",
        data=b"[",
        headers={"Content-Type": "application/json"},
        status=400,
    )
    await api.call(
        "PUT",
        f"{base}/east-node-0/health",
        data=b"healthy: true",
        headers=YAML,
        status=415,
    )


async def test_every_write_is_audited_with_its_caller_and_outcome(api: Api) -> None:
    await api.call(
        "POST", "/api/v1/submissions", data=pytorchjob("x"), headers=YAML, status=201, who="team-a"
    )
    await api.call(
        "POST", "/api/v1/submissions", data=pytorchjob("y"), headers=YAML, status=403, who="team-b"
    )
    await api.call("DELETE", "/api/v1/jobs/team-a/x", status=202, who="team-a")
    await api.call(
        "PATCH", "/api/v1/quota-tree/nodes/team-a", json={"max": None}, status=403, who="team-b"
    )
    await api.call("PATCH", "/api/v1/quota-tree/nodes/team-a", json={"min": None}, status=200)
    await api.call("GET", "/api/v1/jobs", status=200)  # reads are not audited
    log = await api.call("GET", "/api/v1/audit", status=200)
    rows = [(r["actor"], r["kind"], r["method"], r["status"]) for r in log["items"]]
    assert rows == [
        ("ops", "quota-tree", "PATCH", 200),
        ("ci-b", "quota-tree", "PATCH", 403),
        ("ci-a", "cancel", "DELETE", 202),
        ("ci-b", "submission", "POST", 403),
        ("ci-a", "submission", "POST", 201),
    ]
    assert "acts only in the namespaces of its queues (team-b)" in log["items"][3]["detail"]
    only = await api.call("GET", "/api/v1/audit?actor=ci-b", status=200)
    assert [r["kind"] for r in only["items"]] == ["quota-tree", "submission"]
    kind = await api.call("GET", "/api/v1/audit?kind=submission&limit=1", status=200)
    assert [r["actor"] for r in kind["items"]] == ["ci-b"]
    rest = await api.call(
        "GET", f"/api/v1/audit?kind=submission&limit=1&continue={kind['continue']}", status=200
    )
    assert [r["actor"] for r in rest["items"]] == ["ci-a"] and rest["continue"] is None
    await api.call("GET", "/api/v1/audit?kind=nope", status=400)
    await api.call("GET", "/api/v1/audit?continue=garbage", status=400)


async def test_a_submission_is_audited_once_with_the_status_of_its_answer(api: Api) -> None:
    # Stored by the intake with the decision (201, 200, 409), by the middleware
    # when refused before it (422): one record each, there when the answer is.
    audit = api.client.app[keys.AUDIT]
    by_middleware: list[int] = []
    record = audit.record

    async def spy(values: dict[str, Any]) -> None:
        by_middleware.append(values["status"])
        await record(values)

    audit.record = spy  # type: ignore[method-assign]
    first = pytorchjob("same", gpus=1)
    await api.call("POST", "/api/v1/submissions", data=first, headers=YAML, status=201)
    await api.call("POST", "/api/v1/submissions", data=first, headers=YAML, status=200)
    other = pytorchjob("same", gpus=2)
    await api.call("POST", "/api/v1/submissions", data=other, headers=YAML, status=409)
    await api.call("POST", "/api/v1/submissions", data="kind: [", headers=YAML, status=422)
    log = await api.call("GET", "/api/v1/audit?kind=submission", status=200)
    rows = [(r["actor"], r["method"], r["path"], r["status"]) for r in log["items"]]
    assert rows == [("ops", "POST", "/api/v1/submissions", s) for s in (422, 409, 200, 201)]
    assert "team-a/same exist already with another spec" in log["items"][1]["detail"]
    assert log["items"][2]["detail"] == log["items"][3]["detail"] == ""
    assert all(r["operation"] == "submitJobs" for r in log["items"]), log["items"]
    assert by_middleware == [422]  # the others went in the intake's own transactions


async def test_a_team_token_sees_events_only_of_its_own_queues(api: Api) -> None:
    await api.call("POST", "/api/v1/submissions", data=pytorchjob("z"), headers=YAML, status=201)
    await api.settle()
    own = await api.call("GET", "/api/v1/jobs/team-a/z", status=200, who="team-a")
    other = await api.call("GET", "/api/v1/jobs/team-a/z", status=200, who="team-b")
    assert own["events"] and other["events"] == []
    assert other["state"] == own["state"]


async def test_a_bad_node_and_a_drain_survive_a_restart(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]],
    database_url: str,
    tmp_path: Path,
) -> None:
    clock = VirtualClock(1_000.0)
    settings = running.settings(database_url, tokens_file=write_tokens_file(tmp_path / "t.yaml"))
    first = Api(await aiohttp_client(create_app(settings, clock=clock)), clock)
    await first.settle()
    await first.call(
        "PUT",
        "/api/v1/clusters/east/nodes/east-node-1/health",
        json={"healthy": False, "reason": "fan"},
        status=200,
    )
    await first.call("DELETE", "/api/v1/clusters/west", status=202)
    await first.settle()
    await first.client.close()

    second = Api(await aiohttp_client(create_app(settings, clock=clock)), clock)
    await second.settle()
    listing = await second.call("GET", "/api/v1/clusters", status=200)
    by_name = {c["name"]: c for c in listing["items"]}
    assert by_name["east"]["badNodes"] == ["east-node-1"]
    assert "west" not in by_name  # it ran nothing: drained and removed
    loop = second.client.app[keys.SERVICE].loop
    assert loop.state.placers["east"].capacity()["nvidia.com/gpu"] == 16  # 3 nodes, 1 bad
