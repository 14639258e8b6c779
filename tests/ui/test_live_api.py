"""The API routes the dashboard reads: whoami, the change stream, cell maps, submitted documents."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import yaml
from aiohttp import web

from fleet.api.app import create_app
from fleet.clock import VirtualClock
from fleet.testing import running
from fleet.testing.documents import pytorchjob
from fleet.testing.tokens import bearer
from tests.admin.conftest import YAML, Api, Client


async def test_whoami_names_the_token_its_role_and_queues(api: Api) -> None:
    admin = await api.call("GET", "/api/v1/whoami", "admin", status=200)
    assert admin == {
        "name": "ops",
        "role": "admin",
        "queues": [],
        "namespaces": [],
        "tokensRequired": True,
    }
    team = await api.call("GET", "/api/v1/whoami", "team-a", status=200)
    assert team == {
        "name": "ci-a",
        "role": "team",
        "queues": ["team-a"],
        "namespaces": ["default", "team-a"],  # what team-a lists in the tree in force
        "tokensRequired": True,
    }
    resp = await api.client.get("/api/v1/whoami")
    assert resp.status == 401


async def test_whoami_without_tokens_is_the_anonymous_admin(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]], database_url: str
) -> None:
    app = create_app(running.settings(database_url), clock=VirtualClock(0.0))
    client = await aiohttp_client(app)
    body = await (await client.get("/api/v1/whoami")).json()
    assert body["role"] == "admin" and body["tokensRequired"] is False


async def _view(api: Api, after: int | None = None) -> dict[str, Any]:
    query = "" if after is None else f"?after={after}"
    body: dict[str, Any] = await api.call("GET", "/api/v1/events" + query, "team-b", status=200)
    return body


async def test_a_polling_client_learns_which_jobs_changed_since_its_version(api: Api) -> None:
    await api.settle()
    start = await _view(api)
    assert start["complete"] is True and start["jobs"] == []
    await api.call(
        "POST",
        "/api/v1/submissions",
        "admin",
        status=201,
        data=pytorchjob("a", gpus=1, duration="30s"),
        headers=YAML,
    )
    await api.settle()
    later = await _view(api, start["version"])
    assert later["version"] > start["version"]
    assert later["jobs"] == ["team-a/a"]
    assert later["complete"] is True
    unchanged = await _view(api, later["version"])
    assert unchanged["jobs"] == [] and unchanged["version"] == later["version"]
    await api.settle(31)
    done = await _view(api, later["version"])
    assert done["jobs"] == ["team-a/a"]  # it succeeded
    job = await api.call("GET", "/api/v1/jobs/team-a/a", status=200)
    assert job["state"] == "Succeeded"


async def test_a_version_the_service_never_published_asks_for_a_full_reload(api: Api) -> None:
    await api.settle()
    body = await _view(api, 10**9)
    assert body["complete"] is False and body["jobs"] == []
    bad = await api.client.get("/api/v1/events?after=-1", headers=bearer("admin"))
    assert bad.status == 400
    assert "after" in (await bad.json())["detail"]


async def _next_event(resp: Any) -> tuple[str, dict[str, Any]]:
    while True:
        block = (await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 10)).decode()
        fields = dict(
            line.split(": ", 1)
            for line in block.strip().splitlines()
            if not line.startswith(":") and ": " in line
        )
        if fields.get("event") == "view":
            return fields["id"], json.loads(fields["data"])


async def test_the_event_stream_sends_the_current_view_then_each_change(api: Api) -> None:
    await api.settle()
    headers = {**bearer("team-a"), "Accept": "text/event-stream"}
    resp = await api.client.get("/api/v1/events", headers=headers)
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    first_id, first = await _next_event(resp)
    assert int(first_id) == first["version"] and first["jobs"] == []
    await api.call(
        "POST",
        "/api/v1/submissions",
        "admin",
        status=201,
        data=pytorchjob("streamed", gpus=2),
        headers=YAML,
    )
    await api.settle()
    seen: set[str] = set()
    while "team-a/streamed" not in seen:
        event_id, change = await _next_event(resp)
        assert int(event_id) > int(first_id)
        seen.update(change["jobs"])
    resp.close()
    # Reconnecting with Last-Event-ID: what changed after that version.
    again = await api.client.get("/api/v1/events", headers={**headers, "Last-Event-ID": first_id})
    _, missed = await _next_event(again)
    assert "team-a/streamed" in missed["jobs"] and missed["complete"] is True
    again.close()


async def test_the_cell_map_shows_each_gpu_its_holder_and_bad_nodes(api: Api) -> None:
    await api.call(
        "POST",
        "/api/v1/submissions",
        "admin",
        status=201,
        data=pytorchjob("big", workers=2, gpus=4),
        headers=YAML,
    )
    await api.settle()
    job = await api.call("GET", "/api/v1/jobs/team-a/big", status=200)
    cluster = job["cluster"]
    cells = await api.call("GET", f"/api/v1/clusters/{cluster}/cells", "team-b", status=200)
    held = {(n["name"], c["index"]): c for n in cells["nodes"] for c in n["cells"] if c["job"]}
    placed = {(p["node"], g) for p in job["placement"] for g in p["gpus"]}
    assert set(held) == placed
    assert {c["job"] for c in held.values()} == {"team-a/big"}
    assert {(c["queue"], c["mode"], c["state"]) for c in held.values()} == {
        ("team-a", "guaranteed", "Running")
    }
    total = sum(len(n["cells"]) for n in cells["nodes"])
    assert cells["freeGpus"] == total - len(placed)
    assert cells["totalNodes"] == len(cells["nodes"])
    # Mark a free node bad: it shows as bad, with its reason, and its GPUs are not free.
    free_node = next(n for n in cells["nodes"] if not any(c["job"] for c in n["cells"]))
    await api.call(
        "PUT",
        f"/api/v1/clusters/{cluster}/nodes/{free_node['name']}/health",
        "admin",
        status=200,
        json={"healthy": False, "reason": "ECC errors"},
    )
    after = await api.call("GET", f"/api/v1/clusters/{cluster}/cells", status=200)
    bad = next(n for n in after["nodes"] if n["name"] == free_node["name"])
    assert bad["healthy"] is False and bad["reason"] == "ECC errors"
    assert after["freeGpus"] == cells["freeGpus"] - len(free_node["cells"])
    assert after["wholeFreeNodes"] == cells["wholeFreeNodes"] - 1


async def test_the_cell_map_is_paged_by_node(api: Api) -> None:
    first = await api.call("GET", "/api/v1/clusters/east/cells?limit=2", status=200)
    assert [n["name"] for n in first["nodes"]] == ["east-node-0", "east-node-1"]
    assert first["totalNodes"] == 3
    token = first["continue"]
    rest = await api.call(
        "GET", f"/api/v1/clusters/east/cells?limit=2&continue={token}", status=200
    )
    assert [n["name"] for n in rest["nodes"]] == ["east-node-2"] and rest.get("continue") is None
    for query, status in (("?limit=0", 400), ("?continue=x", 400), ("?limit=abc", 400)):
        await api.call("GET", f"/api/v1/clusters/east/cells{query}", status=status)
    await api.call("GET", "/api/v1/clusters/nowhere/cells", status=404)


async def test_submitted_documents_are_the_policy_and_the_job_for_their_queue(api: Api) -> None:
    await api.call(
        "POST", "/api/v1/submissions", "team-a", status=201, data=pytorchjob("docs"), headers=YAML
    )
    text = await api.call("GET", "/api/v1/jobs/team-a/docs/submitted", "team-a", status=200)
    kinds = [d["kind"] for d in yaml.safe_load_all(text)]
    assert kinds == ["PropagationPolicy", "PyTorchJob"]
    await api.call("GET", "/api/v1/jobs/team-a/docs/submitted", "admin", status=200)
    refused = await api.call("GET", "/api/v1/jobs/team-a/docs/submitted", "team-b", status=403)
    assert "team-a" in refused["detail"]
    await api.call("GET", "/api/v1/jobs/team-a/nothing/submitted", status=404)


async def test_the_openapi_document_describes_the_dashboard_routes(api: Api) -> None:
    doc = await api.call("GET", "/api/v1/openapi.json", status=200)
    paths = doc["paths"]
    assert "text/event-stream" in paths["/api/v1/events"]["get"]["responses"]["200"]["content"]
    assert "ViewChange" in doc["components"]["schemas"]
    assert "ClusterCells" in doc["components"]["schemas"]
    assert "/api/v1/whoami" in paths and "/api/v1/jobs/{namespace}/{name}/submitted" in paths
