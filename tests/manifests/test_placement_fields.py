"""Only Fleet places pods: a PyTorchJob may not name its node or scheduler, nor carry what
Fleet writes on the objects it creates; what users may give Fleet stays allowed."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.clusters.kube import objects
from fleet.manifests import documents
from fleet.manifests.errors import SpecIssue
from fleet.manifests.models import (
    FLEET_WRITTEN_KEYS,
    GPU_PRODUCT_LABEL,
    GPU_TYPE_ANNOTATION,
    PINNED_CELL_ANNOTATION,
    PREEMPTIBLE_ANNOTATION,
    SIM_DURATION_ANNOTATION,
    SIM_OUTCOME_ANNOTATION,
)
from fleet.sim.engine import EXPECTED_ANNOTATION
from fleet.sim.traces import SUBMIT_ANNOTATION
from tests.manifests.factories import dump, make_job

PLACES = "only Fleet places pods"
WRITTEN = "is written by Fleet itself on what it creates; remove it"


ZONE_A = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
            ]
        }
    }
}


def issues(doc: dict[str, Any]) -> list[SpecIssue]:
    return documents.parse_documents(dump(doc))[1]


def with_template(role: str, where: str, value: Any) -> dict[str, Any]:
    """The default job with ``value`` set at ``where`` (dotted, under ``role``'s template)."""
    job = make_job()
    node: dict[str, Any] = job["spec"]["pytorchReplicaSpecs"][role]["template"]
    *parents, last = where.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return job


def refused() -> list[Any]:
    cases = [
        pytest.param(
            with_template(role, f"spec.{field}", value),
            f"spec.pytorchReplicaSpecs.{role}.template.spec.{field}",
            PLACES,
            id=f"{role}-{field}",
        )
        for role in ("Master", "Worker")
        for field, value in (("nodeName", "gpu-node-3"), ("schedulerName", "default-scheduler"))
    ]
    for key in sorted(FLEET_WRITTEN_KEYS):
        for field in ("labels", "annotations"):
            job = make_job()
            job["metadata"][field] = {key: "x"}
            cases.append(
                pytest.param(
                    job,
                    f"metadata.{field}.{key}",
                    f"'{key}' {WRITTEN}",
                    id=f"job-{field}-{key}",
                )
            )
            cases.append(
                pytest.param(
                    with_template("Worker", f"metadata.{field}", {key: "x"}),
                    f"spec.pytorchReplicaSpecs.Worker.template.metadata.{field}.{key}",
                    f"'{key}' {WRITTEN}",
                    id=f"template-{field}-{key}",
                )
            )
    return cases


@pytest.mark.parametrize(("doc", "path", "message"), refused())
def test_a_job_may_not_place_its_pods_or_write_what_fleet_writes(
    doc: dict[str, Any], path: str, message: str
) -> None:
    found = issues(doc)
    assert [(i.document, i.kind, i.name, i.path) for i in found] == [
        (0, "PyTorchJob", "default/train", path)
    ]
    assert found[0].message.startswith(message), found[0].message


def test_the_node_name_message_says_what_to_do() -> None:
    (issue,) = issues(with_template("Worker", "spec.nodeName", "n1"))
    assert str(issue).endswith(
        "spec.pytorchReplicaSpecs.Worker.template.spec.nodeName: only Fleet places pods; remove it"
    )


def test_every_refused_field_is_named_at_once() -> None:
    job = with_template("Worker", "spec.nodeName", "n1")
    job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["schedulerName"] = "volcano"
    job["metadata"]["labels"] = {"fleet.io/queue": "team-b"}
    assert [i.path for i in issues(job)] == [
        "metadata.labels.fleet.io/queue",
        "spec.pytorchReplicaSpecs.Master.template.spec.schedulerName",
        "spec.pytorchReplicaSpecs.Worker.template.spec.nodeName",
    ]


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param(
            make_job(
                annotations={
                    GPU_TYPE_ANNOTATION: "A100",
                    PREEMPTIBLE_ANNOTATION: "true",
                    PINNED_CELL_ANNOTATION: "cell-1",
                    SIM_DURATION_ANNOTATION: "5m",
                    SIM_OUTCOME_ANNOTATION: "Failed",
                    EXPECTED_ANNOTATION: "2h",
                    SUBMIT_ANNOTATION: "30",
                    "fleet.io/owner-note": "not one Fleet writes",
                }
            ),
            id="user-annotations",
        ),
        pytest.param(
            with_template("Worker", "spec.nodeSelector", {GPU_PRODUCT_LABEL: "A100"}),
            id="gpu-type-node-selector",
        ),
        pytest.param(
            with_template("Worker", "spec.affinity", ZONE_A),
            id="affinity",
        ),
        pytest.param(with_template("Worker", "spec.nodeName", ""), id="empty-node-name"),
        pytest.param(with_template("Worker", "spec.schedulerName", None), id="null-scheduler"),
        pytest.param(
            with_template("Worker", "metadata.labels", {"app": "train", "fleet.io/team": "a"}),
            id="template-labels",
        ),
    ],
)
def test_what_users_may_give_stays_allowed(doc: dict[str, Any]) -> None:
    assert issues(doc) == []


def test_every_key_fleet_writes_on_member_objects_and_pods_is_refused() -> None:
    written = {
        value
        for name, value in vars(objects).items()
        if name.isupper() and isinstance(value, str) and value.startswith("fleet.io/")
    }
    assert written == FLEET_WRITTEN_KEYS


def test_user_inputs_are_not_among_the_keys_fleet_writes() -> None:
    inputs = {
        GPU_TYPE_ANNOTATION,
        PREEMPTIBLE_ANNOTATION,
        PINNED_CELL_ANNOTATION,
        SIM_DURATION_ANNOTATION,
        SIM_OUTCOME_ANNOTATION,
        EXPECTED_ANNOTATION,
        SUBMIT_ANNOTATION,
    }
    assert not inputs & FLEET_WRITTEN_KEYS
