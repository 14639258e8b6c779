"""GPUs chosen by their attributes, over HTTP: a simulated member with a 40 GB and an
80 GB A100 type; a job asking for more than 40 GiB of GPU memory lands only on the
80 GB cells and is charged for them, one asking for more than any GPU has is
refused at its term's field, and one that waits names what it asked for."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml

from fleet.api import keys
from fleet.testing.documents import gang_policy
from tests.admin.conftest import YAML, Api

GPU = "nvidia.com/gpu"
MEMORY = "nvidia.com/gpu.memory"
NODE = {"childCellNumber": 8, "isNodeLevel": True}
CLUSTER = {
    "apiVersion": "fleet.io/v1alpha1",
    "kind": "MemberCluster",
    "metadata": {"name": "a100s"},
    "spec": {
        "simulated": True,
        "cells": {
            "physicalCluster": {
                # the 40 GB type first: a job of any type would be placed there first
                "skuTypes": {
                    "A100-40GB": {
                        "gpu": 1,
                        "labels": {
                            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
                            MEMORY: 40960,
                        },
                    },
                    "A100-80GB": {
                        "gpu": 1,
                        "labels": {
                            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                            MEMORY: 81920,
                        },
                    },
                },
                "cellTypes": {
                    "A40-NODE": {"childCellType": "A100-40GB", **NODE},
                    "A80-NODE": {"childCellType": "A100-80GB", **NODE},
                },
                "physicalCells": [
                    {"cellType": "A40-NODE", "cellAddress": "a40-0"},
                    {"cellType": "A80-NODE", "cellAddress": "a80-0"},
                ],
            }
        },
    },
}
TREE = {
    "apiVersion": "scheduling.sigs.k8s.io/v1beta1",
    "kind": "ElasticQuotaTree",
    "metadata": {"name": "fleet"},
    "spec": {
        "root": {
            "name": "root",
            "min": {GPU: 16, "kube-queue/max-jobs": 100},
            "max": {GPU: 16, "kube-queue/max-jobs": 100},
            "children": [
                {"name": "team-a", "min": {GPU: 16}, "max": {GPU: 16}, "namespaces": ["team-a"]}
            ],
        }
    },
}
TERMS = (
    "spec.pytorchReplicaSpecs.Worker.template.spec.affinity.nodeAffinity"
    ".requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
)


def submission(name: str, more_than_mib: int, gpus: int = 4) -> str:
    """A gang of two workers of ``gpus`` GPUs asking for more than ``more_than_mib``."""
    requests = {GPU: gpus}
    term = {"matchExpressions": [{"key": MEMORY, "operator": "Gt", "values": [str(more_than_mib)]}]}
    template: dict[str, Any] = {
        "spec": {
            "containers": [
                {
                    "name": "pytorch",
                    "image": "example/train:1",
                    "resources": {"requests": requests, "limits": requests},
                }
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
                }
            },
        }
    }
    doc = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "annotations": {"fleet.io/simulated-duration": "60s"},
        },
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2, "template": template}}},
    }
    return yaml.safe_dump_all([gang_policy(name), doc])


async def configured(api_with: Callable[..., Awaitable[Api]], tmp_path: Path) -> Api:
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(yaml.safe_dump(CLUSTER), encoding="utf-8")
    quota = tmp_path / "quota.yaml"
    quota.write_text(yaml.safe_dump(TREE), encoding="utf-8")
    return await api_with(clusters=clusters, quota=quota)


async def test_a_job_asking_more_than_40_gib_lands_on_the_80_gb_cells_only(
    api_with: Callable[..., Awaitable[Api]], tmp_path: Path
) -> None:
    api = await configured(api_with, tmp_path)
    data = submission("big", 40960)
    await api.call("POST", "/api/v1/submissions", data=data, headers=YAML, status=201)
    await api.settle()
    job = await api.call("GET", "/api/v1/jobs/team-a/big", status=200)
    assert job["state"] == "Running"
    assert {p["node"] for p in job["placement"]} == {"a80-0"}
    tree = api.client.app[keys.SERVICE].loop.state.tree
    assert tree.used("team-a")["gpu.fleet.io/A100-80GB"] == 8
    assert tree.used("team-a")["gpu.fleet.io/A100-40GB"] == 0
    # the 80 GB GPUs are busy: the next one waits, naming what it asked for
    data = submission("next", 40960)
    await api.call("POST", "/api/v1/submissions", data=data, headers=YAML, status=201)
    await api.settle()
    job = await api.call("GET", "/api/v1/jobs/team-a/next", status=200)
    assert job["state"] == "Queued"
    assert "GPUs of A100-80GB (GPU memory > 40960)" in str(job)


async def test_a_job_no_gpu_can_hold_is_refused_at_its_term(
    api_with: Callable[..., Awaitable[Api]], tmp_path: Path
) -> None:
    api = await configured(api_with, tmp_path)
    data = submission("huge", 90000)
    problem = await api.call("POST", "/api/v1/submissions", data=data, headers=YAML, status=422)
    (error,) = problem["errors"]
    assert error["path"] == f"{TERMS}[0].matchExpressions[0]"
    assert error["message"] == (
        "no GPU type of the member clusters the job may use meets GPU memory > 90000 "
        "(the members have nvidia.com/gpu.memory: a100s: A100-40GB 40960, A100-80GB 81920)"
    )
