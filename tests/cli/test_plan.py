"""``fleet plan``: the offline cycle over YAML files, as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fleet.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
POLICIES = ROOT / "policies"

TREE = """\
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {name: tree, namespace: kube-system}
spec:
  root:
    name: root
    min: {nvidia.com/gpu: 16}
    max: {nvidia.com/gpu: 16}
    children:
    - name: team-a
      min: {nvidia.com/gpu: 8}
      max: {nvidia.com/gpu: 16}
      namespaces: [ns-a]
    - name: team-b
      min: {nvidia.com/gpu: 8}
      max: {nvidia.com/gpu: 16}
      namespaces: [ns-b]
"""

CLUSTERS = """\
apiVersion: fleet.io/v1alpha1
kind: MemberCluster
metadata: {name: lab, labels: {site: lab}}
spec:
  simulated: true
  cells:
    physicalCluster:
      cellTypes:
        NODE: {childCellType: GPU, childCellNumber: 8, isNodeLevel: true}
        RACK: {childCellType: NODE, childCellNumber: 2}
      physicalCells:
      - cellType: RACK
        cellChildren:
        - cellAddress: node-0
        - cellAddress: node-1
"""


def pytorchjob(name: str, ns: str, workers: int, gpus: int, priority: str = "test") -> str:
    return f"""\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {{name: {name}, namespace: {ns}}}
spec:
  runPolicy:
    schedulingPolicy: {{priorityClass: {priority}}}
  pytorchReplicaSpecs:
    Worker:
      replicas: {workers}
      template:
        spec:
          containers:
          - name: pytorch
            image: example/train:1
            resources:
              limits: {{nvidia.com/gpu: {gpus}}}
"""


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def plan_args(tmp_path: Path, jobs: str, *extra: str) -> list[str]:
    """``fleet plan`` over the test tree and cluster, with ``jobs`` as the jobs file."""
    return [
        "plan",
        "--quota",
        write(tmp_path, "tree.yaml", TREE),
        "--clusters",
        write(tmp_path, "clusters.yaml", CLUSTERS),
        "--jobs",
        write(tmp_path, "jobs.yaml", jobs),
        *extra,
    ]


def plan_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], jobs: list[str], *extra: str
) -> dict[str, Any]:
    args = plan_args(tmp_path, "---\n".join(jobs), "-o", "json", *extra)
    assert main(args) == 0, capsys.readouterr().err
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


PLACERS = [pytest.param("capacity", id="capacity"), pytest.param("cells", id="cells")]


@pytest.mark.parametrize("placer", PLACERS)
def test_every_job_appears_once_with_nodes_and_gpus(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], placer: str
) -> None:
    jobs = [
        pytorchjob("fits", "ns-a", 2, 4),
        pytorchjob("also-fits", "ns-b", 1, 8),
        pytorchjob("too-big", "ns-b", 2, 8),
    ]
    result = plan_json(tmp_path, capsys, jobs, "--placer", placer)
    admitted = {a["job"]: a for a in result["admitted"]}
    waiting = {w["job"]: w for w in result["waiting"]}
    assert set(admitted) == {"ns-a/fits", "ns-b/also-fits"}
    assert set(waiting) == {"ns-b/too-big"}
    assert waiting["ns-b/too-big"]["queue"] == "team-b"
    assert waiting["ns-b/too-big"]["reason"]
    fits = admitted["ns-a/fits"]
    assert fits["cluster"] == "lab" and fits["mode"] == "guaranteed" and fits["priority"] == 10
    replicas = fits["replicas"]
    assert [r["replica"] for r in replicas] == ["Worker-0", "Worker-1"]
    gpus = {(r["node"], g) for r in replicas for g in r["gpus"]}
    assert len(gpus) == 8 and {node for node, _ in gpus} <= {"node-0", "node-1"}
    used = {q["name"]: q["used"] for q in result["queues"]}
    assert used["team-a"]["nvidia.com/gpu"] == "8"


@pytest.mark.parametrize("placer", PLACERS)
def test_running_jobs_are_preempted_and_queued_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], placer: str
) -> None:
    running = write(tmp_path, "running.yaml", pytorchjob("borrower", "ns-a", 2, 8))
    jobs = [pytorchjob("owner", "ns-b", 1, 8)]
    result = plan_json(tmp_path, capsys, jobs, "--running", running, "--placer", placer)
    assert [p["job"] for p in result["preempted"]] == ["ns-a/borrower"]
    assert "ns-b/owner" in {a["job"] for a in result["admitted"]}
    assert "ns-a/borrower" in {w["job"] for w in result["waiting"]}


def test_table_output_names_sections(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = plan_args(tmp_path, pytorchjob("fits", "ns-a", 1, 2), "--placer", "capacity")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "ADMITTED (1)" in out and "ns-a/fits" in out and "QUEUES" in out


def test_bad_job_file_is_an_error_with_its_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(plan_args(tmp_path, pytorchjob("fits", "ns-unknown", 1, 2))) == 1
    err = capsys.readouterr().err
    assert "metadata.namespace" in err and "ns-unknown" in err


def test_the_shipped_examples_plan(capsys: pytest.CaptureFixture[str]) -> None:
    args = [
        "plan",
        "--quota",
        str(POLICIES / "quota" / "team-tree.yaml"),
        "--clusters",
        str(POLICIES / "clusters" / "example.yaml"),
        "--jobs",
        str(POLICIES / "jobs" / "examples.yaml"),
        "-o",
        "json",
    ]
    assert main(args) == 0, capsys.readouterr().err
    result = json.loads(capsys.readouterr().out)
    assert result["admitted"]


def test_errors_name_the_file_they_are_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(plan_args(tmp_path, pytorchjob("fits", "ns-unknown", 1, 2))) == 1
    assert f"error: {tmp_path / 'jobs.yaml'}: document 0" in capsys.readouterr().err


def test_a_job_cannot_be_both_running_and_submitted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    same = pytorchjob("twice", "ns-a", 1, 2)
    running = write(tmp_path, "running.yaml", same)
    assert main(plan_args(tmp_path, same, "--running", running)) == 1
    err = capsys.readouterr().err
    assert "ns-a/twice" in err and running in err
