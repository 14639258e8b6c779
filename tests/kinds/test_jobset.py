"""JobSet (fleet.manifests.kinds.jobset): pod sets, queue and priority labels, the member half.

The upstream examples become their pod sets (replicated jobs × replicas ×
pods per job); Kueue's queue label must name the namespace's leaf and its
priority-class label a class Fleet knows; typos are the schema's; in a
member the pod templates are decorated and told their pods per job, the
phase comes from conditions and the replicated jobs' status, and a pod is
matched to its planned index from JobSet's and the Job's labels.  On
simulated members a JobSet runs as one gang.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from fleet.clock import VirtualClock
from fleet.manifests import convert
from fleet.manifests.errors import SpecError
from fleet.manifests.kinds import jobset, registry
from fleet.manifests.kinds.base import Phase
from fleet.store import jobs as job_rows
from fleet.testing.running import new_jobs, running_service, settings, settle
from tests import paths
from tests.manifests.factories import dump, make_policy, make_tree

JOBSET = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet"}


@pytest.fixture
def tree() -> Any:
    return convert.load_quota(dump(make_tree()))[0]


def example(name: str) -> dict[str, Any]:
    text = (paths.KIND_EXAMPLES / name).read_text(encoding="utf-8")
    return dict(yaml.safe_load(text))


def policy(namespace: str = "default") -> dict[str, Any]:
    return make_policy("p", namespace=namespace, selectors=[JOBSET])


def a_jobset(*jobs: tuple[str, int, int, int | None], gpus: int = 1, **meta: Any) -> dict[str, Any]:
    """A JobSet of replicated jobs ``(name, replicas, parallelism, completions)``."""
    container = {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": gpus}}}
    rjobs = []
    for name, replicas, parallelism, completions in jobs:
        spec: dict[str, Any] = {
            "parallelism": parallelism,
            "template": {"spec": {"containers": [container]}},
        }
        if completions is not None:
            spec["completions"] = completions
        rjobs.append({"name": name, "replicas": replicas, "template": {"spec": spec}})
    return {
        **JOBSET,
        "metadata": {"name": "js", "namespace": "default", **meta},
        "spec": {"replicatedJobs": rjobs},
    }


def load(tree: Any, *docs: dict[str, Any]) -> list[convert.SubmittedJob]:
    return convert.load_submitted(dump(policy(), *docs), tree).jobs


def issues(tree: Any, *docs: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as e:
        load(tree, *docs)
    return [(i.path, i.message) for i in e.value.issues]


def test_the_upstream_examples_are_their_replicated_jobs_in_order(tree: Any) -> None:
    (parallel,) = load(tree, example("jobset-paralleljobs.yaml"))
    assert [(g.role, g.count) for g in parallel.job.groups] == [("workers", 4), ("driver", 1)]
    (resnet,) = load(tree, example("jobset-pytorch-resnet.yaml"))
    assert [(g.role, g.count) for g in resnet.job.groups] == [("workers", 4)]
    # JobSet has no minAvailable: every pod, one gang, never resized.
    for found in (parallel, resnet):
        assert found.job.gang and found.job.min_members == 0
    assert registry.find("jobset.x-k8s.io/v1alpha2", "JobSet") is jobset.KIND
    assert not jobset.KIND.resizable


def test_a_set_is_replicas_times_the_pods_a_job_runs_at_once(tree: Any) -> None:
    doc = a_jobset(("a", 3, 2, None), ("b", 2, 4, 2), ("c", 1, 2, 8), gpus=2)
    (found,) = load(tree, doc)
    counts = [(g.role, g.count, g.per_pod["nvidia.com/gpu"]) for g in found.job.groups]
    # completions below parallelism: only that many pods; above it: waves of parallelism
    assert counts == [("a", 6, 2), ("b", 4, 2), ("c", 2, 2)]


def test_kueues_queue_label_must_name_the_namespaces_leaf(tree: Any) -> None:
    label = "kueue.x-k8s.io/queue-name"
    (ok,) = load(tree, a_jobset(("w", 1, 1, None), labels={label: "team-a"}))
    assert ok.job.queue == "team-a"
    ((path, message),) = issues(tree, a_jobset(("w", 1, 1, None), labels={label: "user-queue"}))
    assert path == f"metadata.labels.{label}"
    assert "namespace 'default' belongs to queue 'team-a'" in message


def test_kueues_priority_class_label_is_the_priority_class(tree: Any) -> None:
    label = "kueue.x-k8s.io/priority-class"
    (found,) = load(tree, a_jobset(("w", 1, 1, None), labels={label: "prod"}))
    assert found.job.priority_class == "prod"
    ((path, message),) = issues(tree, a_jobset(("w", 1, 1, None), labels={label: "nope"}))
    assert path == f"metadata.labels.{label}"
    assert message.startswith("unknown priority class 'nope'")


@pytest.mark.parametrize(
    ("where", "typo", "path"),
    [
        ("spec", "replicatedJob", "spec.replicatedJob"),
        ("job", "paralelism", "spec.replicatedJobs[0].template.spec.paralelism"),
        ("rjob", "replica", "spec.replicatedJobs[0].replica"),
    ],
)
def test_typos_are_refused_by_the_schema(tree: Any, where: str, typo: str, path: str) -> None:
    doc = a_jobset(("w", 1, 1, None))
    rjob = doc["spec"]["replicatedJobs"][0]
    target = {"spec": doc["spec"], "job": rjob["template"]["spec"], "rjob": rjob}[where]
    target[typo] = 2
    found = issues(tree, doc)
    assert [p for p, _ in found] == [path]
    assert found[0][1].startswith("unknown field")


def test_a_pod_template_may_not_place_its_own_pods(tree: Any) -> None:
    doc = a_jobset(("w", 1, 1, None))
    doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["nodeName"] = "n"
    ((path, _),) = issues(tree, doc)
    assert path == "spec.replicatedJobs[0].template.spec.template.spec.nodeName"


def test_an_empty_jobset_is_refused(tree: Any) -> None:
    doc = a_jobset()
    assert ("spec.replicatedJobs", "needs at least one replicated job") in issues(tree, doc)


# The member half ------------------------------------------------------------------------


def decorate(role: str, template: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(template))
    out.setdefault("metadata", {}).setdefault("labels", {})["decorated"] = role
    out["spec"]["schedulerName"] = "fleet-scheduler"
    return out


def test_the_member_jobset_keeps_the_counts_and_decorates_every_pod_template() -> None:
    doc = a_jobset(("a", 2, 3, None), ("b", 1, 4, 2))
    doc["spec"]["suspend"] = True
    spec = jobset.KIND.member_spec(doc["spec"], {"a": 6, "b": 2}, decorate)
    assert "suspend" not in spec  # admission is Fleet's
    a, b = spec["replicatedJobs"]
    assert (a["replicas"], a["template"]["spec"]["parallelism"]) == (2, 3)
    assert (b["replicas"], b["template"]["spec"]["parallelism"]) == (1, 4)
    for rjob, per_job in ((a, "3"), (b, "2")):
        template = rjob["template"]["spec"]["template"]
        assert template["metadata"]["labels"]["decorated"] == rjob["name"]
        assert template["metadata"]["annotations"]["fleet.io/pods-per-job"] == per_job
        assert template["spec"]["schedulerName"] == "fleet-scheduler"
    # the submitted document is not changed
    assert "metadata" not in doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]


def status(*, conditions: list[dict[str, str]] | None = None, **ready: int) -> dict[str, Any]:
    doc = a_jobset(("a", 2, 1, None), ("b", 1, 1, None))
    doc["status"] = {
        "conditions": conditions or [],
        "replicatedJobsStatus": [{"name": n, "ready": r, "succeeded": 0} for n, r in ready.items()],
    }
    return doc


def test_the_phase_comes_from_the_conditions_and_every_job_being_ready() -> None:
    assert jobset.KIND.phase(status(a=1, b=1)) == (None, "")
    assert jobset.KIND.phase(status(a=2)) == (None, "")
    assert jobset.KIND.phase(status(a=2, b=1))[0] is Phase.RUNNING
    done = [{"type": "Completed", "status": "True", "message": "all done"}]
    assert jobset.KIND.phase(status(conditions=done, a=0, b=0)) == (Phase.SUCCEEDED, "all done")
    failed = [{"type": "Failed", "status": "True", "reason": "FailedJobs"}]
    assert jobset.KIND.phase(status(conditions=failed, a=2, b=1)) == (Phase.FAILED, "FailedJobs")


def pod(labels: dict[str, str], per_job: str | None = "3") -> dict[str, Any]:
    notes = {} if per_job is None else {"fleet.io/pods-per-job": per_job}
    return {"metadata": {"labels": labels, "annotations": notes}}


def test_a_pod_is_its_jobs_index_times_pods_per_job_plus_its_completion_index() -> None:
    labels = {
        "jobset.sigs.k8s.io/replicatedjob-name": "workers",
        "jobset.sigs.k8s.io/job-index": "2",
        "batch.kubernetes.io/job-completion-index": "1",
    }
    assert jobset.KIND.replica(pod(labels)) == ("workers", 7)
    # not indexed, of a later wave, or without Fleet's annotation: the role's first free pod
    no_index = {k: v for k, v in labels.items() if "completion" not in k}
    assert jobset.KIND.replica(pod(no_index)) == ("workers", None)
    wave = {**labels, "batch.kubernetes.io/job-completion-index": "3"}
    assert jobset.KIND.replica(pod(wave)) == ("workers", None)
    assert jobset.KIND.replica(pod(labels, per_job=None)) == ("workers", None)
    assert jobset.KIND.replica(pod({})) is None


# On simulated members ------------------------------------------------------------------


async def test_a_jobset_runs_whole_on_a_simulated_member(database_url: str) -> None:
    doc = a_jobset(("driver", 1, 1, None), ("workers", 2, 2, None), gpus=2)
    doc["metadata"].update(namespace="team-a", annotations={"fleet.io/simulated-duration": "60s"})
    text = dump(make_policy("p", namespace="team-a", selectors=[JOBSET]), doc)
    clock = VirtualClock(1000.0)
    async with running_service(settings(database_url), clock) as svc:
        await svc.intake.accept(new_jobs(text, svc.tree, svc.clusters))
        await settle(svc.loop, clock)
        run = svc.loop.state.running["team-a/js"]
        pods = sorted(p.pod for u in run.units for p in u.pods)
        assert pods == ["driver-0", "workers-0", "workers-1", "workers-2", "workers-3"]
        await settle(svc.loop, clock, 61)
        assert "team-a/js" not in svc.loop.state.running
        async with svc.db.read() as session:
            row = await job_rows.by_name(session, "team-a", "js")
            assert row is not None and row.state == "Succeeded"
