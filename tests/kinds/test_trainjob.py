"""Trainer v2's TrainJob and its runtimes (fleet.manifests.kinds.trainjob).

A TrainJob's pod sets are its runtime's replicated jobs with the TrainJob's
``numNodes`` and ``resourcesPerNode`` applied to the trainer job; a runtime
named by no registered runtime nor one of the same submission is a 422 at
``spec.runtimeRef.name``; runtimes are checked when registered; typos are
the schema's; the stored document carries the effective runtime, from which
a member's own runtime is made, decorated, and the TrainJob pointed at it.
On simulated members a TrainJob runs as one gang.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import pytest
import yaml

from fleet.clock import VirtualClock
from fleet.manifests import convert
from fleet.manifests.errors import SpecError
from fleet.manifests.kinds import registry, trainjob
from fleet.manifests.kinds.base import Phase
from fleet.store import jobs as job_rows
from fleet.testing.running import new_jobs, running_service, settings, settle
from tests import paths
from tests.manifests.factories import dump, make_policy, make_tree

TRAINJOB = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob"}
NAME = "torch-distributed"


@pytest.fixture
def tree() -> Any:
    return convert.load_quota(dump(make_tree()))[0]


def runtime() -> dict[str, Any]:
    text = (paths.KIND_EXAMPLES / "trainer-runtime-torch-distributed.yaml").read_text()
    return dict(yaml.safe_load(text))


def registered(*docs: dict[str, Any]) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for d in docs:
        meta = d["metadata"]
        out[trainjob.runtime_key(d["kind"], meta.get("namespace", ""), meta["name"])] = d
    return out


def a_trainjob(
    nodes: int | None = 2, gpus: int | None = 4, runtime_name: str = NAME, **ref: str
) -> dict[str, Any]:
    trainer: dict[str, Any] = {}
    if nodes is not None:
        trainer["numNodes"] = nodes
    if gpus is not None:
        trainer["resourcesPerNode"] = {"limits": {"nvidia.com/gpu": gpus}}
    return {
        **TRAINJOB,
        "metadata": {"name": "tj", "namespace": "default"},
        "spec": {"runtimeRef": {"name": runtime_name, **ref}, "trainer": trainer},
    }


def policy() -> dict[str, Any]:
    return make_policy("p", selectors=[TRAINJOB])


def load(tree: Any, *docs: dict[str, Any], runtimes: Any = None) -> convert.Submission:
    return convert.load_submitted(dump(*docs), tree, runtimes=runtimes)


def issues(tree: Any, *docs: dict[str, Any], runtimes: Any = None) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as e:
        load(tree, *docs, runtimes=runtimes)
    return [(i.path, i.message) for i in e.value.issues]


def test_the_pod_sets_are_the_runtimes_with_the_trainjobs_nodes_and_resources(tree: Any) -> None:
    found = load(tree, policy(), a_trainjob(nodes=3, gpus=2), runtimes=registered(runtime()))
    (job,) = found.jobs
    assert [(g.role, g.count, g.per_pod["nvidia.com/gpu"]) for g in job.job.groups] == [
        ("node", 3, 2)
    ]
    assert job.job.gang and job.job.min_members == 0
    assert registry.find("trainer.kubeflow.org/v1alpha1", "TrainJob") is trainjob.KIND
    # Without numNodes, the runtime's mlPolicy.numNodes (1).
    (job,) = load(tree, policy(), a_trainjob(nodes=None), runtimes=registered(runtime())).jobs
    assert [(g.role, g.count) for g in job.job.groups] == [("node", 1)]


def test_a_runtime_of_the_same_submission_serves_its_trainjobs(tree: Any) -> None:
    found = load(tree, runtime(), policy(), a_trainjob())
    assert [d.model.key for d in found.runtimes] == [f"ClusterTrainingRuntime/{NAME}"]
    assert [g.count for g in found.jobs[0].job.groups] == [2]
    # A submission of runtimes alone needs no job and no policy.
    assert load(tree, runtime()).jobs == []


def test_an_unknown_runtime_is_refused_at_runtime_ref_name(tree: Any) -> None:
    ((path, message),) = issues(tree, policy(), a_trainjob(runtime_name="nope"))
    assert path == "spec.runtimeRef.name"
    assert message.startswith("no ClusterTrainingRuntime 'nope' is registered")
    # A namespaced runtime is looked up in the TrainJob's namespace only.
    other = runtime()
    other.update(kind="TrainingRuntime")
    other["metadata"]["namespace"] = "b"
    found = issues(tree, policy(), a_trainjob(kind="TrainingRuntime"), runtimes=registered(other))
    assert found[0][0] == "spec.runtimeRef.name"
    assert "in namespace 'default'" in found[0][1]


def test_runtime_patches_are_refused(tree: Any) -> None:
    doc = a_trainjob()
    doc["spec"]["runtimePatches"] = [{"manager": "someone"}]
    found = issues(tree, policy(), doc, runtimes=registered(runtime()))
    assert [p for p, _ in found] == ["spec.runtimePatches"]


@pytest.mark.parametrize(
    ("field", "path"),
    [("numNode", "spec.trainer.numNode"), ("runtimeReff", "spec.runtimeReff")],
)
def test_typos_are_refused_by_the_schema(tree: Any, field: str, path: str) -> None:
    doc = a_trainjob()
    target = doc["spec"]["trainer"] if field == "numNode" else doc["spec"]
    target[field] = 2
    found = issues(tree, policy(), doc, runtimes=registered(runtime()))
    assert [p for p, _ in found if p != "spec.runtimeRef"] == [path]
    assert all(m.startswith(("unknown field", "required field")) for _, m in found)


def test_a_runtime_is_checked_when_registered(tree: Any) -> None:
    bad = runtime()
    template = bad["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    template["template"]["spec"]["schedulerName"] = "mine"
    bad["spec"]["template"]["spec"]["replicatedJobs"][0]["name"] = "other"
    del bad["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["metadata"]
    found = issues(tree, bad)
    paths_ = [p for p, _ in found]
    assert "spec.template.spec.replicatedJobs" in paths_  # no trainer job
    assert (
        "spec.template.spec.replicatedJobs[0].template.spec.template.spec.schedulerName" in paths_
    )
    typo = runtime()
    typo["spec"]["mlPolicy"]["numNode"] = 2
    assert [p for p, _ in issues(tree, typo)] == ["spec.mlPolicy.numNode"]


def decorate(role: str, template: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(template))
    out.setdefault("metadata", {}).setdefault("labels", {})["fleet.io/job-uid"] = "u-1"
    out["spec"]["schedulerName"] = "fleet-scheduler"
    return out


def test_in_a_member_the_trainjob_refers_to_its_own_decorated_runtime(tree: Any) -> None:
    (job,) = load(tree, policy(), a_trainjob(nodes=3, gpus=2), runtimes=registered(runtime())).jobs
    stored = dict(job.document.raw)
    note = json.loads(stored["metadata"]["annotations"]["fleet.io/training-runtime"])
    assert note["runtime"] == f"ClusterTrainingRuntime/{NAME}"
    member = {
        **stored,
        "metadata": {
            **stored["metadata"],
            "name": "default-tj-12345678",
            "labels": {"fleet.io/job-uid": "u-1", "team": "x"},
        },
    }
    obj, deps = trainjob.KIND.dependencies(member, decorate)
    assert obj["spec"]["runtimeRef"] == {
        "name": "default-tj-12345678",
        "kind": "TrainingRuntime",
        "apiGroup": "trainer.kubeflow.org",
    }
    assert "fleet.io/training-runtime" not in obj["metadata"]["annotations"]
    (dep,) = deps
    assert dep.path == "/apis/trainer.kubeflow.org/v1alpha1/namespaces/default/trainingruntimes"
    assert dep.body["kind"] == "TrainingRuntime"
    assert dep.body["metadata"] == {
        "name": "default-tj-12345678",
        "namespace": "default",
        "labels": {"fleet.io/job-uid": "u-1"},
    }
    (node,) = dep.body["spec"]["template"]["spec"]["replicatedJobs"]
    job_spec = node["template"]["spec"]
    assert (job_spec["parallelism"], job_spec["completions"]) == (3, 3)
    pod = job_spec["template"]
    assert pod["spec"]["schedulerName"] == "fleet-scheduler"
    assert pod["metadata"]["annotations"]["fleet.io/pods-per-job"] == "3"
    assert pod["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 2}}
    assert dep.body["spec"]["mlPolicy"]["numNodes"] == 3
    # Every other kind needs nothing.
    assert registry.KINDS[0].dependencies({"spec": {}}, decorate) == ({"spec": {}}, [])


def test_the_phase_comes_from_trainers_conditions_and_jobs_status() -> None:
    def obj(conditions: list[dict[str, str]], *jobs: dict[str, int]) -> dict[str, Any]:
        statuses = [{"name": f"j{i}", **counts} for i, counts in enumerate(jobs)]
        return {"status": {"conditions": conditions, "jobsStatus": statuses}}

    assert trainjob.KIND.phase(obj([])) == (None, "")
    assert trainjob.KIND.phase(obj([], {"active": 1, "ready": 0})) == (None, "")
    assert trainjob.KIND.phase(obj([], {"active": 1, "ready": 1}))[0] is Phase.RUNNING
    done = [{"type": "Complete", "status": "True", "message": "done"}]
    assert trainjob.KIND.phase(obj(done)) == (Phase.SUCCEEDED, "done")
    failed = [{"type": "Failed", "status": "True", "reason": "x"}]
    assert trainjob.KIND.phase(obj(failed)) == (Phase.FAILED, "x")


async def test_a_trainjob_runs_whole_on_a_simulated_member(database_url: str) -> None:
    doc = a_trainjob(nodes=3, gpus=2)
    doc["metadata"].update(namespace="team-a", annotations={"fleet.io/simulated-duration": "60s"})
    text = dump(runtime(), make_policy("p", namespace="team-a", selectors=[TRAINJOB]), doc)
    clock = VirtualClock(1000.0)
    async with running_service(settings(database_url), clock) as svc:
        await svc.intake.accept(new_jobs(text, svc.tree, svc.clusters))
        await settle(svc.loop, clock)
        run = svc.loop.state.running["team-a/tj"]
        assert sorted(p.pod for u in run.units for p in u.pods) == ["node-0", "node-1", "node-2"]
        await settle(svc.loop, clock, 61)
        async with svc.db.read() as session:
            row = await job_rows.by_name(session, "team-a", "tj")
            assert row is not None and row.state == "Succeeded"
