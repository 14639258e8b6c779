"""Member cluster administration over HTTP: add, replace (refused under running jobs), drain."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from fleet.settings import POLICIES
from tests.admin.conftest import YAML, Api
from tests.service.helpers import pytorchjob

CLUSTERS = list(yaml.safe_load_all((POLICIES / "clusters" / "example.yaml").read_text()))


def cluster(name: str) -> dict[str, Any]:
    """A fresh copy of the example MemberCluster ``name``."""
    return copy.deepcopy(next(c for c in CLUSTERS if c["metadata"]["name"] == name))


def dump(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False)


def names(listing: dict[str, Any]) -> list[str]:
    return [c["name"] for c in listing["items"]]


async def running(api: Api, name: str) -> dict[str, Any]:
    await api.call(
        "POST",
        "/api/v1/submissions",
        data=pytorchjob(name, gpus=8, duration="10m"),
        headers=YAML,
        status=201,
    )
    await api.settle()
    job: dict[str, Any] = await api.call("GET", f"/api/v1/jobs/team-a/{name}", status=200)
    assert job["state"] == "Running"
    return job


async def test_a_new_cluster_is_added_and_listed(api: Api) -> None:
    doc = cluster("edge")
    doc["metadata"]["name"] = "edge-2"
    change = await api.call(
        "PUT", "/api/v1/clusters/edge-2", data=dump(doc), headers=YAML, status=201
    )
    assert change == {"name": "edge-2", "created": True, "draining": False, "running": []}
    listing = await api.call("GET", "/api/v1/clusters", status=200)
    assert "edge-2" in names(listing)
    await api.settle()
    listing = await api.call("GET", "/api/v1/clusters", status=200)
    edge2 = next(c for c in listing["items"] if c["name"] == "edge-2")
    edge = next(c for c in listing["items"] if c["name"] == "edge")
    assert edge2["gpus"]["total"] == edge["gpus"]["total"] > 0


async def test_replacing_a_config_under_running_jobs_is_refused_unless_they_keep_their_cells(
    api: Api,
) -> None:
    job = await running(api, "train")
    name, node = job["cluster"], job["placement"][0]["node"]
    doc = cluster(name)
    same = await api.call(
        "PUT", f"/api/v1/clusters/{name}", data=dump(doc), headers=YAML, status=200
    )
    assert same["running"] == ["team-a/train"] and same["created"] is False
    pool = doc["spec"]["cells"]["physicalCluster"]["physicalCells"][0]
    pool["cellChildren"] = [c for c in pool["cellChildren"] if c["cellAddress"] != node]
    pool_type = pool["cellType"]
    types = doc["spec"]["cells"]["physicalCluster"]["cellTypes"]
    types[pool_type]["childCellNumber"] = len(pool["cellChildren"])
    doc["spec"]["cells"].pop("virtualClusters", None)
    refused = await api.call(
        "PUT", f"/api/v1/clusters/{name}", data=dump(doc), headers=YAML, status=409
    )
    assert "team-a/train" in refused["detail"]
    after = await api.call("GET", "/api/v1/jobs/team-a/train", status=200)
    assert after["state"] == "Running" and after["placement"][0]["node"] == node


async def test_a_drained_cluster_takes_nothing_new_and_goes_when_its_jobs_end(api: Api) -> None:
    job = await running(api, "long")
    name = job["cluster"]
    change = await api.call("DELETE", f"/api/v1/clusters/{name}", status=202)
    assert change["draining"] is True and change["running"] == ["team-a/long"]
    listing = await api.call("GET", "/api/v1/clusters", status=200)
    assert next(c for c in listing["items"] if c["name"] == name)["draining"] is True
    await api.call(
        "POST", "/api/v1/submissions", data=pytorchjob("next", gpus=8), headers=YAML, status=201
    )
    await api.settle()
    placed = await api.call("GET", "/api/v1/jobs/team-a/next", status=200)
    assert placed["cluster"] != name, placed
    await api.settle(601)
    await api.settle(5)
    assert (await api.call("GET", "/api/v1/jobs/team-a/long", status=200))["state"] == "Succeeded"
    assert name not in names(await api.call("GET", "/api/v1/clusters", status=200))
    await api.call("DELETE", f"/api/v1/clusters/{name}", status=404)


async def test_a_cluster_document_is_checked_in_full(api: Api) -> None:
    doc = cluster("edge")
    wrong = await api.call(
        "PUT", "/api/v1/clusters/other", data=dump(doc), headers=YAML, status=422
    )
    assert [e["path"] for e in wrong["errors"]] == ["metadata.name"]
    doc["spec"]["cells"]["physicalCluster"]["physicalCells"][0]["cellType"] = "NOPE"
    broken = await api.call(
        "PUT", "/api/v1/clusters/edge", data=dump(doc), headers=YAML, status=422
    )
    assert broken["errors"] and all(e["path"].startswith("spec") for e in broken["errors"])
    await api.call("PUT", "/api/v1/clusters/edge", data="a: [", headers=YAML, status=422)
    await api.call(
        "PUT", "/api/v1/clusters/edge", data=b"{}", headers={"Content-Type": "application/json"},
        status=415,
    )  # fmt: skip
