"""The real member controllers run against a test control plane: KWOK and the training operator.

Theory of operation: the controllers are those ``scripts/controller-binaries``
builds, started as :mod:`tests.kube.controllers` starts them (the test is
skipped, or fails under ``CI=true``, when they are not built).  One control
plane (:class:`~tests.kube.controlplane.ControlPlane`) with the PyTorchJob
CRD of ``deploy/member/``; KWOK out of cluster with the admin's kubeconfig
manages one fake Node of 8 GPUs, playing the stages of
``tests/kube/kwok/stages.yaml`` (the Node becomes Ready, pods bound to it
Running); the training operator out of cluster with ``-kubeconfig``, with
the Secret its certificate rotator insists on and a serving certificate
where a pod would have it mounted (shared with every other operator, and
kept: :func:`~tests.kube.controllers.mount_operator_certs`).  A PyTorchJob of one master and one
worker, bound to the fake Node by ``nodeName`` as Fleet binds them, gets its
pods from the operator, Running by KWOK, and a Running condition.  Every
process is stopped at the end, however the test ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kube.controllers import (
    Processes,
    mount_operator_certs,
    start_kwok,
    start_training_operator,
    wait_node_ready,
)
from tests.kube.controlplane import ADMIN_TOKEN, ControlPlane, wait_for

pytestmark = pytest.mark.slow

NODE = "kwok-node-0"
GPUS = 8
NAMESPACE = "team-a"


@pytest.fixture
def plane(kube_bin: Path, tmp_path: Path) -> Iterator[ControlPlane]:
    plane = ControlPlane("ctl", kube_bin, tmp_path)
    try:
        plane.start()
        plane.install_crd()
        plane.namespace(NAMESPACE)
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[Processes]:
    procs = Processes(tmp_path)
    try:
        yield procs
    finally:
        procs.stop()


def pytorchjob(name: str) -> dict[str, Any]:
    """One master and one worker, bound to the fake Node; the image is never pulled."""

    def replica() -> dict[str, Any]:
        container = {
            "name": "pytorch",
            "image": "example/train:1",
            "resources": {"limits": {"nvidia.com/gpu": 1}},
        }
        return {
            "replicas": 1,
            "restartPolicy": "OnFailure",
            "template": {"spec": {"nodeName": NODE, "containers": [container]}},
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()}},
    }


def test_training_operator_and_kwok_run_a_pytorchjob(
    plane: ControlPlane, processes: Processes, controllers_bin: Path
) -> None:
    admin = plane.admin
    kubeconfig = plane.kubeconfig(ADMIN_TOKEN)
    admin.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    capacity = {"nvidia.com/gpu": str(GPUS), "cpu": "64", "memory": "512Gi", "pods": "110"}
    admin.request(
        "PATCH",
        f"/api/v1/nodes/{NODE}/status",
        {"status": {"capacity": capacity, "allocatable": capacity}},
        content_type="application/merge-patch+json",
    )
    start_kwok(processes, controllers_bin, kubeconfig, node=NODE)
    start_training_operator(processes, plane, controllers_bin, kubeconfig)

    try:
        mount_operator_certs(processes, plane)
        node = wait_node_ready(processes, plane, NODE)
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == str(GPUS)

        admin.request(
            "POST", f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/pytorchjobs", pytorchjob("pt")
        )

        def running_pods() -> list[dict[str, Any]] | None:
            processes.check()
            pods = admin.items(
                f"/api/v1/namespaces/{NAMESPACE}/pods",
                labelSelector="training.kubeflow.org/job-name=pt",
            )
            running = [p for p in pods if p["status"].get("phase") == "Running"]
            return pods if len(pods) == 2 and len(running) == 2 else None

        pods = wait_for(running_pods, "the operator's two pods Running by KWOK", 120)
        roles = sorted(p["metadata"]["labels"]["training.kubeflow.org/replica-type"] for p in pods)
        assert roles == ["master", "worker"]
        for pod in pods:
            assert pod["spec"]["nodeName"] == NODE
            assert pod["status"]["podIP"].startswith("10.0.1.")
            owner = pod["metadata"]["ownerReferences"][0]
            assert (owner["kind"], owner["name"]) == ("PyTorchJob", "pt")

        def job_running() -> dict[str, Any] | None:
            processes.check()
            job = admin.get(f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/pytorchjobs/pt")
            conditions = (job.get("status") or {}).get("conditions") or []
            running = any(c["type"] == "Running" and c["status"] == "True" for c in conditions)
            return job if running else None

        job = wait_for(job_running, "the PyTorchJob's Running condition", 60)
        assert job["status"]["replicaStatuses"]["Master"]["active"] == 1
        assert job["status"]["replicaStatuses"]["Worker"]["active"] == 1
    except AssertionError as e:
        raise AssertionError(f"{e}\n{processes.tails()}\n{plane.log_tail()}") from e
