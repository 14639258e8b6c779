"""The Kubernetes objects Fleet writes and reads, without a cluster; its errors; failover rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fleet.clusters.base import (
    ClusterConflict,
    ClusterRejected,
    ClusterUnavailable,
    DispatchedJob,
    JobRestarting,
    MemberReadiness,
    NodeHealth,
)
from fleet.clusters.kube import client, kubeconfig, objects
from fleet.clusters.kube.kubeconfig import KubeconfigPolicy
from fleet.clusters.kube.nodes import NodeTracker
from fleet.clusters.kube.pods import PodIndex
from fleet.core.failover import FailoverBook, Rule, rule_of
from fleet.core.placement import PodPlacement
from fleet.core.quota import QuotaNodeSpec, QuotaTree
from fleet.core.state import SchedulerState
from fleet.manifests.kinds import mpijob_v1, pytorchjob
from fleet.manifests.kinds.base import Phase
from fleet.manifests.kinds.kubeflow import REPLICA_INDEX_LABEL, REPLICA_TYPE_LABEL
from fleet.service.inbox import member_report


def dispatched(manifest: dict[str, Any], pods: tuple[PodPlacement, ...]) -> DispatchedJob:
    return DispatchedJob("team-a/train", "uid-1", "alpha", "team-a", pods, manifest)


MANIFEST: dict[str, Any] = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {
        "name": "train",
        "namespace": "team-a",
        "uid": "from-another-server",
        "resourceVersion": "7",
        "labels": {"team": "a"},
        "annotations": {"note": "kept"},
    },
    "spec": {
        "pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": {"spec": {"containers": [{"name": "m"}]}}},
            "Worker": {
                "replicas": 4,
                "template": {
                    "metadata": {"labels": {"role": "worker"}},
                    "spec": {
                        "containers": [{"name": "w"}],
                        "affinity": {
                            "nodeAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": {
                                    "nodeSelectorTerms": [
                                        {
                                            "matchExpressions": [
                                                {"key": "zone", "operator": "In", "values": ["a"]}
                                            ]
                                        }
                                    ]
                                }
                            }
                        },
                    },
                },
            },
        }
    },
    "status": {"conditions": []},
}
PODS = (
    PodPlacement("Master-0", "n0", (0,)),
    PodPlacement("Worker-0", "n0", (1, 2)),
    PodPlacement("Worker-1", "n1", (0, 1)),
)


def test_the_pytorchjob_has_the_deterministic_name_fleet_labels_and_placement() -> None:
    obj = objects.member_object(dispatched(MANIFEST, PODS))
    meta = obj["metadata"]
    assert meta["name"] == dispatched(MANIFEST, PODS).object_name
    assert meta["namespace"] == "team-a"
    assert "uid" not in meta and "resourceVersion" not in meta and "status" not in obj
    assert meta["labels"] == {
        "team": "a",
        "fleet.io/job-uid": "uid-1",
        "fleet.io/cluster": "alpha",
        "fleet.io/queue": "team-a",
    }
    assert meta["annotations"]["note"] == "kept"
    assert meta["annotations"]["fleet.io/job"] == "team-a/train"
    assert json.loads(meta["annotations"]["fleet.io/placement"]) == [
        {"pod": "Master-0", "node": "n0", "gpus": [0]},
        {"pod": "Worker-0", "node": "n0", "gpus": [1, 2]},
        {"pod": "Worker-1", "node": "n1", "gpus": [0, 1]},
    ]
    assert MANIFEST["metadata"]["uid"] == "from-another-server"  # the input is not changed


def test_replicas_are_the_placed_pods_and_affinity_adds_the_planned_nodes_to_every_term() -> None:
    spec = objects.member_object(dispatched(MANIFEST, PODS))["spec"]["pytorchReplicaSpecs"]
    assert spec["Master"]["replicas"] == 1
    assert spec["Worker"]["replicas"] == 2  # placed: 2 of the 4 asked (minAvailable)
    worker = spec["Worker"]["template"]
    assert worker["metadata"]["labels"] == {"role": "worker", "fleet.io/job-uid": "uid-1"}
    assert worker["spec"]["schedulerName"] == "fleet-scheduler"
    terms = worker["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    zone = {"key": "zone", "operator": "In", "values": ["a"]}
    assert terms == [
        {
            "matchExpressions": [zone],
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}],
        }
        for node in ("n0", "n1")
    ]
    master = spec["Master"]["template"]["spec"]["affinity"]["nodeAffinity"]
    assert master["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n0"]}]}
    ]


def test_a_replica_type_with_no_placed_pod_is_left_out() -> None:
    spec = objects.member_object(dispatched(MANIFEST, PODS[:1]))["spec"]["pytorchReplicaSpecs"]
    assert list(spec) == ["Master"]


def test_a_queue_name_that_is_no_label_value_is_left_out_of_the_labels() -> None:
    job = DispatchedJob("team-a/train", "uid-1", "alpha", "q" * 64, PODS, MANIFEST)
    assert "fleet.io/queue" not in objects.member_object(job)["metadata"]["labels"]


def condition(kind: str, status: str = "True", message: str = "") -> dict[str, str]:
    return {"type": kind, "status": status, "message": message}


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([], None),
        ([condition("Created")], Phase.CREATED),
        ([condition("Created"), condition("Running")], Phase.RUNNING),
        (
            [condition("Created"), condition("Running", "False"), condition("Restarting")],
            Phase.RESTARTING,
        ),
        ([condition("Running"), condition("Succeeded")], Phase.SUCCEEDED),
        ([condition("Failed", message="OOM"), condition("Running")], Phase.FAILED),
        ([condition("Suspended")], None),
    ],
    ids=["none", "created", "running", "restarting", "succeeded", "failed-wins", "unknown"],
)
def test_the_phase_of_a_pytorchjob_comes_from_its_true_conditions(
    conditions: list[dict[str, str]], expected: Phase | None
) -> None:
    obj = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "status": {"conditions": conditions},
    }
    assert objects.phase(obj)[0] is expected


@pytest.mark.parametrize(
    ("node", "healthy", "why"),
    [
        ({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, True, ""),
        (
            {
                "status": {
                    "conditions": [{"type": "Ready", "status": "False", "reason": "KubeletDown"}]
                }
            },
            False,
            "NotReady (KubeletDown)",
        ),
        (
            {
                "spec": {"unschedulable": True},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]},
            },
            False,
            "cordoned (unschedulable)",
        ),
        ({"status": {}}, False, "NotReady (no Ready condition)"),
    ],
    ids=["ready", "not-ready", "cordoned", "no-condition"],
)
def test_node_health(node: dict[str, Any], healthy: bool, why: str) -> None:
    assert objects.node_health(node) == (healthy, why)


@pytest.mark.parametrize(
    ("labels", "replica"),
    [
        ({REPLICA_TYPE_LABEL: "worker", REPLICA_INDEX_LABEL: "3"}, ("worker", 3)),
        ({REPLICA_TYPE_LABEL: "Master", REPLICA_INDEX_LABEL: "0"}, ("Master", 0)),
        ({REPLICA_TYPE_LABEL: "worker"}, None),
        ({REPLICA_TYPE_LABEL: "worker", REPLICA_INDEX_LABEL: "x"}, None),
        ({REPLICA_TYPE_LABEL: "worker", REPLICA_INDEX_LABEL: "²"}, None),
        ({REPLICA_TYPE_LABEL: "worker", REPLICA_INDEX_LABEL: "١"}, None),
        ({REPLICA_TYPE_LABEL: "worker", REPLICA_INDEX_LABEL: "9" * 5000}, None),
    ],
    ids=["worker", "master", "no-index", "word", "superscript", "arabic-indic", "5000-digits"],
)
def test_a_pod_is_matched_to_its_replica_by_the_operators_labels(
    labels: dict[str, str], replica: tuple[str, int] | None
) -> None:
    assert pytorchjob.KIND.replica({"metadata": {"labels": labels}}) == replica


@pytest.mark.parametrize(
    ("labels", "replica"),
    [
        ({REPLICA_TYPE_LABEL: "launcher"}, ("launcher", 0)),
        ({REPLICA_TYPE_LABEL: "worker", REPLICA_INDEX_LABEL: "1"}, ("worker", 1)),
        ({REPLICA_TYPE_LABEL: "worker"}, None),
    ],
    ids=["launcher", "worker", "worker-without-index"],
)
def test_the_mpijob_launcher_without_an_index_label_is_launcher_0(
    labels: dict[str, str], replica: tuple[str, int] | None
) -> None:
    """The training operator v1 labels an MPIJob's launcher pod with its type alone."""
    assert mpijob_v1.KIND.replica({"metadata": {"labels": labels}}) == replica


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (401, ClusterUnavailable),
        (403, ClusterUnavailable),
        (404, ClusterRejected),
        (409, ClusterConflict),
        (410, ClusterUnavailable),
        (422, ClusterRejected),
        (500, ClusterUnavailable),
        (429, ClusterUnavailable),
    ],
)
def test_api_errors_become_fleets_cluster_errors(status: int, kind: type[Exception]) -> None:
    error = client.error_for("alpha", status, "GET /x", {"message": "why"})
    assert isinstance(error, kind)
    assert error.status == status
    assert str(error) == f"alpha: GET /x: HTTP {status}: why"


async def test_an_unusable_kubeconfig_is_a_fixed_error_and_the_log_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    policy = KubeconfigPolicy(tmp_path)
    missing = tmp_path / "missing.yaml"
    with pytest.raises(client.Invalid) as raised:
        await client.connect("alpha", missing, None, policy)
    assert raised.value.message == kubeconfig.UNREADABLE
    assert "missing.yaml" in caplog.text and "No such file" in caplog.text
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: v1\nkind: Config\ncontexts: []\nclusters: []\nusers: []\n")
    with pytest.raises(client.Invalid) as raised:
        await client.connect("alpha", bad, "nope", policy)
    assert raised.value.message == client.UNUSABLE
    assert "context nope" in caplog.text


@pytest.mark.parametrize(
    ("failover", "rule"),
    [
        (None, Rule(300, "Gracefully")),
        ({"application": {}}, Rule(300, "Gracefully")),
        (
            {"application": {"decisionConditions": {"tolerationSeconds": 30}}},
            Rule(30, "Gracefully"),
        ),
        ({"application": {"purgeMode": "Directly"}}, Rule(300, "Directly")),
        ({"application": {"purgeMode": "Immediately"}}, Rule(300, "Directly")),
        ({"application": {"purgeMode": "Graciously"}}, Rule(300, "Gracefully")),
        ({"application": {"purgeMode": "Never"}}, Rule(300, "Never")),
    ],
    ids=["no-failover", "empty", "toleration", "directly", "immediately", "graciously", "never"],
)
def test_the_failover_rule_of_a_stored_policy(failover: dict[str, Any] | None, rule: Rule) -> None:
    policy = {"spec": {"failover": failover}} if failover is not None else {"spec": {}}
    assert rule_of(policy) == rule


def pod(name: str, uid: str | None = None, node: str | None = None) -> dict[str, Any]:
    labels = {objects.UID_LABEL: uid} if uid else {}
    spec = {"nodeName": node} if node else {}
    return {"metadata": {"namespace": "team-a", "name": name, "labels": labels}, "spec": spec}


def test_the_pod_index_finds_a_jobs_pods_by_uid_and_forgets_removed_ones() -> None:
    index = PodIndex()
    index.replace([pod("a-0", "u1"), pod("a-1", "u1", node="n0"), pod("b-0", "u2"), pod("x")])
    assert [k for k, _ in index.of_uid("u1")] == [("team-a", "a-0"), ("team-a", "a-1")]
    assert [p["metadata"]["name"] for p in index.pending()] == ["a-0", "b-0", "x"]
    index.put(pod("a-0", "u3"))  # relabelled: it moves to the other uid
    assert [k for k, _ in index.of_uid("u1")] == [("team-a", "a-1")]
    assert index.has_uid("u3")
    index.remove(("team-a", "a-1"))
    assert not index.has_uid("u1")
    index.replace([])
    assert len(index) == 0 and not index.has_uid("u2")


def node(name: str, ready: bool = True, cordoned: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"unschedulable": cordoned},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_node_health_is_reported_on_change_and_not_while_the_member_is_not_ready() -> None:
    tracker = NodeTracker(["n0", "n1"])
    assert tracker.changes(ready=True) == []  # nothing listed yet: nothing to say
    tracker.replace([node("n0"), node("n1", ready=False)])
    assert tracker.changes(ready=True) == [("n1", False)]
    assert tracker.changes(ready=True) == []
    tracker.put(node("n1"))
    tracker.remove(node("n0"))
    assert tracker.changes(ready=False) == []  # what Fleet cannot see it does not change
    assert tracker.changes(ready=True) == [("n0", False), ("n1", True)]
    assert tracker.problems() == {"n0": "no such Node in the member"}
    tracker.put(node("n0", cordoned=True))
    assert tracker.problems() == {"n0": "cordoned (unschedulable)"}
    assert tracker.healthy() == 1


def test_a_jobs_health_counts_only_what_its_current_member_says() -> None:
    failover = FailoverBook()
    state = SchedulerState(QuotaTree.build(QuotaNodeSpec("root")), {})
    member_report(state, failover, "a", JobRestarting("a", "t/j", "u", 1.0, True, "CrashLoop"))
    assert failover.why_unhealthy("t/j", "a", []) == "CrashLoop"
    assert failover.why_unhealthy("t/j", "b", []) == ""  # the copy in b is another story
    member_report(state, failover, "b", NodeHealth("b", "n1", False, 2.0))
    assert failover.why_unhealthy("t/j", "b", ["n0", "n1"]) == "node n1 of b is bad"
    member_report(state, failover, "b", MemberReadiness("b", False, "HTTP 401", 3.0))
    assert failover.why_unhealthy("t/j", "b", ["n0"]) == "member b is not ready"  # no HTTP 401
    member_report(state, failover, "b", MemberReadiness("b", True, "", 4.0))
    member_report(state, failover, "b", NodeHealth("b", "n1", True, 5.0))
    assert failover.why_unhealthy("t/j", "b", ["n0", "n1"]) == ""


async def test_each_member_gets_a_client_of_its_own_and_the_global_default_is_untouched(
    tmp_path: Path,
) -> None:
    from kubernetes_asyncio.client import Configuration

    before = Configuration.get_default_copy().host
    clients = []
    for name, port in (("alpha", 6443), ("beta", 7443)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: {name}, cluster: {{server: 'https://127.0.0.1:{port}'}}}}]\n"
            f"users: [{{name: u, user: {{token: token-{name}}}}}]\n"
            f"contexts: [{{name: {name}, context: {{cluster: {name}, user: u}}}}]\n"
        )
        clients.append(await client.connect(name, path, name, KubeconfigPolicy(tmp_path)))
    try:
        hosts = [c._api.configuration.host for c in clients]
        assert hosts == ["https://127.0.0.1:6443", "https://127.0.0.1:7443"]
        assert Configuration.get_default_copy().host == before
    finally:
        for c in clients:
            await c.close()


def _pod(name: str, uid: str, node: str, gpus: str, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "team-a",
            "name": name,
            "labels": {objects.UID_LABEL: uid},
            "annotations": {objects.GPU_ANNOTATION: gpus},
        },
        "spec": {"nodeName": node},
        "status": {"phase": phase},
    }


def test_the_pods_that_still_hold_a_nodes_gpus_are_those_of_other_jobs_not_ended() -> None:
    index = PodIndex()
    index.put(_pod("old-0", "old", "n1", "0,1"))
    index.put(_pod("old-1", "old", "n1", "2,3", phase="Succeeded"))
    index.put(_pod("mine", "new", "n1", "4"))
    index.put(_pod("elsewhere", "other", "n2", "0,1"))
    assert index.holding("n1", [1, 2], other_than="new") == [("team-a", "old-0")]
    assert index.holding("n1", [2, 3], other_than="new") == []  # ended: its GPUs are free
    assert index.holding("n1", [4], other_than="new") == []  # the job's own pod
    index.remove(("team-a", "old-0"))
    assert index.holding("n1", [0, 1], other_than="new") == []
    for malformed in ("1,x", "1,²", "١", "1," + "9" * 5000, "1, 2"):
        assert objects.gpu_indices(_pod("x", "u", "n", malformed)) == [], malformed
