"""Volcano Jobs (fleet.manifests.kinds.volcano): tasks, minimums, policies, member half.

The Volcano document's two jobs (``policies/jobs/volcano.yaml``) become the
right pod sets and gangs; a task's ``minAvailable`` splits its pods so the
gang holds every task's minimum; queue and priority fields route as every
kind's do; the schema refuses a typo in a task and Fleet refuses what
Volcano's webhook refuses in a policy; the member object and the reading of
the member's status and pods follow Volcano's controller.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
import yaml

from fleet import compiled_core
from fleet.core import snapshot
from fleet.core.jobs import Job
from fleet.core.resources import Resources
from fleet.manifests import convert
from fleet.manifests.errors import SpecError
from fleet.manifests.kinds import registry, volcano
from fleet.manifests.kinds.base import Phase
from tests.paths import ROOT

SEED = ROOT / "policies" / "jobs" / "volcano.yaml"
TREE = """\
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {name: t}
spec:
  root:
    name: root
    max: {cpu: 64, memory: 256Gi, nvidia.com/gpu: 8, kube-queue/max-jobs: 100}
    children:
      - name: default
        max: {cpu: 64, memory: 256Gi, nvidia.com/gpu: 8}
        namespaces: [default]
"""
POLICY = {
    "apiVersion": "policy.one.alibabacloud.com/v1alpha1",
    "kind": "PropagationPolicy",
    "metadata": {"name": "volcano", "namespace": "default"},
    "spec": {"resourceSelectors": [{"apiVersion": volcano.API_VERSION, "kind": "Job"}]},
}


def seed_documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(SEED.read_text(encoding="utf-8")) if d]


def seed_job(name: str) -> dict[str, Any]:
    return next(d for d in seed_documents() if d["metadata"]["name"] == name)


def load(*jobs: dict[str, Any]) -> list[Job]:
    tree = convert.load_quota(TREE)[0]
    text = yaml.safe_dump_all([POLICY, *jobs])
    return [s.job for s in convert.load_submitted(text, tree).jobs]


def problems(job: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as e:
        load(job)
    return [(i.path, i.message) for i in e.value.issues]


def task(name: str, replicas: int, cpu: str = "1", **extra: Any) -> dict[str, Any]:
    container = {"name": name, "image": "img:1", "resources": {"requests": {"cpu": cpu}}}
    return {
        "name": name,
        "replicas": replicas,
        "template": {"spec": {"containers": [container]}},
        **extra,
    }


def vcjob(*tasks: dict[str, Any], name: str = "vc", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": volcano.API_VERSION,
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"tasks": list(tasks), **spec},
    }


def shape(job: Job) -> list[tuple[str, int, int]]:
    return [(g.role, g.count, g.first) for g in job.groups]


# The document's two jobs --------------------------------------------------------------


def test_the_documents_tensorflow_job_is_ps_and_workers_gang_of_three() -> None:
    (job,) = load(seed_job("tensorflow-benchmark"))
    assert job.key == "default/tensorflow-benchmark"
    assert shape(job) == [("ps", 1, 0), ("worker", 2, 0)]
    assert job.gang and job.gang_size == 3 and job.min_members == 3
    assert [p.name for p in job.pods] == ["ps-0", "worker-0", "worker-1"]
    ps, worker = job.groups
    assert ps.per_pod == Resources({"cpu": 1000, "memory": 2048 * 2**20})
    assert worker.per_pod == Resources({"cpu": 2000, "memory": 2048 * 2**20})
    assert not job.request.get("nvidia.com/gpu")  # CPU-only
    assert job.queue == "default" and job.priority_class == "test"


def test_the_documents_mpi_job_is_master_and_three_workers_gang_of_four() -> None:
    (job,) = load(seed_job("lm-mpi-job"))
    assert shape(job) == [("mpimaster", 1, 0), ("mpiworker", 3, 0)]
    assert job.gang_size == 4 == job.size
    assert job.gang_request["cpu"] == 3500
    assert not job.request.get("nvidia.com/gpu")


def test_the_documents_file_is_accepted_whole_with_its_policies() -> None:
    tree = convert.load_quota(TREE)[0]
    found = convert.load_submitted(SEED.read_text(encoding="utf-8"), tree).jobs
    assert [s.job.key for s in found] == ["default/tensorflow-benchmark", "default/lm-mpi-job"]
    assert all(s.policy is not None for s in found)


def test_upstream_examples_parse_into_their_tasks() -> None:
    examples = ROOT / "tests" / "kinds" / "examples"
    mnist, mpi = (
        next(d for d in yaml.safe_load_all((examples / f"volcano-{name}.yaml").read_text()) if d)
        for name in ("tf-dist-mnist", "mpi")
    )
    for doc in (mnist, mpi):
        doc["metadata"]["namespace"] = "default"
    (a,) = load(mnist)
    assert shape(a) == [("ps", 1, 0), ("worker", 2, 0)] and a.gang_size == 3
    (b,) = load(mpi)
    assert shape(b) == [("mpimaster", 1, 0), ("mpiworker", 2, 0)] and b.gang_size == 3


# Gang and per-task minimums -------------------------------------------------------------


def test_without_minavailable_the_gang_is_the_tasks_minimums_else_their_replicas() -> None:
    (every,) = load(vcjob(task("a", 2), task("b", 3)))
    assert every.gang_size == 5
    (mins,) = load(vcjob(task("a", 2), task("b", 3, minAvailable=1)))
    assert mins.gang_size == 3  # a's 2 replicas (no minimum) + b's minimum 1


def test_a_task_minimum_below_its_replicas_is_placed_before_every_tasks_rest() -> None:
    (job,) = load(
        vcjob(
            task("master", 2, minAvailable=1),
            task("work", 3, minAvailable=2),
            task("side", 1),
            minAvailable=4,
        )
    )
    assert shape(job) == [
        ("master", 1, 0),
        ("work", 2, 0),
        ("side", 1, 0),
        ("master", 1, 1),
        ("work", 1, 2),
    ]
    names = [p.name for p in job.pods]
    assert names == ["master-0", "work-0", "work-1", "side-0", "master-1", "work-2"]
    assert job.gang_size == 4
    gang = [p.role for p in job.pods[: job.gang_size]]
    assert gang.count("master") >= 1 and gang.count("work") >= 2


def test_a_job_with_split_tasks_survives_its_record_and_pickling() -> None:
    (job,) = load(vcjob(task("m", 2, minAvailable=1), task("w", 2, minAvailable=1)))
    again = snapshot.job_from_plain(snapshot.job_to_plain(job))
    assert again == job and hash(again) == hash(job)
    assert [p.name for p in again.pods] == [p.name for p in job.pods]
    compiled_core.picklable()
    assert pickle.loads(pickle.dumps(job)) == job


def test_a_minimum_above_the_replicas_is_refused() -> None:
    found = problems(vcjob(task("a", 2, minAvailable=3)))
    assert ("spec.tasks[0].minAvailable", "3 is more than the task's 2 replicas") in found
    found = problems(vcjob(task("a", 2), minAvailable=5))
    assert any(p == "spec.minAvailable" and "more than" in m for p, m in found)


# Queue, priority, scheduler ---------------------------------------------------------------


def test_queue_must_name_the_namespaces_leaf_and_priority_is_the_class() -> None:
    (job,) = load(vcjob(task("a", 1), queue="default", priorityClassName="prod"))
    assert job.queue == "default" and job.priority_class == "prod"
    found = problems(vcjob(task("a", 1), queue="elsewhere"))
    assert [p for p, _ in found] == ["spec.queue"]
    found = problems(vcjob(task("a", 1), priorityClassName="nope"))
    assert [p for p, _ in found] == ["spec.priorityClassName"]


def test_the_jobs_scheduler_name_is_accepted_but_a_tasks_is_not() -> None:
    assert load(vcjob(task("a", 1), schedulerName="volcano"))
    bad = task("a", 1)
    bad["template"]["spec"]["schedulerName"] = "volcano"
    assert [p for p, _ in problems(vcjob(bad))] == ["spec.tasks[0].template.spec.schedulerName"]


# Refusals -----------------------------------------------------------------------------------


def test_a_typo_in_a_task_is_refused_by_the_schema() -> None:
    doc = seed_job("lm-mpi-job")
    doc["spec"]["tasks"][1]["replcas"] = doc["spec"]["tasks"][1].pop("replicas")
    found = problems(doc)
    assert any(
        p == "spec.tasks[1].replcas" and "did you mean" in m and "replicas" in m for p, m in found
    ), found


def test_task_names_must_be_unique_dns_labels() -> None:
    assert [p for p, _ in problems(vcjob(task("a", 1), task("a", 1)))] == ["spec.tasks[1].name"]
    assert [p for p, _ in problems(vcjob(task("Big", 1)))] == ["spec.tasks[0].name"]
    assert [p for p, _ in problems(vcjob(task("a" * 64, 1)))] == ["spec.tasks[0].name"]


def test_a_job_of_no_pods_is_refused_and_a_zero_replica_task_is_no_pod_set() -> None:
    assert [p for p, _ in problems(vcjob(task("a", 0)))] == ["spec.tasks"]
    (job,) = load(vcjob(task("a", 0), task("b", 2)))
    assert shape(job) == [("b", 2, 0)]


def test_lifecycle_policies_volcano_accepts_are_accepted() -> None:
    policies = [
        {"event": "PodEvicted", "action": "RestartJob"},
        {"events": ["PodFailed", "Unknown"], "action": "AbortJob"},
        {"exitCode": 3, "action": "TerminateJob"},
    ]
    worker = task("w", 2, policies=[{"event": "TaskCompleted", "action": "CompleteJob"}])
    assert load(vcjob(task("m", 1), worker, policies=policies))


@pytest.mark.parametrize(
    ("policy", "path", "words"),
    [
        ({"event": "OutOfSync", "action": "RestartJob"}, "spec.policies[0].event", "not an event"),
        ({"event": "PodFailed", "action": "SyncJob"}, "spec.policies[0].action", "not an action"),
        ({"event": "PodFailed", "exitCode": 1, "action": "AbortJob"}, "spec.policies[0]", "and an"),
        ({"action": "AbortJob"}, "spec.policies[0]", "needs an event"),
        ({"exitCode": 0, "action": "AbortJob"}, "spec.policies[0].exitCode", "not an error"),
    ],
)
def test_policies_volcano_refuses_are_refused(
    policy: dict[str, Any], path: str, words: str
) -> None:
    found = problems(vcjob(task("a", 1), policies=[policy]))
    assert any(p == path and words in m for p, m in found), found


def test_an_event_named_twice_is_refused() -> None:
    twice = [
        {"event": "PodFailed", "action": "AbortJob"},
        {"event": "PodFailed", "action": "RestartJob"},
    ]
    found = problems(vcjob(task("a", 1), policies=twice))
    assert [p for p, _ in found] == ["spec.policies[1].event"]


# The member half --------------------------------------------------------------------------


def decorate(role: str, template: Any) -> dict[str, Any]:
    out = copy.deepcopy(dict(template))
    out.setdefault("spec", {})["schedulerName"] = "fleet-scheduler"
    out.setdefault("metadata", {})["labels"] = {"fleet.io/job-uid": "u", "role": role}
    return out


def test_the_member_object_has_the_planned_pods_fleets_scheduler_and_no_queue() -> None:
    doc = seed_job("lm-mpi-job")
    doc["spec"]["queue"] = "default"
    doc["spec"]["priorityClassName"] = "prod"
    kind = registry.of(doc)
    assert kind is volcano.KIND
    spec = kind.member_spec(doc["spec"], {"mpimaster": 1, "mpiworker": 3}, decorate)
    assert [(t["name"], t["replicas"]) for t in spec["tasks"]] == [
        ("mpimaster", 1),
        ("mpiworker", 3),
    ]
    assert spec["schedulerName"] == "fleet-scheduler"
    assert "queue" not in spec and "priorityClassName" not in spec
    master = spec["tasks"][0]
    assert master["template"]["spec"]["schedulerName"] == "fleet-scheduler"
    assert master["template"]["metadata"]["labels"]["role"] == "mpimaster"
    # carried unchanged
    assert spec["plugins"] == {"ssh": [], "svc": []}
    assert spec["minAvailable"] == 4
    assert spec["policies"] == [{"event": "PodEvicted", "action": "RestartJob"}]
    assert master["policies"] == [{"event": "TaskCompleted", "action": "CompleteJob"}]
    assert doc["spec"]["queue"] == "default"  # the document itself is not changed


def test_a_task_without_planned_pods_is_kept_with_zero_replicas() -> None:
    doc = vcjob(task("a", 0), task("b", 2))
    spec = volcano.KIND.member_spec(doc["spec"], {"b": 2}, decorate)
    assert [(t["name"], t["replicas"]) for t in spec["tasks"]] == [("a", 0), ("b", 2)]


@pytest.mark.parametrize(
    ("status", "phase"),
    [
        ({}, None),
        ({"state": {"phase": "Pending"}}, Phase.CREATED),
        ({"state": {"phase": "Pending"}, "retryCount": 1}, Phase.RESTARTING),
        ({"state": {"phase": "Running"}}, Phase.RUNNING),
        ({"state": {"phase": "Restarting"}, "retryCount": 1}, Phase.RESTARTING),
        ({"state": {"phase": "Completing"}}, None),
        ({"state": {"phase": "Completed"}}, Phase.SUCCEEDED),
        ({"state": {"phase": "Aborting"}}, None),
        ({"state": {"phase": "Aborted"}}, Phase.FAILED),
        ({"state": {"phase": "Terminating"}}, None),
        ({"state": {"phase": "Terminated"}}, Phase.FAILED),
        ({"state": {"phase": "Failed"}}, Phase.FAILED),
        ({"state": {"phase": "Inqueue"}}, None),
    ],
)
def test_phase_is_read_from_status_state(status: dict[str, Any], phase: Phase | None) -> None:
    assert volcano.KIND.phase({"status": status})[0] is phase


def test_a_failed_phase_says_why() -> None:
    obj = {"status": {"state": {"phase": "Failed", "reason": "MaxRetryExceeded"}}}
    assert volcano.KIND.phase(obj) == (Phase.FAILED, "MaxRetryExceeded")
    assert volcano.KIND.phase({"status": {"state": {"phase": "Aborted"}}}) == (
        Phase.FAILED,
        "Aborted",
    )


def pod(name: str, labels: dict[str, str], annotations: dict[str, str] | None = None) -> Any:
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations or {}}}


def test_a_pod_is_its_task_and_index_from_labels_annotations_or_name() -> None:
    read = volcano.KIND.replica
    labelled = {volcano.TASK_LABEL: "mpiworker", volcano.INDEX_LABEL: "2"}
    assert read(pod("j-mpiworker-2", labelled)) == ("mpiworker", 2)
    assert read(pod("j-mpiworker-2", {}, labelled)) == ("mpiworker", 2)
    older = pod("j-mpiworker-1", {}, {volcano.TASK_LABEL: "mpiworker"})
    assert read(older) == ("mpiworker", 1)
    assert read(pod("j-other-1", {}, {volcano.TASK_LABEL: "mpiworker"})) is None
    assert read(pod("j-x-1", {})) is None
