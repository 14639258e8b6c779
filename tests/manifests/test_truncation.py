"""Error messages quote at most a short prefix of an offending value."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fleet.cli.main import main
from fleet.manifests import convert
from fleet.manifests.errors import (
    ELLIPSIS,
    MAX_MESSAGE,
    MAX_QUOTED,
    SpecError,
    SpecIssue,
    quote,
    shorten,
)
from tests.manifests.factories import dump, make_cluster, make_job, make_tree

HUGE = "z" * 100_000
#: What a message may show of HUGE: MAX_QUOTED characters, then the ellipsis.
SHOWN = "z" * MAX_QUOTED + ELLIPSIS


def test_shorten_keeps_a_prefix_and_marks_the_cut() -> None:
    assert shorten("short") == "short"
    assert shorten("a" * MAX_QUOTED) == "a" * MAX_QUOTED
    assert shorten("a" * (MAX_QUOTED + 1)) == "a" * MAX_QUOTED + ELLIPSIS
    assert shorten("abcdef", 3) == "abc" + ELLIPSIS
    assert quote("x" * 1000) == repr("x" * MAX_QUOTED + ELLIPSIS)
    assert quote(7) == "7"


def test_an_issue_shortens_its_name_path_and_message() -> None:
    issue = SpecIssue(0, "PyTorchJob", HUGE, f"metadata.labels.{HUGE}", HUGE)
    assert issue.name == SHOWN
    assert issue.path == f"metadata.labels.{SHOWN}"
    assert issue.message == "z" * MAX_MESSAGE + ELLIPSIS


def errors_of(load: Callable[[str], Any], *docs: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as info:
        load(dump(*docs))
    return str(info.value)


def submission(text: str) -> Any:
    tree, _ = convert.load_quota(dump(make_tree()))
    return convert.load_submission(text, tree)


def quantity_job() -> dict[str, Any]:
    job = make_job()
    containers = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    containers[0]["resources"]["requests"]["cpu"] = HUGE
    return job


def tree_with_unknown_field() -> dict[str, Any]:
    tree = make_tree()
    tree["spec"]["root"][HUGE] = 1
    return tree


def cluster_with_unknown_cell_type() -> dict[str, Any]:
    cluster = make_cluster()
    cluster["spec"]["cells"]["physicalCluster"]["physicalCells"][0]["cellType"] = HUGE
    return cluster


CASES: dict[str, tuple[Callable[[str], Any], dict[str, Any]]] = {
    "job name": (submission, make_job(HUGE)),
    "queue": (submission, make_job(queue=HUGE)),
    "priority class": (submission, make_job(priority_class=HUGE)),
    "label key": (submission, make_job(labels={HUGE: 1})),
    "annotation value": (submission, make_job(annotations={"fleet.io/preemptible": HUGE})),
    "kind": (submission, {"apiVersion": "v1", "kind": HUGE}),
    "unknown field": (convert.load_quota, tree_with_unknown_field()),
    "quantity (core message)": (submission, quantity_job()),
    "cell type (core message)": (convert.load_clusters, cluster_with_unknown_cell_type()),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_huge_offending_value_is_quoted_by_a_short_prefix(case: str) -> None:
    load, doc = CASES[case]
    text = errors_of(load, doc)
    assert len(text) < 600, text[:600]
    assert "z" * (MAX_QUOTED + 1) not in text
    assert "z" * MAX_QUOTED + ELLIPSIS in text


def test_a_huge_job_name_costs_one_short_line_on_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "jobs.yaml"
    f.write_text(dump(make_job("x" * 2_000_000)), encoding="utf-8")
    assert main(["check", "jobs", str(f)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert len(line) < 500
    assert "x" * (MAX_QUOTED + 1) not in line
    assert "document 0 (PyTorchJob default/xxx" in line  # the name, shortened
    assert f"metadata.name: '{'x' * MAX_QUOTED}{ELLIPSIS}' is not a valid name" in line


def test_a_value_yaml_cannot_build_is_reported_not_a_crash() -> None:
    text = "a: " + "1" * 5000 + "\n"
    with pytest.raises(SpecError) as info:
        convert.load_quota(text)
    (issue,) = info.value.issues
    assert issue.message.startswith("a YAML value cannot be read: ")
    assert len(issue.message) < 200
