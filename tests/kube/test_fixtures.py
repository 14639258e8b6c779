"""What the member tests' shared fixtures and controller starters promise.

``clean`` (run by ``clean_members`` before each test) leaves a session member
without any workload of any kind, so that tests of different kinds sharing
the members cannot see each other's objects; :func:`mount_operator_certs`
keeps a serving certificate already mounted, since every training operator
on the machine (other tests', other sessions') waits for the same fixed
directory and any valid pair will do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.kube import controllers
from tests.kube.conftest import NAMESPACE, NODES, WORKLOADS, clean
from tests.kube.controllers import Processes, mount_operator_certs
from tests.kube.controlplane import ControlPlane

pytestmark = pytest.mark.slow

CONTAINER = {"name": "main", "image": "example/train:1"}


def test_clean_removes_the_workloads_of_every_kind_and_their_pods(
    members: dict[str, ControlPlane],
) -> None:
    plane = members["beta"]
    admin = plane.admin
    admin.request(
        "POST",
        "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs",
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "left"},
            "spec": {
                "tasks": [
                    {"name": "t", "replicas": 1, "template": {"spec": {"containers": [CONTAINER]}}}
                ]
            },
        },
    )
    admin.request(
        "POST",
        "/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups",
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "left"},
            "spec": {"minMember": 1},
        },
    )
    admin.request(
        "POST",
        f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/tfjobs",
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "TFJob",
            "metadata": {"name": "left"},
            "spec": {
                "tfReplicaSpecs": {
                    "Worker": {"replicas": 1, "template": {"spec": {"containers": [CONTAINER]}}}
                }
            },
        },
    )
    admin.request(
        "POST",
        "/api/v1/namespaces/default/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "left"},
            "spec": {"containers": [CONTAINER]},
        },
    )
    clean(plane, NODES["beta"])
    left = {plural: admin.items(f"{prefix}/{plural}") for prefix, plural in WORKLOADS}
    assert left == {plural: [] for _, plural in WORKLOADS}
    assert [p["metadata"]["name"] for p in admin.items("/api/v1/namespaces/default/pods")] == []


class Secret:
    """An admin whose operator Secret holds ``pair``."""

    def __init__(self, pair: dict[str, str]) -> None:
        self.pair = pair

    def get(self, path: str) -> dict[str, Any]:
        assert path.endswith(f"/secrets/{controllers.OPERATOR_SECRET}")
        return {"data": self.pair}


def test_a_serving_certificate_already_mounted_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    certs = tmp_path / "serving-certs"
    monkeypatch.setattr(controllers, "OPERATOR_CERT_DIR", certs)
    plane: Any = type("Plane", (), {})()
    plane.admin = Secret({"tls.crt": "Zmlyc3QtY2VydA==", "tls.key": "Zmlyc3Qta2V5"})
    mount_operator_certs(Processes(tmp_path), plane)
    assert (certs / "tls.crt").read_bytes() == b"first-cert"
    assert (certs / "tls.key").read_bytes() == b"first-key"

    plane.admin = Secret({"tls.crt": "c2Vjb25k", "tls.key": "c2Vjb25k"})
    mount_operator_certs(Processes(tmp_path), plane)
    assert (certs / "tls.crt").read_bytes() == b"first-cert"
    assert (certs / "tls.key").read_bytes() == b"first-key"
    assert sorted(p.name for p in certs.iterdir()) == ["tls.crt", "tls.key"]
