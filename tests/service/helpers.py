"""Builders for service tests: settings on a fresh database, submissions from YAML."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from fleet.api.submissions import SubmissionLimits, parse_submission
from fleet.clock import VirtualClock
from fleet.core.quota import QuotaTree
from fleet.manifests.models import MemberClusterModel
from fleet.service.intake import NewJob
from fleet.service.loop import SchedulerLoop
from fleet.service.settings import POLICIES, Settings


def settings(database_url: str, **kw: Any) -> Settings:
    return Settings(database_url=database_url, schedule_interval=5.0, **kw)


def lab_settings(database_url: str, lab: str) -> Settings:
    return settings(
        database_url,
        clusters=POLICIES / "clusters" / f"{lab}.yaml",
        quota=POLICIES / "quota" / "team-tree.yaml",
    )


def new_jobs(text: str, tree: QuotaTree, clusters: Sequence[MemberClusterModel]) -> list[NewJob]:
    """The jobs of a submission, as the API hands them to intake."""
    limits = SubmissionLimits()
    return [
        NewJob(s.job, s.document, s.policy, s.spec_hash, s.suspended)
        for s in parse_submission(
            text.encode(), tree=tree, clusters=clusters, first_seq=0, limits=limits
        )
    ]


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
    selecting = {
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
    return yaml.safe_dump_all([selecting, doc])


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


async def settle(loop: SchedulerLoop, clock: VirtualClock, seconds: float = 0.0) -> None:
    """Advance the virtual clock and let the loop handle everything that follows."""
    if seconds:
        await clock.advance(seconds)
    for _ in range(3):
        await clock.run_until_idle()
        await loop.quiet()
