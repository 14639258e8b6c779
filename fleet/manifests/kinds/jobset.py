"""JobSet (``jobset.x-k8s.io/v1alpha2``): replicated jobs × replicas × pods per job.

Theory of operation.  A JobSet is a list of *replicated jobs*; each is a
batch Job template run ``replicas`` times.  Each replicated job is one pod
set, named after it (its ``name``, unique in the list, is the role), placed
in the order written; its count is ``replicas`` × the pods one of its Jobs
runs at once: the Job's ``parallelism`` (default 1), or its ``completions``
when that is smaller (the Job controller never runs more pods than
completions remain); ``completions`` beyond ``parallelism`` only make the
Job run its pods in waves.  Each pod's request is that of the Job's pod
template (``template.spec.template``).

* **Gang: every pod.**  JobSet has no ``minAvailable``: its Jobs start
  together and fail together (a failed Job fails or restarts the whole
  JobSet), so Fleet admits every pod or none.  A JobSet is not resized in
  place.
* **Queue and priority: Kueue's labels.**  A JobSet names its queue with
  Kueue's ``kueue.x-k8s.io/queue-name`` label and its priority class with
  ``kueue.x-k8s.io/priority-class``.  Fleet reads them as it reads a
  PyTorchJob's ``schedulingPolicy.queue`` and ``priorityClass``: the queue,
  when given, must name the leaf that lists the job's namespace (a 422
  otherwise, naming the label), and the priority class must be one Fleet
  knows (without the label: Fleet's default class).
* **In a member** (:class:`JobSetKind`) the JobSet keeps the user's
  replicas and parallelism (Fleet admits it whole, so the counts are what
  was asked) and drops ``spec.suspend`` (admission is Fleet's; the member
  runs what Fleet creates); each replicated job's pod template
  (``template.spec.template``) is decorated by Fleet and gets the
  ``fleet.io/pods-per-job`` annotation (the pods one of its Jobs runs at
  once), which :meth:`JobSetKind.replica` reads back.
* **Phase.**  JobSet reports ``Completed`` and ``Failed`` conditions (→
  Succeeded, Failed) and no Running condition; Fleet takes the JobSet as
  Running when ``status.replicatedJobsStatus`` shows, for every replicated
  job of the spec, ``ready + succeeded`` Jobs reaching its ``replicas`` (a
  Job is *ready* when its ready and completed pods reach its parallelism):
  every pod runs.  A JobSet restart (its ``failurePolicy``) is not reported
  as Restarting: its pods go and come back under the same object.
* **Which planned pod a member pod is.**  The JobSet controller labels each
  pod with its replicated job (``jobset.sigs.k8s.io/replicatedjob-name``)
  and its Job's index (``jobset.sigs.k8s.io/job-index``), and the Job
  controller an Indexed Job's pod with its completion index
  (``batch.kubernetes.io/job-completion-index``): the planned pod is
  ``job-index × pods-per-job + completion-index`` of the role; a pod
  without a completion index (a NonIndexed Job), or of a later wave, takes
  its role's first free planned pod.

The replicated-job half (:func:`replicated_pod_sets`, :func:`member_jobs`,
:func:`jobs_phase`, :func:`pod_replica`) is shared with Trainer v2's
TrainJob (:mod:`.trainjob`), whose controller creates a JobSet.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Final, Literal

from pydantic import Field, StrictInt, StrictStr

from fleet.core.digits import parse_digits
from fleet.manifests import models
from fleet.manifests.errors import Problem
from fleet.manifests.kinds import base, pods
from fleet.manifests.kinds.base import JSON, Decorate, Phase, PodSet
from fleet.manifests.models import ReplicaCount

API_VERSION: Final = "jobset.x-k8s.io/v1alpha2"
#: Labels the JobSet controller puts on every pod of a JobSet.
REPLICATED_JOB_LABEL: Final = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL: Final = "jobset.sigs.k8s.io/job-index"
#: The Job controller's label (and annotation) on a pod of an Indexed Job.
COMPLETION_INDEX_LABEL: Final = "batch.kubernetes.io/job-completion-index"
#: Kueue's labels, which name a JobSet's queue and priority class.
QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL: Final = "kueue.x-k8s.io/priority-class"
PODS_PER_JOB_ANNOTATION: Final = models.PODS_PER_JOB_ANNOTATION
_ENDS: Final = {"Completed": Phase.SUCCEEDED, "Failed": Phase.FAILED}


class JobSpec(models._Foreign):
    """A batch Job's spec, as far as Fleet reads it."""

    parallelism: ReplicaCount = 1
    completions: Annotated[StrictInt, Field(ge=1)] | None = None
    template: pods.PodTemplate

    @property
    def pods_at_once(self) -> int:
        """The most pods the Job runs at once: ``parallelism``, at most ``completions``."""
        if self.completions is None:
            return self.parallelism
        return min(self.parallelism, self.completions)


class JobTemplate(models._Foreign):
    spec: JobSpec


class ReplicatedJob(models._Foreign):
    name: StrictStr
    replicas: ReplicaCount = 1
    template: JobTemplate

    @property
    def pods(self) -> int:
        return self.replicas * self.template.spec.pods_at_once


class JobSetSpec(models._Foreign):
    replicated_jobs: list[ReplicatedJob] = Field(default_factory=list)


def replicated_pod_sets(
    jobs: Sequence[ReplicatedJob], path: str, problems: list[Problem]
) -> list[PodSet]:
    """One pod set per replicated job (``path``: the list's field path), in order."""
    out: list[PodSet] = []
    for i, job in enumerate(jobs):
        at = f"{path}[{i}]"
        template = f"{at}.template.spec.template"
        per_pod = pods.pod_request(job.template.spec.template, template, problems)
        out.append(PodSet(job.name, at, job.pods, per_pod, template))
    return out


def replicated_templates(
    jobs: Sequence[ReplicatedJob], path: str
) -> list[tuple[str, str, pods.PodTemplate]]:
    return [
        (job.name, f"{path}[{i}].template.spec.template", job.template.spec.template)
        for i, job in enumerate(jobs)
    ]


class JobSetModel(base.WorkloadModel):
    api_version: Literal["jobset.x-k8s.io/v1alpha2"]
    kind: Literal["JobSet"]
    spec: JobSetSpec

    def templates(self) -> list[tuple[str, str, pods.PodTemplate]]:
        return replicated_templates(self.spec.replicated_jobs, "spec.replicatedJobs")

    def pod_sets(self, problems: list[Problem]) -> list[PodSet]:
        return replicated_pod_sets(self.spec.replicated_jobs, "spec.replicatedJobs", problems)

    def pods_path(self) -> str:
        return "spec.replicatedJobs"

    def queue_field(self) -> tuple[str | None, str]:
        return self.metadata.labels.get(QUEUE_LABEL), f"metadata.labels.{QUEUE_LABEL}"

    def priority_field(self) -> tuple[str | None, str]:
        return self.metadata.labels.get(PRIORITY_LABEL), f"metadata.labels.{PRIORITY_LABEL}"

    def kind_problems(self) -> list[Problem]:
        if not self.spec.replicated_jobs:
            return [("spec.replicatedJobs", "needs at least one replicated job")]
        return []


# The member half -------------------------------------------------------------------------


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _count(value: object, default: int = 1) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def pods_per_job(job_spec: Mapping[str, Any]) -> int:
    """:attr:`JobSpec.pods_at_once` of a Job spec as plain JSON."""
    parallelism = _count(job_spec.get("parallelism"))
    completions = job_spec.get("completions")
    return parallelism if completions is None else min(parallelism, _count(completions))


def member_jobs(jobs: Sequence[Any], decorate: Decorate) -> list[JSON]:
    """Replicated jobs as written, each pod template decorated and told its pods per job."""
    out: list[JSON] = []
    for job in jobs:
        job = dict(_mapping(job))
        job_template = dict(_mapping(job.get("template")))
        job_spec = dict(_mapping(job_template.get("spec")))
        template = decorate(str(job.get("name")), _mapping(job_spec.get("template")))
        meta = dict(_mapping(template.get("metadata")))
        annotations = dict(_mapping(meta.get("annotations")))
        annotations[PODS_PER_JOB_ANNOTATION] = str(pods_per_job(job_spec))
        meta["annotations"] = annotations
        template["metadata"] = meta
        job_spec["template"] = template
        job_template["spec"] = job_spec
        job["template"] = job_template
        out.append(job)
    return out


def jobs_phase(
    obj: Mapping[str, Any], jobs: Sequence[Any], statuses: object
) -> tuple[Phase | None, str]:
    """Running when every replicated job of ``jobs`` has all its Jobs ready or succeeded.

    ``statuses`` is a JobSet's ``status.replicatedJobsStatus`` (Trainer's
    ``status.jobsStatus`` has the same items).
    """
    found, message = base.condition_phase(obj, _ENDS)
    if found is not None:
        return found, message
    by_name = {
        s.get("name"): s for s in (statuses if isinstance(statuses, list) else []) if _mapping(s)
    }
    if not jobs:
        return None, ""
    for job in jobs:
        job = _mapping(job)
        status = _mapping(by_name.get(job.get("name")))
        done = _count(status.get("ready"), 0) + _count(status.get("succeeded"), 0)
        if done < _count(job.get("replicas")):
            return None, ""
    return Phase.RUNNING, "every job of every replicated job is ready"


def pod_replica(pod: Mapping[str, Any]) -> tuple[str, int | None] | None:
    """A JobSet pod's replicated job and planned index (None: any free one of the role)."""
    found = base.labels(pod)
    role = found.get(REPLICATED_JOB_LABEL)
    if not isinstance(role, str) or not role:
        return None
    notes = base.annotations_of(pod)

    def number(value: object) -> int | None:
        return parse_digits(value) if isinstance(value, str) else None

    job = number(found.get(JOB_INDEX_LABEL))
    completion = number(found.get(COMPLETION_INDEX_LABEL, notes.get(COMPLETION_INDEX_LABEL)))
    per_job = number(notes.get(PODS_PER_JOB_ANNOTATION))
    if job is None or completion is None or not per_job or completion >= per_job:
        return role, None
    return role, job * per_job + completion


class JobSetKind(base.Kind):
    api_version = API_VERSION
    kind = "JobSet"
    plural = "jobsets"
    model = JobSetModel

    def member_spec(
        self, spec: Mapping[str, Any], counts: Mapping[str, int], decorate: Decorate
    ) -> JSON:
        out = dict(spec)
        out.pop("suspend", None)
        jobs = out.get("replicatedJobs")
        out["replicatedJobs"] = member_jobs(jobs if isinstance(jobs, list) else [], decorate)
        return out

    def phase(self, obj: Mapping[str, Any]) -> tuple[Phase | None, str]:
        spec = _mapping(obj.get("spec"))
        status = _mapping(obj.get("status"))
        jobs = spec.get("replicatedJobs")
        return jobs_phase(
            obj, jobs if isinstance(jobs, list) else [], status.get("replicatedJobsStatus")
        )

    def replica(self, pod: Mapping[str, Any]) -> tuple[str, int | None] | None:
        return pod_replica(pod)


KIND = JobSetKind()
JobSetModel.KIND = KIND
