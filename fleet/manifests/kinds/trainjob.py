"""Trainer v2's ``TrainJob`` (``trainer.kubeflow.org/v1alpha1``) and its training runtimes.

Theory of operation.  A TrainJob names a *runtime* (``spec.runtimeRef``:
``name``, ``kind`` ``ClusterTrainingRuntime`` (the default) or
``TrainingRuntime`` (in the TrainJob's namespace), ``apiGroup``
``trainer.kubeflow.org``); the runtime is a JobSet template
(``spec.template``) with an ``mlPolicy`` whose ``numNodes`` is the trainer's
node count.  Trainer's controller makes the JobSet from the two: the
*trainer job* (the replicated job labelled
``trainer.kubeflow.org/trainjob-ancestor-step: trainer`` in its template,
else the one named ``node``) runs ``spec.trainer.numNodes`` pods (else the
runtime's ``mlPolicy.numNodes``, else its own parallelism), and the
TrainJob's ``spec.trainer.resourcesPerNode`` replaces the resources of the
trainer container (the one named ``node``, else the first).

* **Runtimes are registered** by an administrator: a ClusterTrainingRuntime
  or TrainingRuntime document in ``POST /api/v1/submissions`` (admin tokens
  only), checked against its CRD schema and by :class:`TrainingRuntimeModel`
  (its pod templates as any kind's: no ``nodeName``/``schedulerName``, no
  key Fleet writes; a trainer job), and stored.  Registered runtimes are
  :data:`Runtimes`: the plain documents by :func:`runtime_key`.
* **Parse time.**  A TrainJob's pod sets need its runtime: the loader
  (:mod:`fleet.manifests.convert`) calls :meth:`TrainJobModel.resolve` with
  the registered runtimes (and those of the same submission); an unknown
  runtime is a problem at ``spec.runtimeRef.name``.  The *effective* runtime
  spec (:func:`effective_runtime`: the runtime with the trainer job's
  parallelism and completions set to the node count and the trainer
  container's resources to ``resourcesPerNode``) gives the pod sets, as a
  JobSet's replicated jobs do (:mod:`.jobset`), and is stored with the job
  (:meth:`TrainJobModel.stored`: the annotation ``fleet.io/training-runtime``,
  a key only Fleet writes): the job runs with the runtime Fleet planned it
  with, whatever is registered later.
* **Gang: every pod**, as a JobSet's (Trainer has no ``minAvailable`` of its
  own); not resizable.  Queue and priority: Kueue's labels
  (``kueue.x-k8s.io/queue-name``, ``kueue.x-k8s.io/priority-class``), read as
  for a JobSet.  ``spec.runtimePatches`` is refused: it could change the
  pods' labels, affinity and node selector, which are Fleet's placement.
* **In a member the runtime is embedded**: Fleet creates, before the
  TrainJob, a namespaced TrainingRuntime of the TrainJob's own member name
  holding the effective runtime with every pod template decorated as any
  kind's (Fleet's uid label, scheduler, planned nodes) and told its pods per
  job, and points the TrainJob's ``runtimeRef`` at it
  (:meth:`TrainJobKind.dependencies`); the runtime is then owned by the
  TrainJob (the member's garbage collector deletes it with the TrainJob).
  The shared runtime is never written into the member, so a member's own
  runtimes are never overwritten and every TrainJob's pods carry its own
  placement.  ``spec.suspend`` is dropped (admission is Fleet's).
* **Deadline:** ``spec.activeDeadlineSeconds`` is the job's own deadline
  (:attr:`fleet.core.jobs.Job.active_deadline`), counted by Fleet over every run.
* **Phase.**  Trainer's conditions: ``Complete`` → Succeeded, ``Failed`` →
  Failed; no Running condition: Running when ``status.jobsStatus`` shows
  every replicated job ready, as for a JobSet.  Trainer's JobSet labels the
  pods as JobSet does, so a pod's planned index is read as for a JobSet
  (:func:`.jobset.pod_replica`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from pydantic import PrivateAttr, StrictInt, StrictStr

from fleet.manifests import models
from fleet.manifests.errors import Problem, quote
from fleet.manifests.kinds import base, jobset, pods
from fleet.manifests.kinds.base import JSON, Decorate, Dependency, Phase, PodSet
from fleet.manifests.models import ObjectMeta, ReplicaCount

API_VERSION: Final = "trainer.kubeflow.org/v1alpha1"
GROUP: Final = "trainer.kubeflow.org"
CLUSTER_RUNTIME: Final = "ClusterTrainingRuntime"
RUNTIME: Final = "TrainingRuntime"
RUNTIME_KINDS: Final = (CLUSTER_RUNTIME, RUNTIME)
#: The label (on a replicated job's Job template) that marks the trainer job.
ANCESTOR_LABEL: Final = "trainer.kubeflow.org/trainjob-ancestor-step"
#: Trainer's name of the trainer job and of its trainer container.
TRAINER_NODE: Final = "node"
RUNTIME_ANNOTATION: Final = models.TRAINING_RUNTIME_ANNOTATION
_ENDS: Final = {"Complete": Phase.SUCCEEDED, "Failed": Phase.FAILED}

#: Registered runtimes: their plain documents by :func:`runtime_key`.
Runtimes = base.Runtimes


def runtime_key(kind: str, namespace: str, name: str) -> str:
    """``ClusterTrainingRuntime/name`` or ``TrainingRuntime/namespace/name``."""
    return f"{kind}/{name}" if kind == CLUSTER_RUNTIME else f"{kind}/{namespace}/{name}"


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def is_trainer_job(job: Mapping[str, Any], jobs: Sequence[Any]) -> bool:
    """Whether replicated job ``job`` (of ``jobs``) is the trainer job."""
    labelled = [
        j
        for j in jobs
        if _mapping(_mapping(_mapping(j).get("template")).get("metadata"))
        .get("labels", {})
        .get(ANCESTOR_LABEL)
        == "trainer"
    ]
    if labelled:
        return job is labelled[0]
    return job.get("name") == TRAINER_NODE


# Runtimes ----------------------------------------------------------------------------


class MLPolicy(models._Foreign):
    num_nodes: ReplicaCount | None = None


class RuntimeTemplate(models._Foreign):
    spec: jobset.JobSetSpec


class RuntimeSpec(models._Foreign):
    ml_policy: MLPolicy | None = None
    template: RuntimeTemplate


class TrainingRuntimeModel(models._Foreign):
    """A ClusterTrainingRuntime or TrainingRuntime document, as an administrator registers it."""

    api_version: Literal["trainer.kubeflow.org/v1alpha1"]
    kind: Literal["ClusterTrainingRuntime", "TrainingRuntime"]
    metadata: ObjectMeta
    spec: RuntimeSpec

    @property
    def key(self) -> str:
        namespace = self.metadata.namespace_or_default if self.kind == RUNTIME else ""
        return runtime_key(self.kind, namespace, self.metadata.name)

    def problems(self) -> list[Problem]:
        path = "spec.template.spec.replicatedJobs"
        jobs = self.spec.template.spec.replicated_jobs
        if not jobs:
            return [(path, "needs at least one replicated job")]
        out: list[Problem] = []
        jobset.replicated_pod_sets(jobs, path, out)
        plain = [{"name": j.name, "template": j.template.model_dump(by_alias=True)} for j in jobs]
        if not any(is_trainer_job(j, plain) for j in plain):
            msg = (
                f"no trainer job: label one replicated job's template {ANCESTOR_LABEL}: "
                f"trainer, or name it {TRAINER_NODE!r}"
            )
            out.append((path, msg))
        for _, at, template in jobset.replicated_templates(jobs, path):
            out.extend(pods.template_problems(template, at))
        out.extend(
            pods.written_key_problems(
                {"labels": self.metadata.labels, "annotations": self.metadata.annotations},
                "metadata",
            )
        )
        return out


def effective_runtime(runtime: Mapping[str, Any], trainer: Mapping[str, Any]) -> JSON:
    """The runtime's spec as Trainer applies a TrainJob's ``spec.trainer`` to it.

    The trainer job's parallelism and completions become the node count
    (``trainer.numNodes``, else ``mlPolicy.numNodes``, else as written) and
    its trainer container's resources ``trainer.resourcesPerNode`` when given.
    """
    spec = copy.deepcopy(dict(_mapping(runtime.get("spec"))))
    policy = dict(_mapping(spec.get("mlPolicy")))
    nodes = trainer.get("numNodes", policy.get("numNodes"))
    if nodes is not None:
        policy["numNodes"] = nodes
        spec["mlPolicy"] = policy
    jobs = _mapping(_mapping(spec.get("template")).get("spec")).get("replicatedJobs")
    jobs = jobs if isinstance(jobs, list) else []
    resources = trainer.get("resourcesPerNode")
    for job in jobs:
        if not isinstance(job, dict) or not is_trainer_job(job, jobs):
            continue
        job_spec = _mapping(job.get("template")).get("spec")
        if not isinstance(job_spec, dict):
            continue
        if nodes is not None:
            job_spec["parallelism"] = nodes
            job_spec["completions"] = nodes
        containers = _mapping(_mapping(job_spec.get("template")).get("spec")).get("containers")
        if resources is not None and isinstance(containers, list) and containers:
            named = [c for c in containers if _mapping(c).get("name") == TRAINER_NODE]
            target = named[0] if named else containers[0]
            if isinstance(target, dict):
                target["resources"] = copy.deepcopy(dict(_mapping(resources)))
    return spec


# TrainJobs ---------------------------------------------------------------------------


class RuntimeRef(models._Foreign):
    name: StrictStr
    kind: StrictStr = CLUSTER_RUNTIME
    api_group: StrictStr = GROUP


class Trainer(models._Foreign):
    num_nodes: ReplicaCount | None = None
    resources_per_node: pods.ResourceRequirements | None = None


class TrainJobSpec(models._Foreign):
    runtime_ref: RuntimeRef
    trainer: Trainer | None = None
    active_deadline_seconds: StrictInt | None = None


class TrainJobModel(base.WorkloadModel):
    api_version: Literal["trainer.kubeflow.org/v1alpha1"]
    kind: Literal["TrainJob"]
    spec: TrainJobSpec
    #: The effective runtime spec, once :meth:`resolve` found the runtime.
    _runtime: JSON | None = PrivateAttr(default=None)
    _runtime_key: str = PrivateAttr(default="")

    def deadline_field(self) -> tuple[int | None, str]:
        return self.spec.active_deadline_seconds, "spec.activeDeadlineSeconds"

    @property
    def runtime_key(self) -> str:
        ref = self.spec.runtime_ref
        return runtime_key(ref.kind, self.namespace, ref.name)

    def resolve(self, runtimes: Runtimes) -> tuple[TrainJobModel, list[Problem]]:
        """This TrainJob with its runtime found among ``runtimes``, or the problem."""
        ref = self.spec.runtime_ref
        if ref.api_group != GROUP or ref.kind not in RUNTIME_KINDS:
            return self, []  # kind_problems says why
        found = runtimes.get(self.runtime_key)
        if found is None:
            where = f" in namespace {quote(self.namespace)}" if ref.kind == RUNTIME else ""
            same = sorted(
                k.rpartition("/")[2] for k in runtimes if k.startswith(f"{ref.kind}/")
            ) or ["none"]
            msg = (
                f"no {ref.kind} {quote(ref.name)}{where} is registered (an administrator "
                f"registers runtimes); registered: {', '.join(same)}"
            )
            return self, [("spec.runtimeRef.name", msg)]
        trainer = _mapping(
            self.model_dump(by_alias=True, exclude_unset=True).get("spec", {}).get("trainer")
        )
        resolved = self.model_copy()
        resolved._runtime = effective_runtime(found, trainer)
        resolved._runtime_key = self.runtime_key
        return resolved, []

    def stored(self, raw: Mapping[str, Any]) -> Mapping[str, Any]:
        """The document as Fleet stores it: with its effective runtime in an annotation."""
        if self._runtime is None:
            return raw
        out = dict(raw)
        meta = dict(_mapping(out.get("metadata")))
        notes = dict(_mapping(meta.get("annotations")))
        notes[RUNTIME_ANNOTATION] = json.dumps(
            {"runtime": self._runtime_key, "spec": self._runtime},
            separators=(",", ":"),
            sort_keys=True,
        )
        meta["annotations"] = notes
        out["metadata"] = meta
        return out

    def _jobs(self) -> list[jobset.ReplicatedJob]:
        if self._runtime is None:
            return []
        template = _mapping(_mapping(self._runtime.get("template")).get("spec"))
        return jobset.JobSetSpec.model_validate(template).replicated_jobs

    def templates(self) -> list[tuple[str, str, pods.PodTemplate]]:
        return [(job.name, "spec.runtimeRef", t) for job, t in self._templates()]

    def _templates(self) -> list[tuple[jobset.ReplicatedJob, pods.PodTemplate]]:
        return [(job, job.template.spec.template) for job in self._jobs()]

    def pod_sets(self, problems: list[Problem]) -> list[PodSet]:
        out: list[PodSet] = []
        plain = self._runtime_jobs()
        for job, raw in zip(self._jobs(), plain, strict=True):
            trainer = is_trainer_job(raw, plain)
            path = "spec.trainer" if trainer else "spec.runtimeRef"
            scratch: list[Problem] = []
            per_pod = pods.pod_request(job.template.spec.template, path, scratch)
            for _, message in scratch:
                problems.append((f"{path}.resourcesPerNode" if trainer else path, message))
            out.append(PodSet(job.name, path, job.pods, per_pod, path))
        return out

    def _runtime_jobs(self) -> list[Any]:
        if self._runtime is None:
            return []
        jobs = _mapping(_mapping(self._runtime.get("template")).get("spec")).get("replicatedJobs")
        return jobs if isinstance(jobs, list) else []

    def pods_path(self) -> str:
        return "spec.trainer"

    def queue_field(self) -> tuple[str | None, str]:
        label = jobset.QUEUE_LABEL
        return self.metadata.labels.get(label), f"metadata.labels.{label}"

    def priority_field(self) -> tuple[str | None, str]:
        label = jobset.PRIORITY_LABEL
        return self.metadata.labels.get(label), f"metadata.labels.{label}"

    def kind_problems(self) -> list[Problem]:
        out: list[Problem] = []
        ref = self.spec.runtime_ref
        if ref.api_group != GROUP:
            msg = f"must be {GROUP} (Trainer's runtimes), not {quote(ref.api_group)}"
            out.append(("spec.runtimeRef.apiGroup", msg))
        if ref.kind not in RUNTIME_KINDS:
            msg = f"must be {CLUSTER_RUNTIME} or {RUNTIME}, not {quote(ref.kind)}"
            out.append(("spec.runtimeRef.kind", msg))
        if (self.spec.model_extra or {}).get("runtimePatches"):
            msg = (
                "not supported: Fleet places the pods (their labels, affinity and node "
                "selector) through the runtime it writes in the member"
            )
            out.append(("spec.runtimePatches", msg))
        return out


# The member half ---------------------------------------------------------------------


class TrainJobKind(base.Kind):
    api_version = API_VERSION
    kind = "TrainJob"
    plural = "trainjobs"
    model = TrainJobModel

    def member_spec(
        self, spec: Mapping[str, Any], counts: Mapping[str, int], decorate: Decorate
    ) -> JSON:
        out = dict(spec)
        out.pop("suspend", None)
        return out

    def dependencies(
        self, obj: Mapping[str, Any], decorate: Decorate
    ) -> tuple[JSON, list[Dependency]]:
        """The TrainJob pointed at its own runtime, and that runtime (see the module docstring)."""
        out = dict(obj)
        meta = dict(_mapping(out.get("metadata")))
        notes = dict(_mapping(meta.get("annotations")))
        stored = notes.pop(RUNTIME_ANNOTATION, None)
        if not isinstance(stored, str):
            return out, []
        meta["annotations"] = notes
        out["metadata"] = meta
        spec = dict(json.loads(stored)["spec"])
        template = dict(_mapping(spec.get("template")))
        js = dict(_mapping(template.get("spec")))
        jobs = js.get("replicatedJobs")
        js["replicatedJobs"] = jobset.member_jobs(jobs if isinstance(jobs, list) else [], decorate)
        template["spec"] = js
        spec["template"] = template
        name, namespace = str(meta.get("name")), str(meta.get("namespace"))
        labels = {
            k: v for k, v in _mapping(meta.get("labels")).items() if k.startswith("fleet.io/")
        }
        runtime = {
            "apiVersion": API_VERSION,
            "kind": RUNTIME,
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": spec,
        }
        job_spec = dict(_mapping(out.get("spec")))
        job_spec["runtimeRef"] = {"name": name, "kind": RUNTIME, "apiGroup": GROUP}
        out["spec"] = job_spec
        path = f"/apis/{API_VERSION}/namespaces/{namespace}/trainingruntimes"
        return out, [Dependency(path, runtime)]

    def phase(self, obj: Mapping[str, Any]) -> tuple[Phase | None, str]:
        found, message = base.condition_phase(obj, _ENDS)
        if found is not None:
            return found, message
        status = _mapping(obj.get("status"))
        statuses = status.get("jobsStatus")
        if not isinstance(statuses, list) or not statuses:
            return None, ""
        # Trainer's JobSet has the runtime's replicated jobs; each entry counts its Jobs.
        jobs = [{"name": s.get("name"), "replicas": _replicas(s)} for s in statuses if _mapping(s)]
        return jobset.jobs_phase({}, jobs, statuses)

    def replica(self, pod: Mapping[str, Any]) -> tuple[str, int | None] | None:
        return jobset.pod_replica(pod)


def _replicas(status: Mapping[str, Any]) -> int:
    """A replicated job's Jobs, from its status entry: active, ended or suspended."""
    counts = [status.get(f) for f in ("active", "succeeded", "failed", "suspended")]
    return max(sum(c for c in counts if isinstance(c, int)), 1)


KIND = TrainJobKind()
TrainJobModel.KIND = KIND
