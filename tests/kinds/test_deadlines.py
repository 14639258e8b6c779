"""A job's own deadline, read from each kind that has one (activeDeadlineSeconds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.core.quota import QuotaTree
from fleet.manifests import convert, documents
from fleet.manifests.errors import SpecError
from tests.kinds import test_trainjob as tj
from tests.kinds.test_batchjob import job, policy
from tests.manifests.factories import dump, make_policy, make_tree

EXAMPLES = Path(__file__).parent / "examples"


@pytest.fixture
def tree() -> QuotaTree:
    return convert.load_quota(dump(make_tree()))[0]


def pytorch_job(**run_policy: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "img:1", "resources": {"limits": {"nvidia.com/gpu": 1}}}
    worker = {"replicas": 2, "template": {"spec": {"containers": [container]}}}
    spec: dict[str, Any] = {"pytorchReplicaSpecs": {"Worker": worker}}
    if run_policy:
        spec["runPolicy"] = run_policy
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "train", "namespace": "default"},
        "spec": spec,
    }


def test_a_batch_jobs_active_deadline_is_the_jobs_deadline(tree: QuotaTree) -> None:
    (core,) = convert.load_submission(dump(policy(), job(activeDeadlineSeconds=600)), tree)
    assert core.active_deadline == 600.0
    (core,) = convert.load_submission(dump(policy(), job()), tree)
    assert core.active_deadline is None


def test_a_kubeflow_jobs_run_policy_deadline_is_the_jobs_deadline(tree: QuotaTree) -> None:
    pol = make_policy("train", selectors=[{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"}])
    doc = pytorch_job(activeDeadlineSeconds=3600)
    (core,) = convert.load_submission(dump(pol, doc), tree)
    assert core.active_deadline == 3600.0


@pytest.mark.parametrize(
    ("example", "path"),
    [
        ("tfjob-simple.yaml", "runPolicy"),
        ("mpijob-v1.yaml", "runPolicy"),
        ("mpijob-v2beta1-pi.yaml", "runPolicy"),
    ],
)
def test_every_kubeflow_kind_reads_its_run_policy(example: str, path: str) -> None:
    doc = yaml.safe_load((EXAMPLES / example).read_text())
    doc["spec"].setdefault(path, {})["activeDeadlineSeconds"] = 120
    docs, issues = documents.parse_documents(dump(doc))
    assert issues == []
    assert docs[0].model.deadline_field() == (120, "spec.runPolicy.activeDeadlineSeconds")


def test_kinds_without_a_deadline_of_the_whole_job_have_none() -> None:
    for example in ("volcano-job.yaml", "jobset-paralleljobs.yaml"):
        docs, issues = documents.parse_documents((EXAMPLES / example).read_text())
        assert issues == []
        assert docs[0].model.deadline_field() == (None, "")


@pytest.mark.parametrize("seconds", [0, -10])
def test_a_deadline_below_one_second_is_refused_at_its_field(seconds: int) -> None:
    with pytest.raises(SpecError) as raised:
        convert.load_submission(
            dump(policy(), job(activeDeadlineSeconds=seconds)),
            convert.load_quota(dump(make_tree()))[0],
        )
    paths = [i.path for i in raised.value.issues]
    assert "spec.activeDeadlineSeconds" in paths, raised.value.issues
    _, issues = documents.parse_documents(dump(pytorch_job(activeDeadlineSeconds=seconds)))
    found = [(i.path, i.message) for i in issues]
    assert found[0][0] == "spec.runPolicy.activeDeadlineSeconds", found
    assert "at least 1" in found[0][1]


def test_a_trainjobs_active_deadline_is_the_jobs_deadline(tree: QuotaTree) -> None:
    doc = tj.a_trainjob()
    doc["spec"]["activeDeadlineSeconds"] = 900
    found = tj.load(tree, tj.policy(), doc, runtimes=tj.registered(tj.runtime()))
    assert found.jobs[0].job.active_deadline == 900.0
