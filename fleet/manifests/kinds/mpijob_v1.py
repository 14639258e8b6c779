"""Kubeflow ``MPIJob`` v1 (``kubeflow.org/v1``, served by the training operator).

Theory of operation: a Launcher and its Workers, placed in that order; the
gang is ``minAvailable`` pods, else every pod (the launcher cannot start
``mpirun`` before every worker runs).  The rest is the training operator's
v1 family (:mod:`.kubeflow`).  An MPIJob is not resized in place: it is
admitted whole.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from fleet.manifests.kinds import kubeflow
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


KIND = MPIJobKind()
MPIJobModel.KIND = KIND
