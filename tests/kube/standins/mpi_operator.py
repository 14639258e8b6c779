"""A stand-in for the MPI operator (MPIJob ``kubeflow.org/v2beta1``), for member tests.

Theory of operation: the MPI operator (``github.com/kubeflow/mpi-operator``)
cannot be built here (the Go module proxy refuses its module), so
:class:`MPIOperator` plays the part of it that Fleet sees, in a thread that
polls the API server as its admin (:class:`.poller.Poller`), with the real
v2beta1 CRD installed and the real Job controller (kube-controller-manager)
running the launcher:

* for every MPIJob it makes the objects the MPI operator makes, named and
  labelled as it names and labels them (``pkg/controller/mpi_job_controller.go``
  at the commit of ``fleet/manifests/kinds/crds/SOURCE.md``): the workers,
  pods ``<job>-worker-<index>`` from the Worker template, labelled
  ``training.kubeflow.org/operator-name: mpi-operator``, ``job-name``,
  ``job-role: worker`` and ``replica-index`` (the index, plus one when
  ``runLauncherAsWorker``), with ``hostname`` and ``subdomain``; the launcher,
  a batch Job ``<job>-launcher`` (``backoffLimit`` and
  ``activeDeadlineSeconds`` from ``runPolicy``, ``podReplacementPolicy:
  Failed``) whose template is the Launcher's labelled ``job-role: launcher``,
  created at once or, with ``launcherCreationPolicy: WaitForWorkersReady``,
  once every worker runs.  All of them are owned by the MPIJob (the garbage
  collector deletes them with it).  It sets the ``Created`` condition;
* ``Running`` once the launcher's pod and every worker run;
* ``Succeeded`` or ``Failed`` when the launcher Job completes or fails (with
  the Job's message), and then, with ``cleanPodPolicy`` ``Running`` or
  ``All``, deletes the workers.

What Fleet does not read is not played: the ConfigMap of the hostfile, the
SSH Secret, the Service, ``replicaStatuses``, restarts.
"""

from __future__ import annotations

from typing import Any

from tests.kube.controlplane import ApiError
from tests.kube.standins.poller import (
    Poller,
    owner_ref,
    pod_from,
    training_condition,
)

API = "/apis/kubeflow.org/v2beta1"
OPERATOR = "mpi-operator"


def _condition(kind: str, reason: str, message: str = "") -> dict[str, str]:
    return training_condition(kind, reason, message or f"{kind} (set by the stand-in MPI operator)")


def _true(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return {c["type"]: c for c in conditions if c.get("status") == "True"}


def _running(pod: dict[str, Any] | None) -> bool:
    return pod is not None and (pod.get("status") or {}).get("phase") == "Running"


class MPIOperator(Poller):
    """Plays the MPI operator of one member; see the module docstring."""

    def step(self) -> None:
        for job in self.admin.items(f"{API}/mpijobs"):
            if not job["metadata"].get("deletionTimestamp"):
                self._operate(job)

    # One MPIJob ----------------------------------------------------------------------

    def _operate(self, job: dict[str, Any]) -> None:
        meta, spec = job["metadata"], job["spec"]
        namespace, name = meta["namespace"], meta["name"]
        true = _true(job)
        if "Succeeded" in true or "Failed" in true:
            return
        if "Created" not in true:
            self._add_condition(job, _condition("Created", "MPIJobCreated"))
        specs = spec["mpiReplicaSpecs"]
        run_policy = spec.get("runPolicy") or {}
        workers = []
        worker = specs.get("Worker")
        for index in range(int((worker or {}).get("replicas", 0))):
            workers.append(self._worker(job, index, worker or {}))
        launcher = self._get(f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}-launcher")
        wait = spec.get("launcherCreationPolicy") == "WaitForWorkersReady"
        if launcher is None and (not wait or all(_running(w) for w in workers)):
            launcher = self._create_launcher(job, specs["Launcher"], run_policy)
        if launcher is None:
            return
        ended = _true(launcher)
        for kind in ("Complete", "Failed"):
            if kind in ended:
                outcome = "Succeeded" if kind == "Complete" else "Failed"
                message = str(ended[kind].get("message") or "")
                self._add_condition(job, _condition(outcome, f"MPIJob{outcome}", message))
                if run_policy.get("cleanPodPolicy") in ("Running", "All"):
                    for w in workers:
                        pod = f"/api/v1/namespaces/{namespace}/pods/{w['metadata']['name']}"
                        self._delete(pod, grace=None)
                return
        launchers = self.admin.items(
            f"/api/v1/namespaces/{namespace}/pods",
            labelSelector=f"batch.kubernetes.io/job-name={name}-launcher",
        )
        workers_run = all(_running(w) for w in workers)
        if "Running" not in true and workers_run and any(_running(p) for p in launchers):
            self._add_condition(job, _condition("Running", "MPIJobRunning"))

    def _labels(self, job: dict[str, Any], role: str) -> dict[str, str]:
        """The operator's labels on the pods of ``job`` in ``role``."""
        return {
            "training.kubeflow.org/operator-name": OPERATOR,
            "training.kubeflow.org/job-name": job["metadata"]["name"],
            "training.kubeflow.org/job-role": role,
        }

    def _owner(self, job: dict[str, Any]) -> dict[str, Any]:
        return owner_ref(job, "kubeflow.org/v2beta1", "MPIJob", block=True)

    def _worker(self, job: dict[str, Any], index: int, spec: dict[str, Any]) -> dict[str, Any]:
        meta = job["metadata"]
        namespace, name = meta["namespace"], f"{meta['name']}-worker-{index}"
        found = self._get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        if found is not None:
            return found
        template = spec.get("template") or {}
        labels = self._labels(job, "worker")
        padded = bool(job["spec"].get("runLauncherAsWorker"))
        labels["training.kubeflow.org/replica-index"] = str(index + 1 if padded else index)
        pod_spec = {
            **template["spec"],
            "hostname": name,
            "subdomain": meta["name"],
            "restartPolicy": spec.get("restartPolicy") or "Never",
        }
        pod = pod_from(
            template, name, namespace, labels=labels, owned_by=self._owner(job), spec=pod_spec
        )
        return self._create(f"/api/v1/namespaces/{namespace}/pods", pod)

    def _create_launcher(
        self, job: dict[str, Any], spec: dict[str, Any], run_policy: dict[str, Any]
    ) -> dict[str, Any]:
        meta = job["metadata"]
        namespace, name = meta["namespace"], f"{meta['name']}-launcher"
        template = spec.get("template") or {}
        launcher_template = {
            "metadata": {
                **(template.get("metadata") or {}),
                "labels": {
                    **((template.get("metadata") or {}).get("labels") or {}),
                    **self._labels(job, "launcher"),
                },
            },
            "spec": {
                **template["spec"],
                "hostname": name,
                "subdomain": meta["name"],
                "restartPolicy": spec.get("restartPolicy") or "OnFailure",
            },
        }
        job_spec: dict[str, Any] = {"template": launcher_template, "podReplacementPolicy": "Failed"}
        for field in ("backoffLimit", "activeDeadlineSeconds", "ttlSecondsAfterFinished"):
            if run_policy.get(field) is not None:
                job_spec[field] = run_policy[field]
        launcher = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"app": meta["name"]},
                "ownerReferences": [self._owner(job)],
            },
            "spec": job_spec,
        }
        return self._create(f"/apis/batch/v1/namespaces/{namespace}/jobs", launcher)

    # API calls -----------------------------------------------------------------------

    def _get(self, path: str) -> dict[str, Any] | None:
        try:
            return dict(self.admin.get(path))
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def _add_condition(self, job: dict[str, Any], condition: dict[str, str]) -> None:
        old = [
            {**c, "status": "False"} if c["type"] == "Running" else c
            for c in (job.get("status") or {}).get("conditions") or []
            if c["type"] != condition["type"]
        ]
        meta = job["metadata"]
        self._merge_patch(
            f"{API}/namespaces/{meta['namespace']}/mpijobs/{meta['name']}/status",
            {"status": {"conditions": [*old, condition]}},
        )
        job.setdefault("status", {})["conditions"] = [*old, condition]
