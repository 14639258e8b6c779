"""Volcano Jobs on a real member: dispatched, bound to the planned nodes, run, ended, cancelled.

The member is the ``alpha`` control plane of the ``members`` fixture, which
has the real Volcano CRDs (``batch.volcano.sh`` Job, ``scheduling.volcano.sh``
PodGroup), cleaned before each test by ``clean_members`` and running the
session's real controllers (``operators``: KWOK plays the kubelets, the
garbage collector deletes what a deleted job owned).  In place of Volcano's
controller, which cannot be built here, runs the STAND-IN of
:mod:`tests.kube.standins.volcano`: it makes the PodGroup and the pods as
Volcano's job controller names and labels them and reports
``status.state.phase``, the task and job policies included.  Fleet runs
with its MemberCluster listing ``batch.volcano.sh/v1alpha1`` ``Job`` and is
given the Volcano document's jobs as written (``policies/jobs/volcano.yaml``,
namespace ``default``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest
import yaml

from fleet.clusters.base import member_object_name
from fleet.service.settings import POLICIES
from tests.kube.conftest import Fleet, member_document
from tests.kube.controlplane import ControlPlane, wait_for
from tests.kube.real_operator import MemberControllers
from tests.kube.standins.volcano import VolcanoStandIn

pytestmark = pytest.mark.slow

NAMESPACE = "default"
SEED = POLICIES / "jobs" / "volcano.yaml"
JOBS = f"/apis/batch.volcano.sh/v1alpha1/namespaces/{NAMESPACE}/jobs"
PODGROUPS = f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{NAMESPACE}/podgroups"
QUOTA = """\
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {name: volcano-tests}
spec:
  root:
    name: root
    min: {nvidia.com/gpu: 8, cpu: 64, memory: 512Gi, kube-queue/max-jobs: 100}
    max: {nvidia.com/gpu: 8, cpu: 64, memory: 512Gi, kube-queue/max-jobs: 100}
    children:
      - name: team-a
        min: {nvidia.com/gpu: 8, cpu: 64, memory: 512Gi, kube-queue/max-jobs: 100}
        max: {nvidia.com/gpu: 8, cpu: 64, memory: 512Gi, kube-queue/max-jobs: 100}
        namespaces: [team-a, default]
"""


@pytest.fixture
def alpha(
    members: dict[str, ControlPlane], operators: dict[str, MemberControllers]
) -> Iterator[tuple[ControlPlane, VolcanoStandIn]]:
    """The alpha member, cleaned, its controllers running, and the stand-in beside them."""
    plane = members["alpha"]
    standin = VolcanoStandIn(plane.admin).start()
    yield plane, standin
    standin.stop()


@pytest.fixture
def fleet(alpha: tuple[ControlPlane, VolcanoStandIn], fleet_factory: Any) -> Fleet:
    plane = alpha[0]
    document = member_document("alpha", plane.kubeconfig(), "alpha")
    document["spec"]["kinds"] = [
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"},
        {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job"},
    ]
    return cast(Fleet, fleet_factory([document], QUOTA))


def seed(*names: str) -> str:
    """The policy of the Volcano document's file and the jobs named."""
    docs = [d for d in yaml.safe_load_all(SEED.read_text(encoding="utf-8")) if d]
    return yaml.safe_dump_all([docs[0], *(d for d in docs[1:] if d["metadata"]["name"] in names)])


def job_state(fleet: Fleet, name: str, *states: str, timeout: float = 60.0) -> dict[str, Any]:
    def reached() -> dict[str, Any] | None:
        job = dict(fleet.request("GET", f"/api/v1/jobs/{NAMESPACE}/{name}"))
        return job if job["state"] in states else None

    try:
        return dict(wait_for(reached, f"job {name} in {states}", timeout))
    except AssertionError as e:
        raise AssertionError(f"{e}\n{fleet.log_tail()}") from e


def member_job(plane: ControlPlane, name: str) -> dict[str, Any] | None:
    found = [j for j in plane.admin.items(JOBS) if j["metadata"]["name"] == name]
    return found[0] if found else None


def pods_of(plane: ControlPlane, uid: str) -> list[dict[str, Any]]:
    return plane.admin.items(
        f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=f"fleet.io/job-uid={uid}"
    )


def bound(plane: ControlPlane, uid: str, count: int) -> list[dict[str, Any]] | None:
    pods = pods_of(plane, uid)
    return pods if len(pods) == count and all(p["spec"].get("nodeName") for p in pods) else None


def test_the_mpi_job_runs_on_its_planned_nodes_and_completes_when_its_master_does(
    fleet: Fleet, alpha: tuple[ControlPlane, VolcanoStandIn]
) -> None:
    plane, standin = alpha
    fleet.submit(seed("lm-mpi-job"))
    job = job_state(fleet, "lm-mpi-job", "Dispatched", "Running")
    assert job["cluster"] == "alpha"
    object_name = member_object_name(f"{NAMESPACE}/lm-mpi-job")
    created = wait_for(lambda: member_job(plane, object_name), "the Volcano Job in the member")
    spec = created["spec"]
    assert created["metadata"]["labels"]["fleet.io/job-uid"] == job["uid"]
    assert [(t["name"], t["replicas"]) for t in spec["tasks"]] == [
        ("mpimaster", 1),
        ("mpiworker", 3),
    ]
    assert spec["minAvailable"] == 4 and spec["schedulerName"] == "fleet-scheduler"
    assert spec["plugins"] == {"ssh": [], "svc": []}
    for task in spec["tasks"]:
        assert task["template"]["spec"]["schedulerName"] == "fleet-scheduler"

    group = wait_for(lambda: plane.admin.items(PODGROUPS) or None, "the stand-in's PodGroup")
    assert group[0]["spec"]["minMember"] == 4

    pods = wait_for(lambda: bound(plane, job["uid"], 4), "the job's four pods bound")
    planned = {
        p["replica"]: p["node"] for p in job_state(fleet, "lm-mpi-job", "Running")["placement"]
    }
    seen = {}
    for pod in pods:
        labels, annotations = pod["metadata"]["labels"], pod["metadata"]["annotations"]
        replica = annotations["fleet.io/replica"]
        assert replica == f"{labels['volcano.sh/task-spec']}-{labels['volcano.sh/task-index']}"
        assert pod["metadata"]["name"] == f"{object_name}-{replica}"
        seen[replica] = pod["spec"]["nodeName"]
    assert seen == planned
    assert sorted(planned) == ["mpimaster-0", "mpiworker-0", "mpiworker-1", "mpiworker-2"]

    # mpimaster's TaskCompleted -> CompleteJob: the member says Completed, Fleet Succeeded.
    standin.finish(NAMESPACE, object_name, "mpimaster")
    done = job_state(fleet, "lm-mpi-job", "Succeeded")
    assert done["placement"] == []
    assert (member_job(plane, object_name) or {})["status"]["state"]["phase"] == "Completed"
    assert not standin.errors, standin.errors[-3:]


def test_an_evicted_pod_restarts_the_job_in_place_and_cancel_deletes_it_with_its_pods(
    fleet: Fleet, alpha: tuple[ControlPlane, VolcanoStandIn]
) -> None:
    plane, standin = alpha
    fleet.submit(seed("tensorflow-benchmark"))
    job = job_state(fleet, "tensorflow-benchmark", "Running")
    object_name = member_object_name(f"{NAMESPACE}/tensorflow-benchmark")
    first = wait_for(lambda: bound(plane, job["uid"], 3), "the job's three pods bound")
    nodes = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in first}

    # PodEvicted -> RestartJob: the pods are made again and bound to the same nodes.
    standin.evict(NAMESPACE, f"{object_name}-worker-1")
    wait_for(
        lambda: (
            (member_job(plane, object_name) or {}).get("status", {}).get("retryCount") == 1 or None
        ),
        "the job restarted",
    )
    again = wait_for(
        lambda: (
            pods
            if (pods := bound(plane, job["uid"], 3))
            and {p["metadata"]["uid"] for p in pods}.isdisjoint(p["metadata"]["uid"] for p in first)
            else None
        ),
        "new pods bound",
    )
    assert {p["metadata"]["name"]: p["spec"]["nodeName"] for p in again} == nodes
    running = job_state(fleet, "tensorflow-benchmark", "Running")
    assert "Restarting" in [e["reason"] for e in running["events"]]

    fleet.request("DELETE", f"/api/v1/jobs/{NAMESPACE}/tensorflow-benchmark")
    job_state(fleet, "tensorflow-benchmark", "Cancelled")
    wait_for(lambda: member_job(plane, object_name) is None, "the Volcano Job deleted")
    wait_for(lambda: not pods_of(plane, job["uid"]), "its pods deleted")
    wait_for(lambda: not plane.admin.items(PODGROUPS), "its PodGroup collected")
    assert not standin.errors, standin.errors[-3:]
