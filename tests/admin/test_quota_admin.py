"""Quota tree administration over HTTP: PUT, PATCH, dryRun, history, and work in flight."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import yaml
from aiohttp import web

from fleet.api import keys
from fleet.api.app import create_app
from fleet.clock import VirtualClock
from fleet.service.settings import POLICIES
from fleet.testing import running
from fleet.testing.documents import pytorchjob
from fleet.testing.tokens import write_tokens_file
from tests.admin.conftest import YAML, Api, Client

TREE = (POLICIES / "quota" / "team-tree.yaml").read_text(encoding="utf-8")


def tree_with(**changes: dict[str, object]) -> str:
    """The example tree with some leaves' fields replaced (None deletes the leaf)."""
    doc = yaml.safe_load(TREE)

    def walk(node: dict[str, object]) -> None:
        kids = node.get("children") or []
        assert isinstance(kids, list)
        kept = []
        for child in kids:
            change = changes.get(child["name"], {})
            if change is None:
                continue
            child.update(change)
            walk(child)
            kept.append(child)
        if kids:
            node["children"] = kept

    walk(doc["spec"]["root"])
    return yaml.safe_dump(doc, sort_keys=False)


async def run_team_a(api: Api, *names: str, gpus: int = 8) -> None:
    for name in names:
        await api.call(
            "POST",
            "/api/v1/submissions",
            data=pytorchjob(name, gpus=gpus, duration="1h"),
            headers=YAML,
            status=201,
        )
    await api.settle()
    for name in names:
        job = await api.call("GET", f"/api/v1/jobs/team-a/{name}", status=200)
        assert job["state"] == "Running", job


async def test_a_broken_tree_lists_every_error_and_changes_nothing(api: Api) -> None:
    broken = tree_with(
        **{
            "team-a": {"min": {"nvidia.com/gpu": 40}, "max": {"nvidia.com/gpu": 32}},
            "team-b": {"namespaces": ["team-a"]},
        }
    )
    problem = await api.call("PUT", "/api/v1/quota-tree", data=broken, headers=YAML, status=422)
    messages = [e["message"] for e in problem["errors"]]
    paths = [e["path"] for e in problem["errors"]]
    assert len(problem["errors"]) >= 3, messages
    assert any("min" in m and "above max" in m for m in messages), messages
    assert any("already belongs" in m for m in messages), messages
    assert all(p.startswith("spec.root") for p in paths), paths
    assert await api.call("GET", "/api/v1/quota-tree", status=200) == TREE
    history = await api.call("GET", "/api/v1/quota-tree/history", status=200)
    assert [v["version"] for v in history["items"]] == [1]


async def test_a_cut_keeps_running_jobs_blocks_the_queue_and_is_a_new_version(api: Api) -> None:
    await run_team_a(api, "a1", "a2", "a3")  # 24 GPUs
    cut = tree_with(**{"team-a": {"min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 8}}})
    preview = await api.call(
        "PUT", "/api/v1/quota-tree?dryRun=All", data=cut, headers=YAML, status=200
    )
    assert preview["dryRun"] is True and preview["version"] is None
    over = {(o["node"], o["limit"]): o for o in preview["overLimit"]}
    assert over["team-a", "max"]["used"] == "24" and over["team-a", "max"]["allowed"] == "8"
    assert over["team-a", "max"]["reclaimable"] == ["team-a/a3", "team-a/a2"]
    assert await api.call("GET", "/api/v1/quota-tree", status=200) == TREE  # unchanged

    done = await api.call("PUT", "/api/v1/quota-tree", data=cut, headers=YAML, status=200)
    assert done["dryRun"] is False and done["version"] == 2
    assert await api.call("GET", "/api/v1/quota-tree", status=200) == cut
    history = await api.call("GET", "/api/v1/quota-tree/history", status=200)
    newest = history["items"][0]
    assert (newest["version"], newest["author"]) == (2, "ops")
    assert newest["diff"].startswith("--- previous\n+++ new\n")
    added = [line for line in newest["diff"].splitlines() if line.startswith("+ ")]
    assert any("nvidia.com/gpu: 8" in line for line in added), newest["diff"]
    assert history["items"][1]["author"] == "fleet serve --quota"

    await api.call(
        "POST", "/api/v1/submissions", data=pytorchjob("a4", gpus=1), headers=YAML, status=201
    )
    await api.settle(60)
    for name in ("a1", "a2", "a3"):
        job = await api.call("GET", f"/api/v1/jobs/team-a/{name}", status=200)
        assert job["state"] == "Running"
    waiting = await api.call("GET", "/api/v1/jobs/team-a/a4", status=200)
    assert waiting["state"] == "Queued"
    assert "over its max since a quota change" in waiting["reason"]


async def test_a_patch_changes_one_node_and_is_validated_as_a_whole_tree(api: Api) -> None:
    patch = {"max": {"nvidia.com/gpu": 24}, "namespaces": ["team-a", "default", "extra"]}
    done = await api.call("PATCH", "/api/v1/quota-tree/nodes/team-a", json=patch, status=200)
    assert done["version"] == 2
    tree = yaml.safe_load(await api.call("GET", "/api/v1/quota-tree", status=200))
    team_a = tree["spec"]["root"]["children"][0]["children"][0]
    assert team_a["max"]["nvidia.com/gpu"] == 24 and team_a["max"]["cpu"] == 512
    assert team_a["namespaces"] == ["team-a", "default", "extra"]
    bad = await api.call(
        "PATCH",
        "/api/v1/quota-tree/nodes/team-a",
        json={"max": {"nvidia.com/gpu": 64}},
        status=422,
    )
    assert "above" in bad["errors"][0]["message"]
    assert bad["errors"][0]["path"].startswith("spec.root.children[0].children[0].max")
    unknown = await api.call(
        "PATCH", "/api/v1/quota-tree/nodes/team-a", json={"children": []}, status=422
    )
    assert unknown["errors"][0]["path"] == "children"
    await api.call("PATCH", "/api/v1/quota-tree/nodes/nope", json={"min": None}, status=404)
    await api.call(
        "PATCH",
        "/api/v1/quota-tree/nodes/team-a",
        data=b"{not json",
        headers={"Content-Type": "application/merge-patch+json"},
        status=400,
    )
    by_yaml = await api.call(
        "PATCH",
        "/api/v1/quota-tree/nodes/sandbox",
        data="max: {nvidia.com/gpu: 4}\n",
        headers=YAML,
        status=200,
    )
    assert by_yaml["version"] == 3
    await api.call("PATCH", "/api/v1/quota-tree/nodes/team-a?dryRun=yes", json={}, status=400)


async def test_jobs_whose_namespace_no_leaf_takes_any_more_are_failed(api: Api) -> None:
    await api.call(
        "POST",
        "/api/v1/submissions",
        data=pytorchjob("big", namespace="sandbox", gpus=8, workers=2),
        headers=YAML,
        status=201,
    )
    await api.settle()
    queued = await api.call("GET", "/api/v1/jobs/sandbox/big", status=200)
    assert queued["state"] == "Queued"  # 16 GPUs: above sandbox's max of 8
    gone = tree_with(sandbox=None)
    done = await api.call("PUT", "/api/v1/quota-tree", data=gone, headers=YAML, status=200)
    assert [f["job"] for f in done["failed"]] == ["sandbox/big"]
    await api.settle()
    job = await api.call("GET", "/api/v1/jobs/sandbox/big", status=200)
    assert job["state"] == "Failed"
    assert "no leaf of the quota tree takes" in job["events"][-1]["message"]


async def test_the_cut_time_survives_a_restart_and_the_grace_preempts_after_it(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]],
    database_url: str,
    tmp_path: Path,
) -> None:
    clock = VirtualClock(1_000.0)
    tokens = write_tokens_file(tmp_path / "t.yaml")
    settings = running.settings(database_url, tokens_file=tokens, quota_cut_grace=600.0)
    first = Api(await aiohttp_client(create_app(settings, clock=clock)), clock)
    await run_team_a(first, "a1", "a2", "a3")
    cut = tree_with(**{"team-a": {"min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 8}}})
    await first.call("PUT", "/api/v1/quota-tree", data=cut, headers=YAML, status=200)
    cut_at = clock.now()
    await first.settle(300)
    await first.client.close()

    second = Api(await aiohttp_client(create_app(settings, clock=clock)), clock)
    loop = second.client.app[keys.SERVICE].loop
    await second.settle()
    assert loop.state.cut_since == {"team-a": cut_at}
    for _ in range(59):  # to 1595: cycles run, none preempts yet
        await second.settle(5)
    assert len(loop.state.running) == 3
    await second.settle(10)
    await second.settle()
    states = {
        n: (await second.call("GET", f"/api/v1/jobs/team-a/{n}", status=200))["state"]
        for n in ("a1", "a2", "a3")
    }
    assert states["a1"] == "Running"
    assert states["a2"] == states["a3"] == "Queued", states
    job = await second.call("GET", "/api/v1/jobs/team-a/a3", status=200)
    assert any("after a quota change (grace 10m)" in e["message"] for e in job["events"])


async def test_a_patch_sets_a_minimum_runtime_and_a_bad_one_is_a_field_error(api: Api) -> None:
    await api.call(
        "PATCH", "/api/v1/quota-tree/nodes/team-a", json={"reclaimMinRuntime": "10m"}, status=200
    )
    tree = yaml.safe_load(await api.call("GET", "/api/v1/quota-tree", status=200))
    assert tree["spec"]["root"]["children"][0]["children"][0]["reclaimMinRuntime"] == "10m"
    bad = await api.call(
        "PATCH", "/api/v1/quota-tree/nodes/team-a", json={"preemptMinRuntime": "soon"}, status=422
    )
    assert bad["errors"][0]["path"] == "spec.root.children[0].children[0].preemptMinRuntime"


async def test_a_patch_nested_too_deep_is_refused_before_it_is_built(api: Api) -> None:
    deep = "max: " + "[" * 30 + "]" * 30 + "\n"
    problem = await api.call(
        "PATCH", "/api/v1/quota-tree/nodes/team-a", data=deep, headers=YAML, status=400
    )
    assert "nest more than 20 levels deep" in problem["detail"]
