"""Kubeflow ``MPIJob`` v1 (``kubeflow.org/v1``, served by the training operator).

Theory of operation: a Launcher and its Workers, placed in that order; the
gang is ``minAvailable`` pods, else every pod (the launcher cannot start
``mpirun`` before every worker runs).  The rest is the training operator's
v1 family (:mod:`.kubeflow`).  An MPIJob is not resized in place: it is
admitted whole.  The operator labels its one launcher pod with the replica
type alone (no index, unlike the workers): that pod is ``Launcher-0``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from pydantic import Field

from fleet.manifests.kinds import base, kubeflow
from fleet.manifests.kinds.kubeflow import ReplicaSpec


class MPIJobSpec(kubeflow.TrainingSpec):
    replica_specs: dict[str, ReplicaSpec] = Field(alias="mpiReplicaSpecs")


class MPIJobModel(kubeflow.TrainingJobModel):
    REPLICA_FIELD: ClassVar[str] = "mpiReplicaSpecs"
    ROLES: ClassVar[tuple[str, ...]] = ("Launcher", "Worker")
    api_version: Literal["kubeflow.org/v1"]
    kind: Literal["MPIJob"]
    spec: MPIJobSpec


class MPIJobKind(kubeflow.TrainingKind):
    kind = "MPIJob"
    plural = "mpijobs"
    model = MPIJobModel
    replica_field = "mpiReplicaSpecs"

    def replica(self, pod: Mapping[str, Any]) -> tuple[str, int | None] | None:
        found = super().replica(pod)
        labels = base.labels(pod)
        unindexed = found is None and kubeflow.REPLICA_INDEX_LABEL not in labels
        if unindexed and labels.get(kubeflow.REPLICA_TYPE_LABEL) == "launcher":
            return "launcher", 0
        return found


KIND = MPIJobKind()
MPIJobModel.KIND = KIND
