"""load_submitted: jobs with their documents, and policies and jobs that select each other."""

from __future__ import annotations

import pytest

from fleet.core.quota import QuotaTree
from fleet.manifests import convert
from fleet.manifests.errors import SpecError, SpecIssue
from fleet.manifests.kinds import registry
from fleet.manifests.yaml_stream import YamlLimits
from tests.manifests.factories import dump, make_job, make_policy, make_tree


@pytest.fixture
def tree() -> QuotaTree:
    return convert.load_quota(dump(make_tree()))[0]


def issues_of(text: str, tree: QuotaTree, **kw: object) -> list[SpecIssue]:
    with pytest.raises(SpecError) as e:
        convert.load_submitted(text, tree, **kw)  # type: ignore[arg-type]
    return list(e.value.issues)


def test_each_job_comes_with_its_document_and_policy(tree: QuotaTree) -> None:
    text = dump(
        make_policy("p"),
        make_job("one"),
        make_job("two", namespace="b"),
        make_policy("pb", namespace="b"),
    )
    out = convert.load_submitted(text, tree, first_seq=40).jobs
    assert [(s.job.key, s.job.seq, s.job.queue) for s in out] == [
        ("default/one", 40, "team-a"),
        ("b/two", 41, "team-b"),
    ]
    assert [s.document.index for s in out] == [1, 2]
    assert [s.policy.name if s.policy else None for s in out] == ["default/p", "b/pb"]
    assert out[0].document.raw == make_job("one")
    assert out[1].policy is not None and out[1].policy.raw == make_policy("pb", namespace="b")
    assert [s.job for s in out] == convert.load_submission(text, tree, first_seq=40)


def test_the_policy_that_applies_is_the_one_karmada_would_choose(tree: QuotaTree) -> None:
    low = make_policy("low")
    high = make_policy("high", priority=5, gang=False)
    (out,) = convert.load_submitted(dump(low, high, make_job()), tree).jobs
    assert out.policy is not None and out.policy.name == "default/high"
    assert out.job.gang is False


def test_a_job_that_no_policy_selects_is_an_error(tree: QuotaTree) -> None:
    text = dump(make_policy("p", namespace="b"), make_job("lonely"), make_job("ok", namespace="b"))
    (issue,) = issues_of(text, tree)
    assert (issue.document, issue.kind, issue.name, issue.path) == (
        1,
        "PyTorchJob",
        "default/lonely",
        "",
    )
    assert issue.message.startswith("no PropagationPolicy of the submission selects this")
    assert "namespace 'default'" in issue.message
    # The lenient loader takes it as a gang without affinity.
    assert len(convert.load_submission(text, tree)) == 2


def test_a_policy_that_selects_nothing_is_an_error(tree: QuotaTree) -> None:
    other = make_policy("other", selectors=[{"apiVersion": "kubeflow.org/v1", "kind": "TFJob"}])
    (issue,) = issues_of(dump(make_policy("p"), other, make_job()), tree)
    assert (issue.document, issue.kind, issue.name, issue.path) == (
        1,
        "PropagationPolicy",
        "default/other",
        "spec.resourceSelectors",
    )
    assert issue.message == "selects no job of the submission"


def test_a_submission_without_a_job_is_an_error(tree: QuotaTree) -> None:
    (issue,) = issues_of(dump(make_policy()), tree)
    assert (issue.document, issue.message) == (
        0,
        f"the submission holds no job (Fleet runs {registry.names()})",
    )


def test_policies_are_not_required_when_told(tree: QuotaTree) -> None:
    (out,) = convert.load_submitted(dump(make_job()), tree, require_policies=False).jobs
    assert out.policy is None and out.job.gang


def test_an_unreadable_document_suppresses_the_selection_errors(tree: QuotaTree) -> None:
    broken = make_job()
    broken["spec"]["pytorchReplicaSpecs"] = "nope"
    issues = issues_of(dump(make_policy(), broken), tree)
    assert [(i.document, i.path) for i in issues] == [(1, "spec.pytorchReplicaSpecs")]


def test_every_issue_is_reported_at_once(tree: QuotaTree) -> None:
    text = dump(
        make_policy("p"),
        make_job("a", queue="nowhere"),
        make_job("b", namespace="b"),
        make_policy("q", namespace="c"),
    )
    issues = issues_of(text, tree)
    assert [(i.document, i.path) for i in issues] == [
        (1, "spec.runPolicy.schedulingPolicy.queue"),
        (2, ""),
        (3, "spec.resourceSelectors"),
    ]


def test_the_yaml_limits_apply(tree: QuotaTree) -> None:
    text = dump(make_policy(), make_job("a"), make_job("b"))
    found = convert.load_submitted(text, tree, limits=YamlLimits(max_documents=3))
    assert len(found.jobs) == 2
    issues = issues_of(text, tree, limits=YamlLimits(max_documents=2))
    assert [(i.document, i.path) for i in issues] == [(2, "")]
    assert "more than 2 documents in one stream" in issues[0].message
