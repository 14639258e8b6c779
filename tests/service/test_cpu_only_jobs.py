"""CPU-only and mixed jobs end to end on a simulated member with a CPU-only node pool:
submitted, placed by the cell allocator on the CPU-only nodes, run and succeed; a
CPU-only pod that no CPU-only node could hold is refused at submission."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.api.problems import ProblemError
from fleet.clock import VirtualClock
from fleet.service.wiring import Service
from fleet.store import jobs as job_rows
from fleet.testing import running
from fleet.testing.documents import gang_policy
from fleet.testing.running import new_jobs, running_service, settings

GPU = "nvidia.com/gpu"

NODE = {"childCellNumber": 8, "isNodeLevel": True}
CLUSTER = {
    "apiVersion": "fleet.io/v1alpha1",
    "kind": "MemberCluster",
    "metadata": {"name": "mixed"},
    "spec": {
        "simulated": True,
        "cells": {
            "physicalCluster": {
                "skuTypes": {
                    "A100": {"gpu": 1, "cpu": 12, "memory": "120Gi"},
                    # no gpu: a CPU-only node pool, as OpenPAI writes one
                    "CPU": {"cpu": 4, "memory": "16Gi"},
                },
                "cellTypes": {
                    "A100-NODE": {"childCellType": "A100", **NODE},
                    "A100-POOL": {"childCellType": "A100-NODE", "childCellNumber": 1},
                    "CPU-NODE": {"childCellType": "CPU", **NODE},
                    "CPU-POOL": {"childCellType": "CPU-NODE", "childCellNumber": 2},
                },
                "physicalCells": [
                    {"cellType": "A100-POOL", "cellChildren": [{"cellAddress": "gpu-0"}]},
                    {
                        "cellType": "CPU-POOL",
                        "cellChildren": [{"cellAddress": "cpu-0"}, {"cellAddress": "cpu-1"}],
                    },
                ],
            },
            "virtualClusters": {
                "team-a": {"virtualCells": [{"cellType": "A100-POOL.A100-NODE", "cellNumber": 1}]}
            },
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
            "min": {GPU: 8, "cpu": 160, "memory": "1Ti", "kube-queue/max-jobs": 100},
            "max": {GPU: 8, "cpu": 160, "memory": "1Ti", "kube-queue/max-jobs": 100},
            "children": [
                {
                    "name": "team-a",
                    "min": {GPU: 8, "cpu": 160, "memory": "1Ti"},
                    "max": {GPU: 8, "cpu": 160, "memory": "1Ti"},
                    "namespaces": ["team-a"],
                }
            ],
        }
    },
}


def job(name: str, roles: dict[str, tuple[int, dict[str, Any]]]) -> str:
    """A PyTorchJob of ``roles`` (role -> replicas, requests) and the policy selecting it."""
    specs = {
        role: {
            "replicas": replicas,
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "pytorch",
                            "image": "example/train:1",
                            "resources": {"requests": requests, "limits": requests},
                        }
                    ]
                }
            },
        }
        for role, (replicas, requests) in roles.items()
    }
    doc = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "annotations": {"fleet.io/simulated-duration": "60s"},
        },
        "spec": {"pytorchReplicaSpecs": specs},
    }
    return yaml.safe_dump_all([gang_policy(name), doc])


CPU_ONLY = job(
    "cpu-only", {"Master": (1, {"cpu": "2"}), "Worker": (3, {"cpu": "10", "memory": "8Gi"})}
)
MIXED = job("mixed", {"Master": (1, {GPU: 2, "cpu": "4"}), "Worker": (2, {"cpu": "16"})})


def configured(database_url: str, tmp_path: Path) -> Any:
    clusters = tmp_path / "clusters.yaml"
    clusters.write_text(yaml.safe_dump(CLUSTER), encoding="utf-8")
    quota = tmp_path / "quota.yaml"
    quota.write_text(yaml.safe_dump(TREE), encoding="utf-8")
    return settings(database_url, clusters=clusters, quota=quota)


async def state_of(svc: Service, name: str) -> str:
    async with svc.db.read() as session:
        row = await job_rows.by_name(session, "team-a", name)
        assert row is not None
        return row.state


async def test_a_cpu_only_job_and_a_mixed_job_run_on_the_cpu_only_nodes(
    database_url: str, tmp_path: Path
) -> None:
    clock = VirtualClock(1000.0)
    async with running_service(configured(database_url, tmp_path), clock) as svc:
        for text in (CPU_ONLY, MIXED):
            await svc.intake.accept(new_jobs(text, svc.tree, svc.clusters))
        await running.settle(svc.loop, clock)
        assert await state_of(svc, "cpu-only") == "Running"
        assert await state_of(svc, "mixed") == "Running"
        placer = svc.loop.state.placers["mixed"]
        where = {
            name: {pp.pod: (pp.node, len(pp.gpus)) for pp in placer.placement_of(f"team-a/{name}")}
            for name in ("cpu-only", "mixed")
        }
        assert {node for node, _ in where["cpu-only"].values()} <= {"cpu-0", "cpu-1"}
        assert all(gpus == 0 for _, gpus in where["cpu-only"].values())
        assert where["mixed"]["Master-0"] == ("gpu-0", 2)
        assert {where["mixed"][w][0] for w in ("Worker-0", "Worker-1")} <= {"cpu-0", "cpu-1"}
        used = svc.loop.state.tree.used("team-a")
        assert used[GPU] == 2
        assert used["cpu"] == (2 + 30 + 4 + 32) * 1000
        svc.loop.state.check_invariants()
        await running.settle(svc.loop, clock, 61)
        assert await state_of(svc, "cpu-only") == "Succeeded"
        assert await state_of(svc, "mixed") == "Succeeded"
        assert svc.loop.state.tree.used("team-a")["cpu"] == 0


async def test_a_cpu_only_pod_no_cpu_node_holds_is_refused_at_submission(
    database_url: str, tmp_path: Path
) -> None:
    """The GPU node has 96 cpu, but a pod asking no GPU may use the CPU-only nodes alone
    (32 cpu each): 40 cpu is a 422 naming the largest of them."""
    clock = VirtualClock(1000.0)
    async with running_service(configured(database_url, tmp_path), clock) as svc:
        text = job("too-big", {"Worker": (1, {"cpu": "40"})})
        with pytest.raises(ProblemError) as e:
            new_jobs(text, svc.tree, svc.clusters)
        message = str(e.value.problem)
        assert "a Worker pod asks for cpu 40, more than any node" in message
        assert "cpu-0 of mixed, has cpu 32" in message
        # 30 cpu fits a CPU-only node: accepted
        assert new_jobs(job("fits", {"Worker": (1, {"cpu": "30"})}), svc.tree, svc.clusters)
