"""A stand-in for Trainer v2's controller (and the garbage collector), for tests.

Theory of operation: Trainer v2 needs JobSet's module, which the Go module
proxy refuses, so it cannot be built here; :class:`TrainerController` plays
it in a thread that polls the API server as its admin
(:class:`.poller.Poller`), installed with Trainer's real CRDs
(``deploy/member/crds/trainer.kubeflow.org_*.yaml``):

* for every TrainJob it reads the runtime its ``runtimeRef`` names (a
  ``TrainingRuntime`` in its namespace or a ``ClusterTrainingRuntime``) and
  creates the JobSet Trainer would, named as the TrainJob and owned by it:
  the runtime's JobSet template, with the trainer job (labelled
  ``trainer.kubeflow.org/trainjob-ancestor-step: trainer``, else named
  ``node``) running ``spec.trainer.numNodes`` pods (parallelism and
  completions) and its ``node`` container given
  ``spec.trainer.resourcesPerNode``; the stand-in JobSet controller
  (:mod:`.jobset`) runs that JobSet;
* it copies the JobSet's ``replicatedJobsStatus`` to the TrainJob's
  ``status.jobsStatus`` and its end to the TrainJob's ``Complete`` or
  ``Failed`` condition;
* as the garbage collector would, it deletes a JobSet whose TrainJob is gone
  and the pods of a JobSet that is gone.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from tests.kube.controlplane import ApiError
from tests.kube.standins.jobset import API as JOBSET_API
from tests.kube.standins.poller import Poller, now, owner_ref

API: str = "/apis/trainer.kubeflow.org/v1alpha1"
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"


def _trainer_job(jobs: list[dict[str, Any]]) -> dict[str, Any] | None:
    for job in jobs:
        labels = ((job.get("template") or {}).get("metadata") or {}).get("labels") or {}
        if labels.get(ANCESTOR) == "trainer":
            return job
    return next((j for j in jobs if j.get("name") == "node"), None)


def jobset_of(trainjob: dict[str, Any], runtime: dict[str, Any]) -> dict[str, Any]:
    """The JobSet Trainer makes of ``trainjob`` and its ``runtime``."""
    meta = trainjob["metadata"]
    template = copy.deepcopy(runtime["spec"]["template"])
    spec = template["spec"]
    trainer = trainjob["spec"].get("trainer") or {}
    nodes = trainer.get("numNodes", (runtime["spec"].get("mlPolicy") or {}).get("numNodes"))
    job = _trainer_job(spec["replicatedJobs"])
    if job is not None:
        job_spec = job["template"]["spec"]
        if nodes is not None:
            job_spec["parallelism"] = job_spec["completions"] = nodes
        resources = trainer.get("resourcesPerNode")
        for container in job_spec["template"]["spec"]["containers"]:
            if container.get("name") == "node" and resources is not None:
                container["resources"] = resources
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    labels["trainer.kubeflow.org/trainjob-name"] = meta["name"]
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": labels,
            "ownerReferences": [owner_ref(trainjob, "trainer.kubeflow.org/v1alpha1", "TrainJob")],
        },
        "spec": spec,
    }


class TrainerController(Poller):
    """Plays Trainer v2's controller and the garbage collector; see the module docstring."""

    def step(self) -> None:
        trainjobs = {
            (t["metadata"]["namespace"], t["metadata"]["name"]): t
            for t in self.admin.items(f"{API}/trainjobs")
        }
        jobsets = {
            (j["metadata"]["namespace"], j["metadata"]["name"]): j
            for j in self.admin.items(f"{JOBSET_API}/jobsets")
        }
        for where, jobset in jobsets.items():
            owners = jobset["metadata"].get("ownerReferences") or []
            if any(o["kind"] == "TrainJob" for o in owners) and where not in trainjobs:
                self._delete(f"{JOBSET_API}/namespaces/{where[0]}/jobsets/{where[1]}")
        for pod in self.admin.items("/api/v1/pods"):
            meta = pod["metadata"]
            owners = meta.get("ownerReferences") or []
            for owner in owners:
                if owner["kind"] == "JobSet" and (meta["namespace"], owner["name"]) not in jobsets:
                    self._delete(f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}")
        for where, trainjob in trainjobs.items():
            if trainjob["metadata"].get("deletionTimestamp"):
                continue
            jobset = jobsets.get(where)
            if jobset is None:
                self._create_jobset(trainjob)
            else:
                self._mirror(trainjob, jobset)

    def _create_jobset(self, trainjob: dict[str, Any]) -> None:
        ref = trainjob["spec"]["runtimeRef"]
        namespace = trainjob["metadata"]["namespace"]
        if ref.get("kind", "ClusterTrainingRuntime") == "TrainingRuntime":
            path = f"{API}/namespaces/{namespace}/trainingruntimes/{ref['name']}"
        else:
            path = f"{API}/clustertrainingruntimes/{ref['name']}"
        runtime = self.admin.get(path)
        body = jobset_of(trainjob, runtime)
        with contextlib.suppress(ApiError):
            self.admin.request("POST", f"{JOBSET_API}/namespaces/{namespace}/jobsets", body)

    def _mirror(self, trainjob: dict[str, Any], jobset: dict[str, Any]) -> None:
        status = jobset.get("status") or {}
        old = trainjob.get("status") or {}
        if any(c.get("type") in ("Complete", "Failed") for c in old.get("conditions") or []):
            return
        new: dict[str, Any] = {"jobsStatus": status.get("replicatedJobsStatus") or []}
        terminal = status.get("terminalState")
        if terminal:
            kind = "Complete" if terminal == "Completed" else "Failed"
            new["conditions"] = [
                {
                    "type": kind,
                    "status": "True",
                    "reason": "JobSet" + terminal,
                    "message": f"the JobSet is {terminal} (set by the stand-in Trainer)",
                    "lastTransitionTime": now(),
                }
            ]
        if new.get("jobsStatus") == old.get("jobsStatus") and "conditions" not in new:
            return
        meta = trainjob["metadata"]
        self._merge_patch(
            f"{API}/namespaces/{meta['namespace']}/trainjobs/{meta['name']}/status",
            {"status": new},
        )
