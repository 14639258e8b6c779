"""batch/v1 Job: its pod set, gang, queue and priority labels, refused fields, member half."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from fleet.clusters.base import DispatchedJob
from fleet.clusters.kube import objects
from fleet.core.placement import PodPlacement
from fleet.core.quota import QuotaTree
from fleet.core.resources import Resources
from fleet.manifests import convert, documents
from fleet.manifests.errors import SpecError
from fleet.manifests.kinds import batchjob, registry
from fleet.manifests.kinds.base import Phase, PodSet
from tests.manifests.factories import dump, make_policy, make_tree


def job(
    name: str = "shard",
    *,
    labels: dict[str, str] | None = None,
    gpu: int = 1,
    **spec: Any,
) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "img:1",
        "resources": {"limits": {"nvidia.com/gpu": gpu}, "requests": {"cpu": "2"}},
    }
    meta: dict[str, Any] = {"name": name, "namespace": "default"}
    if labels:
        meta["labels"] = labels
    body: dict[str, Any] = {"template": {"spec": {"containers": [container]}}, **spec}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": body}


def policy(name: str = "shard") -> dict[str, Any]:
    return make_policy(name, selectors=[{"apiVersion": "batch/v1", "kind": "Job", "name": name}])


@pytest.fixture
def tree() -> QuotaTree:
    return convert.load_quota(dump(make_tree()))[0]


def model_of(doc: dict[str, Any]) -> batchjob.BatchJobModel:
    docs, issues = documents.parse_documents(dump(doc))
    assert issues == []
    model = docs[0].model
    assert isinstance(model, batchjob.BatchJobModel)
    return model


def problems_of(doc: dict[str, Any]) -> list[tuple[str, str]]:
    _, issues = documents.parse_documents(dump(doc))
    return [(i.path, i.message) for i in issues]


def test_the_registry_tells_a_batch_job_from_a_volcano_job() -> None:
    assert registry.find("batch/v1", "Job") is batchjob.KIND
    assert registry.find("batch.volcano.sh/v1alpha1", "Job") is not batchjob.KIND
    assert batchjob.KIND.api_path == "/apis/batch/v1"
    assert batchjob.KIND.name == "Job.batch/v1"
    assert not batchjob.KIND.resizable


@pytest.mark.parametrize(
    ("spec", "pods"),
    [
        pytest.param({}, 1, id="defaults"),
        pytest.param({"parallelism": 4}, 4, id="work-queue"),
        pytest.param({"completions": 3}, 1, id="one-at-a-time"),
        pytest.param({"parallelism": 4, "completions": 2}, 2, id="nonindexed-fewer-completions"),
        pytest.param({"parallelism": 2, "completions": 6}, 2, id="nonindexed-waves"),
        pytest.param(
            {"parallelism": 3, "completions": 3, "completionMode": "Indexed"}, 3, id="indexed"
        ),
        pytest.param(
            {"parallelism": 5, "completions": 2, "completionMode": "Indexed"},
            2,
            id="indexed-fewer-completions",
        ),
    ],
)
def test_one_pod_set_of_the_pods_the_job_runs_at_once(spec: dict[str, Any], pods: int) -> None:
    model = model_of(job(**spec))
    problems: list[tuple[str, str]] = []
    assert model.pod_sets(problems) == [
        PodSet(
            "main",
            "spec",
            pods,
            Resources.parse({"nvidia.com/gpu": 1, "cpu": "2"}),
            "spec.template",
        )
    ]
    assert problems == []


def test_the_gang_is_every_pod_and_the_job_is_admitted_whole(tree: QuotaTree) -> None:
    # Even under a policy that asks for incremental scheduling: a Job is not resized.
    lenient = make_policy(
        "shard", gang=False, selectors=[{"apiVersion": "batch/v1", "kind": "Job"}]
    )
    (core,) = convert.load_submission(dump(lenient, job(parallelism=4)), tree)
    assert [(g.role, g.count) for g in core.groups] == [("main", 4)]
    assert core.min_members == 0 and core.gang
    assert core.queue == "team-a" and core.priority_class == "test"


def test_kueues_queue_label_must_name_the_namespaces_leaf(tree: QuotaTree) -> None:
    named = job(labels={"kueue.x-k8s.io/queue-name": "team-a"})
    (core,) = convert.load_submission(dump(policy(), named), tree)
    assert core.queue == "team-a"
    wrong = job(labels={"kueue.x-k8s.io/queue-name": "team-b"})
    with pytest.raises(SpecError) as e:
        convert.load_submission(dump(policy(), wrong), tree)
    (issue,) = e.value.issues
    assert issue.path == "metadata.labels.kueue.x-k8s.io/queue-name"
    assert "namespace 'default' belongs to queue 'team-a'" in issue.message


def test_kueues_priority_class_label_names_a_fleet_priority_class(tree: QuotaTree) -> None:
    prod = job(labels={"kueue.x-k8s.io/priority-class": "prod"})
    (core,) = convert.load_submission(dump(policy(), prod), tree)
    assert core.priority_class == "prod"
    unknown = job(labels={"kueue.x-k8s.io/priority-class": "high"})
    with pytest.raises(SpecError) as e:
        convert.load_submission(dump(policy(), unknown), tree)
    (issue,) = e.value.issues
    assert issue.path == "metadata.labels.kueue.x-k8s.io/priority-class"
    assert "unknown priority class 'high'" in issue.message


@pytest.mark.parametrize(
    ("spec", "path", "words"),
    [
        pytest.param(
            {"selector": {"matchLabels": {"a": "b"}}}, "spec.selector", "generates", id="selector"
        ),
        pytest.param({"manualSelector": True}, "spec.manualSelector", "generate", id="manual"),
        pytest.param(
            {"managedBy": "example.com/mine"}, "spec.managedBy", "skips a Job", id="managed-by"
        ),
        pytest.param(
            {"completionMode": "Indexed"}, "spec.completions", "needs completions", id="indexed"
        ),
        pytest.param(
            {"completionMode": "Indexed", "parallelism": 2, "completions": 4},
            "spec.completions",
            "4 is more than parallelism 2",
            id="indexed-waves",
        ),
        pytest.param({"parallelism": 0}, "spec.parallelism", "at least 1", id="no-pods"),
        pytest.param({"completions": 0}, "spec.completions", "at least 1", id="no-completions"),
    ],
)
def test_fields_fleet_cannot_honour_are_refused_at_their_path(
    spec: dict[str, Any], path: str, words: str
) -> None:
    found = problems_of(job(**spec))
    assert [p for p, _ in found] == [path], found
    assert words in found[0][1]


@pytest.mark.parametrize("manager", ["kubernetes.io/job-controller", "kueue.x-k8s.io/multikueue"])
def test_a_job_managed_by_its_own_controller_or_multikueue_is_taken(manager: str) -> None:
    assert problems_of(job(managedBy=manager, suspend=True)) == []


def dispatched(manifest: dict[str, Any], pods: tuple[PodPlacement, ...]) -> DispatchedJob:
    return DispatchedJob("default/shard", "uid-1", "alpha", "team-a", pods, manifest)


def test_the_member_object_runs_the_planned_pods_unsuspended_on_its_own_controller() -> None:
    manifest = job(
        parallelism=5,
        completions=2,
        completionMode="Indexed",
        suspend=True,
        managedBy="kueue.x-k8s.io/multikueue",
        backoffLimit=0,
    )
    pods = (PodPlacement("main-0", "n0", (0,)), PodPlacement("main-1", "n1", (3,)))
    obj = objects.member_object(dispatched(copy.deepcopy(manifest), pods))
    assert (obj["apiVersion"], obj["kind"]) == ("batch/v1", "Job")
    spec = obj["spec"]
    assert spec["parallelism"] == 2 and spec["completions"] == 2
    assert spec["completionMode"] == "Indexed" and spec["backoffLimit"] == 0
    assert "suspend" not in spec and "managedBy" not in spec
    template = spec["template"]
    assert template["metadata"]["labels"] == {"fleet.io/job-uid": "uid-1"}
    assert template["spec"]["schedulerName"] == "fleet-scheduler"
    terms = template["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert [t["matchFields"][0]["values"] for t in terms] == [["n0"], ["n1"]]
    assert manifest["spec"]["suspend"] is True  # the submitted document is left alone


def status(**fields: Any) -> dict[str, Any]:
    conditions = fields.pop("conditions", [])
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "spec": {"parallelism": 2, "completions": 2},
        "status": {**fields, "conditions": conditions},
    }


def condition(kind: str, message: str = "", value: str = "True") -> dict[str, str]:
    return {"type": kind, "status": value, "reason": kind + "Reason", "message": message}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param({"apiVersion": "batch/v1", "kind": "Job"}, (None, ""), id="new"),
        pytest.param(status(active=2), (None, ""), id="pods-pending"),
        pytest.param(status(active=2, ready=1), (None, ""), id="one-ready"),
        pytest.param(status(active=2, ready=2), (Phase.RUNNING, ""), id="all-ready"),
        pytest.param(status(ready=1, succeeded=1), (Phase.RUNNING, ""), id="one-done"),
        pytest.param(
            status(succeeded=2, conditions=[condition("Complete")]),
            (Phase.SUCCEEDED, "CompleteReason"),
            id="complete",
        ),
        pytest.param(
            status(failed=1, conditions=[condition("Failed", "Job has reached the limit")]),
            (Phase.FAILED, "Job has reached the limit"),
            id="failed",
        ),
        pytest.param(
            status(conditions=[condition("Complete", value="False")]), (None, ""), id="not-yet"
        ),
        pytest.param(status(conditions=[condition("Suspended")]), (None, ""), id="suspended"),
    ],
)
def test_the_phase_comes_from_the_conditions_then_the_ready_pods(
    obj: dict[str, Any], expected: tuple[Phase | None, str]
) -> None:
    assert batchjob.KIND.phase(obj) == expected
    assert objects.phase(obj) == expected


def pod(labels: dict[str, str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "p", "labels": labels, "annotations": annotations or {}}}


def test_a_pod_is_its_completion_index_or_any_pod_of_the_job() -> None:
    by_job = {"batch.kubernetes.io/job-name": "shard"}
    index = "batch.kubernetes.io/job-completion-index"
    assert batchjob.KIND.replica(pod({**by_job, index: "3"})) == ("main", 3)
    assert batchjob.KIND.replica(pod(by_job, {index: "1"})) == ("main", 1)
    assert batchjob.KIND.replica(pod(by_job)) == ("main", None)
    assert batchjob.KIND.replica(pod({**by_job, index: "x"})) is None
    assert batchjob.KIND.replica(pod({index: "0"})) is None  # no pod of a Job
