"""`fleet check` and `fleet plan` on the mistakes people make in hand-written YAML.

Every error names the file, the document index and the field path and exits 1;
warnings do not fail; nothing crashes with a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleet.cli.main import main
from tests.manifests.factories import dump, make_cluster, make_job, make_policy, make_tree
from tests.paths import KUBEFLOW

POLICIES = Path(__file__).resolve().parents[2] / "policies"


def write(tmp_path: Path, name: str, text: str | bytes) -> str:
    f = tmp_path / name
    if isinstance(text, bytes):
        f.write_bytes(text)
    else:
        f.write_text(text, encoding="utf-8")
    return str(f)


def check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(["check", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def plan_files(tmp_path: Path, jobs: str, **files: str) -> list[str]:
    argv = [
        "plan",
        "--quota",
        files.get("quota", write(tmp_path, "tree.yaml", dump(make_tree()))),
        "--clusters",
        files.get("clusters", write(tmp_path, "clusters.yaml", dump(make_cluster()))),
        "--jobs",
        jobs,
    ]
    if "running" in files:
        argv += ["--running", files["running"]]
    return argv


# Counting words ------------------------------------------------------------------


def test_policy_count_is_plural_english(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = write(tmp_path, "jobs.yaml", dump(make_job()))
    rc, out, _ = check(capsys, "jobs", f)
    assert rc == 0 and "1 job, 0 PropagationPolicies;" in out
    f = write(tmp_path, "two.yaml", dump(make_policy("p1"), make_policy("p2", priority=1)))
    rc, out, _ = check(capsys, "jobs", f)
    assert rc == 0 and "2 PropagationPolicies;" in out


# Files that are not YAML text ----------------------------------------------------------


@pytest.mark.parametrize("what", ["quota", "jobs", "clusters"])
def test_unreadable_files_are_plain_errors(
    what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = write(tmp_path, "bin.yaml", b"kind: \xff\xfe\n")
    rc, out, err = check(capsys, what, binary)
    assert (rc, out) == (1, "")
    assert err == f"error: {binary}: not UTF-8 text (byte 0xff at offset 6)\n"
    rc, _, err = check(capsys, what, str(tmp_path))
    assert rc == 1 and err == f"error: {tmp_path}: is a directory, not a file\n"
    missing = str(tmp_path / "nope.yaml")
    rc, _, err = check(capsys, what, missing)
    assert rc == 1 and err == f"error: {missing}: no such file\n"


@pytest.mark.parametrize("which", ["quota", "clusters", "jobs", "running"])
def test_plan_refuses_unreadable_files_without_a_traceback(
    which: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = write(tmp_path, "jobs.yaml", dump(make_job()))
    binary = write(tmp_path, "bin.yaml", b"\xff")
    files = {} if which == "jobs" else {which: binary}
    argv = plan_files(tmp_path, binary if which == "jobs" else jobs, **files)
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out == "" and err == f"error: {binary}: not UTF-8 text (byte 0xff at offset 0)\n"


# Empty files --------------------------------------------------------------------------


def test_empty_cluster_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = write(tmp_path, "clusters.yaml", "# nothing yet\n")
    rc, out, err = check(capsys, "clusters", f)
    assert (rc, out) == (1, "")
    assert err == f"error: {f}: document 0: the file holds no MemberCluster\n"


def test_empty_job_file_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = write(tmp_path, "jobs.yaml", "")
    rc, out, err = check(capsys, "jobs", f)
    assert rc == 0 and out.startswith(f"OK: {f}: 0 jobs")
    assert err == f"warning: {f}: document 0: the file holds no job\n"


def test_a_file_of_policies_alone_is_a_submission(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = write(tmp_path, "policies.yaml", dump(make_policy("a"), make_policy("b", namespace="b")))
    rc, out, err = check(capsys, "jobs", f)
    assert (rc, err) == (0, "")
    assert out.startswith(f"OK: {f}: 0 jobs, 2 PropagationPolicies")


# Sizes that would exhaust memory ----------------------------------------------------


def test_absurd_replica_count_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = make_job(workers=10**23)
    f = write(tmp_path, "jobs.yaml", dump(job))
    rc, _, err = check(capsys, "jobs", f)
    assert rc == 1
    assert err == (
        f"error: {f}: document 0 (PyTorchJob default/train): "
        "spec.pytorchReplicaSpecs.Worker.replicas: must be at most 10000, not "
        "100000000000000000000000\n"
    )


def test_absurd_cell_count_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = make_cluster()
    cell_types = cluster["spec"]["cells"]["physicalCluster"]["cellTypes"]
    cell_types["NODE"]["childCellNumber"] = 10**14
    f = write(tmp_path, "clusters.yaml", dump(cluster))
    rc, _, err = check(capsys, "clusters", f)
    assert rc == 1
    assert err.startswith(
        f"error: {f}: document 0 (MemberCluster c1): "
        "spec.cells.physicalCluster.physicalCells[0]: cell type NODE has 100000000000000 leaf cells"
    )


# Human messages instead of pydantic's ----------------------------------------------


@pytest.mark.parametrize(
    ("mutate", "path", "message"),
    [
        pytest.param(
            lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas="2"),
            "spec.pytorchReplicaSpecs.Worker.replicas",
            "expected an integer, not the string '2' (remove the quotes)",
            id="quoted-int",
        ),
        pytest.param(
            lambda j: j.update(metadata=[{"name": "x"}]),
            "metadata",
            "expected a mapping (key: value), not a list",
            id="list-for-mapping",
        ),
        pytest.param(
            lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].update(
                containers={"name": "x"}
            ),
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers",
            "expected a list, not a mapping",
            id="mapping-for-list",
        ),
        pytest.param(
            lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].pop(
                "containers"
            ),
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers",
            "required field is missing",
            id="missing",
        ),
        pytest.param(
            lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][
                0
            ]["resources"].update(limits={"nvidia.com/gpu": "0.5"}),
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits."
            "nvidia.com/gpu",
            "quantity '0.5' must be a whole number",
            id="half-gpu",
        ),
        pytest.param(
            lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][
                0
            ]["resources"].update(limits={"gpu": 1}),
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits.gpu",
            "'gpu' is not a Kubernetes resource name (a name without a domain must be one of "
            "cpu, memory, ephemeral-storage, storage, pods, hugepages-<size>); "
            "GPUs are 'nvidia.com/gpu'",
            id="unqualified-gpu",
        ),
    ],
)
def test_shape_errors_read_like_english(
    mutate: Any, path: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = make_job(master=False)
    mutate(job)
    f = write(tmp_path, "jobs.yaml", dump(job))
    rc, _, err = check(capsys, "jobs", f)
    assert rc == 1
    (line,) = err.splitlines()
    assert line.endswith(f": {path}: {message}"), line


def test_unknown_field_in_owned_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = make_tree()
    tree["spec"]["root"]["children"][0]["namespace"] = ["x"]
    f = write(tmp_path, "tree.yaml", dump(tree))
    rc, _, err = check(capsys, "quota", f)
    assert rc == 1
    assert err == (
        f"error: {f}: document 0 (ElasticQuotaTree tree): spec.root.children[0].namespace: "
        "node 'research': unknown field (did you mean 'namespaces'?)\n"
    )


@pytest.mark.parametrize(
    ("text", "path", "message"),
    [
        (
            "kind: PyTorchJob\n",
            "apiVersion",
            "apiVersion is missing; PyTorchJob uses kubeflow.org/v1",
        ),
        ("apiVersion: v1\nmetadata: {name: a}\n", "kind", "kind is missing; Fleet reads "),
        (
            "kind: pytorchjob\napiVersion: kubeflow.org/v1\n",
            "kind",
            "unknown kind 'pytorchjob' (did you mean PyTorchJob?)",
        ),
        (
            "just a string\n",
            "",
            "a document must be a mapping (key: value), not the string 'just a string'",
        ),
    ],
)
def test_document_level_mistakes(
    text: str, path: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = write(tmp_path, "jobs.yaml", text)
    rc, _, err = check(capsys, "jobs", f)
    assert rc == 1
    prefix = f"error: {f}: document 0" + ("" if path != "apiVersion" else " (PyTorchJob)")
    prefix += f": {path}: " if path else ": "
    assert err.startswith(prefix + message), err


def test_priority_class_case_hint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = write(tmp_path, "jobs.yaml", dump(make_job(priority_class="Prod")))
    rc, _, err = check(capsys, "jobs", f)
    assert rc == 1
    assert "unknown priority class 'Prod' (did you mean 'prod'? names are case-sensitive)" in err


# Policies that select nothing or too much ---------------------------------------------


def test_policy_selecting_nothing_warns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    unused = make_policy(
        "unused", selectors=[{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "x"}]
    )
    f = write(tmp_path, "jobs.yaml", dump(unused, make_job()))
    rc, _, err = check(capsys, "jobs", f)
    assert rc == 0
    assert err == (
        f"warning: {f}: document 0 (PropagationPolicy default/unused): "
        "spec.resourceSelectors: selects no job of this file\n"
    )


def test_two_policies_for_one_job_warn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = write(
        tmp_path,
        "jobs.yaml",
        dump(make_policy("b-gang"), make_policy("a-no-gang", gang=False), make_job()),
    )
    rc, _, err = check(capsys, "jobs", f)
    assert rc == 0
    assert err == (
        f"warning: {f}: document 2 (PyTorchJob default/train): "
        "selected by 2 PropagationPolicies (a-no-gang, b-gang); a-no-gang applies\n"
    )


# GPU types against the member clusters ---------------------------------------------------


def sku_clusters() -> str:
    cluster = make_cluster("h", {"gpu": "h100"})
    pc = cluster["spec"]["cells"]["physicalCluster"]
    pc["cellTypes"] = {
        "H100-NODE": {"childCellType": "H100", "childCellNumber": 8, "isNodeLevel": True}
    }
    pc["physicalCells"] = [{"cellType": "H100-NODE", "cellAddress": "h-node-0"}]
    return dump(cluster, make_cluster("plain"))


def sku_job(name: str, sku: str, *, annotation: bool) -> dict[str, Any]:
    job = make_job(name, master=False, workers=1, gpu=8)
    if annotation:
        job["metadata"]["annotations"] = {"fleet.io/gpu-type": sku}
    else:
        job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"] = {
            "nvidia.com/gpu.product": sku
        }
    return job


def test_sku_jobs_plan_on_matching_leaf_cells(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    jobs = write(
        tmp_path,
        "jobs.yaml",
        dump(
            sku_job("by-annotation", "H100", annotation=True),
            sku_job("by-selector", "GPU", annotation=False),
        ),
    )
    argv = plan_files(tmp_path, jobs, clusters=write(tmp_path, "c.yaml", sku_clusters()))
    assert main([*argv, "-o", "json"]) == 0, capsys.readouterr().err
    result = json.loads(capsys.readouterr().out)
    assert {a["job"]: a["cluster"] for a in result["admitted"]} == {
        "default/by-annotation": "h",
        "default/by-selector": "plain",
    }


@pytest.mark.parametrize("annotation", [True, False])
def test_sku_no_cluster_has_is_an_error(
    annotation: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clusters = write(tmp_path, "c.yaml", sku_clusters())
    jobs = write(tmp_path, "jobs.yaml", dump(sku_job("v", "H100-NODE", annotation=annotation)))
    rc, _, err = check(capsys, "jobs", jobs, "--clusters", clusters)
    assert rc == 1
    path = (
        "metadata.annotations.fleet.io/gpu-type"
        if annotation
        else "spec.pytorchReplicaSpecs.Worker.template.spec.nodeSelector.nvidia.com/gpu.product"
    )
    assert err == (
        f"error: {jobs}: document 0 (PyTorchJob default/v): {path}: GPU type 'H100-NODE' is "
        "not a leaf cell type of any member cluster the job may use (h: H100; plain: GPU)\n"
    )
    assert main(plan_files(tmp_path, jobs, clusters=clusters)) == 1
    assert "GPU type 'H100-NODE' is not a leaf cell type" in capsys.readouterr().err


# The fit test, the server's own --------------------------------------------------------


def test_check_jobs_with_clusters_runs_the_servers_fit_test(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fleet.api.problems import ProblemError
    from fleet.api.submissions import SubmissionLimits, parse_submission
    from fleet.manifests import convert

    fpga = make_job("fpga", workers=None)
    master = fpga["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    master["containers"][0]["resources"]["requests"]["example.com/fpga"] = 1
    text = dump(make_policy(), make_job("huge", gpu=9), fpga)
    clusters_text = dump(make_cluster("c1"))
    jobs = write(tmp_path, "jobs.yaml", text)
    clusters = write(tmp_path, "clusters.yaml", clusters_text)
    rc, out, err = check(capsys, "jobs", jobs, "--clusters", clusters)
    assert (rc, out) == (1, "")
    # Word for word what the server answers to the same submission.
    with pytest.raises(ProblemError) as refused:
        parse_submission(
            text.encode(),
            tree=convert.load_quota(dump(make_tree()))[0],
            clusters=convert.load_clusters(clusters_text),
            first_seq=1,
            limits=SubmissionLimits(),
        )
    served = refused.value.problem.errors
    assert len(served) == 3
    assert err == "".join(
        f"error: {jobs}: document {e.document} ({e.kind} {e.name}): {e.path}: {e.message}\n"
        for e in served
    )
    assert "resources.requests.example.com/fpga: resource 'example.com/fpga' is offered" in err
    assert "a Master pod asks for nvidia.com/gpu 9, cpu 1, more than any node" in err
    # Without --clusters there is nothing to fit.
    rc, out, _ = check(capsys, "jobs", jobs)
    assert rc == 0 and out.startswith(f"OK: {jobs}: 2 jobs")


# The seed objects ----------------------------------------------------------------------

SEED_TREE = """\
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata:
  name: elasticquotatree # 只支持单个ElasticQuotaTree。
  namespace: kube-system # 只有kube-system下才会生效。
spec:
  root:
    name: root # Root节点的Max必须等于Min。
    max:
      cpu: 999900
      memory: 400000Gi
      kube-queue/max-jobs: 10000000000
      nvidia.com/gpu: 100000
    min:
      cpu: 9999
      memory: 40Gi
    children:
    - name: child-2
      max:
        # 限制同时只能出队一个任务。
        kube-queue/max-jobs: 1
        cpu: 10000
        nvidia.com/gpu: 10000
        memory: 10000Gi
      namespaces: # 配置对应的Namespace。
        - default
"""

SEED_POLICY = """\
apiVersion: policy.one.alibabacloud.com/v1alpha1
kind: PropagationPolicy
metadata:
  name: example-policy # The default namespace is `default`.
spec:
  propagateDeps: true
  # 申明任务运行失败时重新调度。
  failover:
    application:
      decisionConditions:
        tolerationSeconds: 30
      purgeMode: Immediately
  placement:
    replicaScheduling:
      replicaSchedulingType: Divided
      # 声明使用Gang调度。
      customSchedulingType: Gang
  suspension:
    scheduling: true
  resourceSelectors:
    - apiVersion: kubeflow.org/v1
      kind: PyTorchJob
"""


# Kubeflow's examples as published (no namespace, a Worker only, requests only;
# Master and Worker in namespace kubeflow, no resources): see tests/data/kubeflow.
KUBEFLOW_ELASTIC = (KUBEFLOW / "example-pytorchjob-elastic.yaml").read_text(encoding="utf-8")


def test_seed_tree_policy_and_kubeflow_examples_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = write(tmp_path, "tree.yaml", SEED_TREE)
    rc, out, _ = check(capsys, "quota", tree)
    assert rc == 0 and "1 leaf queue (child-2); 1 warning" in out
    jobs = write(tmp_path, "jobs.yaml", SEED_POLICY + "---\n" + KUBEFLOW_ELASTIC)
    for argv in (["jobs", jobs], ["jobs", jobs, "--quota", tree]):
        rc, out, err = check(capsys, *argv)
        assert rc == 0, err
        # Only the tree's own warning (root min != max); nothing about the jobs.
        assert all(line.startswith(f"warning: {tree}: root node") for line in err.splitlines())
        assert "1 job, 1 PropagationPolicy;" in out
    rc, out, err = check(capsys, "jobs", str(KUBEFLOW / "example-pytorchjob-simple.yaml"))
    assert (rc, err) == (0, "")
    assert "1 job, 0 PropagationPolicies; queues not routed" in out


def test_check_quota_lists_every_broken_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = """\
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {name: tree}
spec:
  root:
    name: root
    min: {cpu: 10}
    max: {cpu: 10}
    children:
    - {name: a, min: {cpu: 20}, max: {cpu: 8}, namespaces: [ns]}
    - {name: b, namespaces: [ns]}
"""
    rc, _, err = check(capsys, "quota", write(tmp_path, "tree.yaml", text))
    assert rc == 1
    assert "spec.root.children[0].min" in err and "min cpu 20 is above max 8" in err
    assert "spec.root.children[1].namespaces[0]" in err and "already belongs" in err
    assert "spec.root.min" in err and "children's min" in err


@pytest.mark.parametrize(
    ("field", "resource", "value", "what"),
    [
        pytest.param("min", "nvidia.com/gpu", -2, "quantity -2 is negative", id="negative"),
        pytest.param("max", "memory", "-1Gi", "quantity '-1Gi' is negative", id="negative bytes"),
        pytest.param("min", "cpu", "abc", "'abc' is not a Kubernetes quantity", id="unparsable"),
        pytest.param("max", "memory", "1Gb", "'1Gb' is not a Kubernetes quantity", id="bad unit"),
        pytest.param("min", "cpu", "1\n", "'1\\n' is not a Kubernetes quantity", id="newline"),
        pytest.param(
            "min", "nvidia.com/gpu", "1.5", "quantity '1.5' must be a whole number", id="decimals"
        ),
        pytest.param("max", "nvidia.com/gpu", "500m", "must be a whole number", id="milli-gpu"),
        pytest.param("min", "cpu", "1e999", "exponent 999 is out of range", id="exponent"),
        pytest.param("min", "cpu", "9" * 100, "has more than 64 digits", id="100 digits"),
        pytest.param("min", "cpu", True, "True is not a Kubernetes quantity", id="boolean"),
        pytest.param("min", "gpus", 1, "is not a Kubernetes resource name", id="resource name"),
    ],
)
def test_every_quota_error_names_its_node(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    field: str,
    resource: str,
    value: Any,
    what: str,
) -> None:
    tree = make_tree()
    team_a = tree["spec"]["root"]["children"][0]["children"][0]
    team_a.setdefault(field, {})[resource] = value
    rc, _, err = check(capsys, "quota", write(tmp_path, "tree.yaml", dump(tree)))
    assert rc == 1
    path = f"spec.root.children[0].children[0].{field}.{resource}"
    assert f"{path}: node 'team-a': " in err, err
    assert what in err, err


def test_a_shape_error_in_a_quota_tree_names_its_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = make_tree()
    tree["spec"]["root"]["children"][0]["children"][1]["mni"] = {"cpu": 1}
    tree["spec"]["root"]["children"][0]["preemptMinRuntime"] = "10 minutes"
    rc, _, err = check(capsys, "quota", write(tmp_path, "tree.yaml", dump(tree)))
    assert rc == 1
    assert "spec.root.children[0].children[1].mni: node 'team-b': unknown field" in err, err
    assert "spec.root.children[0].preemptMinRuntime: node 'research': '10 minutes'" in err, err
