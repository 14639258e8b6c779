"""Per-user limits through the service: the token's name, or on a server without
tokens the job's ``fleet.io/user`` label, hits the leaf's ``limits.perUser``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from fleet.api import keys
from fleet.api.app import create_app
from fleet.clock import VirtualClock
from fleet.testing import running
from fleet.testing.documents import pytorchjob
from tests.admin.conftest import YAML, Api, Client
from tests.admin.test_quota_admin import tree_with

CAPPED = tree_with(**{"team-a": {"limits": {"perUser": {"runningJobs": 1, "nvidia.com/gpu": 8}}}})


def labelled(name: str, user: str, gpus: int = 4) -> str:
    """:func:`pytorchjob` in team-a with the label ``fleet.io/user: USER``."""
    docs = list(yaml.safe_load_all(pytorchjob(name, gpus=gpus, duration="1h")))
    for doc in docs:
        if doc["kind"] == "PyTorchJob":
            doc["metadata"]["labels"] = {"fleet.io/user": user}
    return yaml.safe_dump_all(docs, sort_keys=False)


async def submit(api: Api, text: str, who: str = "admin") -> None:
    await api.call("POST", "/api/v1/submissions", who, data=text, headers=YAML, status=201)


async def team_a(api: Api) -> dict[str, Any]:
    queues = await api.call("GET", "/api/v1/queues", status=200)
    found: dict[str, Any] = next(q for q in queues["items"] if q["name"] == "team-a")
    return found


async def test_the_tokens_name_is_the_user_and_hits_its_cap(api: Api) -> None:
    await api.call("PUT", "/api/v1/quota-tree", data=CAPPED, headers=YAML, status=200)
    # The label names someone else: the token's name wins.
    await submit(api, labelled("a1", "mallory"), who="team-a")
    await submit(api, labelled("a2", "mallory"), who="team-a")
    await submit(api, labelled("o1", "mallory"), who="admin")
    await api.settle()
    first = await api.call("GET", "/api/v1/jobs/team-a/a1", status=200)
    second = await api.call("GET", "/api/v1/jobs/team-a/a2", status=200)
    other = await api.call("GET", "/api/v1/jobs/team-a/o1", status=200)
    assert (first["user"], first["state"]) == ("ci-a", "Running")
    assert (second["user"], second["state"]) == ("ci-a", "Queued")
    assert second["reason"] == (
        "user ci-a runs the most jobs queue team-a allows one user: 1 of 1 job running "
        "(limits.perUser.runningJobs)"
    )
    assert (other["user"], other["state"]) == ("ops", "Running")
    queue = await team_a(api)
    assert queue["perUser"] == {
        "limits": {"nvidia.com/gpu": "8", "runningJobs": "1"},
        "users": [
            {"user": "ci-a", "runningJobs": 1, "resources": {"nvidia.com/gpu": "4"}},
            {"user": "ops", "runningJobs": 1, "resources": {"nvidia.com/gpu": "4"}},
        ],
    }
    tree = await api.call("GET", "/api/v1/quota-tree", status=200)
    assert "perUser" in tree  # the stored tree keeps the limits as written
    others = [q for q in (await api.call("GET", "/api/v1/queues", status=200))["items"]]
    assert all("perUser" not in q for q in others if q["name"] != "team-a")


async def test_a_labelled_user_on_a_server_without_tokens_hits_its_gpu_cap(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]],
    database_url: str,
    tmp_path: Path,
) -> None:
    quota = tmp_path / "tree.yaml"
    quota.write_text(
        tree_with(**{"team-a": {"limits": {"perUser": {"nvidia.com/gpu": 8}}}}), encoding="utf-8"
    )
    clock = VirtualClock(1_000.0)
    settings = running.settings(
        database_url, clusters=running.POLICIES / "clusters" / "example.yaml", quota=quota
    )
    client = await aiohttp_client(create_app(settings, clock=clock))

    async def post(text: str) -> None:
        resp = await client.post("/api/v1/submissions", data=text, headers=YAML)
        assert resp.status == 201, await resp.text()

    for name, user in (("b1", "bob"), ("b2", "bob"), ("b3", "bob"), ("c1", "carol")):
        await post(labelled(name, user))
    await post(pytorchjob("n1", gpus=4, duration="1h"))
    await running.settle(client.app[keys.SERVICE].loop, clock, 0.0)
    states = {}
    for name in ("b1", "b2", "b3", "c1", "n1"):
        resp = await client.get(f"/api/v1/jobs/team-a/{name}")
        states[name] = await resp.json()
    assert {n: j["state"] for n, j in states.items()} == {
        "b1": "Running",
        "b2": "Running",
        "b3": "Queued",
        "c1": "Running",
        "n1": "Running",
    }
    assert states["b3"]["user"] == "bob" and "user" not in states["n1"]
    assert states["b3"]["reason"] == (
        "user bob's share of queue team-a is full: 8 of 8 GPUs held "
        "(limits.perUser.nvidia.com/gpu); this job needs 4"
    )
    resp = await client.get("/api/v1/queues/team-a")
    queue = await resp.json()
    assert [(u["user"], u["runningJobs"]) for u in queue["perUser"]["users"]] == [
        ("bob", 2),
        ("carol", 1),
    ]
