"""MPIJob v2beta1 (the MPI operator's): pod sets, gang, refused fields, member half."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleet.clusters.base import DispatchedJob
from fleet.clusters.kube import objects
from fleet.core.placement import PodPlacement
from fleet.core.quota import QuotaTree
from fleet.manifests import convert, documents
from fleet.manifests.kinds import mpijob_v1, mpijob_v2, registry
from fleet.manifests.kinds.base import Phase
from tests.manifests.factories import dump, make_policy, make_tree, replica

EXAMPLE = Path(__file__).parent / "examples" / "mpijob-v2beta1-pi.yaml"


def mpijob(
    name: str = "pi", *, workers: int = 2, launcher: int | None = 1, **spec: Any
) -> dict[str, Any]:
    specs: dict[str, Any] = {"Worker": replica(workers, gpu=2)}
    if launcher is not None:
        specs = {"Launcher": replica(launcher, gpu=0), **specs}
    return {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"slotsPerWorker": 2, "mpiReplicaSpecs": specs, **spec},
    }


def problems_of(doc: dict[str, Any]) -> list[tuple[str, str]]:
    _, issues = documents.parse_documents(dump(doc))
    return [(i.path, i.message) for i in issues]


@pytest.fixture
def tree() -> QuotaTree:
    return convert.load_quota(dump(make_tree()))[0]


def test_the_registry_has_both_mpijob_versions() -> None:
    assert registry.find("kubeflow.org/v2beta1", "MPIJob") is mpijob_v2.KIND
    assert registry.find("kubeflow.org/v1", "MPIJob") is mpijob_v1.KIND
    assert mpijob_v2.KIND.api_path == "/apis/kubeflow.org/v2beta1"
    assert not mpijob_v2.KIND.resizable


def test_the_upstream_pi_example_is_a_launcher_and_two_workers() -> None:
    docs, issues = documents.parse_documents(EXAMPLE.read_text())
    assert issues == []
    model = docs[0].model
    assert isinstance(model, mpijob_v2.MPIJobModel)
    problems: list[tuple[str, str]] = []
    sets = model.pod_sets(problems)
    assert problems == []
    assert [(s.role, s.count, dict(s.per_pod.items())) for s in sets] == [
        ("Launcher", 1, {"cpu": 1000, "memory": 2**30}),
        ("Worker", 2, {"cpu": 1000, "memory": 2**30}),
    ]
    assert model.gang_minimum() == (0, "spec.runPolicy.schedulingPolicy.minAvailable")


def test_launcher_then_workers_as_one_gang_of_min_available_else_every_pod(
    tree: QuotaTree,
) -> None:
    chosen = make_policy("pi", selectors=[{"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob"}])
    (whole,) = convert.load_submission(dump(chosen, mpijob(workers=3)), tree)
    assert [(g.role, g.count) for g in whole.groups] == [("Launcher", 1), ("Worker", 3)]
    assert whole.min_members == 0 and whole.gang
    policy = {"schedulingPolicy": {"minAvailable": 3, "queue": "team-a", "priorityClass": "prod"}}
    (some,) = convert.load_submission(dump(chosen, mpijob(workers=3, runPolicy=policy)), tree)
    assert some.min_members == 3 and some.queue == "team-a" and some.priority_class == "prod"


@pytest.mark.parametrize(
    ("doc", "path", "words"),
    [
        pytest.param(
            mpijob(launcher=None), "spec.mpiReplicaSpecs", "needs a Launcher", id="no-launcher"
        ),
        pytest.param(
            mpijob(launcher=2),
            "spec.mpiReplicaSpecs.Launcher.replicas",
            "exactly 1 Launcher",
            id="two-launchers",
        ),
        pytest.param(
            mpijob(runPolicy={"managedBy": "example.com/other"}),
            "spec.runPolicy.managedBy",
            "skips one managed by 'example.com/other'",
            id="managed-by",
        ),
        pytest.param(
            mpijob(runPolicy={"schedulingPolicy": {"minAvailable": 4}}),
            "spec.runPolicy.schedulingPolicy.minAvailable",
            "4 is more than the job's 3 replicas",
            id="min-available",
        ),
    ],
)
def test_what_the_mpi_operator_would_refuse_or_skip_is_refused(
    doc: dict[str, Any], path: str, words: str
) -> None:
    found = problems_of(doc)
    assert [p for p, _ in found] == [path], found
    assert words in found[0][1]


def test_the_member_object_keeps_the_mpi_fields_and_runs_unsuspended() -> None:
    run_policy = {
        "cleanPodPolicy": "Running",
        "suspend": True,
        "managedBy": "kueue.x-k8s.io/multikueue",
    }
    manifest = mpijob(runPolicy=run_policy, launcherCreationPolicy="WaitForWorkersReady")
    assert problems_of(manifest) == []
    pods = (
        PodPlacement("Launcher-0", "n0", ()),
        PodPlacement("Worker-0", "n0", (0, 1)),
        PodPlacement("Worker-1", "n1", (0, 1)),
    )
    job = DispatchedJob("default/pi", "uid-1", "alpha", "team-a", pods, manifest)
    obj = objects.member_object(job)
    assert (obj["apiVersion"], obj["kind"]) == ("kubeflow.org/v2beta1", "MPIJob")
    spec = obj["spec"]
    assert spec["runPolicy"] == {"cleanPodPolicy": "Running"}
    assert spec["slotsPerWorker"] == 2 and spec["launcherCreationPolicy"] == "WaitForWorkersReady"
    specs = spec["mpiReplicaSpecs"]
    assert (specs["Launcher"]["replicas"], specs["Worker"]["replicas"]) == (1, 2)
    for role, nodes in (("Launcher", ["n0"]), ("Worker", ["n0", "n1"])):
        template = specs[role]["template"]
        assert template["metadata"]["labels"]["fleet.io/job-uid"] == "uid-1"
        terms = template["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert [t["matchFields"][0]["values"][0] for t in terms] == nodes


@pytest.mark.parametrize(
    ("kind", "phase"),
    [
        ("Created", Phase.CREATED),
        ("Running", Phase.RUNNING),
        ("Restarting", Phase.RESTARTING),
        ("Succeeded", Phase.SUCCEEDED),
        ("Failed", Phase.FAILED),
    ],
)
def test_the_phase_comes_from_the_operators_conditions(kind: str, phase: Phase) -> None:
    obj = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "status": {"conditions": [{"type": kind, "status": "True", "message": "said"}]},
    }
    assert objects.phase(obj) == (phase, "said")


def pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}}


def test_pods_are_read_by_the_mpi_operators_role_label_and_worker_names() -> None:
    role = "training.kubeflow.org/job-role"
    index = "training.kubeflow.org/replica-index"
    replica_of = mpijob_v2.KIND.replica
    assert replica_of(pod("pi-launcher-x7k2q", {role: "launcher"})) == ("Launcher", None)
    assert replica_of(pod("pi-worker-1", {role: "worker", index: "1"})) == ("Worker", 1)
    # runLauncherAsWorker: the label is the index plus one, the name is the index.
    assert replica_of(pod("pi-worker-0", {role: "worker", index: "1"})) == ("Worker", 0)
    assert replica_of(pod("pi-worker-x", {role: "worker"})) is None
    assert replica_of(pod("pi-worker-0", {"training.kubeflow.org/replica-type": "worker"})) is None
