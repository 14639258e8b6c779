"""A stand-in for the training operator and the kubelets of a member, for tests.

Theory of operation: the training operator is not part of Fleet, and no
kubelet runs in the tests' control planes, so :class:`Operator` plays both,
in a thread that polls the API server as its admin
(:class:`~tests.kube.standins.poller.Poller`):

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

from typing import Any

from tests.kube.standins.poller import (
    Poller,
    owner_ref,
    pod_from,
    training_condition,
)

JOBS = "/apis/kubeflow.org/v1/pytorchjobs"


def _condition(kind: str, reason: str) -> dict[str, str]:
    return training_condition(kind, reason, f"{kind} (set by the test operator)")


class Operator(Poller):
    """Plays the training operator and the kubelets of one member; see the module docstring."""

    # One pass ------------------------------------------------------------------------

    def step(self) -> None:
        pods = self.admin.items("/api/v1/pods")
        self._finish_deletions(pods)
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
    ) -> dict[str, Any]:
        meta = job["metadata"]
        labels = {
            "training.kubeflow.org/job-name": meta["name"],
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/replica-type": role.lower(),
            "training.kubeflow.org/replica-index": str(index),
        }
        body = pod_from(
            template,
            name,
            meta["namespace"],
            labels=labels,
            owned_by=owner_ref(job, "kubeflow.org/v1", "PyTorchJob"),
        )
        return self._create(f"/api/v1/namespaces/{meta['namespace']}/pods", body)

    def _set_conditions(self, namespace: str, name: str, conditions: list[dict[str, str]]) -> None:
        self._merge_patch(
            f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs/{name}/status",
            {"status": {"conditions": conditions}},
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
            self._pod_status(pod, {"phase": kind})
        self._add_condition(self.job(namespace, name), _condition(kind, f"PyTorchJob{kind}"))

    def restart(self, namespace: str, name: str) -> None:
        self._add_condition(
            self.job(namespace, name), _condition("Restarting", "PyTorchJobRestarting")
        )
