"""The API names each job's kind and shows its pod sets; a waiting gang says so per set."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestClient

from fleet.api import keys, routes, schemas
from fleet.api.app import create_app
from fleet.api.routes import unschedulable
from fleet.clock import VirtualClock
from fleet.core.jobs import Job, ReplicaGroup
from fleet.core.resources import Resources
from fleet.manifests.errors import Problem
from fleet.manifests.kinds.base import PodSet
from fleet.manifests.kinds.tfjob import TFJobModel
from fleet.testing import running
from fleet.testing.documents import pytorchjob
from fleet.testing.running import settings

Client = TestClient[web.Request, web.Application]
YAML = {"Content-Type": "application/yaml"}


def tfjob(name: str, *, workers: int = 2, gpus: int = 1, namespace: str = "team-a") -> str:
    """A PropagationPolicy selecting TFJobs and one TFJob: a PS and ``workers`` workers."""
    policy = {
        "apiVersion": "policy.one.alibabacloud.com/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"resourceSelectors": [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob"}]},
    }

    def replica(count: int, request: dict[str, Any]) -> dict[str, Any]:
        container = {"name": "tensorflow", "image": "example/tf:1", "resources": request}
        return {"replicas": count, "template": {"spec": {"containers": [container]}}}

    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {"fleet.io/simulated-duration": "1h"},
        },
        "spec": {
            "tfReplicaSpecs": {
                "PS": replica(1, {"requests": {"cpu": "2"}}),
                "Worker": replica(workers, {"limits": {"nvidia.com/gpu": gpus}}),
            }
        },
    }
    return yaml.safe_dump_all([policy, job])


@pytest.fixture
async def api(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]], database_url: str
) -> AsyncIterator[tuple[Client, VirtualClock]]:
    clock = VirtualClock(1_000.0)
    client = await aiohttp_client(create_app(settings(database_url), clock=clock))
    yield client, clock


async def ok(resp: Any, status: int = 200) -> Any:
    body = await resp.json()
    assert resp.status == status, body
    return body


async def test_the_job_list_and_detail_name_the_kind_and_show_the_pod_sets(
    api: tuple[Client, VirtualClock],
) -> None:
    client, clock = api
    await ok(await client.post("/api/v1/submissions", data=tfjob("tf"), headers=YAML), 201)
    await ok(await client.post("/api/v1/submissions", data=pytorchjob("pt"), headers=YAML), 201)
    await running.settle(client.app[keys.SERVICE].loop, clock, 0.0)
    listed = (await ok(await client.get("/api/v1/jobs")))["items"]
    assert {j["name"]: (j["apiVersion"], j["kind"]) for j in listed} == {
        "tf": ("kubeflow.org/v1", "TFJob"),
        "pt": ("kubeflow.org/v1", "PyTorchJob"),
    }
    job = await ok(await client.get("/api/v1/jobs/team-a/tf"))
    assert (job["kind"], job["apiVersion"], job["state"]) == ("TFJob", "kubeflow.org/v1", "Running")
    assert job["podSets"] == [
        {
            "role": "PS",
            "count": 1,
            "perPod": {"cpu": "2"},
            "minimum": None,
            "placed": 1,
            "total": {"cpu": "2"},
        },
        {
            "role": "Worker",
            "count": 2,
            "perPod": {"nvidia.com/gpu": "1"},
            "minimum": None,
            "placed": 2,
            "total": {"nvidia.com/gpu": "2"},
        },
    ]
    assert job["gangMinimum"] == 3  # a TFJob is admitted whole
    assert job["unschedulable"] is None


async def test_a_waiting_gang_says_so_per_set_and_its_queue_names_its_kind(
    api: tuple[Client, VirtualClock],
) -> None:
    client, clock = api
    # team-a's max is 32 GPUs: the third 16-GPU job waits.
    for n in range(3):
        text = pytorchjob(f"q{n}", workers=2, gpus=8, duration="1h")
        await ok(await client.post("/api/v1/submissions", data=text, headers=YAML), 201)
    await running.settle(client.app[keys.SERVICE].loop, clock, 0.0)
    job = await ok(await client.get("/api/v1/jobs/team-a/q2"))
    assert job["state"] == "Queued" and job["reason"]
    assert job["unschedulable"] == (
        f"2/2 pods in gang unschedulable (Worker 2; 2 must start together): {job['reason']}"
    )
    (waiting,) = (await ok(await client.get("/api/v1/queues/team-a")))["pending"]
    assert (waiting["job"], waiting["apiVersion"], waiting["kind"]) == (
        "team-a/q2",
        "kubeflow.org/v1",
        "PyTorchJob",
    )


def test_a_sets_own_minimum_is_named_in_the_gangs_condition() -> None:
    gpu = Resources({"nvidia.com/gpu": 1})
    job = Job(
        key="ns/mpi",
        queue="q",
        priority=0,
        seq=1,
        groups=(ReplicaGroup("mpimaster", 1, Resources()), ReplicaGroup("mpiworker", 3, gpu)),
        min_members=3,
    )
    sets = [
        schemas.PodSetDetail(role="mpimaster", count=1, per_pod={}, minimum=1),
        schemas.PodSetDetail(role="mpiworker", count=3, per_pod={"nvidia.com/gpu": "1"}, minimum=2),
    ]
    assert unschedulable(job, sets, "NotEnoughResources") == (
        "4/4 pods in gang unschedulable (mpimaster 1 (at least 1), mpiworker 3 (at least 2); "
        "3 must start together): NotEnoughResources"
    )


def test_a_sets_own_minimum_is_read_by_its_kinds_model_from_the_stored_document(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (document,) = [d for d in yaml.safe_load_all(tfjob("tf")) if d["kind"] == "TFJob"]
    assert routes._set_minimums(document) == {}  # a TFJob sets none per set
    original = TFJobModel.pod_sets

    def with_minimum(self: TFJobModel, problems: list[Problem]) -> list[PodSet]:
        return [dataclasses.replace(s, minimum=s.count) for s in original(self, problems)]

    monkeypatch.setattr(TFJobModel, "pod_sets", with_minimum)
    assert routes._set_minimums(document) == {"PS": 1, "Worker": 2}
    assert routes._set_minimums({**document, "spec": "unreadable"}) == {}
    assert routes._set_minimums({"apiVersion": "apps/v1", "kind": "Deployment"}) == {}
