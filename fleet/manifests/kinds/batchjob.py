"""Kubernetes ``Job`` (``batch/v1``): one pod set of ``parallelism`` pods, run as one gang.

Theory of operation: a batch Job is one pod template run by the member's own
Job controller (built into every Kubernetes: :attr:`BatchJobKind.api_path` is
``/apis/batch/v1``).  Fleet reads it as Kueue does:

* **One pod set**, role :data:`ROLE` (``main``, the name Kueue gives it), of
  as many pods as the Job runs at once: ``parallelism`` (default 1), at most
  ``completions`` when that is set (the Job controller never keeps more than
  ``completions - succeeded`` pods active, in either completion mode); each
  pod asks for what ``spec.template`` asks for.  Neither may be 0 (a Job of
  no pods).  An ``Indexed`` Job needs ``completions`` (the API server says
  so), and may not have more completions than ``parallelism``: its pods are
  bound by their index (below), and an index beyond the planned pods would
  have no planned pod.  A ``NonIndexed`` Job whose completions exceed its
  parallelism runs its pods in waves, each new pod taking the place of one
  that ended.
* **The gang is every pod**, and a Job is **not resized** in place: its
  ``parallelism`` is mutable in Kubernetes (Kueue calls a smaller admission
  partial admission), but Fleet admits it whole, as it was written.
* **Queue and priority** come from Kueue's labels: ``kueue.x-k8s.io/queue-name``
  (when given, it must name the leaf queue of the job's namespace, as any
  kind's queue field must) and ``kueue.x-k8s.io/priority-class`` (a Fleet
  priority class by that name; none: the default class).
* **Deadline:** ``spec.activeDeadlineSeconds`` is the job's own deadline
  (:attr:`fleet.core.jobs.Job.active_deadline`), counted by Fleet over every
  run of the job; the member's Job controller also counts it for the run it
  sees.
* **Refused:** ``spec.selector`` and ``spec.manualSelector: true`` (the API
  server generates a Job's selector from its uid; a copy made in a member has
  another uid), and a ``spec.managedBy`` other than the built-in controller
  (``kubernetes.io/job-controller``) or MultiKueue's
  (``kueue.x-k8s.io/multikueue``): Fleet runs a Job on its member's Job
  controller, which skips a Job managed by anything else.
* **Dropped from the member's copy:** ``spec.managedBy`` (Fleet plays
  MultiKueue's part; in the member the Job controller runs it) and
  ``spec.suspend`` (Kueue's admission gate: Fleet creates a job in a member
  only once it is admitted there, so a document written for Kueue with
  ``suspend: true`` runs as written; to hold a job, suspend it through its
  PropagationPolicy).

The member half writes ``parallelism`` (the planned pods) and the decorated
template.  The phase comes from the Job's conditions, ``Complete`` (Succeeded)
and ``Failed`` (Failed, with the condition's message), else from its counts:
Running once ``status.ready + status.succeeded`` reaches the Job's pod count
(every pod has run; a pod that ends fast may never be counted ready).
``Suspended`` is not a phase of Fleet's: Fleet never suspends a Job in a
member.  A pod is matched to its planned pod by the Job controller's
completion index (``batch.kubernetes.io/job-completion-index``, a label since
Kubernetes 1.28, an annotation before): ``main-<index>``; a NonIndexed Job's
pod has none and takes the first planned pod that no live pod of the job
holds (:meth:`fleet.clusters.kube.cluster.KubeCluster._replica`).  A pod the
Job controller did not make (no ``batch.kubernetes.io/job-name`` label) is
no pod of the job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import StrictBool, StrictInt, StrictStr

from fleet.core.digits import parse_digits
from fleet.manifests import models
from fleet.manifests.errors import Problem, quote
from fleet.manifests.kinds import base, pods
from fleet.manifests.kinds.base import JSON, Decorate, Phase, PodSet
from fleet.manifests.models import ReplicaCount

API_VERSION: Final = "batch/v1"
#: The one role of a batch Job's pods (Kueue's pod-set name).
ROLE: Final = "main"
QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL: Final = "kueue.x-k8s.io/priority-class"
#: The Job controller's completion index of an Indexed Job's pod (label and annotation).
INDEX_KEY: Final = "batch.kubernetes.io/job-completion-index"
#: The Job controller's label on every pod of a Job.
JOB_NAME_LABEL: Final = "batch.kubernetes.io/job-name"
#: ``spec.managedBy`` values whose Job the member's own controller may run.
MANAGERS: Final = ("kubernetes.io/job-controller", "kueue.x-k8s.io/multikueue")
_ENDS: Final = {"Complete": Phase.SUCCEEDED, "Failed": Phase.FAILED}


class BatchJobSpec(models._Foreign):
    parallelism: ReplicaCount | None = None
    completions: ReplicaCount | None = None
    completion_mode: Literal["NonIndexed", "Indexed"] | None = None
    manual_selector: StrictBool | None = None
    selector: dict[str, Any] | None = None
    managed_by: StrictStr | None = None
    active_deadline_seconds: StrictInt | None = None
    template: pods.PodTemplate

    @property
    def indexed(self) -> bool:
        return self.completion_mode == "Indexed"


def pods_of(parallelism: int | None, completions: int | None) -> int:
    """The pods a Job runs at once: ``parallelism`` (default 1), at most ``completions``."""
    most = 1 if parallelism is None else parallelism
    return most if completions is None else min(most, completions)


class BatchJobModel(base.WorkloadModel):
    api_version: Literal["batch/v1"]
    kind: Literal["Job"]
    spec: BatchJobSpec

    def templates(self) -> list[tuple[str, str, pods.PodTemplate]]:
        return [(ROLE, "spec.template", self.spec.template)]

    def deadline_field(self) -> tuple[int | None, str]:
        return self.spec.active_deadline_seconds, "spec.activeDeadlineSeconds"

    def pod_sets(self, problems: list[Problem]) -> list[PodSet]:
        per_pod = pods.pod_request(self.spec.template, "spec.template", problems)
        count = pods_of(self.spec.parallelism, self.spec.completions)
        return [PodSet(ROLE, "spec", count, per_pod, "spec.template")]

    def pods_path(self) -> str:
        return "spec.parallelism"

    def queue_field(self) -> tuple[str | None, str]:
        return self.metadata.labels.get(QUEUE_LABEL), f"metadata.labels.{QUEUE_LABEL}"

    def priority_field(self) -> tuple[str | None, str]:
        return self.metadata.labels.get(PRIORITY_LABEL), f"metadata.labels.{PRIORITY_LABEL}"

    def kind_problems(self) -> list[Problem]:
        spec = self.spec
        out: list[Problem] = []
        if spec.selector is not None:
            out.append(
                (
                    "spec.selector",
                    "Kubernetes generates a Job's selector from the Job's uid, and the copy "
                    "Fleet creates in a member has another uid; remove spec.selector",
                )
            )
        if spec.manual_selector:
            out.append(
                (
                    "spec.manualSelector",
                    "Fleet lets Kubernetes generate the Job's selector; remove spec.manualSelector",
                )
            )
        if spec.managed_by is not None and spec.managed_by not in MANAGERS:
            out.append(
                (
                    "spec.managedBy",
                    f"Fleet runs a Job on its member's Job controller, which skips a Job "
                    f"managed by {quote(spec.managed_by)}; leave spec.managedBy out "
                    f"(or name {' or '.join(MANAGERS)})",
                )
            )
        if spec.indexed:
            if spec.completions is None:
                out.append(("spec.completions", "an Indexed Job needs completions"))
            elif spec.completions > (spec.parallelism or 1):
                out.append(
                    (
                        "spec.completions",
                        f"{spec.completions} is more than parallelism "
                        f"{spec.parallelism or 1}: Fleet binds an Indexed Job's pods by "
                        "their index to the pods it plans, which are parallelism pods; "
                        "set parallelism to completions",
                    )
                )
        return out


class BatchJobKind(base.Kind):
    """The member half of a batch Job (the Job controller is built into Kubernetes)."""

    api_version = API_VERSION
    kind = "Job"
    plural = "jobs"
    model = BatchJobModel

    def member_spec(
        self, spec: Mapping[str, Any], counts: Mapping[str, int], decorate: Decorate
    ) -> JSON:
        out = dict(spec)
        out["parallelism"] = counts.get(ROLE, 0)
        out["template"] = decorate(ROLE, spec.get("template") or {})
        out.pop("suspend", None)
        out.pop("managedBy", None)
        return out

    def phase(self, obj: Mapping[str, Any]) -> tuple[Phase | None, str]:
        found, message = base.condition_phase(obj, _ENDS)
        if found is not None:
            return found, message
        spec = obj.get("spec")
        status = obj.get("status")
        if not isinstance(spec, Mapping) or not isinstance(status, Mapping):
            return None, ""
        expected = pods_of(_count(spec.get("parallelism")), _count(spec.get("completions")))
        ran = (_count(status.get("ready")) or 0) + (_count(status.get("succeeded")) or 0)
        return (Phase.RUNNING, "") if expected and ran >= expected else (None, "")

    def replica(self, pod: Mapping[str, Any]) -> tuple[str, int | None] | None:
        found = base.labels(pod)
        if not found.get(JOB_NAME_LABEL):
            return None
        index = found.get(INDEX_KEY, base.annotations_of(pod).get(INDEX_KEY))
        if index is None:
            return ROLE, None
        number = parse_digits(index) if isinstance(index, str) else None
        return None if number is None else (ROLE, number)


def _count(value: object) -> int | None:
    """A count the member wrote (a JSON integer), or None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


KIND = BatchJobKind()
BatchJobModel.KIND = KIND
