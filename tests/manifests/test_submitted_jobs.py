"""load_submitted: jobs with their documents, and policies and jobs that select each other."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.core.quota import QuotaTree
from fleet.manifests import convert
from fleet.manifests.errors import SpecError, SpecIssue
from fleet.manifests.kinds import registry
from fleet.manifests.models import PropagationPolicyModel
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
    assert "store one with `fleet apply -f policy.yaml`" in issue.message
    # The lenient loader takes it as a gang without affinity.
    assert len(convert.load_submission(text, tree)) == 2


def test_a_policy_that_selects_no_job_is_returned_to_be_stored(tree: QuotaTree) -> None:
    other = make_policy("other", selectors=[{"apiVersion": "kubeflow.org/v1", "kind": "TFJob"}])
    found = convert.load_submitted(dump(make_policy("p"), other, make_job()), tree)
    assert [p.name for p in found.policies] == ["default/p", "default/other"]
    (out,) = found.jobs
    assert out.policy is not None and out.policy.name == "default/p" and out.stored is None


def test_a_submission_of_policies_alone_is_valid(tree: QuotaTree) -> None:
    found = convert.load_submitted(dump(make_policy("p"), make_policy("q", namespace="b")), tree)
    assert found.jobs == []
    assert [(p.index, p.name) for p in found.policies] == [(0, "default/p"), (1, "b/q")]


def test_an_empty_submission_is_an_error(tree: QuotaTree) -> None:
    (issue,) = issues_of("# nothing\n", tree)
    assert (issue.document, issue.message) == (
        0,
        f"the submission holds no job (Fleet runs {registry.names()}) and no PropagationPolicy",
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
    # Policy q selects nothing of the submission: it is stored, not refused.
    assert [(i.document, i.path) for i in issues] == [
        (1, "spec.runPolicy.schedulingPolicy.queue"),
        (2, ""),
    ]


def test_the_yaml_limits_apply(tree: QuotaTree) -> None:
    text = dump(make_policy(), make_job("a"), make_job("b"))
    found = convert.load_submitted(text, tree, limits=YamlLimits(max_documents=3))
    assert len(found.jobs) == 2
    issues = issues_of(text, tree, limits=YamlLimits(max_documents=2))
    assert [(i.document, i.path) for i in issues] == [(2, "")]
    assert "more than 2 documents in one stream" in issues[0].message


# Stored policies ----------------------------------------------------------------------


def stored(*policies: dict[str, Any]) -> list[PropagationPolicyModel]:
    """Policies as the service holds them (plain documents), read as models."""
    return convert.policy_models(policies)


def test_a_job_alone_is_governed_by_a_stored_policy_of_its_namespace(tree: QuotaTree) -> None:
    policies = stored(make_policy("standing", gang=False), make_policy("elsewhere", namespace="b"))
    found = convert.load_submitted(dump(make_job("one")), tree, stored_policies=policies)
    (out,) = found.jobs
    assert out.policy is None
    assert out.stored is not None and out.stored.key == "default/standing"
    assert out.job.gang is False  # the stored policy's settings apply
    assert found.policies == []
    # Without it the job is refused, naming both ways to give it one.
    (issue,) = issues_of(dump(make_job("one")), tree, stored_policies=policies[1:])
    assert issue.message == (
        "no PropagationPolicy of the submission selects this PyTorchJob, and no policy stored "
        "in namespace 'default' does; add one to the submission, or store one with "
        "`fleet apply -f policy.yaml`, in namespace 'default' whose resourceSelectors name "
        "apiVersion kubeflow.org/v1, kind PyTorchJob"
    )


def test_the_submissions_own_policy_wins_over_a_stored_one(tree: QuotaTree) -> None:
    policies = stored(make_policy("standing", priority=100, gang=False))
    text = dump(make_policy("own"), make_job())
    (out,) = convert.load_submitted(text, tree, stored_policies=policies).jobs
    assert out.policy is not None and out.policy.name == "default/own" and out.stored is None
    assert out.job.gang is True


def test_a_stored_policy_the_submission_names_again_is_replaced(tree: QuotaTree) -> None:
    tfjobs = [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob"}]
    policies = stored(make_policy("p"))
    # The submission's p no longer selects PyTorchJobs: the stored p is gone with it.
    issues = issues_of(
        dump(make_policy("p", selectors=tfjobs), make_job()), tree, stored_policies=policies
    )
    assert [(i.document, i.path) for i in issues] == [(1, "")]


def named(name: str) -> list[dict[str, Any]]:
    return [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": name}]


def labelled(**labels: str) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "labelSelector": {"matchLabels": labels},
        }
    ]


@pytest.mark.parametrize(
    ("policies", "applies"),
    [
        # explicit priority first, whatever the selector
        (
            [make_policy("a-named", selectors=named("train")), make_policy("z-kind", priority=1)],
            "z-kind",
        ),
        # then the most specific selector: name > labelSelector > kind only
        (
            [
                make_policy("a-kind"),
                make_policy("b-labels", selectors=labelled(team="x")),
                make_policy("c-named", selectors=named("train")),
            ],
            "c-named",
        ),
        (
            [make_policy("a-kind"), make_policy("b-labels", selectors=labelled(team="x"))],
            "b-labels",
        ),
        # then the name
        ([make_policy("b-kind"), make_policy("a-kind")], "a-kind"),
    ],
)
def test_stored_policies_resolve_as_karmada_resolves_them(
    tree: QuotaTree, policies: list[dict[str, Any]], applies: str
) -> None:
    job = make_job("train")
    job["metadata"]["labels"] = {"team": "x"}
    (out,) = convert.load_submitted(dump(job), tree, stored_policies=stored(*policies)).jobs
    assert out.stored is not None and out.stored.metadata.name == applies


def test_a_stored_policy_that_no_longer_reads_is_left_out() -> None:
    broken = {**make_policy("broken"), "spec": {"resourceSelectors": []}}
    assert [p.key for p in convert.policy_models([broken, make_policy("ok")])] == ["default/ok"]
