"""Member cluster administration over HTTP: add, replace (refused under running jobs), drain."""

from __future__ import annotations

import copy
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.api import keys
from fleet.clusters.kube import kubeconfig
from fleet.service.settings import POLICIES
from fleet.testing.documents import pytorchjob
from fleet.testing.tokens import bearer
from tests.admin.conftest import YAML, Api
from tests.clusters.kubeconfigs import SECRET, config, exec_user

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


# Real members' kubeconfigs -------------------------------------------------------------------


def real(name: str, path: str) -> dict[str, Any]:
    """The example ``edge`` cluster as a real member ``name`` reached through ``path``."""
    doc = cluster("edge")
    doc["metadata"]["name"] = name
    doc["spec"] = {"kubeconfig": {"path": path}, "cells": doc["spec"]["cells"]}
    return doc


async def test_a_kubeconfig_outside_the_directory_is_a_422_and_nothing_is_stored(
    api: Api, kubeconfigs: Path
) -> None:
    outside = kubeconfigs.parent / "outside.yaml"
    outside.write_text(config())
    (kubeconfigs / "link.yaml").symlink_to(outside)
    for path in (str(kubeconfigs / ".." / "outside.yaml"), "link.yaml", "/etc/shadow"):
        refused = await api.call(
            "PUT", "/api/v1/clusters/far", data=dump(real("far", path)), headers=YAML, status=422
        )
        (error,) = refused["errors"]
        assert error["path"] == "spec.kubeconfig.path"
        assert "outside the kubeconfig directory" in error["message"]
    assert "far" not in names(await api.call("GET", "/api/v1/clusters", status=200))
    assert "far" not in api.client.app[keys.SERVICE].loop.members


async def test_a_kubeconfig_with_a_credential_plugin_is_a_422_and_the_plugin_never_runs(
    api: Api, kubeconfigs: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "plugin-ran"
    (kubeconfigs / "plugin.yaml").write_text(config(exec_user(marker)))
    refused = await api.call(
        "PUT",
        "/api/v1/clusters/plugged",
        data=dump(real("plugged", "plugin.yaml")),
        headers=YAML,
        status=422,
    )
    (error,) = refused["errors"]
    assert error["path"] == "spec.kubeconfig.path"
    assert "users[0] 'fleet' (exec)" in error["message"]
    assert "--allow-kubeconfig-exec" in error["message"]
    assert "plugged" not in names(await api.call("GET", "/api/v1/clusters", status=200))
    assert not marker.exists()


async def test_an_allowed_plugin_runs_and_a_restart_without_the_setting_does_not_run_it(
    api_with: Callable[..., Awaitable[Api]], kubeconfigs: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "plugin-ran"
    (kubeconfigs / "plugin.yaml").write_text(config(exec_user(marker)))
    allowed = await api_with(allow_kubeconfig_exec=True)
    doc = real("plugged", "plugin.yaml")
    await allowed.call("PUT", "/api/v1/clusters/plugged", data=dump(doc), headers=YAML, status=201)
    assert marker.exists()  # the client library ran it as it loaded the config
    await allowed.client.close()
    marker.unlink()

    restarted = await api_with()  # the member is stored; the setting is off now
    listing = await restarted.call("GET", "/api/v1/clusters", status=200)
    plugged = next(c for c in listing["items"] if c["name"] == "plugged")
    assert plugged["health"] == "Unreachable"
    assert plugged["message"] == kubeconfig.PLUGIN
    assert not marker.exists()


@pytest.mark.parametrize(
    "content",
    [f"users: [{{name: {SECRET}\n  - : ]\n", f"{SECRET} is not a kubeconfig\n"],
    ids=["broken-yaml", "not-a-mapping"],
)
async def test_an_unreadable_kubeconfig_is_a_fixed_message_and_its_content_is_in_no_answer(
    api: Api, kubeconfigs: Path, content: str, caplog: pytest.LogCaptureFixture
) -> None:
    (kubeconfigs / "bad.yaml").write_text(content)
    doc = real("bad", "bad.yaml")
    resp = await api.client.put(
        "/api/v1/clusters/bad", data=dump(doc), headers={**YAML, **bearer("admin")}
    )
    text = await resp.text()
    assert resp.status == 422, text
    (error,) = (await resp.json())["errors"]
    assert (error["path"], error["message"]) == ("spec.kubeconfig.path", kubeconfig.UNREADABLE)
    assert SECRET not in text
    listing = await api.call("GET", "/api/v1/clusters", status=200)
    assert "bad" not in names(listing) and SECRET not in json.dumps(listing)
    audit = await api.call("GET", "/api/v1/audit", status=200)
    assert SECRET not in json.dumps(audit)
    assert "bad.yaml" in caplog.text and SECRET not in caplog.text


async def test_a_members_health_message_is_shown_to_admin_tokens_only(
    api: Api, kubeconfigs: Path
) -> None:
    (kubeconfigs / "far.yaml").write_text(config())  # nothing answers at 127.0.0.1:1
    doc = real("far", "far.yaml")  # relative: taken from the kubeconfig directory
    await api.call("PUT", "/api/v1/clusters/far", data=dump(doc), headers=YAML, status=201)
    as_admin = await api.call("GET", "/api/v1/clusters", status=200)
    as_team = await api.call("GET", "/api/v1/clusters", "team-a", status=200)
    admin = {c["name"]: c for c in as_admin["items"]}
    team = {c["name"]: c for c in as_team["items"]}
    assert admin["far"]["message"].startswith("unreachable: ")
    assert admin["east"]["message"].startswith("simulated")
    assert {n: c["message"] for n, c in team.items()} == {
        "east": "ready",
        "west": "ready",
        "edge": "ready",
        "far": "not ready",
    }
    assert {n: c["health"] for n, c in team.items()} == {n: c["health"] for n, c in admin.items()}
