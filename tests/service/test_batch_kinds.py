"""A batch/v1 Job and an MPIJob v2beta1 run end to end as whole gangs on simulated members."""

from __future__ import annotations

from typing import Any

import yaml

from fleet.clock import VirtualClock
from fleet.service.wiring import Service
from fleet.testing import running
from fleet.testing.running import new_jobs, running_service, settings
from tests.service.test_loop import states


def policy(name: str, api_version: str, kind: str) -> dict[str, Any]:
    return {
        "apiVersion": "policy.one.alibabacloud.com/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "resourceSelectors": [{"apiVersion": api_version, "kind": kind, "name": name}],
            "placement": {"replicaScheduling": {"replicaSchedulingType": "Divided"}},
        },
    }


def meta(name: str, duration: str, outcome: str | None) -> dict[str, Any]:
    annotations = {"fleet.io/simulated-duration": duration}
    if outcome:
        annotations["fleet.io/simulated-outcome"] = outcome
    return {"name": name, "namespace": "team-a", "annotations": annotations}


def template(gpus: int) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "img:1",
        "resources": {"limits": {"nvidia.com/gpu": gpus}},
    }
    return {"spec": {"containers": [container]}}


def batch_job(name: str, *, pods: int, gpus: int, duration: str, outcome: str | None = None) -> str:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta(name, duration, outcome),
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "completionMode": "Indexed",
            "suspend": True,  # as written for Kueue: Fleet admits it
            "template": template(gpus),
        },
    }
    # No customSchedulingType: Gang in the policy; a batch Job is admitted whole anyway.
    return yaml.safe_dump_all([policy(name, "batch/v1", "Job"), job])


def mpi_job(name: str, *, workers: int, gpus: int, duration: str) -> str:
    job = {
        "apiVersion": "kubeflow.org/v2beta1",
        "kind": "MPIJob",
        "metadata": meta(name, duration, None),
        "spec": {
            "slotsPerWorker": gpus,
            "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": template(1)},
                "Worker": {"replicas": workers, "template": template(gpus)},
            },
        },
    }
    return yaml.safe_dump_all([policy(name, "kubeflow.org/v2beta1", "MPIJob"), job])


async def submit(svc: Service, text: str) -> None:
    await svc.intake.accept(new_jobs(text, svc.tree, svc.clusters))


def pods(svc: Service, key: str) -> list[str]:
    return sorted(p.pod for p in svc.loop.state.running[key].pods)


async def test_a_batch_job_and_an_mpijob_run_whole_and_the_second_waits_whole(
    database_url: str,
) -> None:
    clock = VirtualClock(0.0)
    async with running_service(settings(database_url), clock) as svc:
        # team-a may use 32 GPUs: the Job takes 24, the MPIJob's 17 wait for them.
        await submit(svc, batch_job("shards", pods=3, gpus=8, duration="60s"))
        await running.settle(svc.loop, clock)
        assert await states(svc) == {"team-a/shards": "Running"}
        assert pods(svc, "team-a/shards") == ["main-0", "main-1", "main-2"]

        await submit(svc, mpi_job("pi", workers=2, gpus=8, duration="60s"))
        await running.settle(svc.loop, clock)
        assert (await states(svc))["team-a/pi"] == "Queued"
        assert "team-a/pi" not in svc.loop.state.running  # not a pod of it runs

        await running.settle(svc.loop, clock, 61)
        seen = await states(svc)
        assert seen["team-a/shards"] == "Succeeded" and seen["team-a/pi"] == "Running"
        assert pods(svc, "team-a/pi") == ["Launcher-0", "Worker-0", "Worker-1"]
        await running.settle(svc.loop, clock, 61)
        assert await states(svc) == {"team-a/shards": "Succeeded", "team-a/pi": "Succeeded"}
        assert svc.loop.state.tree.used("team-a")["nvidia.com/gpu"] == 0
        svc.loop.state.check_invariants()


async def test_a_failing_batch_job_fails(database_url: str) -> None:
    clock = VirtualClock(0.0)
    async with running_service(settings(database_url), clock) as svc:
        await submit(svc, batch_job("crash", pods=2, gpus=1, duration="10s", outcome="Failed"))
        await running.settle(svc.loop, clock)
        assert await states(svc) == {"team-a/crash": "Running"}
        await running.settle(svc.loop, clock, 11)
        assert await states(svc) == {"team-a/crash": "Failed"}
