"""Volcano ``Job`` (``batch.volcano.sh/v1alpha1``): tasks, ``minAvailable`` and lifecycle policies.

Theory of operation: a Volcano Job is a list of ``spec.tasks``, each a pod
set: the task's ``name`` is the role, ``replicas`` the pods, ``template``
their pod template.  Fleet places the tasks in the order written.

**The gang.**  ``spec.minAvailable`` pods, else Volcano's own default (its
admission webhook writes it when absent): the sum over the tasks of each
task's ``minAvailable``, a task without one counting its ``replicas``
(``mutate_job.go`` ``patchDefaultMinAvailable``).  A task's ``minAvailable``
(at most its ``replicas``) is how many of its pods the gang must hold: such a
task is two pod sets for the core, its first ``minAvailable`` pods placed with
the other tasks' minimums and its other pods after every task's minimum
(:func:`fleet.manifests.convert`); the core's gang is the first
``minAvailable`` pods in that order, so it holds every task's minimum
whenever ``minAvailable`` is at least their sum.  When it is less, Volcano
itself does not hold the tasks to their minimums (its gang check skips them,
``CheckTaskReady``) and neither does Fleet: the gang is the first
``minAvailable`` pods, minimums first.  Volcano fills the gang beyond the
minimums by task priority; Fleet by the order the tasks are written.  A Volcano
Job cannot be resized in place: it is admitted whole.

**Fields Fleet reads.**  ``spec.queue`` must name the leaf queue of the job's
namespace (as every kind's queue field); ``spec.priorityClassName`` is the
Fleet priority class.  ``spec.schedulerName`` (Volcano's ``volcano``) is
accepted as written, and a task's template may not name a scheduler (only
Fleet places pods).

**The member object.**  The job as written, each task with the pods Fleet
planned for it and its template decorated (Fleet's scheduler, uid label and
planned nodes); a task Fleet planned no pod for (one of ``replicas: 0``, which
Volcano accepts) is kept with ``replicas: 0``, so the job keeps its tasks
(Volcano refuses an update that adds or removes tasks, and its ``svc``
plugin writes every task's host file).  Fleet rewrites three fields:

* ``spec.schedulerName`` is Fleet's scheduler, the one decorate wrote on the
  templates: Volcano's controller gives it to any pod whose template names
  none, and its webhook would write ``volcano`` in an absent field;
* ``spec.queue`` is dropped: it names Fleet's leaf queue, which the member's
  Volcano need not have (its webhook refuses a job naming a Volcano Queue
  that does not exist, and writes ``default`` in an absent field);
* ``spec.priorityClassName`` is dropped: it names a Fleet priority class,
  which Volcano's controller would copy to every pod, and the member need
  not have that PriorityClass (its API server refuses pods naming an unknown
  one).  A template's own ``priorityClassName`` is kept.

``plugins`` (``ssh``, ``svc``, ``env``, ...), ``maxRetry``, ``minSuccess``,
``ttlSecondsAfterFinished``, ``volumes``, task ``dependsOn`` and the
``policies`` are carried to the member unchanged: the member's Volcano
controller runs them.

**Phases.**  Volcano's controller reports ``status.state.phase``:

=============  ============  =================================================
Volcano        Fleet         why
=============  ============  =================================================
Pending        Created       no pod runs yet (Restarting when
                             ``status.retryCount`` > 0: a restarted job waits
                             for its pods again)
Running        Running       ``minAvailable`` pods run
Restarting     Restarting    its pods are being killed to start again
Completing     (none)        a CompleteJob is killing the pods; Fleet keeps the
                             placement until Completed
Completed      Succeeded
Aborting       (none)        an AbortJob is killing the pods
Aborted        Failed        the pods are gone; Fleet issues no ResumeJob
Terminating    (none)        a TerminateJob is killing the pods
Terminated     Failed
Failed         Failed        ``maxRetry`` restarts spent, or too few pods
                             succeeded
=============  ============  =================================================

**Policies** (job-level, or a task's, which win for that task's events):
what the member's controller does for an event, and what Fleet then does.

=================  ============================================================
action             Fleet
=================  ============================================================
RestartJob         the job is Restarting (Pending after it, until its pods
                   run again), then Running; Fleet keeps its placement and
                   binds the new pods, named as before, to the same planned
                   nodes; the restarts that ``maxRetry`` allows spent, the
                   controller says Failed and so does Fleet
RestartTask,       the task's pods (or the pod) are recreated while the job
RestartPod         stays Running; Fleet binds them to the same planned nodes
CompleteJob        Completing, then Completed: the job Succeeded, its
                   placement released (``TaskCompleted -> CompleteJob``: the
                   task's pods ended well, the others are killed)
AbortJob           Aborting, then Aborted: the job Failed
TerminateJob       Terminating, then Terminated: the job Failed
ResumeJob          (resumes an Aborted job) nothing: Fleet has ended it
=================  ============================================================

Events: ``PodFailed``, ``PodEvicted``, ``TaskCompleted``, ``TaskFailed``,
``Unknown``, ``JobUpdated`` and ``*``, or an ``exitCode``; Fleet itself never
evicts one pod of a running job (a preemption or a cancel deletes the whole
Job), so ``PodEvicted`` comes from the member (a drained or failed node).
As Volcano's webhook does, Fleet refuses the events and actions Volcano
keeps for itself (``PodPending``, ``PodRunning``, ``OutOfSync``,
``CommandIssued``; ``SyncJob``, ``EnqueueJob``, ...), a policy with both an
event and an exit code or neither, an exit code 0, and an event named twice.

**Pods.**  Volcano's controller names a task's pods ``<job>-<task>-<index>``
and labels them ``volcano.sh/task-spec`` (the task) and, since v1.10,
``volcano.sh/task-index``; both are annotations too (older versions wrote the
task only as an annotation).  :meth:`VolcanoJobKind.replica` reads the label,
else the annotation, else the index from the pod's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final, Literal

from pydantic import Field, StrictInt, StrictStr

from fleet.core.digits import parse_digits
from fleet.manifests import models
from fleet.manifests.errors import Problem, quote
from fleet.manifests.kinds import base, pods
from fleet.manifests.kinds.base import JSON, Decorate, Phase, PodSet
from fleet.manifests.models import MAX_REPLICAS

API_VERSION: Final = "batch.volcano.sh/v1alpha1"
#: Pod label (and annotation) of a pod's task, and of its index in the task.
TASK_LABEL: Final = "volcano.sh/task-spec"
INDEX_LABEL: Final = "volcano.sh/task-index"
#: Label of the job a pod belongs to.
JOB_LABEL: Final = "volcano.sh/job-name"
#: The task name Volcano gives a task without one (``default0``, ...).
DEFAULT_TASK: Final = "default"

#: Events and actions a policy may name (Volcano's webhook: ``policyEventMap``,
#: ``policyActionMap``); the others are the controller's own.
EVENTS: Final = (
    "*",
    "PodFailed",
    "PodEvicted",
    "Unknown",
    "TaskCompleted",
    "TaskFailed",
    "JobUpdated",
)
ACTIONS: Final = (
    "AbortJob",
    "RestartJob",
    "RestartTask",
    "RestartPod",
    "TerminateJob",
    "CompleteJob",
    "ResumeJob",
)

#: ``status.state.phase`` -> Fleet's phase (None: in between, nothing to report).
PHASES: Final[Mapping[str, Phase | None]] = {
    "Pending": Phase.CREATED,
    "Running": Phase.RUNNING,
    "Restarting": Phase.RESTARTING,
    "Completing": None,
    "Completed": Phase.SUCCEEDED,
    "Aborting": None,
    "Aborted": Phase.FAILED,
    "Terminating": None,
    "Terminated": Phase.FAILED,
    "Failed": Phase.FAILED,
}

TaskReplicas = Annotated[StrictInt, Field(ge=0, le=MAX_REPLICAS)]


class Policy(models._Foreign):
    event: StrictStr | None = None
    events: list[StrictStr] = Field(default_factory=list)
    action: StrictStr | None = None
    exit_code: StrictInt | None = None


class Task(models._Foreign):
    name: StrictStr | None = None
    replicas: TaskReplicas = 0
    min_available: StrictInt | None = None
    template: pods.PodTemplate
    policies: list[Policy] = Field(default_factory=list)


class VolcanoJobSpec(models._Foreign):
    tasks: Annotated[list[Task], Field(min_length=1)]
    min_available: StrictInt | None = None
    queue: StrictStr | None = None
    priority_class_name: StrictStr | None = None
    scheduler_name: StrictStr | None = None
    policies: list[Policy] = Field(default_factory=list)


class VolcanoJobModel(base.WorkloadModel):
    api_version: Literal["batch.volcano.sh/v1alpha1"]
    kind: Literal["Job"]
    spec: VolcanoJobSpec

    def roles(self) -> list[str]:
        """Each task's role: its name, or Volcano's ``default<i>`` for one without."""
        return [t.name or f"{DEFAULT_TASK}{i}" for i, t in enumerate(self.spec.tasks)]

    def templates(self) -> list[tuple[str, str, pods.PodTemplate]]:
        return [
            (role, f"spec.tasks[{i}].template", task.template)
            for i, (role, task) in enumerate(zip(self.roles(), self.spec.tasks, strict=True))
        ]

    def pod_sets(self, problems: list[Problem]) -> list[PodSet]:
        out: list[PodSet] = []
        for i, (role, task) in enumerate(zip(self.roles(), self.spec.tasks, strict=True)):
            path = f"spec.tasks[{i}]"
            per_pod = pods.pod_request(task.template, f"{path}.template", problems)
            if task.replicas:  # a task of no pods has nothing to place
                minimum = task.min_available or 0
                out.append(PodSet(role, path, task.replicas, per_pod, f"{path}.template", minimum))
        return out

    def pods_path(self) -> str:
        return "spec.tasks"

    def declared_minimum(self) -> tuple[int, str]:
        return self.spec.min_available or 0, "spec.minAvailable"

    def gang_minimum(self) -> tuple[int, str]:
        found = self.spec.min_available
        if found:
            return found, "spec.minAvailable"
        # Volcano's default: every task's minAvailable, else its replicas.
        total = sum(
            t.replicas if t.min_available is None else t.min_available for t in self.spec.tasks
        )
        return total, "spec.tasks"

    def queue_field(self) -> tuple[str | None, str]:
        return self.spec.queue, "spec.queue"

    def priority_field(self) -> tuple[str | None, str]:
        return self.spec.priority_class_name, "spec.priorityClassName"

    def kind_problems(self) -> list[Problem]:
        problems: list[Problem] = []
        seen: dict[str, int] = {}
        for i, task in enumerate(self.spec.tasks):
            path = f"spec.tasks[{i}]"
            if task.name is not None:
                # (the schema checks the name's characters; Volcano its length too)
                if len(task.name) > 63:
                    problems.append((f"{path}.name", "a task name has at most 63 characters"))
                elif task.name in seen:
                    problems.append(
                        (
                            f"{path}.name",
                            f"task {quote(task.name)} is spec.tasks[{seen[task.name]}] too",
                        )
                    )
                seen.setdefault(task.name, i)
            low = task.min_available
            if low is not None and low < 0:
                problems.append((f"{path}.minAvailable", "must not be negative"))
            elif low is not None and low > task.replicas:
                problems.append(
                    (
                        f"{path}.minAvailable",
                        f"{low} is more than the task's {task.replicas} replicas",
                    )
                )
            problems.extend(_policy_problems(task.policies, f"{path}.policies"))
        if not any(t.replicas for t in self.spec.tasks):
            problems.append(("spec.tasks", "no task has replicas: the job has no pod"))
        if self.spec.min_available is not None and self.spec.min_available < 0:
            problems.append(("spec.minAvailable", "must not be negative"))
        problems.extend(_policy_problems(self.spec.policies, "spec.policies"))
        return problems


def _policy_problems(policies: list[Policy], path: str) -> list[Problem]:
    """What Volcano's webhook refuses in a list of lifecycle policies (``validatePolicies``)."""
    out: list[Problem] = []
    named: dict[str, int] = {}
    for i, policy in enumerate(policies):
        at = f"{path}[{i}]"
        events = [*policy.events, *([policy.event] if policy.event else [])]
        if events and policy.exit_code is not None:
            out.append((at, "names an event and an exitCode: a policy answers one of them"))
        elif not events and policy.exit_code is None:
            out.append((at, "needs an event (or events) or an exitCode"))
        elif policy.exit_code == 0:
            out.append((f"{at}.exitCode", "0 is not an error code"))
        for event in events:
            where = f"{at}.event" if event == policy.event else f"{at}.events"
            if event not in EVENTS:
                out.append(
                    (
                        where,
                        f"{quote(event)} is not an event a policy may name; "
                        f"one of {', '.join(EVENTS)}",
                    )
                )
            elif event in named and named[event] != i:
                out.append((where, f"event {quote(event)} is in {path}[{named[event]}] too"))
            named.setdefault(event, i)
        if policy.action is None:
            out.append((f"{at}.action", "a policy needs an action"))
        elif policy.action not in ACTIONS:
            out.append(
                (
                    f"{at}.action",
                    f"{quote(policy.action)} is not an action a policy may name; "
                    f"one of {', '.join(ACTIONS)}",
                )
            )
    if "*" in named and len(named) > 1:
        out.append((path, "a policy for event '*' must be the only one"))
    return out


class VolcanoJobKind(base.Kind):
    """The member half of a Volcano Job."""

    api_version = API_VERSION
    kind = "Job"
    plural = "jobs"
    model = VolcanoJobModel

    def member_spec(
        self, spec: Mapping[str, Any], counts: Mapping[str, int], decorate: Decorate
    ) -> JSON:
        out = dict(spec)
        tasks: list[JSON] = []
        scheduler: object = None
        for i, given in enumerate(out.get("tasks") or []):
            task = dict(given) if isinstance(given, Mapping) else {}
            role = str(task.get("name") or f"{DEFAULT_TASK}{i}")
            task["replicas"] = counts.get(role, 0)
            template = decorate(role, task.get("template") or {})
            task["template"] = template
            pod = template.get("spec")
            if scheduler is None and isinstance(pod, Mapping):
                scheduler = pod.get("schedulerName")
            tasks.append(task)
        out["tasks"] = tasks
        if isinstance(scheduler, str) and scheduler:
            out["schedulerName"] = scheduler
        out.pop("queue", None)
        out.pop("priorityClassName", None)
        return out

    def phase(self, obj: Mapping[str, Any]) -> tuple[Phase | None, str]:
        status = obj.get("status")
        status = status if isinstance(status, Mapping) else {}
        state = status.get("state")
        state = state if isinstance(state, Mapping) else {}
        name = state.get("phase")
        found = PHASES.get(name) if isinstance(name, str) else None
        retries = status.get("retryCount")
        if found is Phase.CREATED and isinstance(retries, int) and retries > 0:
            found = Phase.RESTARTING  # a restarted job waits for its pods again
        said = state.get("message") or state.get("reason") or name or ""
        return found, str(said)

    def replica(self, pod: Mapping[str, Any]) -> tuple[str, int | None] | None:
        found = base.labels(pod)
        notes = base.annotations_of(pod)
        role = found.get(TASK_LABEL) or notes.get(TASK_LABEL)
        if not isinstance(role, str) or not role:
            return None
        index = found.get(INDEX_LABEL) or notes.get(INDEX_LABEL)
        if not isinstance(index, str):
            meta = pod.get("metadata")
            name = meta.get("name") if isinstance(meta, Mapping) else None
            head, _, index = str(name or "").rpartition("-")
            if not head.endswith(f"-{role}"):
                return None
        number = parse_digits(index)
        return None if number is None else (role, number)


KIND = VolcanoJobKind()
VolcanoJobModel.KIND = KIND
