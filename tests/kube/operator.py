"""A stand-in for the training operator and the kubelets of a member, for tests.

Theory of operation: the training operator is not part of Fleet, and no
kubelet runs in the tests' control planes, so :class:`Operator` plays both,
in a thread that polls the API server as its admin:

* for every PyTorchJob it creates the pods its replica specs ask for, named
  and labelled as Kubeflow's operator does (``<job>-<type>-<index>``,
  ``training.kubeflow.org/replica-type`` and ``-index``), from the pod
  templates (so they keep Fleet's ``schedulerName``, labels and affinity),
  and sets the job's ``Created`` condition;
* once every pod of a job is bound to a node (by Fleet) it sets ``Running``;
* :meth:`Operator.finish` sets the pods' phase, as kubelets do when their
  containers exit, and then the job's ``Succeeded`` or ``Failed`` condition;
* like a kubelet, it finishes the deletion of pods that are being deleted.

Tests end jobs with :meth:`Operator.finish` and make them restart with
:meth:`Operator.restart`.  :meth:`Operator.pause` stops it for a while.
"""

from __future__ import annotations

import contextlib
import datetime
import threading
from typing import Any

from tests.kube.controlplane import Admin, ApiError

JOBS = "/apis/kubeflow.org/v1/pytorchjobs"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(kind: str, reason: str) -> dict[str, str]:
    now = _now()
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": f"{kind} (set by the test operator)",
        "lastTransitionTime": now,
        "lastUpdateTime": now,
    }


class Operator:
    """Plays the training operator and the kubelets of one member; see the module docstring."""

    def __init__(self, admin: Admin, interval: float = 0.1) -> None:
        self.admin = admin
        self.interval = interval
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Operator:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def pause(self, paused: bool = True) -> None:
        if paused:
            self._paused.set()
        else:
            self._paused.clear()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if self._paused.is_set():
                continue
            try:
                self.step()
            except (ApiError, OSError, ValueError) as e:
                self.errors.append(str(e))  # the API server may be stopped on purpose

    # One pass ------------------------------------------------------------------------

    def step(self) -> None:
        pods = self.admin.items("/api/v1/pods")
        for pod in pods:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                self._delete_pod(meta["namespace"], meta["name"], grace=0)
        by_name = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
        for job in self.admin.items(JOBS):
            if job["metadata"].get("deletionTimestamp"):
                continue
            self._operate(job, by_name)

    def _operate(self, job: dict[str, Any], pods: dict[tuple[str, str], Any]) -> None:
        meta = job["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        conditions = (job.get("status") or {}).get("conditions") or []
        kinds = [c["type"] for c in conditions]
        true = {c["type"] for c in conditions if c["status"] == "True"}
        if "Succeeded" in kinds or "Failed" in kinds:
            return
        mine = []
        for role, spec in sorted(job["spec"]["pytorchReplicaSpecs"].items()):
            for index in range(int(spec.get("replicas", 1))):
                pod_name = f"{name}-{role.lower()}-{index}"
                pod = pods.get((namespace, pod_name))
                if pod is None:
                    pod = self._create_pod(job, role, index, pod_name, spec["template"])
                mine.append(pod)
        if "Created" not in kinds:
            self._set_conditions(namespace, name, [_condition("Created", "PyTorchJobCreated")])
            kinds.append("Created")
        bound = mine and all((p.get("spec") or {}).get("nodeName") for p in mine)
        if bound and not true & {"Running", "Restarting"}:
            self._add_condition(job, _condition("Running", "PyTorchJobRunning"))

    def _create_pod(
        self, job: dict[str, Any], role: str, index: int, name: str, template: dict[str, Any]
    ) -> Any:
        meta = job["metadata"]
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        labels.update(
            {
                "training.kubeflow.org/job-name": meta["name"],
                "training.kubeflow.org/operator-name": "pytorchjob-controller",
                "training.kubeflow.org/replica-type": role.lower(),
                "training.kubeflow.org/replica-index": str(index),
            }
        )
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
                "ownerReferences": [
                    {
                        "apiVersion": "kubeflow.org/v1",
                        "kind": "PyTorchJob",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": template["spec"],
        }
        try:
            return self.admin.request("POST", f"/api/v1/namespaces/{meta['namespace']}/pods", pod)
        except ApiError as e:
            if e.status != 409:
                raise
            return self.admin.get(f"/api/v1/namespaces/{meta['namespace']}/pods/{name}")

    def _delete_pod(self, namespace: str, name: str, *, grace: int) -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": grace}
        with contextlib.suppress(ApiError):
            self.admin.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body)

    def _set_conditions(self, namespace: str, name: str, conditions: list[dict[str, str]]) -> None:
        self.admin.request(
            "PATCH",
            f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs/{name}/status",
            {"status": {"conditions": conditions}},
            content_type="application/merge-patch+json",
        )

    def _add_condition(self, job: dict[str, Any], condition: dict[str, str]) -> None:
        old = [
            {**c, "status": "False"} if c["type"] in ("Running", "Restarting") else c
            for c in (job.get("status") or {}).get("conditions") or []
            if c["type"] != condition["type"]
        ]
        meta = job["metadata"]
        self._set_conditions(meta["namespace"], meta["name"], [*old, condition])

    # What tests do -----------------------------------------------------------------

    def job(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(
            self.admin.get(f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs/{name}")
        )

    def finish(self, namespace: str, name: str, *, succeeded: bool = True) -> None:
        """End the job: its pods' containers exit (as kubelets report), then its condition."""
        kind = "Succeeded" if succeeded else "Failed"
        pods = self.admin.items(
            f"/api/v1/namespaces/{namespace}/pods",
            labelSelector=f"training.kubeflow.org/job-name={name}",
        )
        for pod in pods:
            with contextlib.suppress(ApiError):
                self.admin.request(
                    "PATCH",
                    f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}/status",
                    {"status": {"phase": kind}},
                    content_type="application/merge-patch+json",
                )
        self._add_condition(self.job(namespace, name), _condition(kind, f"PyTorchJob{kind}"))

    def restart(self, namespace: str, name: str) -> None:
        self._add_condition(
            self.job(namespace, name), _condition("Restarting", "PyTorchJobRestarting")
        )
