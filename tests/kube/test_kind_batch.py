"""batch/v1 Jobs and MPIJobs v2beta1 on a real member, with a stand-in MPI operator.

Theory of operation: one control plane (``delta``) for the module, with
Fleet's member role, the MPIJob v2beta1 CRD of ``deploy/member/crds/``, the
``team-a`` namespace and two Nodes of 4 GPUs named as in its cell config;
the real controllers, started as :mod:`tests.kube.controllers` starts them:
kube-controller-manager with the Job controller and the garbage collector,
and KWOK managing every Node with the stages of ``tests/kube/kwok/stages.yaml``
but its ``pod-complete`` (which ends a batch Job's pod as soon as it runs),
replaced by ``pod-exit.yaml``: a running pod ends when the test annotates it
``fleet.test/exit-code`` (``0``: Succeeded, else Failed), so the test decides
when a pod ends and how.  The MPI operator cannot be built here: MPIJobs are
run by the **stand-in** :class:`~tests.kube.standins.mpi_operator.MPIOperator`,
which makes the launcher Job and the worker pods as the MPI operator names and
labels them; the launcher's pod comes from the real Job controller.

The member is not one of the session's (:mod:`tests.kube.conftest`): they
have MPIJob v1's CRD, which has the same name as v2beta1's, and run neither
the Job controller nor the ``pod-exit`` stage.

One ``fleet serve`` for the module, whose MemberCluster lists the kinds the
member runs (``spec.kinds``: batch/v1 Job and MPIJob v2beta1).  Each test
submits its jobs, reads what happens through Fleet's HTTP API and the
member's API server, and leaves no job running.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.clusters.base import member_object_name
from tests.kube.conftest import GPUS_PER_NODE, NAMESPACE, Fleet, member_document, pods_of
from tests.kube.controllers import (
    KWOK_DIR,
    Processes,
    kwok_stages,
    start_controller_manager,
    start_kwok,
    wait_node_ready,
)
from tests.kube.controlplane import ADMIN_TOKEN, ApiError, ControlPlane, wait_for
from tests.kube.standins.mpi_operator import MPIOperator

pytestmark = pytest.mark.slow

MEMBER = "delta"
NODES = (f"{MEMBER}-node-0", f"{MEMBER}-node-1")
EXIT = "fleet.test/exit-code"
JOBS = f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"
MPIJOBS = f"/apis/kubeflow.org/v2beta1/namespaces/{NAMESPACE}/mpijobs"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"


class Member:
    """The control plane, its controllers and the stand-in MPI operator."""

    def __init__(self, plane: ControlPlane, procs: Processes, mpi: MPIOperator) -> None:
        self.plane = plane
        self.procs = procs
        self.mpi = mpi

    def diagnostics(self) -> str:
        errors = "\n".join(self.mpi.errors[-10:])
        return f"{self.procs.tails()}\n--- stand-in MPI operator\n{errors}"


@pytest.fixture(scope="module")
def member(
    kube_bin: Path, controllers_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Member]:
    bin_dir = controllers_bin
    root = tmp_path_factory.mktemp("batch-member")
    plane = ControlPlane(MEMBER, kube_bin, root)
    procs = Processes(root)
    mpi = MPIOperator(plane.admin)
    try:
        plane.start()
        plane.install_crd("kubeflow.org_mpijobs-v2beta1.yaml")
        plane.install_rbac()
        plane.namespace(NAMESPACE)
        for node in NODES:
            plane.add_node(node, GPUS_PER_NODE)
        admin = plane.kubeconfig(ADMIN_TOKEN)
        stages = kwok_stages(
            root / "stages.yaml", without=["pod-complete"], adding=[KWOK_DIR / "pod-exit.yaml"]
        )
        start_kwok(procs, bin_dir, admin, stages=stages)
        start_controller_manager(procs, bin_dir, admin)
        for node in NODES:
            wait_node_ready(procs, plane, node)
        mpi.start()
        yield Member(plane, procs, mpi)
    finally:
        mpi.stop()
        procs.stop()
        plane.stop()


@pytest.fixture(scope="module")
def fleet(member: Member, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    document = member_document(MEMBER, member.plane.kubeconfig(), MEMBER)
    document["spec"]["kinds"] = [
        {"apiVersion": "batch/v1", "kind": "Job"},
        {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob"},
    ]
    fleet = Fleet(tmp_path_factory.mktemp("batch-fleet"), [document]).start()
    try:
        yield fleet
    finally:
        fleet.stop()


@pytest.fixture
def run(member: Member, fleet: Fleet) -> Iterator[Fleet]:
    """The module's Fleet; the controllers' and Fleet's logs are printed after the test
    (pytest shows them when it fails)."""
    yield fleet
    print(f"{member.diagnostics()}\n--- fleet\n{fleet.log_tail()}")


def policy(name: str, api_version: str, kind: str) -> dict[str, Any]:
    return {
        "apiVersion": "policy.one.alibabacloud.com/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "resourceSelectors": [{"apiVersion": api_version, "kind": kind, "name": name}],
            "placement": {"replicaScheduling": {"replicaSchedulingType": "Divided"}},
        },
    }


def template(gpus: int) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "example/shard:1",
        "resources": {"limits": {"nvidia.com/gpu": gpus}},
    }
    return {"spec": {"restartPolicy": "Never", "containers": [container]}}


def batch_job(name: str, *, gpus: int = 2, **spec: Any) -> str:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"template": template(gpus), **spec},
    }
    return yaml.safe_dump_all([policy(name, "batch/v1", "Job"), job])


def mpi_job(name: str, *, workers: int = 2, gpus: int = 2, **run_policy: Any) -> str:
    launcher = {"replicas": 1, "template": template(1)}
    worker = {"replicas": workers, "template": template(gpus)}
    job = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "slotsPerWorker": gpus,
            "runPolicy": {"cleanPodPolicy": "Running", **run_policy},
            "mpiReplicaSpecs": {"Launcher": launcher, "Worker": worker},
        },
    }
    return yaml.safe_dump_all([policy(name, "kubeflow.org/v2beta1", "MPIJob"), job])


def running_pods(plane: ControlPlane, uid: str, count: int) -> list[dict[str, Any]] | None:
    """The job's live pods once ``count`` of them run (none ended), else None."""
    pods = [p for p in pods_of(plane, uid) if p["status"].get("phase") != "Failed"]
    ok = len(pods) == count and all(p["status"].get("phase") == "Running" for p in pods)
    return pods if ok else None


def where(pod: dict[str, Any]) -> tuple[str, str, tuple[int, ...]]:
    """A pod's planned replica, node and GPUs, as Fleet bound it."""
    annotations = pod["metadata"]["annotations"]
    gpus = tuple(int(g) for g in annotations["fleet.io/gpu-indices"].split(","))
    return annotations["fleet.io/replica"], pod["spec"]["nodeName"], gpus


def planned(job: dict[str, Any]) -> dict[str, tuple[str, tuple[int, ...]]]:
    return {p["replica"]: (p["node"], tuple(p["gpus"])) for p in job["placement"]}


def end(plane: ControlPlane, pod: dict[str, Any], code: int) -> None:
    """The pod's containers exit with ``code`` (the pod-exit stage of KWOK plays it)."""
    plane.admin.request(
        "PATCH",
        f"{PODS}/{pod['metadata']['name']}",
        {"metadata": {"annotations": {EXIT: str(code)}}},
        content_type="application/merge-patch+json",
    )


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    found = [c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind]
    return found[0] if found and found[0]["status"] == "True" else None


def gone(plane: ControlPlane, path: str) -> bool:
    try:
        plane.admin.get(path)
    except ApiError as e:
        return e.status == 404
    return False


def test_an_indexed_job_runs_on_the_planned_gpus_and_completes(member: Member, run: Fleet) -> None:
    plane = member.plane
    run.submit(batch_job("indexed", parallelism=2, completions=2, completionMode="Indexed"))
    job = run.wait_state("indexed", "Running")
    assert job["cluster"] == MEMBER
    obj = plane.admin.get(f"{JOBS}/{member_object_name(f'{NAMESPACE}/indexed')}")
    assert obj["spec"]["parallelism"] == 2
    assert obj["spec"]["template"]["spec"]["schedulerName"] == "fleet-scheduler"
    pods = wait_for(lambda: running_pods(plane, job["uid"], 2), "both pods Running")
    seen = {}
    for pod in pods:
        replica, node, gpus = where(pod)
        index = pod["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]
        assert replica == f"main-{index}"
        seen[replica] = (node, gpus)
    assert seen == planned(job)
    assert run.clusters_view()[MEMBER]["gpus"]["used"] == 4

    for pod in pods:
        end(plane, pod, 0)
    done = run.wait_state("indexed", "Succeeded")
    assert done["placement"] == []
    assert condition(plane.admin.get(f"{JOBS}/{obj['metadata']['name']}"), "Complete")
    assert run.clusters_view()[MEMBER]["gpus"]["used"] == 0


def test_a_nonindexed_jobs_replacement_pod_takes_the_failed_pods_place(
    member: Member, run: Fleet
) -> None:
    """A pod that failed holds no planned pod: the one the Job controller makes instead
    is bound to the same node and GPUs, and the Job completes."""
    plane = member.plane
    run.submit(batch_job("retry", parallelism=2, completions=2, backoffLimit=1))
    job = run.wait_state("retry", "Running")
    first = wait_for(lambda: running_pods(plane, job["uid"], 2), "both pods Running")
    assert sorted(where(p)[0] for p in first) == ["main-0", "main-1"]
    failed = first[0]
    end(plane, failed, 1)

    def replaced() -> list[dict[str, Any]] | None:
        pods = running_pods(plane, job["uid"], 2)
        names = {p["metadata"]["name"] for p in pods or ()}
        return pods if pods and failed["metadata"]["name"] not in names else None

    pods = wait_for(replaced, "the failed pod's replacement Running")
    assert {where(p) for p in pods} == {where(p) for p in first}
    for pod in pods:
        end(plane, pod, 0)
    run.wait_state("retry", "Succeeded")


def test_a_job_whose_pod_fails_fails_with_the_job_controllers_message(
    member: Member, run: Fleet
) -> None:
    plane = member.plane
    run.submit(batch_job("crash", gpus=1, backoffLimit=0))
    job = run.wait_state("crash", "Running")
    (pod,) = wait_for(lambda: running_pods(plane, job["uid"], 1), "the pod Running")
    end(plane, pod, 3)
    failed = run.wait_state("crash", "Failed")
    message = failed["events"][-1]["message"]
    assert message.startswith("failed after running ")  # then what the member said
    assert ": Job failed: " in message and "backoff limit" in message
    assert run.clusters_view()[MEMBER]["gpus"]["used"] == 0


def test_cancel_deletes_the_job_and_its_pods(member: Member, run: Fleet) -> None:
    plane = member.plane
    run.submit(batch_job("cancel", parallelism=2))
    job = run.wait_state("cancel", "Running")
    wait_for(lambda: running_pods(plane, job["uid"], 2), "both pods Running")
    run.request("DELETE", f"/api/v1/jobs/{NAMESPACE}/cancel")
    name = member_object_name(f"{NAMESPACE}/cancel")
    wait_for(lambda: gone(plane, f"{JOBS}/{name}"), "the Job deleted in the member")
    wait_for(lambda: not pods_of(plane, job["uid"]), "the Job's pods gone")
    run.wait_state("cancel", "Cancelled")


def test_an_mpijob_runs_its_launcher_and_workers_on_the_planned_gpus(
    member: Member, run: Fleet
) -> None:
    plane = member.plane
    run.submit(mpi_job("pi", workers=2, gpus=2))
    job = run.wait_state("pi", "Running")
    name = member_object_name(f"{NAMESPACE}/pi")
    pods = wait_for(lambda: running_pods(plane, job["uid"], 3), "the launcher and workers")
    seen = {}
    for pod in pods:
        replica, node, gpus = where(pod)
        labels = pod["metadata"]["labels"]
        if labels["training.kubeflow.org/job-role"] == "launcher":
            assert replica == "Launcher-0"
            assert labels["batch.kubernetes.io/job-name"] == f"{name}-launcher"
        else:
            assert pod["metadata"]["name"] == f"{name}-worker-{replica.rsplit('-', 1)[1]}"
        seen[replica] = (node, gpus)
    assert seen == planned(job)

    (launcher,) = [p for p in pods if where(p)[0] == "Launcher-0"]
    end(plane, launcher, 0)
    run.wait_state("pi", "Succeeded")
    assert condition(plane.admin.get(f"{MPIJOBS}/{name}"), "Succeeded")
    assert run.clusters_view()[MEMBER]["gpus"]["used"] == 0


def test_cancelling_an_mpijob_deletes_its_launcher_job_and_every_pod(
    member: Member, run: Fleet
) -> None:
    plane = member.plane
    run.submit(mpi_job("pi-cancel", workers=1, gpus=4))
    job = run.wait_state("pi-cancel", "Running")
    wait_for(lambda: running_pods(plane, job["uid"], 2), "the launcher and the worker")
    name = member_object_name(f"{NAMESPACE}/pi-cancel")
    run.request("DELETE", f"/api/v1/jobs/{NAMESPACE}/pi-cancel")
    wait_for(lambda: gone(plane, f"{MPIJOBS}/{name}"), "the MPIJob deleted in the member")
    # The launcher Job is the MPIJob's: the garbage collector deletes it.
    wait_for(lambda: gone(plane, f"{JOBS}/{name}-launcher"), "the launcher Job collected")
    wait_for(lambda: not pods_of(plane, job["uid"]), "every pod gone")
    run.wait_state("pi-cancel", "Cancelled")
