"""``limits: {perUser: ...}`` on a quota tree leaf: read, kept, and its errors at their paths."""

from __future__ import annotations

import pathlib
import textwrap

import pytest
import yaml

from fleet.core.resources import GPU, MAX_JOBS, Resources
from fleet.manifests import convert
from fleet.manifests.errors import SpecError
from fleet.testing.documents import pytorchjob

EXAMPLE = pathlib.Path(__file__).parents[2] / "policies" / "quota" / "per-user-tree.yaml"


def tree_yaml(leaf_limits: str, root_limits: str = "") -> str:
    root_extra = f", limits: {root_limits}" if root_limits else ""
    return textwrap.dedent(
        f"""\
        apiVersion: scheduling.sigs.k8s.io/v1beta1
        kind: ElasticQuotaTree
        metadata: {{name: t}}
        spec:
          root: {{name: root, min: {{nvidia.com/gpu: 16}}, max: {{nvidia.com/gpu: 16}}{root_extra},
            children: [{{name: team-a, namespaces: [a], limits: {leaf_limits}}}]}}
        """
    )


def paths(text: str) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as caught:
        convert.load_quota(text)
    return [(issue.path, issue.message) for issue in caught.value.issues]


def test_the_example_tree_reads_with_its_per_user_limits() -> None:
    tree, _ = convert.load_quota(EXAMPLE.read_text())
    assert tree.per_user("team-a") == Resources.limits({MAX_JOBS: 4, GPU: 16})
    assert tree.per_user("team-b") == Resources.limits({GPU: 8})
    assert tree.per_user("root") is None
    assert tree.to_spec().children[0].per_user == Resources.limits({MAX_JOBS: 4, GPU: 16})


def test_a_zero_cap_is_kept() -> None:
    tree, _ = convert.load_quota(tree_yaml("{perUser: {runningJobs: 0}}"))
    assert tree.per_user("team-a") == Resources.limits({MAX_JOBS: 0})


def test_per_user_limits_on_an_inner_node_are_an_error_at_their_path() -> None:
    found = paths(tree_yaml("{perUser: {runningJobs: 1}}", "{perUser: {runningJobs: 2}}"))
    assert found[0][0] == "spec.root.limits.perUser"
    assert "leaves only" in found[0][1]


@pytest.mark.parametrize(
    ("limits", "path", "words"),
    [
        ("{perUser: {runningJobs: -1}}", "limits.perUser.runningJobs", "whole number"),
        ("{perUser: {runningJobs: 1.5}}", "limits.perUser.runningJobs", "whole number"),
        ("{perUser: {runningJobs: four}}", "limits.perUser.runningJobs", "whole number"),
        ("{perUser: {nvidia.com/gpu: lots}}", "limits.perUser.nvidia.com/gpu", "lots"),
        ("{perUser: {gpu: 2}}", "limits.perUser.gpu", "not a Kubernetes resource name"),
        (
            "{perUser: {kube-queue/max-jobs: 2}}",
            "limits.perUser.kube-queue/max-jobs",
            "runningJobs",
        ),
        ("{perUsers: {runningJobs: 2}}", "limits.perUsers", ""),
    ],
)
def test_bad_per_user_values_are_errors_at_their_paths(limits: str, path: str, words: str) -> None:
    found = paths(tree_yaml(limits))
    assert found[0][0] == f"spec.root.children[0].{path}", found
    assert words in found[0][1]


def test_a_jobs_user_is_its_fleet_io_user_label() -> None:
    tree, _ = convert.load_quota(EXAMPLE.read_text())
    docs = list(yaml.safe_load_all(pytorchjob("train", namespace="team-a")))
    for doc in docs:
        if doc["kind"] == "PyTorchJob":
            doc["metadata"]["labels"] = {"fleet.io/user": "alice"}
    labelled = convert.load_submission(yaml.safe_dump_all(docs), tree)
    plain = convert.load_submission(pytorchjob("train", namespace="team-a"), tree)
    assert [j.user for j in labelled] == ["alice"]
    assert [j.user for j in plain] == [""]
