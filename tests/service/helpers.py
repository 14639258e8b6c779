"""Builders for service tests: settings on a fresh database, submissions from YAML."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from fleet.core.quota import QuotaTree
from fleet.intake import NewJob
from fleet.manifests import convert
from fleet.manifests.models import MemberClusterModel
from fleet.settings import POLICIES, Settings


def settings(database_url: str, **kw: Any) -> Settings:
    return Settings(database_url=database_url, schedule_interval=5.0, **kw)


def lab_settings(database_url: str, lab: str) -> Settings:
    return settings(
        database_url,
        clusters=POLICIES / "clusters" / f"{lab}.yaml",
        quota=POLICIES / "quota" / "team-tree.yaml",
    )


def new_jobs(text: str, tree: QuotaTree, clusters: Sequence[MemberClusterModel]) -> list[NewJob]:
    """The jobs of a submission, as the API would hand them to intake."""
    jobs = convert.load_submission(text, tree, clusters)
    docs = [d for d in yaml.safe_load_all(text) if d]
    by_key = {
        f"{d['metadata'].get('namespace', 'default')}/{d['metadata']['name']}": d
        for d in docs
        if d.get("kind") == "PyTorchJob"
    }
    out = []
    for job in jobs:
        doc = by_key[job.key]
        digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
        out.append(NewJob(job, doc, None, digest))
    return out


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
) -> str:
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
    doc = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations},
        "spec": {
            "runPolicy": {"schedulingPolicy": policy} if policy else {},
            "pytorchReplicaSpecs": {
                "Worker": {
                    "replicas": workers,
                    "template": {"spec": {"containers": [container]}},
                }
            },
        },
    }
    return yaml.safe_dump(doc)


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")
