"""Real members added and drained through the administration API while Fleet runs."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import pytest
import yaml

from fleet.clusters.base import member_object_name
from tests.kube.conftest import NAMESPACE, Fleet, member_document, pytorchjobs, submission
from tests.kube.controlplane import ControlPlane, wait_for

pytestmark = pytest.mark.slow


def put_cluster(fleet: Fleet, document: dict[str, Any]) -> tuple[int, Any]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{fleet.port}/api/v1/clusters/{document['metadata']['name']}",
        data=yaml.safe_dump(document).encode(),
        method="PUT",
        headers={"Content-Type": "application/yaml"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, yaml.safe_load(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, yaml.safe_load(e.read())


def test_a_real_member_put_while_running_is_connected_and_gets_jobs(
    fleet_factory: Any, members: dict[str, ControlPlane]
) -> None:
    alpha, beta = members["alpha"], members["beta"]
    fleet: Fleet = fleet_factory([member_document("alpha", alpha.kubeconfig(), "alpha")])
    assert sorted(fleet.clusters_view()) == ["alpha"]

    status, body = put_cluster(fleet, member_document("beta", beta.kubeconfig(), "beta"))
    assert status == 201, body
    ready = wait_for(
        lambda: fleet.clusters_view().get("beta", {}).get("health") == "Healthy" or None,
        "beta ready in GET /api/v1/clusters",
    )
    assert ready

    fleet.submit(submission("on-beta", workers=1, gpus=1, clusters=["beta"]))
    job = fleet.wait_state("on-beta", "Dispatched", "Running")
    assert job["cluster"] == "beta"
    name = member_object_name(f"{NAMESPACE}/on-beta")
    wait_for(
        lambda: [j for j in pytorchjobs(beta) if j["metadata"]["name"] == name] or None,
        "the PyTorchJob in beta",
    )

    # how a member is reached cannot change while it is a member
    moved = member_document("beta", alpha.kubeconfig(), "alpha")
    status, body = put_cluster(fleet, moved)
    assert status == 422, body
    assert body["errors"][0]["path"] == "spec.kubeconfig"
    assert "cannot change while it is a member" in body["errors"][0]["message"]
