"""Crashes and surprises around dispatch to real members.

``fleet serve`` killed with SIGKILL at different moments of a dispatch and
started again leaves exactly one PyTorchJob per job; an object in the way
(same name, another uid) is reported on the job and never overwritten; a
job that keeps restarting, or whose node goes bad, fails over after its
``tolerationSeconds``.  The members run the real training operator and
KWOK, except in the two tests whose docstrings say "stand-in:" and why.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from fleet.clusters.base import member_object_name
from tests.kube.conftest import NAMESPACE, NODES, Fleet, pods_of, pytorchjobs, submission
from tests.kube.controlplane import ControlPlane, wait_for
from tests.kube.operator import Operator
from tests.kube.real_operator import MemberControllers

pytestmark = pytest.mark.slow


def copies(members: dict[str, ControlPlane], name: str) -> list[tuple[str, str]]:
    object_name = member_object_name(f"{NAMESPACE}/{name}")
    return [
        (cluster, job["metadata"]["labels"]["fleet.io/job-uid"])
        for cluster, plane in members.items()
        for job in pytorchjobs(plane)
        if job["metadata"]["name"] == object_name
    ]


@pytest.mark.parametrize("delay", [0.0, 0.02, 0.05, 0.1, 0.3])
def test_fleet_killed_mid_dispatch_and_restarted_leaves_exactly_one_pytorchjob(
    fleet_factory: Any,
    members: dict[str, ControlPlane],
    operators: dict[str, MemberControllers],
    delay: float,
) -> None:
    fleet: Fleet = fleet_factory()
    name = "crash"
    answer = fleet.submit(submission(name, workers=2, gpus=1))
    uid = answer["jobs"][0]["uid"]
    time.sleep(delay)
    fleet.kill()
    fleet.start()
    job = fleet.wait_state(name, "Running")
    assert job["uid"] == uid
    wait_for(lambda: copies(members, name), "the PyTorchJob")
    time.sleep(0.5)  # a few loop iterations after the restart
    assert copies(members, name) == [(job["cluster"], uid)]
    pods = members[job["cluster"]].admin.items(
        f"/api/v1/namespaces/{NAMESPACE}/pods", labelSelector=f"fleet.io/job-uid={uid}"
    )
    assert sorted(p["metadata"]["name"] for p in pods) == sorted(
        f"{member_object_name(f'{NAMESPACE}/{name}')}-worker-{i}" for i in range(2)
    )
    planned = {p["replica"]: p["node"] for p in job["placement"]}
    for pod in pods:
        replica = pod["metadata"]["annotations"]["fleet.io/replica"]
        assert pod["spec"]["nodeName"] == planned[replica]


def test_an_object_of_another_uid_in_the_way_is_a_conflict_and_is_left_alone(
    fleet_factory: Any, members: dict[str, ControlPlane], operators: dict[str, MemberControllers]
) -> None:
    name = "taken"
    object_name = member_object_name(f"{NAMESPACE}/{name}")
    stranger = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": object_name,
            "namespace": NAMESPACE,
            "labels": {"fleet.io/job-uid": "someone-else"},
        },
        "spec": {"pytorchReplicaSpecs": {}},
    }
    for op in operators.values():
        op.pause()
    for plane in members.values():
        plane.admin.request(
            "POST", f"/apis/kubeflow.org/v1/namespaces/{NAMESPACE}/pytorchjobs", stranger
        )
    fleet: Fleet = fleet_factory()
    fleet.submit(submission(name, workers=1, gpus=1))

    def conflict() -> bool:
        return any("someone-else" in e["message"] for e in fleet.job(name)["events"])

    wait_for(conflict, "the conflict reported on the job")
    wait_for(
        lambda: len([e for e in fleet.job(name)["events"] if "someone-else" in e["message"]]) == 2,
        "a conflict in each member",
    )
    time.sleep(0.5)  # no more attempts: the job waits, allowed nowhere
    job = fleet.job(name)
    assert job["state"] == "Queued"
    assert len([e for e in job["events"] if e["reason"] == "Admitted"]) == 2
    for plane in members.values():
        (found,) = [j for j in pytorchjobs(plane) if j["metadata"]["name"] == object_name]
        assert found["metadata"]["labels"] == {"fleet.io/job-uid": "someone-else"}
        assert found["spec"]["pytorchReplicaSpecs"] == {}


def test_a_job_that_keeps_restarting_fails_over_to_the_other_member(
    fleet_factory: Any, members: dict[str, ControlPlane], standin_operators: dict[str, Operator]
) -> None:
    """stand-in: the job must stay Restarting for longer than its toleration; the real
    operator restarts a failed pod at once, and the job runs again within a second."""
    operators = standin_operators
    fleet: Fleet = fleet_factory()
    fleet.submit(submission("flaky", workers=1, gpus=1, toleration=2, purge_mode="Directly"))
    first = fleet.wait_state("flaky", "Running")
    object_name = member_object_name(f"{NAMESPACE}/flaky")
    operators[first["cluster"]].restart(NAMESPACE, object_name)
    wait_for(
        lambda: fleet.job("flaky")["cluster"] not in (None, first["cluster"]), "the job moved", 30
    )
    moved = fleet.wait_state("flaky", "Running")
    restarting = [e for e in moved["events"] if e["reason"] == "Restarting"]
    assert restarting and restarting[0]["message"].startswith(f"in {first['cluster']}: ")
    assert restarting[0]["type"] == "Warning"
    wait_for(lambda: all(c != first["cluster"] for c, _ in copies(members, "flaky")), "purged")
    time.sleep(3)  # longer than the toleration: the new copy runs well, it stays
    job = fleet.job("flaky")
    assert (job["state"], job["cluster"]) == ("Running", moved["cluster"])
    assert len([e for e in job["events"] if "failed over" in e["message"]]) == 1


def test_a_job_on_a_node_gone_bad_is_preempted_and_runs_again_on_healthy_nodes(
    fleet_factory: Any, members: dict[str, ControlPlane], standin_operators: dict[str, Operator]
) -> None:
    """stand-in: the pods of a node made NotReady must go once Fleet deletes them; KWOK
    makes a Node it plays Ready again at once, and a Node whose kubelet is gone keeps its
    deleted pods Terminating (only a kubelet or a force deletion ends them)."""
    fleet: Fleet = fleet_factory()
    fleet.submit(submission("stranded", workers=1, gpus=4))
    first = fleet.wait_state("stranded", "Running")
    node = first["placement"][0]["node"]
    assert node in NODES[first["cluster"]]
    plane = members[first["cluster"]]
    plane.set_node_ready(node, False)

    def elsewhere() -> dict[str, Any] | None:
        job = fleet.job("stranded")
        placed = [p["node"] for p in job["placement"]]
        return job if job["state"] == "Running" and placed and node not in placed else None

    moved = wait_for(elsewhere, "the job running on a healthy node", 30)
    reasons = [(e["reason"], e["message"]) for e in moved["events"]]
    assert ("Preempted", f"node {node} of {first['cluster']} went bad") in reasons
    # The pods on the bad node were deleted before the job was queued again.
    old = [p for p in pods_of(plane, first["uid"]) if p["spec"].get("nodeName") == node]
    assert old == []
