"""`fleet check` on every example in policies/ and on broken files; `plan` is wired."""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path

import pytest

from fleet.cli import main as cli
from tests.manifests.factories import dump, make_job, make_tree

POLICIES = Path(__file__).resolve().parents[2] / "policies"


@pytest.mark.parametrize("path", sorted((POLICIES / "quota").glob("*.yaml")), ids=lambda p: p.name)
def test_every_quota_example_passes(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "quota", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"OK: {path}: quota tree with ")
    assert all(line.startswith("warning: ") for line in err.splitlines())


def test_ack_example_warns_about_root(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "quota", str(POLICIES / "quota" / "ack-example.yaml")]) == 0
    out, err = capsys.readouterr()
    assert "1 leaf queue (child-2); 1 warning" in out
    (line,) = err.splitlines()
    assert line.startswith("warning: ") and "root node 'root'" in line


@pytest.mark.parametrize(
    "path", sorted((POLICIES / "clusters").glob("*.yaml")), ids=lambda p: p.name
)
def test_every_cluster_example_passes(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "clusters", str(path)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"OK: {path}: ") and err == ""


def test_lab_seeds_and_example_cluster_names(capsys: pytest.CaptureFixture[str]) -> None:
    for name, expected in [
        ("lab-1", "(lab-1)"),
        ("lab-2", "(lab-2)"),
        ("example", "(east, west, edge)"),
    ]:
        assert cli.main(["check", "clusters", str(POLICIES / "clusters" / f"{name}.yaml")]) == 0
        assert expected in capsys.readouterr().out


@pytest.mark.parametrize("quota", [None, "team-tree.yaml"])
def test_job_examples_pass(quota: str | None, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["check", "jobs", str(POLICIES / "jobs" / "examples.yaml")]
    if quota:
        argv += ["--quota", str(POLICIES / "quota" / quota)]
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert "4 jobs, 4 PropagationPolicies" in out
    assert ("queues routed" if quota else "queues not routed") in out
    assert err == ""


def test_job_examples_route_to_expected_queues() -> None:
    from fleet.manifests import convert

    tree, _ = convert.load_quota((POLICIES / "quota" / "team-tree.yaml").read_text())
    clusters = convert.load_clusters((POLICIES / "clusters" / "example.yaml").read_text())
    jobs = convert.load_submission(
        (POLICIES / "jobs" / "examples.yaml").read_text(), tree, clusters
    )
    got = {
        j.key: (j.queue, j.priority_class, j.gang, j.preemptible, j.gpu_sku, j.clusters)
        for j in jobs
    }
    assert got == {
        "team-a/pytorch-test": ("team-a", "test", True, True, None, frozenset({"east", "west"})),
        "team-b/llm-pretrain": ("team-b", "crit", True, False, "H100", None),
        "team-c/elastic-imagenet": ("team-c", "prod", True, True, None, None),
        "sandbox/hparam-sweep": ("sandbox", "oppo", True, True, None, None),
    }


def test_errors_name_document_and_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = make_job()
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 0
    f = tmp_path / "jobs.yaml"
    f.write_text(dump(make_job("ok"), bad))
    assert cli.main(["check", "jobs", str(f)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"error: {f}: document 1 (PyTorchJob default/train): "
        "spec.pytorchReplicaSpecs.Worker.replicas: must be at least 1, not 0\n"
    )


def test_jobs_with_quota_report_routing_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tree.yaml").write_text(dump(make_tree()))
    (tmp_path / "jobs.yaml").write_text(dump(make_job(namespace="orphan")))
    argv = ["check", "jobs", str(tmp_path / "jobs.yaml"), "--quota", str(tmp_path / "tree.yaml")]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert (
        "document 0 (PyTorchJob orphan/train): metadata.namespace: no leaf of the quota tree "
        "lists namespace 'orphan'" in err
    )


def test_bad_quota_tree_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "tree.yaml"
    f.write_text("kind: ElasticQuotaTree\napiVersion: scheduling.sigs.k8s.io/v1beta1\n")
    assert cli.main(["check", "quota", str(f)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert f"error: {f}: document 0 (ElasticQuotaTree): metadata: required field is missing" in err


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "clusters", str(tmp_path / "nope.yaml")]) == 1
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'nope.yaml'}: ")


def test_plan_calls_the_lazily_imported_planner(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[argparse.Namespace] = []
    fake = types.ModuleType("fleet.cli.plan")

    def run(args: argparse.Namespace) -> int:
        seen.append(args)
        return 3

    fake.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "fleet.cli.plan", fake)
    q, c, j = (str(tmp_path / n) for n in "qcj")
    for f in (q, c, j):
        Path(f).write_text("")  # plan refuses unreadable files before the planner runs
    argv = ["plan", "--quota", q, "--clusters", c, "--jobs", j, "-o", "json"]
    assert cli.main(argv) == 3
    (args,) = seen
    assert (args.quota, args.clusters, args.jobs, args.running, args.output, args.placer) == (
        q,
        c,
        j,
        None,
        "json",
        "cells",
    )


def test_check_quota_warns_where_the_tree_promises_more_than_the_clusters_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = (POLICIES / "clusters" / "example.yaml").read_text(encoding="utf-8")
    edge = tmp_path / "edge.yaml"  # 8 A100s, 128 cpu, 1Ti
    edge.write_text(
        "apiVersion: fleet.io/v1alpha1\nkind: MemberCluster\nmetadata:\n  "
        + example[example.index("name: edge") :],
        encoding="utf-8",
    )
    tree = POLICIES / "quota" / "auto-tree.yaml"
    assert cli.main(["check", "quota", str(tree), "--clusters", str(edge)]) == 0
    out, err = capsys.readouterr()
    assert "capacity: auto (cpu 128, gpu.fleet.io/A100 8, memory 1Ti, nvidia.com/gpu 8)" in out
    assert out.rstrip().endswith("; 4 warnings")
    lines = err.splitlines()
    assert len(lines) == 4 and all(
        line.startswith(f"warning: {tree}: the tree promises more than the member clusters hold: ")
        for line in lines
    )
    assert lines[-1].endswith(
        "nvidia.com/gpu: the tree guarantees 48, the members hold 8 (40 short)"
    )
    assert "gpu.fleet.io/H100: the tree guarantees 8, the members hold 0 (8 short)" in err
    # The same tree against the clusters it was written for promises nothing more.
    clusters = POLICIES / "clusters" / "example.yaml"
    assert cli.main(["check", "quota", str(tree), "--clusters", str(clusters)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and out.rstrip().endswith("nvidia.com/gpu 48); 0 warnings")


def test_capacity_auto_errors_name_their_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (POLICIES / "quota" / "auto-tree.yaml").read_text(encoding="utf-8")
    broken = tmp_path / "tree.yaml"
    broken.write_text(
        text.replace("    capacity: auto\n", "    capacity: auto\n    max: {cpu: 1}\n").replace(
            "      - name: research\n", "      - name: research\n        capacity: auto\n"
        ),
        encoding="utf-8",
    )
    assert cli.main(["check", "quota", str(broken)]) == 1
    err = capsys.readouterr().err
    assert "spec.root.max: node 'root': capacity: auto makes the root's max" in err
    assert "spec.root.children[0].capacity: node 'research': capacity: auto is for the root" in err


def test_check_quota_says_which_members_it_cannot_count_offline(
    capsys: pytest.CaptureFixture[str],
) -> None:
    tree = POLICIES / "quota" / "auto-tree.yaml"
    clusters = POLICIES / "clusters" / "described-members.yaml"  # real, cells from Nodes
    assert cli.main(["check", "quota", str(tree), "--clusters", str(clusters)]) == 0
    err = capsys.readouterr().err
    assert (
        f"warning: {clusters}: member cluster prod-east is described by its Node objects: "
        "its capacity is known to the running service only and is not counted here"
    ) in err
