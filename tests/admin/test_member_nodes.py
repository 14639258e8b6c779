"""A member described by its nodes, kept current: a simulated member's ``spec.nodes``
replaced through ``PUT /api/v1/clusters/{name}`` (the path a real member's observed
nodes take too, fleet.service.admin.replace_nodes)."""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.api import keys
from fleet.api.routes import cluster_nodes
from fleet.clusters.sim import SimulatedCluster
from fleet.core.charges import Charge
from fleet.core.jobs import Job
from fleet.core.placement import Placer, RestoreError
from fleet.manifests.models import MemberClusterModel
from fleet.service import admin
from fleet.service.settings import POLICIES
from fleet.testing.documents import pytorchjob
from tests.admin.conftest import YAML, Api
from tests.clusters.kubeconfigs import config

ZONE = "topology.kubernetes.io/zone"
RACK = "fleet.io/rack"
A100 = "NVIDIA-A100-SXM4-80GB"


def node(name: str, rack: str, gpus: int = 4) -> dict[str, Any]:
    return {
        "name": name,
        "labels": {
            "nvidia.com/gpu.product": A100,
            "nvidia.com/gpu.memory": "81920",
            ZONE: "z1",
            RACK: rack,
        },
        "capacity": {"nvidia.com/gpu": gpus, "cpu": 8 * gpus, "memory": f"{64 * gpus}Gi"},
    }


def member(nodes: list[dict[str, Any]], vcs: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"simulated": True, "topology": {"levels": [ZONE, RACK]}}
    spec["nodes"] = nodes
    if vcs is not None:
        spec["virtualClusters"] = vcs
    return {
        "apiVersion": "fleet.io/v1alpha1",
        "kind": "MemberCluster",
        "metadata": {"name": "labs"},
        "spec": spec,
    }


def two_racks() -> list[dict[str, Any]]:
    return [node("n-0", "r1"), node("n-1", "r1"), node("n-2", "r2"), node("n-3", "r2")]


@pytest.fixture
def labs(
    api_with: Callable[..., Awaitable[Api]], tmp_path: Path
) -> Callable[[dict[str, Any]], Awaitable[Api]]:
    async def make(document: dict[str, Any]) -> Api:
        clusters = tmp_path / "clusters.yaml"
        clusters.write_text(yaml.safe_dump(document))
        return await api_with(clusters=clusters, quota=POLICIES / "quota" / "team-tree.yaml")

    return make


async def put(api: Api, document: dict[str, Any], status: int = 200) -> Any:
    return await api.call(
        "PUT", "/api/v1/clusters/labs", data=yaml.safe_dump(document), headers=YAML, status=status
    )


async def submit(api: Api, name: str, workers: int, gpus: int) -> None:
    await api.call(
        "POST",
        "/api/v1/submissions",
        data=pytorchjob(name, workers=workers, gpus=gpus, duration="10m"),
        headers=YAML,
        status=201,
    )


async def job(api: Api, name: str) -> dict[str, Any]:
    found: dict[str, Any] = await api.call("GET", f"/api/v1/jobs/team-a/{name}", status=200)
    return found


async def cells(api: Api) -> dict[str, list[dict[str, Any]]]:
    found = await api.call("GET", "/api/v1/clusters/labs/cells", status=200)
    return {n["name"]: n["cells"] for n in found["nodes"]}


async def held_once(api: Api, *names: str) -> None:
    """No GPU is held by two running jobs, and the cell map says the same."""
    seen: dict[tuple[str, int], str] = {}
    for name in names:
        found = await job(api, name)
        if found["state"] != "Running":
            continue
        for pod in found["placement"]:
            for gpu in pod["gpus"]:
                assert (pod["node"], gpu) not in seen, (name, seen)
                seen[pod["node"], gpu] = name
    mapped = {
        (n, c["index"]): c["job"].split("/")[1]
        for n, row in (await cells(api)).items()
        for c in row
        if c.get("job")
    }
    assert mapped == seen


async def test_a_node_left_out_of_spec_nodes_preempts_its_gang_which_runs_elsewhere(
    labs: Callable[[dict[str, Any]], Awaitable[Api]],
) -> None:
    doc = member(two_racks())
    api = await labs(doc)
    await submit(api, "gang", workers=2, gpus=4)
    await api.settle()
    first = await job(api, "gang")
    assert first["state"] == "Running"
    nodes = sorted(p["node"] for p in first["placement"])
    gone = nodes[0]

    smaller = copy.deepcopy(doc)
    smaller["spec"]["nodes"] = [n for n in two_racks() if n["name"] != gone]
    change = await put(api, smaller)
    assert change["created"] is False
    assert "team-a/gang" not in change["running"]
    await api.settle()
    moved = await job(api, "gang")
    assert moved["state"] == "Running", moved
    assert gone not in {p["node"] for p in moved["placement"]}
    assert not {p["node"] for p in moved["placement"]} & set(nodes)  # the other rack
    reasons = [e["message"] for e in moved["events"]]
    assert any(f"node {gone} of labs went bad: removed from the member" in r for r in reasons)
    assert gone not in await cells(api)
    await held_once(api, "gang")
    listing = await api.call("GET", "/api/v1/clusters", status=200)
    (labs_view,) = [c for c in listing["items"] if c["name"] == "labs"]
    assert labs_view["gpus"]["total"] == 12
    assert labs_view["topology"]["nodes"] == 3
    assert labs_view["topology"]["gpuTypes"] == [{"product": A100, "gpus": 12, "nodes": 3}]


async def test_a_node_added_to_spec_nodes_becomes_usable_and_running_jobs_stay(
    labs: Callable[[dict[str, Any]], Awaitable[Api]],
) -> None:
    one_rack = [node("n-0", "r1"), node("n-1", "r1")]
    doc = member(one_rack)
    api = await labs(doc)
    await submit(api, "first", workers=2, gpus=4)
    await api.settle()
    await submit(api, "second", workers=1, gpus=4)
    await api.settle()
    before = await job(api, "first")
    assert before["state"] == "Running"
    assert (await job(api, "second"))["state"] == "Queued"

    bigger = copy.deepcopy(doc)
    bigger["spec"]["nodes"] = [*one_rack, node("n-2", "r2")]
    change = await put(api, bigger)
    assert change["running"] == ["team-a/first"]
    await api.settle()
    second = await job(api, "second")
    assert second["state"] == "Running", second
    assert [p["node"] for p in second["placement"]] == ["n-2"]
    after = await job(api, "first")
    assert after["state"] == "Running" and after["placement"] == before["placement"]
    assert sorted(await cells(api)) == ["n-0", "n-1", "n-2"]
    await held_once(api, "first", "second")


@pytest.mark.interpreted_core  # replaces CellPlacer.restore; CI runs it interpreted
async def test_a_gang_the_new_cells_cannot_hold_again_is_preempted_alone(
    labs: Callable[[dict[str, Any]], Awaitable[Api]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new cells refuse to hold a job again where it runs (the allocator's restore
    says no: here made to): that job alone is preempted (``Evicted``), the change goes
    through on a placer of its own, and the other jobs keep their cells."""
    doc = member(two_racks())
    api = await labs(doc)
    await submit(api, "wide", workers=2, gpus=4)
    await submit(api, "small", workers=1, gpus=4)
    await api.settle()
    wide, small = await job(api, "wide"), await job(api, "small")
    assert wide["state"] == small["state"] == "Running"
    used = {p["node"] for p in [*wide["placement"], *small["placement"]]}
    (idle,) = {"n-0", "n-1", "n-2", "n-3"} - used

    built = admin.placers.placer
    refusals = ["team-a/wide"]

    def refusing(model: MemberClusterModel, kind: Any = "cells") -> Placer:
        placer = built(model, kind)
        restore = placer.restore

        def refuse(job: Job, charge: Charge, pods: Any) -> None:
            if job.key in refusals:
                refusals.remove(job.key)
                raise RestoreError(f"{job.key}: refused by the test")
            restore(job, charge, pods)

        placer.restore = refuse  # type: ignore[method-assign]
        return placer

    monkeypatch.setattr(admin.placers, "placer", refusing)
    smaller = copy.deepcopy(doc)
    smaller["spec"]["nodes"] = [n for n in two_racks() if n["name"] != idle]
    change = await put(api, smaller)
    assert change["running"] == ["team-a/small"]
    assert not refusals
    wide = await job(api, "wide")
    reasons = [e["message"] for e in wide["events"]]
    assert any("the cells of labs changed and no longer hold it" in r for r in reasons), reasons
    assert (await job(api, "small"))["placement"] == small["placement"]
    assert sorted(await cells(api)) == sorted(used)
    await api.settle()
    wide = await job(api, "wide")
    assert wide["state"] == "Running", wide["reason"]
    await held_once(api, "wide", "small")


async def test_a_node_the_member_reported_bad_stays_bad_in_the_new_cells(
    labs: Callable[[dict[str, Any]], Awaitable[Api]],
) -> None:
    one_rack = [node("n-0", "r1"), node("n-1", "r1")]
    doc = member(one_rack)
    api = await labs(doc)
    sim = api.client.app[keys.SERVICE].loop.members["labs"]
    assert isinstance(sim, SimulatedCluster)
    sim.set_node_health("n-0", False)
    await api.settle()
    bigger = copy.deepcopy(doc)
    bigger["spec"]["nodes"] = [*one_rack, node("n-2", "r1")]
    await put(api, bigger)
    for name in ("a", "b", "c"):
        await submit(api, name, workers=1, gpus=4)
    await api.settle()
    placed = {n: await job(api, n) for n in ("a", "b", "c")}
    nodes = sorted(p["node"] for j in placed.values() for p in j["placement"] or [])
    assert nodes == ["n-1", "n-2"], placed
    assert sorted(j["state"] for j in placed.values()) == ["Queued", "Running", "Running"]


async def test_other_changes_of_a_simulated_member_keep_the_refusal_under_running_jobs(
    labs: Callable[[dict[str, Any]], Awaitable[Api]],
) -> None:
    doc = member(two_racks())
    api = await labs(doc)
    await submit(api, "gang", workers=2, gpus=4)
    await api.settle()
    running = await job(api, "gang")
    gone = running["placement"][0]["node"]
    other = copy.deepcopy(doc)
    other["spec"]["nodes"] = [n for n in two_racks() if n["name"] != gone]
    other["metadata"]["labels"] = {"site": "elsewhere"}  # not the node list alone
    refused = await put(api, other, status=409)
    assert "team-a/gang" in refused["detail"]
    assert (await job(api, "gang"))["placement"] == running["placement"]


def test_a_real_members_shortfalls_and_gpu_types_are_listed() -> None:
    nodes = [node("a-0", "r1"), node("a-1", "r1")]
    model = MemberClusterModel.model_validate(
        {
            "apiVersion": "fleet.io/v1alpha1",
            "kind": "MemberCluster",
            "metadata": {"name": "real"},
            "spec": {
                "kubeconfig": {"path": "real.yaml"},
                "topology": {"levels": [ZONE, RACK]},
                "virtualClusters": {"team-a": {"requests": [{"gpus": 12}]}},
            },
            "status": {"nodes": nodes},
        }
    )
    shown = cluster_nodes(model)
    assert shown is not None
    assert shown.nodes == 2
    assert [(t.product, t.gpus, t.nodes) for t in shown.gpu_types] == [(A100, 8, 2)]
    (short,) = shown.shortfalls
    assert (short.vc, short.path, short.asked, short.held) == (
        "team-a",
        "spec.virtualClusters.team-a.requests[0]",
        "12 GPU(s)",
        8,
    )
    assert short.reason


async def test_a_real_members_request_its_observed_nodes_cannot_hold_is_refused(
    api_with: Callable[..., Awaitable[Api]], tmp_path: Path, kubeconfigs: Path
) -> None:
    (kubeconfigs / "far.yaml").write_text(config(), encoding="utf-8")
    doc = member(two_racks(), {"team-a": {"requests": [{"nodes": 2}]}})
    doc["metadata"]["name"] = "far"
    del doc["spec"]["simulated"], doc["spec"]["nodes"]
    doc["spec"]["kubeconfig"] = {"path": "far.yaml"}
    doc["status"] = {"nodes": two_racks()}  # as Fleet stored what it observed
    clusters = tmp_path / "far.yaml"
    clusters.write_text(yaml.safe_dump(doc))
    api = await api_with(clusters=clusters, quota=POLICIES / "quota" / "team-tree.yaml")
    wanted = copy.deepcopy(doc)
    del wanted["status"]
    wanted["spec"]["virtualClusters"]["team-a"]["requests"] = [{"nodes": 5}]
    problem = await api.call(
        "PUT", "/api/v1/clusters/far", data=yaml.safe_dump(wanted), headers=YAML, status=422
    )
    (error,) = problem["errors"]
    assert error["path"] == "spec.virtualClusters.team-a.requests[0]"
    assert "asks 5 node(s)" in error["message"]
    wanted["spec"]["virtualClusters"]["team-a"]["requests"] = [{"nodes": 3}]
    await api.call(
        "PUT", "/api/v1/clusters/far", data=yaml.safe_dump(wanted), headers=YAML, status=200
    )
