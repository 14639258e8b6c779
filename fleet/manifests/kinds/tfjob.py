"""Kubeflow ``TFJob`` (``kubeflow.org/v1``): Chief, PS, Worker and Evaluator replicas.

Theory of operation: the replica types the training operator v1 runs for
TensorFlow, placed in the order Chief, Master (TensorFlow 1's name of the
chief), PS, Worker, Evaluator; the gang is ``minAvailable`` pods, else every
pod.  The rest is the training operator's v1 family (:mod:`.kubeflow`).  A
TFJob is not resized in place: it is admitted whole.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from fleet.manifests.kinds import kubeflow
from fleet.manifests.kinds.kubeflow import ReplicaSpec


class TFJobSpec(kubeflow.TrainingSpec):
    replica_specs: dict[str, ReplicaSpec] = Field(alias="tfReplicaSpecs")


class TFJobModel(kubeflow.TrainingJobModel):
    REPLICA_FIELD: ClassVar[str] = "tfReplicaSpecs"
    ROLES: ClassVar[tuple[str, ...]] = ("Chief", "Master", "PS", "Worker", "Evaluator")
    api_version: Literal["kubeflow.org/v1"]
    kind: Literal["TFJob"]
    spec: TFJobSpec


class TFJobKind(kubeflow.TrainingKind):
    kind = "TFJob"
    plural = "tfjobs"
    model = TFJobModel
    replica_field = "tfReplicaSpecs"


KIND = TFJobKind()
TFJobModel.KIND = KIND
