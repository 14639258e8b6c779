"""Every kind of the training operator v1, end to end on real members: PyTorchJob, TFJob, MPIJob.

Each test runs ``fleet serve`` with the two members of the ``members``
fixture, whose MemberClusters list the three kinds (``spec.kinds``), and the
real Kubeflow training operator v1.8.1 and KWOK in each (``operators``):
Fleet creates the job in the member it chose, the operator makes its pods,
Fleet binds them to the nodes and GPUs it planned, KWOK runs them, and the
operator's own conditions bring the job to Running and then, once the pods'
containers exit (:func:`~tests.kube.real_operator.end_pods`, as a kubelet
reports it), to Succeeded or Failed in Fleet.  A cancellation deletes the
member's object and its pods; ``fleet serve`` killed mid-dispatch and started
again leaves exactly one object with one pod per planned replica.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml

from fleet.clusters.base import member_object_name
from tests.kube.conftest import NAMESPACE, Fleet, member_document, pods_of
from tests.kube.controlplane import ControlPlane, wait_for
from tests.kube.real_operator import MemberControllers, end_pods

pytestmark = pytest.mark.slow

#: kind -> (plural, replica-spec field, container name, roles and their pods)
KINDS: dict[str, tuple[str, str, str, tuple[tuple[str, int], ...]]] = {
    "PyTorchJob": ("pytorchjobs", "pytorchReplicaSpecs", "pytorch", (("Master", 1), ("Worker", 2))),
    "TFJob": ("tfjobs", "tfReplicaSpecs", "tensorflow", (("PS", 1), ("Worker", 2))),
    "MPIJob": ("mpijobs", "mpiReplicaSpecs", "mpi", (("Launcher", 1), ("Worker", 2))),
}


def documents(members: dict[str, ControlPlane]) -> list[dict[str, Any]]:
    """Both members, each running the three kinds."""
    out = []
    for name, plane in members.items():
        doc = member_document(name, plane.kubeconfig(), name)
        doc["spec"]["kinds"] = [{"apiVersion": "kubeflow.org/v1", "kind": k} for k in KINDS]
        out.append(doc)
    return out


def submission(kind: str, name: str, *, restart_policy: str = "OnFailure") -> str:
    """A PropagationPolicy and the ``kind`` job it selects, 1 GPU a pod, admitted whole."""
    _, field, container, roles = KINDS[kind]
    policy = {
        "apiVersion": "policy.one.alibabacloud.com/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "resourceSelectors": [{"apiVersion": "kubeflow.org/v1", "kind": kind, "name": name}],
            "placement": {
                "replicaScheduling": {
                    "replicaSchedulingType": "Divided",
                    "customSchedulingType": "Gang",
                }
            },
        },
    }
    spec = {
        role: {
            "replicas": count,
            "restartPolicy": restart_policy,
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": container,
                            "image": "example/train:1",
                            "resources": {"limits": {"nvidia.com/gpu": 1}},
                        }
                    ]
                }
            },
        }
        for role, count in roles
    }
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {field: spec},
    }
    return yaml.safe_dump_all([policy, job])


def pods_in_all(kind: str) -> int:
    return sum(count for _, count in KINDS[kind][3])


def objects_of(plane: ControlPlane, kind: str) -> list[dict[str, Any]]:
    return plane.admin.items(f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/{KINDS[kind][0]}")


def copies(members: dict[str, ControlPlane], kind: str, name: str) -> list[tuple[str, str]]:
    object_name = member_object_name(f"{NAMESPACE}/{name}")
    return [
        (cluster, obj["metadata"]["labels"]["fleet.io/job-uid"])
        for cluster, plane in members.items()
        for obj in objects_of(plane, kind)
        if obj["metadata"]["name"] == object_name
    ]


def running_pods(plane: ControlPlane, uid: str, count: int) -> list[dict[str, Any]] | None:
    pods = pods_of(plane, uid)
    running = [p for p in pods if p["status"].get("phase") == "Running"]
    return pods if len(pods) == count and len(running) == count else None


def assert_on_plan(job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
    """Every pod is its planned replica, on the planned node with the planned GPUs."""
    planned = {p["replica"]: (p["node"], p["gpus"]) for p in job["placement"]}
    seen = {}
    for pod in pods:
        annotations = pod["metadata"]["annotations"]
        replica = annotations["fleet.io/replica"]
        labels = pod["metadata"]["labels"]
        role = labels["training.kubeflow.org/replica-type"]
        assert replica.rsplit("-", 1)[0].lower() == role
        index = labels.get("training.kubeflow.org/replica-index", "0")  # an MPI launcher has none
        assert replica.rsplit("-", 1)[1] == index
        gpus = [int(g) for g in annotations["fleet.io/gpu-indices"].split(",")]
        seen[replica] = (pod["spec"]["nodeName"], gpus)
    assert seen == planned


def run(fleet: Fleet, members: dict[str, ControlPlane], kind: str, name: str, **kw: Any) -> Any:
    """Submit a ``kind`` job and wait until it is Running with every pod Running on plan."""
    fleet.submit(submission(kind, name, **kw))
    job = fleet.wait_state(name, "Running")
    plane = members[job["cluster"]]
    (found,) = [
        o
        for o in objects_of(plane, kind)
        if o["metadata"]["name"] == member_object_name(f"{NAMESPACE}/{name}")
    ]
    assert found["kind"] == kind
    assert found["metadata"]["labels"]["fleet.io/job-uid"] == job["uid"]
    pods = wait_for(
        lambda: running_pods(plane, job["uid"], pods_in_all(kind)), f"the {kind}'s pods Running"
    )
    assert_on_plan(job, pods)
    for pod in pods:
        owner = pod["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["controller"]) == (kind, True)  # made by the operator
    return job


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_job_runs_on_its_planned_nodes_and_succeeds_by_the_operators_status(
    fleet_factory: Any,
    members: dict[str, ControlPlane],
    operators: dict[str, MemberControllers],
    kind: str,
) -> None:
    fleet: Fleet = fleet_factory(documents(members))
    name = f"ok-{kind.lower()}"
    job = run(fleet, members, kind, name)
    cluster = job["cluster"]
    assert fleet.clusters_view()[cluster]["gpus"]["used"] == pods_in_all(kind)
    other = next(n for n in members if n != cluster)
    assert objects_of(members[other], kind) == []

    end_pods(members[cluster].admin, NAMESPACE, member_object_name(f"{NAMESPACE}/{name}"))
    done = fleet.wait_state(name, "Succeeded")
    assert done["placement"] == []
    assert fleet.clusters_view()[cluster]["gpus"]["used"] == 0


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_job_whose_pod_fails_fails_by_the_operators_status(
    fleet_factory: Any,
    members: dict[str, ControlPlane],
    operators: dict[str, MemberControllers],
    kind: str,
) -> None:
    fleet: Fleet = fleet_factory(documents(members))
    name = f"bad-{kind.lower()}"
    job = run(fleet, members, kind, name, restart_policy="Never")
    plane = members[job["cluster"]]
    end_pods(plane.admin, NAMESPACE, member_object_name(f"{NAMESPACE}/{name}"), succeeded=False)
    failed = fleet.wait_state(name, "Failed")
    assert f"{kind} failed" in failed["events"][-1]["message"]
    assert fleet.clusters_view()[job["cluster"]]["gpus"]["used"] == 0


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_cancelled_job_is_deleted_with_its_pods_from_its_member(
    fleet_factory: Any,
    members: dict[str, ControlPlane],
    operators: dict[str, MemberControllers],
    kind: str,
) -> None:
    fleet: Fleet = fleet_factory(documents(members))
    name = f"stop-{kind.lower()}"
    job = run(fleet, members, kind, name)
    plane = members[job["cluster"]]
    fleet.request("DELETE", f"/api/v1/jobs/{NAMESPACE}/{name}")
    fleet.wait_state(name, "Cancelled")
    wait_for(lambda: not copies(members, kind, name), f"the {kind} deleted in its member")
    wait_for(lambda: not pods_of(plane, job["uid"]), "its pods gone")
    assert fleet.clusters_view()[job["cluster"]]["gpus"]["used"] == 0


@pytest.mark.parametrize("kind", list(KINDS))
def test_fleet_killed_mid_dispatch_and_restarted_creates_nothing_twice(
    fleet_factory: Any,
    members: dict[str, ControlPlane],
    operators: dict[str, MemberControllers],
    kind: str,
) -> None:
    fleet: Fleet = fleet_factory(documents(members))
    name = f"crash-{kind.lower()}"
    uid = fleet.submit(submission(kind, name))["jobs"][0]["uid"]
    time.sleep(0.05)
    fleet.kill()
    fleet.start()
    job = fleet.wait_state(name, "Running")
    assert job["uid"] == uid
    plane = members[job["cluster"]]
    pods = wait_for(lambda: running_pods(plane, uid, pods_in_all(kind)), "every pod Running")
    time.sleep(0.5)  # a few loop iterations after the restart
    assert copies(members, kind, name) == [(job["cluster"], uid)]
    assert len(pods_of(plane, uid)) == pods_in_all(kind)
    assert_on_plan(job, pods)
    events = [e["reason"] for e in fleet.job(name)["events"]]
    assert events.count("Dispatched") == 1, events
