"""Fleet drives real members: dispatch, binding, status, completion, preemption, node health.

Every test runs ``fleet serve`` against the two control planes of the
``members`` fixture, with the real training operator and KWOK in each
(``operators``), and speaks to it through its HTTP API only; what happens
in the members is read from their API servers.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

import pytest
import yaml

from fleet.clusters.base import member_object_name
from tests.kube.conftest import (
    NAMESPACE,
    NODES,
    Fleet,
    member_document,
    pods_of,
    pytorchjobs,
    submission,
)
from tests.kube.controlplane import ApiError, ControlPlane, wait_for
from tests.kube.real_operator import MemberControllers, lose_node

pytestmark = pytest.mark.slow


def the_job(plane: ControlPlane, name: str) -> dict[str, Any] | None:
    found = [j for j in pytorchjobs(plane) if j["metadata"]["name"] == name]
    return found[0] if found else None


def bound_pods(plane: ControlPlane, uid: str, count: int) -> list[dict[str, Any]] | None:
    pods = pods_of(plane, uid)
    ok = len(pods) == count and all(p["spec"].get("nodeName") for p in pods)
    return pods if ok else None


def test_a_job_runs_in_its_member_on_the_planned_nodes_and_gpus_and_releases_them(
    fleet_factory: Any, members: dict[str, ControlPlane], operators: dict[str, MemberControllers]
) -> None:
    fleet: Fleet = fleet_factory()
    fleet.submit(submission("train", workers=2, gpus=2))
    job = fleet.wait_state("train", "Dispatched", "Running")
    cluster = job["cluster"]
    plane = members[cluster]
    object_name = member_object_name(f"{NAMESPACE}/train")

    created = wait_for(lambda: the_job(plane, object_name), "the PyTorchJob in the member")
    meta = created["metadata"]
    assert meta["labels"]["fleet.io/job-uid"] == job["uid"]
    assert meta["labels"]["fleet.io/cluster"] == cluster
    assert meta["labels"]["fleet.io/queue"] == "team-a"
    assert meta["annotations"]["fleet.io/job"] == f"{NAMESPACE}/train"
    planned = {p["replica"]: (p["node"], p["gpus"]) for p in job["placement"]}
    assert json.loads(meta["annotations"]["fleet.io/placement"]) == [
        {"pod": r, "node": n, "gpus": g} for r, (n, g) in planned.items()
    ]
    worker = created["spec"]["pytorchReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 2
    template = worker["template"]["spec"]
    assert template["schedulerName"] == "fleet-scheduler"
    term = template["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        for node in sorted({n for n, _ in planned.values()})
    ]
    # The other member got nothing.
    other = members[next(n for n in members if n != cluster)]
    assert pytorchjobs(other) == []

    pods = wait_for(lambda: bound_pods(plane, job["uid"], 2), "both pods bound")
    seen = {}
    for pod in pods:
        annotations = pod["metadata"]["annotations"]
        replica = annotations["fleet.io/replica"]
        gpus = [int(g) for g in annotations["fleet.io/gpu-indices"].split(",")]
        seen[replica] = (pod["spec"]["nodeName"], gpus)
        index = pod["metadata"]["labels"]["training.kubeflow.org/replica-index"]
        assert replica == f"Worker-{index}"
    assert seen == planned

    fleet.wait_state("train", "Running")
    gpus = fleet.clusters_view()[cluster]["gpus"]
    assert gpus["used"] == 4

    operators[cluster].finish(NAMESPACE, object_name)
    done = fleet.wait_state("train", "Succeeded")
    assert done["placement"] == []
    assert fleet.clusters_view()[cluster]["gpus"]["used"] == 0
    queue = fleet.request("GET", "/api/v1/queues/team-a")
    assert queue.get("used", {}).get("nvidia.com/gpu") in (None, "0")


def test_a_failed_pytorchjob_fails_the_job_with_the_members_reason(
    fleet_factory: Any, members: dict[str, ControlPlane], operators: dict[str, MemberControllers]
) -> None:
    fleet: Fleet = fleet_factory()
    fleet.submit(submission("crash", workers=1, gpus=1, restart_policy="Never"))
    job = fleet.wait_state("crash", "Running")
    operators[job["cluster"]].finish(
        NAMESPACE, member_object_name(f"{NAMESPACE}/crash"), succeeded=False
    )
    failed = fleet.wait_state("crash", "Failed")
    assert "PyTorchJob failed" in failed["events"][-1]["message"]
    assert fleet.clusters_view()[job["cluster"]]["gpus"]["used"] == 0


def test_a_new_run_of_an_ended_jobs_name_replaces_its_pytorchjob_in_the_member(
    fleet_factory: Any, members: dict[str, ControlPlane], operators: dict[str, MemberControllers]
) -> None:
    """A name comes back once its job ended: the ended copy makes way for the new run's."""
    fleet: Fleet = fleet_factory()
    fleet.submit(submission("again", workers=1, gpus=1, clusters=["alpha"], restart_policy="Never"))
    first = fleet.wait_state("again", "Running")
    object_name = member_object_name(f"{NAMESPACE}/again")
    operators["alpha"].finish(NAMESPACE, object_name, succeeded=False)
    fleet.wait_state("again", "Failed")
    answer = fleet.submit(submission("again", workers=2, gpus=1, clusters=["alpha"]))
    second = answer["jobs"][0]["uid"]
    assert second != first["uid"]
    running = fleet.wait_state("again", "Running")
    assert running["uid"] == second and running["cluster"] == "alpha"

    def replaced() -> bool:
        found = [j for j in pytorchjobs(members["alpha"]) if j["metadata"]["name"] == object_name]
        return [j["metadata"]["labels"]["fleet.io/job-uid"] for j in found] == [second]

    wait_for(replaced, "the new run's PyTorchJob in place of the ended one")


def test_priority_preemption_deletes_the_victim_in_its_member_before_the_preemptor_runs(
    fleet_factory: Any, members: dict[str, ControlPlane], operators: dict[str, MemberControllers]
) -> None:
    fleet: Fleet = fleet_factory()
    fleet.submit(submission("low", workers=2, gpus=4, priority_class="test"))
    low = fleet.wait_state("low", "Running")
    victim_plane = members[low["cluster"]]
    low_name = member_object_name(f"{NAMESPACE}/low")
    assert the_job(victim_plane, low_name) is not None

    # The queue's quota is 8 GPUs, all held by `low`: `high` can only preempt.
    fleet.submit(submission("high", workers=2, gpus=4, priority_class="prod"))
    wait_for(lambda: the_job(victim_plane, low_name) is None, "the victim deleted in its member")
    wait_for(lambda: not pods_of(victim_plane, low["uid"]), "the victim's pods gone")
    high = fleet.wait_state("high", "Running")
    assert high["placement"]
    low_now = fleet.job("low")
    assert low_now["state"] == "Queued"
    assert any(e["reason"] == "Preempted" for e in low_now["events"])


def test_a_preemptor_is_bound_to_the_victims_gpus_only_once_the_victims_pods_are_gone(
    fleet_factory: Any, members: dict[str, ControlPlane], operators: dict[str, MemberControllers]
) -> None:
    fleet: Fleet = fleet_factory()
    fleet.submit(submission("slow-low", workers=2, gpus=4, priority_class="test"))
    low = fleet.wait_state("slow-low", "Running")
    cluster = low["cluster"]
    plane = members[cluster]
    victims = wait_for(lambda: bound_pods(plane, low["uid"], 2), "the victim's pods bound")
    hold = {"metadata": {"finalizers": ["fleet.test/hold"]}}
    paths = [f"/api/v1/namespaces/{NAMESPACE}/pods/{p['metadata']['name']}" for p in victims]
    release = {"metadata": {"finalizers": None}}
    try:
        for path in paths:  # the pods will linger after their deletion, as slow pods do
            plane.admin.request("PATCH", path, hold, content_type="application/merge-patch+json")

        fleet.submit(
            submission("fast-high", workers=2, gpus=4, priority_class="prod", clusters=[cluster])
        )
        high = fleet.wait_state("fast-high", "Dispatched", "Running")
        wait_for(
            lambda: (
                all(p["metadata"].get("deletionTimestamp") for p in pods_of(plane, low["uid"]))
                or None
            ),
            "the victim's pods being deleted",
        )
        # The operator creates a job's pods one after the other: wait for both.
        waiting = wait_for(
            lambda: pods if len(pods := pods_of(plane, high["uid"])) == 2 else None,
            "the preemptor's two pods",
        )
        time.sleep(2)  # Fleet has seen them; it must not bind them yet
        assert [p["spec"].get("nodeName") for p in pods_of(plane, high["uid"])] == [None, None]
        reasons = [
            e["message"]
            for e in plane.admin.items(f"/api/v1/namespaces/{NAMESPACE}/events")
            if e["reason"] == "FailedScheduling"
            and e["involvedObject"]["name"] in {p["metadata"]["name"] for p in waiting}
        ]
        assert reasons and all("still held by" in m for m in reasons), reasons
    finally:  # held pods left behind would hold their GPUs for every later test
        for path in paths:
            with contextlib.suppress(ApiError):
                plane.admin.request(
                    "PATCH", path, release, content_type="application/merge-patch+json"
                )
    bound = wait_for(lambda: bound_pods(plane, high["uid"], 2), "the preemptor's pods bound")
    planned = {(p["node"], tuple(p["gpus"])) for p in fleet.job("fast-high")["placement"]}
    got = {
        (
            p["spec"]["nodeName"],
            tuple(int(g) for g in p["metadata"]["annotations"]["fleet.io/gpu-indices"].split(",")),
        )
        for p in bound
    }
    assert got == planned


def test_an_incremental_job_that_grows_gets_its_new_pods_in_its_member(
    fleet_factory: Any, members: dict[str, ControlPlane], operators: dict[str, MemberControllers]
) -> None:
    fleet: Fleet = fleet_factory()
    fleet.submit(submission("blocker", workers=1, gpus=4, clusters=["alpha"]))
    fleet.wait_state("blocker", "Running")
    # No Gang: the job starts with the worker that fits now, the other comes later.
    policy, job = yaml.safe_load_all(submission("grows", workers=2, gpus=4, clusters=["alpha"]))
    del policy["spec"]["placement"]["replicaScheduling"]["customSchedulingType"]
    fleet.submit(yaml.safe_dump_all([policy, job]))
    grows = fleet.wait_state("grows", "Running")
    plane = members["alpha"]
    name = member_object_name(f"{NAMESPACE}/grows")
    first = wait_for(lambda: the_job(plane, name), "the PyTorchJob in alpha")
    assert first["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
    wait_for(lambda: bound_pods(plane, grows["uid"], 1), "its first pod bound")

    operators["alpha"].finish(NAMESPACE, member_object_name(f"{NAMESPACE}/blocker"))
    grown = wait_for(
        lambda: (
            the_job(plane, name)
            if (the_job(plane, name) or {}).get("spec", {})["pytorchReplicaSpecs"]["Worker"][
                "replicas"
            ]
            == 2
            else None
        ),
        "the PyTorchJob grown to two workers",
    )
    placement = json.loads(grown["metadata"]["annotations"]["fleet.io/placement"])
    assert [p["pod"] for p in placement] == ["Worker-0", "Worker-1"]
    pods = wait_for(lambda: bound_pods(plane, grows["uid"], 2), "both pods bound")
    planned = {p["replica"]: (p["node"], p["gpus"]) for p in fleet.job("grows")["placement"]}
    assert len(planned) == 2
    for pod in pods:
        annotations = pod["metadata"]["annotations"]
        node, gpus = planned[annotations["fleet.io/replica"]]
        assert pod["spec"]["nodeName"] == node
        assert [int(g) for g in annotations["fleet.io/gpu-indices"].split(",")] == gpus
    assert any(e["reason"] == "Grew" for e in fleet.job("grows")["events"])


def test_a_node_made_not_ready_takes_its_cells_out_of_allocation(
    fleet_factory: Any, members: dict[str, ControlPlane], operators: dict[str, MemberControllers]
) -> None:
    fleet: Fleet = fleet_factory()
    # alpha loses one of its two nodes (its kubelet is gone): a gang of two
    # 4-GPU pods fits only in beta.
    lose_node(members["alpha"], NODES["alpha"][0])
    members["beta"].cordon(NODES["beta"][1])  # and beta loses one until it is uncordoned

    def both_bad() -> bool:
        view = fleet.clusters_view()
        return bool(view["alpha"]["gpus"]["free"] == 4 and view["beta"]["gpus"]["free"] == 4)

    wait_for(both_bad, "one node of each member out of allocation")
    fleet.submit(submission("wide", workers=2, gpus=4))
    waiting = fleet.wait_state("wide", "Queued")
    assert waiting["state"] == "Queued"
    members["beta"].cordon(NODES["beta"][1], False)
    job = fleet.wait_state("wide", "Running")
    assert job["cluster"] == "beta"
    assert {p["node"] for p in job["placement"]} == set(NODES["beta"])


def test_a_pod_of_no_admitted_job_stays_pending_with_an_event_saying_why(
    fleet_factory: Any, members: dict[str, ControlPlane], operators: dict[str, MemberControllers]
) -> None:
    fleet: Fleet = fleet_factory()
    wait_for(lambda: fleet.clusters_view()["alpha"]["health"] == "Healthy", "alpha ready")
    admin = members["alpha"].admin
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "stray", "namespace": NAMESPACE},
        "spec": {
            "schedulerName": "fleet-scheduler",
            "containers": [{"name": "c", "image": "example/train:1"}],
        },
    }
    admin.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod)

    def event() -> list[dict[str, Any]]:
        return [
            e
            for e in admin.items(f"/api/v1/namespaces/{NAMESPACE}/events")
            if e["involvedObject"]["name"] == "stray"
        ]

    found = wait_for(event, "an event on the stray pod")
    assert found[0]["reason"] == "FailedScheduling"
    assert "belongs to no job that Fleet admitted" in found[0]["message"]
    assert not admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods/stray")["spec"].get("nodeName")


def test_a_member_without_the_crd_or_with_refused_credentials_is_not_ready_and_gets_nothing(
    fleet_factory: Any,
    members: dict[str, ControlPlane],
    operators: dict[str, MemberControllers],
    tmp_path: Any,
) -> None:
    alpha = members["alpha"]
    refused = member_document("refused", alpha.kubeconfig("wrong-token"), "alpha")
    forbidden = member_document("forbidden", alpha.kubeconfig("nobody-token"), "alpha")
    fleet: Fleet = fleet_factory([refused, forbidden])
    view = fleet.clusters_view()
    assert view["refused"]["health"] == "Unreachable"
    assert "HTTP 401" in view["refused"]["message"]
    assert view["forbidden"]["health"] == "Unreachable"
    assert "HTTP 403" in view["forbidden"]["message"]
    assert "forbidden" in view["forbidden"]["message"]
    fleet.submit(submission("nowhere", workers=1, gpus=1))
    assert fleet.wait_state("nowhere", "Queued")["cluster"] is None
    assert pytorchjobs(alpha) == []
