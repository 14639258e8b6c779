"""What a member needs (``deploy/member/``): the CRD and Fleet's role, and what Fleet says without.

A third control plane, ``gamma``, starts without the PyTorchJob CRD: Fleet
reports it not ready with that reason and dispatches nothing until the CRD
is installed.  Without the ClusterRoleBinding of ``deploy/member/rbac.yaml``
Fleet's service account may do nothing, and the member is not ready with
the API server's own words; with it back, Fleet works.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kube.conftest import GPUS_PER_NODE, NAMESPACE, Fleet, member_document, submission
from tests.kube.controlplane import ControlPlane, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gamma(kube_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane("gamma", kube_bin, tmp_path_factory.mktemp("gamma"))
    try:
        plane.start()
        plane.install_rbac()
        plane.namespace(NAMESPACE)
        for node in ("gamma-node-0", "gamma-node-1"):
            plane.add_node(node, GPUS_PER_NODE)
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def fleet_on_gamma(gamma: ControlPlane, tmp_path: Path) -> Iterator[Fleet]:
    fleet = Fleet(tmp_path, [member_document("gamma", gamma.kubeconfig(), "gamma")])
    yield fleet
    fleet.stop()


def health(fleet: Fleet) -> dict[str, Any]:
    return fleet.clusters_view()["gamma"]


def jobs_in(plane: ControlPlane) -> list[dict[str, Any]]:
    return plane.admin.items(f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/pytorchjobs")


def test_a_member_without_the_crd_is_not_ready_and_gets_nothing_until_it_is_installed(
    gamma: ControlPlane, fleet_on_gamma: Fleet
) -> None:
    fleet = fleet_on_gamma.start()
    view = health(fleet)
    assert view["health"] == "Unreachable"
    assert (
        "PyTorchJob CRD (pytorchjobs.kubeflow.org, version v1) is not installed"
        in (view["message"])
    )
    fleet.submit(submission("early", workers=1, gpus=1))
    assert fleet.wait_state("early", "Queued")["cluster"] is None

    gamma.install_crd()
    wait_for(lambda: health(fleet)["health"] == "Healthy", "gamma ready once the CRD is there")
    job = fleet.wait_state("early", "Dispatched", "Running")
    assert job["cluster"] == "gamma"
    assert [j["metadata"]["labels"]["fleet.io/job-uid"] for j in jobs_in(gamma)] == [job["uid"]]


def test_fleet_works_with_exactly_the_member_role_and_fails_clearly_without_it(
    gamma: ControlPlane, fleet_on_gamma: Fleet
) -> None:
    gamma.install_crd()
    binding = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/fleet-member"
    gamma.admin.request("DELETE", binding)
    try:
        fleet = fleet_on_gamma.start()
        view = health(fleet)
        assert view["health"] == "Unreachable"
        assert "refuses Fleet's credentials or rights" in view["message"]
        assert "HTTP 403" in view["message"]
        assert "system:serviceaccount:fleet-system:fleet" in view["message"]
        fleet.submit(submission("without", workers=1, gpus=1))
        assert fleet.wait_state("without", "Queued")["cluster"] is None
    finally:
        gamma.install_rbac()
    wait_for(lambda: health(fleet)["health"] == "Healthy", "gamma ready with the role")
    job = fleet.wait_state("without", "Dispatched", "Running")
    assert job["cluster"] == "gamma"
