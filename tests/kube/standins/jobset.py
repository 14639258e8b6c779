"""A stand-in for the JobSet controller (and the Job controller and kubelets under it), for tests.

Theory of operation: JobSet's controller cannot be built here (the Go module
proxy refuses ``sigs.k8s.io/jobset``), so :class:`JobSetController` plays it
in a thread that polls the API server as its admin, installed with JobSet's
real CRD (``deploy/member/crds/jobset.x-k8s.io_jobsets.yaml``):

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

import contextlib
import datetime
import threading
from typing import Any

from tests.kube.controlplane import Admin, ApiError

API: str = "/apis/jobset.x-k8s.io/v1alpha2"
JOBSETS: str = f"{API}/jobsets"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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


class JobSetController:
    """Plays JobSet's controller, the Job controller and the kubelets; see the module docstring."""

    def __init__(self, admin: Admin, interval: float = 0.1) -> None:
        self.admin = admin
        self.interval = interval
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> JobSetController:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.step()
            except (ApiError, OSError, ValueError, KeyError) as e:
                self.errors.append(str(e))

    # One pass ------------------------------------------------------------------------

    def step(self) -> None:
        pods = self.admin.items("/api/v1/pods")
        for pod in pods:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                self._delete_pod(meta["namespace"], meta["name"])
            elif _bound(pod) and (pod.get("status") or {}).get("phase") not in _RUNNING_OR_DONE:
                self._pod_status(pod, "Running", ready=True)
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
    ) -> Any:
        meta = jobset["metadata"]
        template_meta = template.get("metadata") or {}
        annotations = dict(template_meta.get("annotations") or {})
        annotations["batch.kubernetes.io/job-completion-index"] = labels[
            "batch.kubernetes.io/job-completion-index"
        ]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": {**dict(template_meta.get("labels") or {}), **labels},
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": "jobset.x-k8s.io/v1alpha2",
                        "kind": "JobSet",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": template["spec"],
        }
        path = f"/api/v1/namespaces/{meta['namespace']}/pods"
        try:
            return self.admin.request("POST", path, pod)
        except ApiError as e:
            if e.status != 409:
                raise
            return self.admin.get(f"{path}/{name}")

    def _pod_status(self, pod: dict[str, Any], phase: str, *, ready: bool) -> None:
        meta = pod["metadata"]
        status: dict[str, Any] = {"phase": phase}
        status["conditions"] = [
            {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": _now()}
        ]
        with contextlib.suppress(ApiError):
            self.admin.request(
                "PATCH",
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                {"status": status},
                content_type="application/merge-patch+json",
            )

    def _delete_pod(self, namespace: str, name: str) -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        with contextlib.suppress(ApiError):
            self.admin.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body)

    def _status(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.admin.request(
            "PATCH",
            f"{API}/namespaces/{namespace}/jobsets/{name}/status",
            {"status": status},
            content_type="application/merge-patch+json",
        )

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
            self._pod_status(pod, phase, ready=False)
        jobset = self.jobset(namespace, name)
        kind = "Completed" if succeeded else "Failed"
        condition = {
            "type": kind,
            "status": "True",
            "reason": "AllJobsCompleted" if succeeded else "FailedJobs",
            "message": f"jobset {kind.lower()} (set by the stand-in JobSet controller)",
            "lastTransitionTime": _now(),
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
