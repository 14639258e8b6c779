"""A stand-in for the JobSet controller (and the Job controller and kubelets under it), for tests.

Theory of operation: JobSet's controller cannot be built here (the Go module
proxy refuses ``sigs.k8s.io/jobset``), so :class:`JobSetController` plays it
in a thread that polls the API server as its admin (:class:`.poller.Poller`),
installed with JobSet's real CRD (``deploy/member/crds/jobset.x-k8s.io_jobsets.yaml``):

* for every JobSet it makes the pods its Jobs would have, directly (no batch
  Job objects): for replicated job ``r``, Job index ``j`` < ``replicas`` and
  completion index ``i`` < the Job's pods at once (``parallelism``, at most
  ``completions``), the pod ``<jobset>-<r>-<j>-<i>`` from the Job's pod
  template (so it keeps Fleet's scheduler, labels, annotations and
  affinity), labelled as JobSet and the Job controller label it
  (``jobset.sigs.k8s.io/jobset-name``, ``replicatedjob-name``,
  ``job-index``, and ``batch.kubernetes.io/job-completion-index`` as label
  and annotation) and owned by the JobSet;
* like a kubelet, once a pod is bound (by Fleet) it marks it Running and
  Ready, and it finishes the deletion of pods being deleted;
* it writes ``status.replicatedJobsStatus`` as JobSet does: per replicated
  job, ``ready`` is the number of its Jobs whose pods are all Ready;
* :meth:`JobSetController.finish` makes the pods' containers exit and then
  sets the JobSet's ``Completed`` or ``Failed`` condition (and
  ``terminalState``), as JobSet does when its Jobs end.

:func:`jobset_pods` is what the stand-in makes of a JobSet (the Trainer
stand-in, :mod:`.trainer`, relies on this controller for the JobSet it
creates).
"""

from __future__ import annotations

from typing import Any

from tests.kube.standins.poller import Poller, now, owner_ref, pod_from

API: str = "/apis/jobset.x-k8s.io/v1alpha2"
JOBSETS: str = f"{API}/jobsets"


def pods_per_job(job_spec: dict[str, Any]) -> int:
    parallelism = int(job_spec.get("parallelism", 1))
    completions = job_spec.get("completions")
    return parallelism if completions is None else min(parallelism, int(completions))


def jobset_pods(jobset: dict[str, Any]) -> list[tuple[str, dict[str, str], dict[str, Any]]]:
    """``(pod name, JobSet's and the Job controller's labels, pod template)`` of every pod."""
    name = jobset["metadata"]["name"]
    out = []
    for rjob in jobset["spec"]["replicatedJobs"]:
        job_spec = rjob["template"]["spec"]
        for j in range(int(rjob.get("replicas", 1))):
            for i in range(pods_per_job(job_spec)):
                labels = {
                    "jobset.sigs.k8s.io/jobset-name": name,
                    "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
                    "jobset.sigs.k8s.io/job-index": str(j),
                    "batch.kubernetes.io/job-completion-index": str(i),
                    "job-name": f"{name}-{rjob['name']}-{j}",
                }
                out.append((f"{name}-{rjob['name']}-{j}-{i}", labels, job_spec["template"]))
    return out


class JobSetController(Poller):
    """Plays JobSet's controller, the Job controller and the kubelets; see the module docstring."""

    # One pass ------------------------------------------------------------------------

    def step(self) -> None:
        pods = self.admin.items("/api/v1/pods")
        self._finish_deletions(pods)
        for pod in pods:
            deleting = pod["metadata"].get("deletionTimestamp")
            phase = (pod.get("status") or {}).get("phase")
            if not deleting and _bound(pod) and phase not in _RUNNING_OR_DONE:
                self._pod_phase(pod, "Running", ready=True)
        by_name = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
        for jobset in self.admin.items(JOBSETS):
            if jobset["metadata"].get("deletionTimestamp"):
                continue
            self._operate(jobset, by_name)

    def _operate(self, jobset: dict[str, Any], pods: dict[tuple[str, str], Any]) -> None:
        meta = jobset["metadata"]
        status = jobset.get("status") or {}
        if status.get("terminalState"):
            return
        namespace = meta["namespace"]
        ready: dict[tuple[str, str], bool] = {}
        for name, labels, template in jobset_pods(jobset):
            pod = pods.get((namespace, name))
            if pod is None:
                pod = self._create_pod(jobset, name, labels, template)
            key = (labels["jobset.sigs.k8s.io/replicatedjob-name"], labels["job-name"])
            ready[key] = ready.get(key, True) and _ready(pod)
        counts = []
        for rjob in jobset["spec"]["replicatedJobs"]:
            n = sum(1 for (r, _), ok in ready.items() if r == rjob["name"] and ok)
            counts.append(
                {
                    "name": rjob["name"],
                    "ready": n,
                    "succeeded": 0,
                    "failed": 0,
                    "active": int(rjob.get("replicas", 1)),
                    "suspended": 0,
                }
            )
        if counts != status.get("replicatedJobsStatus"):
            self._status(namespace, meta["name"], {"replicatedJobsStatus": counts})

    def _create_pod(
        self, jobset: dict[str, Any], name: str, labels: dict[str, str], template: dict[str, Any]
    ) -> dict[str, Any]:
        meta = jobset["metadata"]
        index = "batch.kubernetes.io/job-completion-index"
        body = pod_from(
            template,
            name,
            meta["namespace"],
            labels=labels,
            annotations={index: labels[index]},
            owned_by=owner_ref(jobset, "jobset.x-k8s.io/v1alpha2", "JobSet"),
        )
        return self._create(f"/api/v1/namespaces/{meta['namespace']}/pods", body)

    def _pod_phase(self, pod: dict[str, Any], phase: str, *, ready: bool) -> None:
        ready_condition = {
            "type": "Ready",
            "status": "True" if ready else "False",
            "lastTransitionTime": now(),
        }
        self._pod_status(pod, {"phase": phase, "conditions": [ready_condition]})

    def _status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self._merge_patch(f"{API}/namespaces/{namespace}/jobsets/{name}/status", {"status": status})

    # What tests do -----------------------------------------------------------------

    def jobset(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(self.admin.get(f"{API}/namespaces/{namespace}/jobsets/{name}"))

    def finish(self, namespace: str, name: str, *, succeeded: bool = True) -> None:
        """End the JobSet: its pods' containers exit, then its Completed or Failed condition."""
        phase = "Succeeded" if succeeded else "Failed"
        pods = self.admin.items(
            f"/api/v1/namespaces/{namespace}/pods",
            labelSelector=f"jobset.sigs.k8s.io/jobset-name={name}",
        )
        for pod in pods:
            self._pod_phase(pod, phase, ready=False)
        jobset = self.jobset(namespace, name)
        kind = "Completed" if succeeded else "Failed"
        condition = {
            "type": kind,
            "status": "True",
            "reason": "AllJobsCompleted" if succeeded else "FailedJobs",
            "message": f"jobset {kind.lower()} (set by the stand-in JobSet controller)",
            "lastTransitionTime": now(),
        }
        done = [
            {**s, "ready": 0, "active": 0, "succeeded" if succeeded else "failed": s.get("active")}
            for s in (jobset.get("status") or {}).get("replicatedJobsStatus") or []
        ]
        self._status(
            namespace,
            name,
            {"conditions": [condition], "terminalState": kind, "replicatedJobsStatus": done},
        )


_RUNNING_OR_DONE = ("Running", "Succeeded", "Failed")


def _bound(pod: dict[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def _ready(pod: dict[str, Any]) -> bool:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return bool(c.get("status") == "True")
    return False
