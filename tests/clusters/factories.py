"""Dispatched jobs for the member cluster tests."""

from __future__ import annotations

from typing import Any

from fleet.clusters.base import DispatchedJob
from fleet.core.placement import PodPlacement


def pytorchjob(namespace: str, name: str, annotations: dict[str, object]) -> dict[str, Any]:
    """A minimal PyTorchJob manifest with ``annotations``."""
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"namespace": namespace, "name": name, "annotations": annotations},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2}}},
    }


def dispatched(
    key: str,
    *,
    duration: object = None,
    outcome: object = None,
    uid: str = "uid-1",
    cluster: str = "sim-a",
    queue: str = "team-a",
) -> DispatchedJob:
    """Job ``key`` with two workers on ``node-1``, annotated as asked (None: not at all)."""
    namespace, _, name = key.partition("/")
    annotations: dict[str, object] = {}
    if duration is not None:
        annotations["fleet.io/simulated-duration"] = duration
    if outcome is not None:
        annotations["fleet.io/simulated-outcome"] = outcome
    pods = (
        PodPlacement(f"{name}-worker-0", "node-1", (0, 1)),
        PodPlacement(f"{name}-worker-1", "node-1", (2, 3)),
    )
    return DispatchedJob(
        key=key,
        uid=uid,
        cluster=cluster,
        queue=queue,
        pods=pods,
        manifest=pytorchjob(namespace, name, annotations),
    )
