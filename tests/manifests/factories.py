"""Builders of Fleet's YAML objects for tests: defaults everywhere, override what matters."""

from __future__ import annotations

from typing import Any

import yaml


def container(**resources: Any) -> dict[str, Any]:
    """A container; ``requests=``/``limits=`` dicts, or ``gpu=1`` as a limit shortcut."""
    gpu = resources.pop("gpu", None)
    res: dict[str, Any] = dict(resources)
    if gpu is not None:
        res.setdefault("limits", {})["nvidia.com/gpu"] = gpu
    return {"name": "pytorch", "image": "img:1", "resources": res}


def replica(replicas: int | None = 1, *, gpu: int = 1, **spec: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {"containers": [container(gpu=gpu, requests={"cpu": "1"})]}
    pod.update(spec)
    out: dict[str, Any] = {"template": {"spec": pod}}
    if replicas is not None:
        out["replicas"] = replicas
    return out


def make_job(
    name: str = "train",
    namespace: str | None = "default",
    *,
    workers: int | None = 2,
    master: bool = True,
    gpu: int = 1,
    queue: str | None = None,
    priority_class: str | None = None,
    min_available: int | None = None,
    elastic: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    replica_specs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    specs: dict[str, Any] = {}
    if master:
        specs["Master"] = replica(1, gpu=gpu)
    if workers is not None:
        specs["Worker"] = replica(workers, gpu=gpu)
    if replica_specs is not None:
        specs = replica_specs
    spec: dict[str, Any] = {"pytorchReplicaSpecs": specs}
    sp = {
        k: v
        for k, v in (
            ("queue", queue),
            ("priorityClass", priority_class),
            ("minAvailable", min_available),
        )
        if v is not None
    }
    if sp:
        spec["runPolicy"] = {"schedulingPolicy": sp}
    if elastic is not None:
        spec["elasticPolicy"] = elastic
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": meta, "spec": spec}


def make_policy(
    name: str = "policy",
    namespace: str = "default",
    *,
    gang: bool = True,
    selectors: list[dict[str, Any]] | None = None,
    affinity: dict[str, Any] | None = None,
    api_version: str = "policy.one.alibabacloud.com/v1alpha1",
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "resourceSelectors": selectors
        if selectors is not None
        else [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"}],
        "placement": {"replicaScheduling": {"replicaSchedulingType": "Divided"}},
    }
    if gang:
        body["placement"]["replicaScheduling"]["customSchedulingType"] = "Gang"
    if affinity is not None:
        body["placement"]["clusterAffinity"] = affinity
    body.update(spec)
    return {
        "apiVersion": api_version,
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


def make_cluster(
    name: str = "c1", labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "simulated": True,
        "cells": {
            "physicalCluster": {
                "cellTypes": {
                    "NODE": {"childCellType": "GPU", "childCellNumber": 8, "isNodeLevel": True}
                },
                "physicalCells": [{"cellType": "NODE", "cellAddress": f"{name}-node-0"}],
            }
        },
    }
    body.update(spec)
    return {
        "apiVersion": "fleet.io/v1alpha1",
        "kind": "MemberCluster",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": body,
    }


def node(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, **fields}


def make_tree(root: dict[str, Any] | None = None) -> dict[str, Any]:
    if root is None:
        root = node(
            "root",
            min={"nvidia.com/gpu": 16},
            max={"nvidia.com/gpu": 16},
            children=[
                node(
                    "research",
                    min={"nvidia.com/gpu": 8},
                    max={"nvidia.com/gpu": 16},
                    children=[
                        node("team-a", min={"nvidia.com/gpu": 8}, namespaces=["default", "a"]),
                        node("team-b", max={"nvidia.com/gpu": 8}, namespaces=["b"]),
                    ],
                ),
            ],
        )
    return {
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1",
        "kind": "ElasticQuotaTree",
        "metadata": {"name": "tree"},
        "spec": {"root": root},
    }


def dump(*docs: dict[str, Any]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)
