"""A stand-in for Volcano's job controller in a member, for tests.

Theory of operation: Volcano's controllers cannot be built here (the Go
module proxy refuses ``volcano.sh/volcano``), so :class:`VolcanoStandIn`
plays the part of them that Fleet meets, against the real Volcano CRDs
(``deploy/member/crds/batch.volcano.sh_jobs.yaml`` and
``scheduling.volcano.sh_podgroups.yaml``), in a thread that polls the API
server as its admin (:class:`.poller.Poller`).  What it does follows Volcano's job controller
(``pkg/controllers/job``):

* for every Volcano Job it creates the PodGroup ``<job>-<uid>``
  (``minMember`` = ``spec.minAvailable``, ``minTaskMember`` each task's
  ``minAvailable``, the job's queue, else ``default``) and marks it
  ``Inqueue``, as Volcano's scheduler's enqueue action would (the controller
  creates no pod while its PodGroup is Pending);
* then the pods of every task, ``<job>-<task>-<index>``, from the task's
  template (so they keep Fleet's scheduler, uid label and node affinity),
  labelled and annotated as Volcano v1.10+ does (``volcano.sh/task-spec``,
  ``volcano.sh/task-index``, ``volcano.sh/job-name``, ...), owned by the job;
  a template without a scheduler gets the job's ``schedulerName``;
* ``status.state.phase``: Pending, then Running once ``minAvailable`` pods
  run (``pending.go``); every pod ended: Completed if at least
  ``minAvailable`` succeeded, else Failed (``running.go``);
* policies, a task's before the job's: ``TaskCompleted`` (every pod of the
  task succeeded) and ``PodFailed`` / ``PodEvicted`` (a pod failed, with
  reason ``Evicted`` for the latter) run their action: ``CompleteJob``,
  ``AbortJob`` and ``TerminateJob`` kill the running pods and end the job
  Completed, Aborted or Terminated; ``RestartJob`` kills every pod, says
  Restarting with ``retryCount`` + 1 (Failed past ``maxRetry``, default 3),
  and Pending once the pods are gone, when it creates them again.

It plays neither the kubelets nor the garbage collector: the member's real
KWOK runs the pods bound to its Nodes and finishes off those being deleted,
and its real garbage collector deletes what a deleted job owned (its pods
and PodGroup) (:mod:`tests.kube.real_operator`).

Tests end pods with :meth:`VolcanoStandIn.finish` (their containers exit)
and evict one with :meth:`VolcanoStandIn.evict`.
"""

from __future__ import annotations

from typing import Any

from tests.kube.standins.poller import Poller, now, owner_ref, pod_from

JOBS = "/apis/batch.volcano.sh/v1alpha1/jobs"
ENDED = ("Completed", "Aborted", "Terminated", "Failed")
#: What a phase-ending action leaves the job in, through its "-ing" phase.
ENDS = {"CompleteJob": "Completed", "AbortJob": "Aborted", "TerminateJob": "Terminated"}
ENDING = {"CompleteJob": "Completing", "AbortJob": "Aborting", "TerminateJob": "Terminating"}
TASK = "volcano.sh/task-spec"
INDEX = "volcano.sh/task-index"


class VolcanoStandIn(Poller):
    """Plays Volcano's job controller in one member; see the module docstring."""

    # One pass ------------------------------------------------------------------------

    def step(self) -> None:
        pods = self.admin.items("/api/v1/pods")
        for job in self.admin.items(JOBS):
            if not job["metadata"].get("deletionTimestamp"):
                self._operate(job, pods)

    def _operate(self, job: dict[str, Any], all_pods: list[dict[str, Any]]) -> None:
        meta, spec = job["metadata"], job["spec"]
        status = dict(job.get("status") or {})
        phase = (status.get("state") or {}).get("phase") or ""
        if phase in ENDED:
            return
        pods = {
            p["metadata"]["name"]: p
            for p in all_pods
            if p["metadata"]["namespace"] == meta["namespace"]
            and any(o.get("uid") == meta["uid"] for o in p["metadata"].get("ownerReferences") or [])
        }
        live = {n: p for n, p in pods.items() if not p["metadata"].get("deletionTimestamp")}
        if not phase:
            self._podgroup(job)
            self._set_phase(job, "Pending", status)
            return
        if phase in ("Completing", "Aborting", "Terminating"):
            if self._kill(live, keep_ended=True):
                action = next(a for a, ing in ENDING.items() if ing == phase)
                self._set_phase(job, ENDS[action], status)
            return
        if phase == "Restarting":
            if not pods:  # every pod gone: start again
                self._set_phase(job, "Pending", status)
            return
        # Pending or Running: create what is missing, then read the pods.
        for task in spec["tasks"]:
            for index in range(int(task.get("replicas", 0))):
                name = f"{meta['name']}-{task['name']}-{index}"
                if name not in pods:
                    live[name] = self._create_pod(job, task, index, name)
        action = self._policy_action(job, live)
        if action == "RestartJob":
            retries = int(status.get("retryCount") or 0) + 1
            self._kill(live, keep_ended=False)
            ended = retries >= int(spec.get("maxRetry") or 3)
            status["retryCount"] = retries
            self._set_phase(job, "Failed" if ended else "Restarting", status)
            return
        if action in ENDS:
            self._set_phase(job, ENDING[action], status)
            return
        phases = [(p.get("status") or {}).get("phase") for p in live.values()]
        minimum = int(spec.get("minAvailable") or len(phases))
        succeeded = phases.count("Succeeded")
        total = sum(int(t.get("replicas", 0)) for t in spec["tasks"])
        if len(phases) == total and succeeded + phases.count("Failed") == total:
            self._set_phase(job, "Completed" if succeeded >= minimum else "Failed", status)
        elif (
            phase == "Pending"
            and sum(p in ("Running", "Succeeded", "Failed") for p in phases) >= minimum
        ):
            self._set_phase(job, "Running", status)

    def _policy_action(self, job: dict[str, Any], pods: dict[str, dict[str, Any]]) -> str | None:
        """The action of the first event the pods raise, a task's policy before the job's."""
        spec = job["spec"]
        for task in spec["tasks"]:
            mine = [p for p in pods.values() if p["metadata"]["labels"].get(TASK) == task["name"]]
            events = []
            whole = bool(mine) and len(mine) == int(task.get("replicas", 0))
            if whole and all((p.get("status") or {}).get("phase") == "Succeeded" for p in mine):
                events.append("TaskCompleted")
            for p in mine:
                if (p.get("status") or {}).get("phase") == "Failed":
                    evicted = (p.get("status") or {}).get("reason") == "Evicted"
                    events.append("PodEvicted" if evicted else "PodFailed")
            for event in events:
                for policies in (task.get("policies") or [], spec.get("policies") or []):
                    for policy in policies:
                        named = [*(policy.get("events") or []), policy.get("event")]
                        if event in named or "*" in named:
                            return str(policy.get("action"))
        return None

    # Objects -------------------------------------------------------------------------

    def _podgroup(self, job: dict[str, Any]) -> None:
        meta, spec = job["metadata"], job["spec"]
        tasks = spec["tasks"]
        group = {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {
                "name": f"{meta['name']}-{meta['uid']}",
                "namespace": meta["namespace"],
                "ownerReferences": [_owner(job)],
            },
            "spec": {
                "minMember": int(
                    spec.get("minAvailable")
                    or sum(int(t.get("minAvailable", t.get("replicas", 0))) for t in tasks)
                ),
                "minTaskMember": {
                    t["name"]: int(t.get("minAvailable", t.get("replicas", 0))) for t in tasks
                },
                "queue": spec.get("queue") or "default",
            },
        }
        path = podgroups_in(meta["namespace"])
        self._create(path, group)
        # (the PodGroup CRD has no status subresource)
        self._merge_patch(f"{path}/{group['metadata']['name']}", {"status": {"phase": "Inqueue"}})

    def _create_pod(
        self, job: dict[str, Any], task: dict[str, Any], index: int, name: str
    ) -> dict[str, Any]:
        meta, spec = job["metadata"], job["spec"]
        template = task.get("template") or {}
        queue = spec.get("queue") or "default"
        ours = {
            TASK: task["name"],
            INDEX: str(index),
            "volcano.sh/job-name": meta["name"],
            "volcano.sh/job-namespace": meta["namespace"],
            "volcano.sh/queue-name": queue,
        }
        annotations = {
            TASK: task["name"],
            INDEX: str(index),
            "scheduling.k8s.io/group-name": f"{meta['name']}-{meta['uid']}",
            "volcano.sh/job-name": meta["name"],
            "volcano.sh/queue-name": queue,
            "volcano.sh/job-version": str((job.get("status") or {}).get("version") or 0),
            "volcano.sh/template-uid": f"{meta['name']}-{task['name']}",
        }
        pod_spec = dict(template.get("spec") or {})
        if not pod_spec.get("schedulerName") and spec.get("schedulerName"):
            pod_spec["schedulerName"] = spec["schedulerName"]
        if not pod_spec.get("priorityClassName") and spec.get("priorityClassName"):
            pod_spec["priorityClassName"] = spec["priorityClassName"]
        body = pod_from(
            template,
            name,
            meta["namespace"],
            labels=ours,
            annotations=annotations,
            owned_by=_owner(job),
            spec=pod_spec,
        )
        return self._create(f"/api/v1/namespaces/{meta['namespace']}/pods", body)

    def _kill(self, pods: dict[str, dict[str, Any]], *, keep_ended: bool) -> bool:
        """Delete the pods (but the ended ones, with ``keep_ended``); True when none is left."""
        left = False
        for pod in pods.values():
            if keep_ended and (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            meta = pod["metadata"]
            self._delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}")
            left = True
        return not left

    def _set_phase(self, job: dict[str, Any], phase: str, status: dict[str, Any]) -> None:
        meta = job["metadata"]
        state = {"phase": phase, "lastTransitionTime": now()}
        if phase == "Failed" and status.get("retryCount"):
            state["reason"] = "MaxRetryExceeded"
        self._merge_patch(
            f"/apis/batch.volcano.sh/v1alpha1/namespaces/{meta['namespace']}/jobs/{meta['name']}/status",
            {"status": {**status, "state": state, "minAvailable": job["spec"].get("minAvailable")}},
        )

    def _pod_phase(self, pod: dict[str, Any], phase: str, reason: str = "") -> None:
        status: dict[str, Any] = {"phase": phase}
        if reason:
            status["reason"] = reason
        self._pod_status(pod, status)

    # What tests do -----------------------------------------------------------------

    def job(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(
            self.admin.get(f"/apis/batch.volcano.sh/v1alpha1/namespaces/{namespace}/jobs/{name}")
        )

    def pods(self, namespace: str, name: str, task: str | None = None) -> list[dict[str, Any]]:
        selector = f"volcano.sh/job-name={name}" + (f",{TASK}={task}" if task else "")
        return self.admin.items(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector)

    def finish(
        self, namespace: str, name: str, task: str | None = None, *, succeeded: bool = True
    ) -> None:
        """The containers of the job's pods (of ``task``) exit, as kubelets report."""
        for pod in self.pods(namespace, name, task):
            self._pod_phase(pod, "Succeeded" if succeeded else "Failed")

    def evict(self, namespace: str, pod_name: str) -> None:
        """The pod is evicted (its node drained): Failed, reason Evicted."""
        pod = self.admin.get(f"/api/v1/namespaces/{namespace}/pods/{pod_name}")
        self._pod_phase(pod, "Failed", "Evicted")


def podgroups_in(namespace: str) -> str:
    return f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{namespace}/podgroups"


def _owner(job: dict[str, Any]) -> dict[str, Any]:
    return owner_ref(job, "batch.volcano.sh/v1alpha1", "Job", block=True)
