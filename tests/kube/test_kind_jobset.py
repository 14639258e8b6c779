"""JobSets and Trainer v2's TrainJobs on a real member, run by stand-in controllers.

One control plane (etcd and kube-apiserver) with the real CRDs of JobSet and
Trainer v2 (TrainJob and both runtimes) and Fleet's member role
(``deploy/member/``), two Nodes of 4 GPUs.  Neither controller can be built
here, so :class:`~tests.kube.standins.jobset.JobSetController` (a **stand-in**
for JobSet's controller, the Job controller and the kubelets) makes the
pods, labelled as they would be, and reports status, and
:class:`~tests.kube.standins.trainer.TrainerController` (a **stand-in** for
Trainer v2's controller and the garbage collector) makes a TrainJob's
JobSet from its runtime and reports its end.  ``fleet serve`` runs with the
member listing JobSet and TrainJob in ``spec.kinds``: a JobSet is
dispatched, each of its pods bound to the node and GPUs Fleet planned for
it (the planned pod read from the JobSet's and the Job's index labels),
Running, then Succeeded; a cancelled JobSet is deleted with its pods.  A
TrainJob, once an administrator registered its runtime, is created in the
member after its own decorated runtime (owned by it), and runs and ends the
same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.clusters.base import member_object_name
from tests import paths
from tests.kube.conftest import GPUS_PER_NODE, NAMESPACE, Fleet, member_document
from tests.kube.controlplane import ControlPlane, wait_for
from tests.kube.standins.jobset import API, JobSetController
from tests.kube.standins.trainer import API as TRAINER_API
from tests.kube.standins.trainer import TrainerController

pytestmark = pytest.mark.slow

NODES = ("js-node-0", "js-node-1")
JOBSET = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet"}
TRAINJOB = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob"}
RUNTIME = paths.KIND_EXAMPLES / "trainer-runtime-torch-distributed.yaml"


@pytest.fixture(scope="module")
def plane(kube_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = ControlPlane("js", kube_bin, tmp_path_factory.mktemp("jobset"))
    try:
        plane.start()
        plane.install_crd(
            "jobset.x-k8s.io_jobsets.yaml",
            "trainer.kubeflow.org_trainjobs.yaml",
            "trainer.kubeflow.org_trainingruntimes.yaml",
            "trainer.kubeflow.org_clustertrainingruntimes.yaml",
        )
        plane.install_rbac()
        plane.namespace(NAMESPACE)
        for node in NODES:
            plane.add_node(node, GPUS_PER_NODE)
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def controller(plane: ControlPlane) -> Iterator[JobSetController]:
    ctl = JobSetController(plane.admin).start()
    trainer = TrainerController(plane.admin).start()
    yield ctl
    trainer.stop()
    ctl.stop()


@pytest.fixture
def fleet(plane: ControlPlane, controller: JobSetController, tmp_path: Path) -> Iterator[Fleet]:
    doc = member_document("js", plane.kubeconfig(), "js")
    doc["spec"]["kinds"] = [JOBSET, TRAINJOB]
    cells = doc["spec"]["cells"]["physicalCluster"]["physicalCells"][0]
    cells["cellChildren"] = [{"cellAddress": n} for n in NODES]
    started = Fleet(tmp_path, [doc], kubeconfig_dir=plane.dir).start()
    yield started
    started.stop()


def submission(name: str, *, replicas: int = 2, parallelism: int = 2, gpus: int = 1) -> str:
    """A policy and a JobSet of one replicated job: ``replicas`` Jobs of ``parallelism`` pods."""
    policy = {
        "apiVersion": "policy.one.alibabacloud.com/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"resourceSelectors": [{**JOBSET, "name": name}]},
    }
    container = {
        "name": "train",
        "image": "example/train:1",
        "resources": {"limits": {"nvidia.com/gpu": gpus}},
    }
    jobset = {
        **JOBSET,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "parallelism": parallelism,
                            "completions": parallelism,
                            "completionMode": "Indexed",
                            "template": {
                                "spec": {"restartPolicy": "Never", "containers": [container]}
                            },
                        }
                    },
                }
            ]
        },
    }
    return yaml.safe_dump_all([policy, jobset])


def jobsets(plane: ControlPlane) -> list[dict[str, Any]]:
    return plane.admin.items(f"{API}/namespaces/{NAMESPACE}/jobsets")


def pods_of(plane: ControlPlane, uid: str) -> list[dict[str, Any]]:
    return plane.admin.items(
        f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=f"fleet.io/job-uid={uid}"
    )


def test_a_jobset_runs_on_the_planned_nodes_and_succeeds(
    fleet: Fleet, plane: ControlPlane, controller: JobSetController
) -> None:
    fleet.submit(submission("sweep", replicas=2, parallelism=2))
    job = fleet.wait_state("sweep", "Dispatched", "Running")
    name = member_object_name(f"{NAMESPACE}/sweep")
    (created,) = wait_for(
        lambda: [j for j in jobsets(plane) if j["metadata"]["name"] == name],
        "the JobSet in the member",
    )
    assert created["metadata"]["labels"]["fleet.io/job-uid"] == job["uid"]
    template = created["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert template["spec"]["schedulerName"] == "fleet-scheduler"
    assert template["metadata"]["annotations"]["fleet.io/pods-per-job"] == "2"

    def all_bound() -> list[dict[str, Any]] | None:
        pods = pods_of(plane, job["uid"])
        return pods if len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods) else None

    pods = wait_for(all_bound, "the JobSet's 4 pods bound")
    planned = {p["replica"]: (p["node"], p["gpus"]) for p in job["placement"]}
    for pod in pods:
        labels = pod["metadata"]["labels"]
        index = int(labels["jobset.sigs.k8s.io/job-index"]) * 2 + int(
            labels["batch.kubernetes.io/job-completion-index"]
        )
        replica = f"workers-{index}"
        assert pod["metadata"]["annotations"]["fleet.io/replica"] == replica
        node, gpus = planned[replica]
        assert pod["spec"]["nodeName"] == node
        assert pod["metadata"]["annotations"]["fleet.io/gpu-indices"] == ",".join(map(str, gpus))

    fleet.wait_state("sweep", "Running")
    controller.finish(NAMESPACE, name)
    done = fleet.wait_state("sweep", "Succeeded", "Failed")
    assert done["state"] == "Succeeded"


def test_a_cancelled_jobset_is_deleted_with_its_pods(
    fleet: Fleet, plane: ControlPlane, controller: JobSetController
) -> None:
    fleet.submit(submission("gone", replicas=1, parallelism=2))
    job = fleet.wait_state("gone", "Running")
    assert len(pods_of(plane, job["uid"])) == 2
    fleet.request("DELETE", f"/api/v1/jobs/{NAMESPACE}/gone")
    fleet.wait_state("gone", "Cancelled")
    name = member_object_name(f"{NAMESPACE}/gone")
    wait_for(
        lambda: all(j["metadata"]["name"] != name for j in jobsets(plane)), "the JobSet deleted"
    )
    wait_for(lambda: not pods_of(plane, job["uid"]), "its pods deleted")


def trainjob(name: str, *, nodes: int, gpus: int) -> str:
    policy = {
        "apiVersion": "policy.one.alibabacloud.com/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"resourceSelectors": [{**TRAINJOB, "name": name}]},
    }
    job = {
        **TRAINJOB,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {
                "numNodes": nodes,
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": gpus}},
            },
        },
    }
    return yaml.safe_dump_all([policy, job])


def test_a_trainjob_runs_on_its_own_runtime_on_the_planned_nodes_and_succeeds(
    fleet: Fleet, plane: ControlPlane, controller: JobSetController
) -> None:
    assert fleet.submit(RUNTIME.read_text())["runtimes"] == [
        "ClusterTrainingRuntime/torch-distributed"
    ]
    fleet.submit(trainjob("llm", nodes=3, gpus=2))
    job = fleet.wait_state("llm", "Dispatched", "Running")
    name = member_object_name(f"{NAMESPACE}/llm")
    created = wait_for(
        lambda: plane.admin.get(f"{TRAINER_API}/namespaces/{NAMESPACE}/trainjobs/{name}"),
        "the TrainJob in the member",
    )
    assert created["spec"]["runtimeRef"] == {
        "name": name,
        "kind": "TrainingRuntime",
        "apiGroup": "trainer.kubeflow.org",
    }
    assert "fleet.io/training-runtime" not in created["metadata"]["annotations"]
    runtime = plane.admin.get(f"{TRAINER_API}/namespaces/{NAMESPACE}/trainingruntimes/{name}")
    (owner,) = runtime["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("TrainJob", created["metadata"]["uid"])
    (node,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert node["template"]["spec"]["template"]["spec"]["schedulerName"] == "fleet-scheduler"
    # The registered runtime itself is never written into the member.
    assert plane.admin.items(f"{TRAINER_API}/clustertrainingruntimes") == []

    def all_bound() -> list[dict[str, Any]] | None:
        pods = pods_of(plane, job["uid"])
        return pods if len(pods) == 3 and all(p["spec"].get("nodeName") for p in pods) else None

    pods = wait_for(all_bound, "the TrainJob's 3 pods bound")
    planned = {p["replica"]: (p["node"], p["gpus"]) for p in job["placement"]}
    for pod in pods:
        index = pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
        node_name, gpus = planned[f"node-{index}"]
        assert pod["spec"]["nodeName"] == node_name
        assert len(gpus) == 2
    fleet.wait_state("llm", "Running")
    controller.finish(NAMESPACE, name)
    assert fleet.wait_state("llm", "Succeeded", "Failed")["state"] == "Succeeded"


def test_a_cancelled_trainjob_is_deleted_with_its_pods(
    fleet: Fleet, plane: ControlPlane, controller: JobSetController
) -> None:
    fleet.submit(RUNTIME.read_text())
    fleet.submit(trainjob("stop", nodes=2, gpus=1))
    job = fleet.wait_state("stop", "Running")
    assert len(pods_of(plane, job["uid"])) == 2
    fleet.request("DELETE", f"/api/v1/jobs/{NAMESPACE}/stop")
    fleet.wait_state("stop", "Cancelled")
    name = member_object_name(f"{NAMESPACE}/stop")
    path = f"{TRAINER_API}/namespaces/{NAMESPACE}/trainjobs"
    wait_for(
        lambda: all(t["metadata"]["name"] != name for t in plane.admin.items(path)),
        "the TrainJob deleted",
    )
    wait_for(lambda: not pods_of(plane, job["uid"]), "its pods deleted")
