"""YAML documents for tests and benchmarks: a PyTorchJob with its PropagationPolicy.

Theory of operation: :func:`pytorchjob` writes the two documents one
submission holds, a PropagationPolicy that selects one PyTorchJob by name with
gang scheduling (:func:`gang_policy`), and the job (workers of one container each asking for GPUs,
with the simulated members' annotations for duration and outcome and,
optionally, a queue and priority class), as the text ``POST
/api/v1/submissions`` takes.  :func:`read` reads a document file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def gang_policy(name: str, namespace: str = "team-a") -> dict[str, Any]:
    """The PropagationPolicy ``namespace/name`` selecting the PyTorchJob of that name as a gang."""
    return {
        "apiVersion": "policy.one.alibabacloud.com/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "resourceSelectors": [
                {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": name}
            ],
            "placement": {
                "replicaScheduling": {
                    "replicaSchedulingType": "Divided",
                    "customSchedulingType": "Gang",
                }
            },
        },
    }


def pytorchjob(
    name: str,
    *,
    namespace: str = "team-a",
    workers: int = 1,
    gpus: int = 1,
    duration: str | None = None,
    outcome: str | None = None,
    queue: str | None = None,
    priority_class: str | None = None,
    deadline: int | None = None,
) -> str:
    """A PropagationPolicy and the PyTorchJob ``namespace/name`` it selects, as YAML
    (``deadline``: its ``runPolicy.activeDeadlineSeconds``)."""
    annotations: dict[str, str] = {}
    if duration:
        annotations["fleet.io/simulated-duration"] = duration
    if outcome:
        annotations["fleet.io/simulated-outcome"] = outcome
    policy: dict[str, Any] = {}
    if queue:
        policy["queue"] = queue
    if priority_class:
        policy["priorityClass"] = priority_class
    container = {
        "name": "pytorch",
        "image": "example/train:1",
        "resources": {"limits": {"nvidia.com/gpu": gpus}},
    }
    run_policy: dict[str, Any] = {"schedulingPolicy": policy} if policy else {}
    if deadline is not None:
        run_policy["activeDeadlineSeconds"] = deadline
    doc = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {
            "runPolicy": run_policy,
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": workers,
                    "template": {"spec": {"containers": [container]}},
                }
            },
        },
    }
    return yaml.safe_dump_all([gang_policy(name, namespace), doc])


def read(path: Path) -> str:
    """A document file's text."""
    return path.read_text(encoding="utf-8")
