"""Response models: the JSON shapes of DESIGN's examples, camelCase, documented fields."""

from __future__ import annotations

import datetime
import json
from typing import Any

import pydantic
import pytest

from fleet.api import schemas
from fleet.api.problems import FieldError, Problem
from fleet.core.jobs import Mode
from fleet.core.lifecycle import JobState

T0 = datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


def as_json(model: schemas.Schema, status: int = 200) -> dict[str, Any]:
    response = schemas.json_response(model, status=status)
    assert response.status == status and response.content_type == "application/json"
    assert isinstance(response.body, bytes)
    data: dict[str, Any] = json.loads(response.body)
    return data


def detail() -> schemas.JobDetail:
    return schemas.JobDetail(
        namespace="team-a",
        name="train",
        api_version="kubeflow.org/v1",
        kind="PyTorchJob",
        uid="u-1",
        queue="team-a",
        state=JobState.RUNNING,
        priority_class="prod",
        priority=100,
        preemptible=True,
        mode=Mode.BORROWED,
        cluster="east",
        request=schemas.quantities({"nvidia.com/gpu": 16, "cpu": 4500, "memory": 2**36}),
        placement=[schemas.ReplicaPlacement(replica="Master-0", node="east-node-0", gpus=[0, 1])],
        reason=None,
        submitted_at=T0,
        events=[schemas.JobEvent(time=T0, type="Admitted", reason="Admitted", message="fits east")],
    )


def test_a_submission_answer_has_design_s_shape() -> None:
    job = schemas.SubmittedJob(
        namespace="team-a",
        name="train",
        uid="u-1",
        queue="team-a",
        state=JobState.QUEUED,
        created=True,
    )
    data = as_json(schemas.SubmissionResult(jobs=[job]), status=201)
    assert data == {
        "jobs": [
            {
                "namespace": "team-a",
                "name": "train",
                "uid": "u-1",
                "queue": "team-a",
                "state": "Queued",
                "created": True,
            }
        ]
    }


def test_a_job_detail_is_camel_case_with_placement_and_events() -> None:
    data = as_json(detail())
    assert data["priorityClass"] == "prod" and data["priority"] == 100
    assert data["mode"] == "borrowed" and data["state"] == "Running"
    assert data["request"] == {"cpu": "4500m", "memory": "64Gi", "nvidia.com/gpu": "16"}
    assert data["placement"] == [{"replica": "Master-0", "node": "east-node-0", "gpus": [0, 1]}]
    assert data["events"] == [
        {
            "time": "2025-01-02T03:04:05Z",
            "type": "Admitted",
            "reason": "Admitted",
            "message": "fits east",
        }
    ]
    assert data["submittedAt"] == "2025-01-02T03:04:05Z"
    assert data["reason"] is None
    assert (data["apiVersion"], data["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert data["podSets"] == [] and data["unschedulable"] is None


def test_the_job_list_continues_with_a_token() -> None:
    summary = schemas.JobSummary(
        namespace="a",
        name="b",
        api_version="batch/v1",
        kind="Job",
        uid="u",
        queue="q",
        state=JobState.QUEUED,
        priority_class="test",
        priority=10,
        submitted_at=T0,
    )
    data = as_json(schemas.JobList(items=[summary], continue_="abc"))
    assert data["continue"] == "abc"
    assert set(data["items"][0]) == {
        "namespace",
        "name",
        "uid",
        "queue",
        "state",
        "priorityClass",
        "priority",
        "mode",
        "cluster",
        "submittedAt",
        "apiVersion",
        "kind",
        "gpus",  # always (0: none); the rest of the list's additions only when set
        "labels",
    }
    by_alias = schemas.JobList.model_validate({"items": [], "continue": "x"})
    assert by_alias.continue_ == "x"


def test_queues_list_and_detail() -> None:
    common: dict[str, Any] = {
        "name": "team-a",
        "parent": "research",
        "leaf": True,
        "namespaces": ["team-a"],
        "min": {"nvidia.com/gpu": "16"},
        "max": {"nvidia.com/gpu": "32"},
        "used": {"nvidia.com/gpu": "20"},
        "borrowed": {"nvidia.com/gpu": "4"},
        "admitted": 3,
    }
    item = as_json(schemas.QueueList(items=[schemas.QueueSummary(**common, pending=2)]))
    assert item["items"][0] == {**common, "pending": 2}
    pending = schemas.PendingJob(
        position=1,
        job="team-a/train",
        priority=10,
        priority_class="test",
        request={"nvidia.com/gpu": "8"},
        reason="queue team-a is full: 32 of 32 GPUs used; this job needs 8",
    )
    data = as_json(schemas.QueueDetail(**common, pending=[pending]))
    assert data["pending"] == [
        {
            "position": 1,
            "job": "team-a/train",
            "apiVersion": None,
            "kind": None,
            "priority": 10,
            "priorityClass": "test",
            "request": {"nvidia.com/gpu": "8"},
            "reason": "queue team-a is full: 32 of 32 GPUs used; this job needs 8",
            "estimatedStart": None,
        }
    ]


def test_clusters_with_gpus_per_virtual_cluster() -> None:
    gpus = schemas.GpuCounts(total=24, used=8, free=16)
    cluster = schemas.ClusterSummary(
        name="east",
        labels={"tier": "production"},
        simulated=True,
        health=schemas.ClusterHealth.DEGRADED,
        bad_nodes=["east-node-2"],
        gpus=gpus,
        virtual_clusters=[schemas.VirtualClusterGpus(name="team-a", gpus=gpus)],
    )
    data = as_json(schemas.ClusterList(items=[cluster]))
    assert data["items"][0]["badNodes"] == ["east-node-2"]
    assert data["items"][0]["health"] == "Degraded"
    assert data["items"][0]["virtualClusters"] == [
        {"name": "team-a", "gpus": {"total": 24, "used": 8, "free": 16}, "doomedCells": 0}
    ]


def test_models_refuse_unknown_fields_and_are_frozen() -> None:
    with pytest.raises(pydantic.ValidationError):
        schemas.GpuCounts(total=1, used=0, free=1, spare=3)  # type: ignore[call-arg]
    with pytest.raises(pydantic.ValidationError):
        schemas.GpuCounts(total=-1, used=0, free=0)
    counts = schemas.GpuCounts(total=1, used=0, free=1)
    with pytest.raises(pydantic.ValidationError):
        counts.total = 2  # type: ignore[misc]


def _models(model: type[pydantic.BaseModel], seen: set[type[pydantic.BaseModel]]) -> None:
    if model in seen:
        return
    seen.add(model)
    for info in model.model_fields.values():
        for arg in _walk(info.annotation):
            if isinstance(arg, type) and issubclass(arg, pydantic.BaseModel):
                _models(arg, seen)


def _walk(annotation: Any) -> list[Any]:
    out = [annotation]
    for arg in getattr(annotation, "__args__", ()):
        out.extend(_walk(arg))
    return out


def test_every_field_of_every_response_is_documented() -> None:
    seen: set[type[pydantic.BaseModel]] = set()
    for model in (*schemas.RESPONSE_MODELS, Problem, FieldError):
        _models(model, seen)
    undocumented = [
        f"{model.__name__}.{name}"
        for model in seen
        for name, info in model.model_fields.items()
        if not info.description
    ]
    assert undocumented == []
    assert all(model.__doc__ for model in seen)
