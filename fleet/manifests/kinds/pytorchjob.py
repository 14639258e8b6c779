"""Kubeflow ``PyTorchJob`` (``kubeflow.org/v1``): Master and Worker, elastic workers.

Theory of operation: one Master (at most) then the Workers, placed in that
order.  The gang is ``runPolicy.schedulingPolicy.minAvailable`` pods, else
``elasticPolicy.minReplicas`` workers plus the Master, else every pod.  An
elastic job (``elasticPolicy.maxReplicas``) may have up to ``maxReplicas``
workers and starts with ``Worker.replicas`` (plus the Master); a resize
writes the new replica counts and templates.  The rest is the training
operator's v1 family (:mod:`.kubeflow`).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from fleet.manifests import models
from fleet.manifests.errors import Problem
from fleet.manifests.kinds import kubeflow
from fleet.manifests.kinds.kubeflow import ReplicaSpec
from fleet.manifests.models import ReplicaCount


class ElasticPolicy(models._Foreign):
    min_replicas: ReplicaCount | None = None
    max_replicas: ReplicaCount | None = None


class PyTorchJobSpec(kubeflow.TrainingSpec):
    replica_specs: dict[str, ReplicaSpec] = Field(alias="pytorchReplicaSpecs")
    elastic_policy: ElasticPolicy | None = None


class PyTorchJobModel(kubeflow.TrainingJobModel):
    REPLICA_FIELD: ClassVar[str] = "pytorchReplicaSpecs"
    ROLES: ClassVar[tuple[str, ...]] = ("Master", "Worker")
    api_version: Literal["kubeflow.org/v1"]
    kind: Literal["PyTorchJob"]
    spec: PyTorchJobSpec

    def pods_of(self, role: str, rs: ReplicaSpec) -> int:
        ep = self.spec.elastic_policy
        if role == "Worker" and ep is not None and ep.max_replicas is not None:
            return ep.max_replicas  # elastic: grows up to maxReplicas
        return rs.replicas

    def start_pods(self) -> int:
        ep = self.spec.elastic_policy
        worker = self.spec.replica_specs.get("Worker")
        if ep is None or ep.max_replicas is None or worker is None:
            return 0
        masters = sum(rs.replicas for role, rs in self.replica_groups() if role == "Master")
        return worker.replicas + masters

    def declared_minimum(self) -> tuple[int, str]:
        return super().gang_minimum()

    def gang_minimum(self) -> tuple[int, str]:
        found, path = super().gang_minimum()
        ep = self.spec.elastic_policy
        if found or ep is None or ep.min_replicas is None:
            return found, path
        masters = sum(rs.replicas for role, rs in self.replica_groups() if role == "Master")
        return ep.min_replicas + masters, "spec.elasticPolicy.minReplicas"

    def kind_problems(self) -> list[Problem]:
        problems = super().kind_problems()
        master = self.spec.replica_specs.get("Master")
        if master is not None and master.replicas != 1:
            problems.append(
                ("spec.pytorchReplicaSpecs.Master.replicas", "a PyTorchJob has exactly 1 Master")
            )
        problems.extend(self._elastic_problems())
        return problems

    def _elastic_problems(self) -> list[Problem]:
        ep = self.spec.elastic_policy
        if ep is None:
            return []
        worker = self.spec.replica_specs.get("Worker")
        if worker is None:
            return [("spec.elasticPolicy", "an elastic job needs a Worker replica spec")]
        out: list[Problem] = []
        lo, hi = ep.min_replicas, ep.max_replicas
        if lo is not None and hi is not None and lo > hi:
            return [("spec.elasticPolicy.minReplicas", f"{lo} is more than maxReplicas {hi}")]
        if lo is not None and worker.replicas < lo:
            out.append(
                (
                    "spec.pytorchReplicaSpecs.Worker.replicas",
                    f"{worker.replicas} is below elasticPolicy.minReplicas {lo}",
                )
            )
        if hi is not None and worker.replicas > hi:
            out.append(
                (
                    "spec.pytorchReplicaSpecs.Worker.replicas",
                    f"{worker.replicas} is above elasticPolicy.maxReplicas {hi}",
                )
            )
        return out


class PyTorchJobKind(kubeflow.TrainingKind):
    kind = "PyTorchJob"
    plural = "pytorchjobs"
    model = PyTorchJobModel
    replica_field = "pytorchReplicaSpecs"
    resizable = True


KIND = PyTorchJobKind()
PyTorchJobModel.KIND = KIND
