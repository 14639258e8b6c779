"""Parsing YAML streams and model rules: every issue has its document, path and message."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.manifests import documents, models
from fleet.manifests.errors import SpecError, SpecIssue
from fleet.manifests.kinds.pytorchjob import PyTorchJobModel
from tests.manifests.factories import (
    dump,
    make_cluster,
    make_job,
    make_policy,
    make_tree,
    node,
    replica,
)


def issues_of(text: str) -> list[SpecIssue]:
    return documents.parse_documents(text)[1]


def one_issue(*docs: dict[str, Any]) -> SpecIssue:
    found = issues_of(dump(*docs))
    assert len(found) == 1, found
    return found[0]


def test_issue_renders_document_kind_name_path_and_message() -> None:
    job = make_job()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 0
    text = dump(make_policy(), make_job("other"), job)
    (issue,) = issues_of(text)
    assert str(issue) == (
        "document 2 (PyTorchJob default/train): spec.pytorchReplicaSpecs.Worker.replicas: "
        "must be at least 1, not 0"
    )


def test_spec_error_renders_one_line_per_issue() -> None:
    err = SpecError([SpecIssue(0, "", "", "", "a"), SpecIssue(1, "K", "n", "p", "b")])
    assert str(err).splitlines() == ["document 0: a", "document 1 (K n): p: b"]


def test_yaml_syntax_error_names_its_line() -> None:
    first, issue = issues_of("a: 1\n---\nkind: x\n  bad: indent\n")
    assert first.document == 0  # the first document is read (and has no kind)
    assert issue.document == 1
    # libyaml ends the sentence "in this context", PyYAML's Python parser "here".
    assert issue.message.startswith(
        "YAML syntax error at line 4, column 6: mapping values are not allowed "
    )


def test_empty_documents_are_skipped_but_keep_their_index() -> None:
    job = make_job()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "many"
    text = "---\n---\n# nothing\n---\n" + dump(job)
    (issue,) = issues_of(text)
    assert issue.document == 2
    assert issue.path == "spec.pytorchReplicaSpecs.Worker.replicas"


@pytest.mark.parametrize(
    ("text", "path", "message"),
    [
        pytest.param(
            "- 1\n- 2\n",
            "",
            "a document must be a mapping (key: value), not a list",
            id="not-a-mapping",
        ),
        pytest.param(
            "kind: Pod\napiVersion: v1\n", "kind", "unknown kind 'Pod'", id="unknown-kind"
        ),
        pytest.param("apiVersion: v1\n", "kind", "kind is missing; Fleet reads ", id="no-kind"),
        pytest.param(
            "kind: PyTorchJob\napiVersion: kubeflow.org/v2\n",
            "apiVersion",
            "PyTorchJob must have apiVersion kubeflow.org/v1, not 'kubeflow.org/v2'",
            id="wrong-api-version",
        ),
    ],
)
def test_document_dispatch_errors(text: str, path: str, message: str) -> None:
    (issue,) = issues_of(text)
    assert (issue.document, issue.path) == (0, path)
    assert issue.message.startswith(message)


def test_load_documents_restricts_kinds() -> None:
    with pytest.raises(SpecError) as e:
        documents.load_documents(dump(make_tree(), make_job()), kinds=["ElasticQuotaTree"])
    (issue,) = e.value.issues
    assert (issue.document, issue.path) == (1, "kind")


# ElasticQuotaTree -----------------------------------------------------------------


def tree_with_child(**child: Any) -> dict[str, Any]:
    return make_tree(node("root", children=[node("team-a", **child)]))


@pytest.mark.parametrize(
    ("doc", "path", "message"),
    [
        pytest.param(
            tree_with_child(max={"cpu": "lots"}),
            "spec.root.children[0].max.cpu",
            "node 'team-a': 'lots' is not a Kubernetes quantity",
            id="bad-quantity",
        ),
        pytest.param(
            tree_with_child(max={"nvidia.com/gpu": "0.5"}),
            "spec.root.children[0].max.nvidia.com/gpu",
            "node 'team-a': quantity '0.5' must be a whole number",
            id="fractional-gpu",
        ),
        pytest.param(
            tree_with_child(min={"cpu": True}),
            "spec.root.children[0].min.cpu",
            "node 'team-a': True is not a Kubernetes quantity",
            id="boolean-quantity",
        ),
        pytest.param(
            tree_with_child(maxx={"cpu": 1}),
            "spec.root.children[0].maxx",
            "node 'team-a': unknown field (did you mean 'max'?)",
            id="unknown-field",
        ),
        pytest.param(
            tree_with_child(namespaces=["Team_A"]),
            "spec.root.children[0].namespaces[0]",
            "node 'team-a': 'Team_A' is not a valid namespace",
            id="bad-namespace",
        ),
        pytest.param(
            make_tree(node("Root")),
            "spec.root.name",
            "node 'Root': 'Root' is not a valid name",
            id="bad-node-name",
        ),
        pytest.param(
            {**make_tree(), "spec": {}},
            "spec.root",
            "required field is missing",
            id="no-root",
        ),
    ],
)
def test_quota_tree_shape_errors(doc: dict[str, Any], path: str, message: str) -> None:
    issue = one_issue(doc)
    assert (issue.document, issue.kind, issue.path) == (0, "ElasticQuotaTree", path)
    assert issue.message.startswith(message)


def test_quota_quantities_are_exact() -> None:
    docs, issues = documents.parse_documents(
        dump(tree_with_child(min={"cpu": "500m", "memory": "1.5Gi", "nvidia.com/gpu": 2}))
    )
    assert issues == []
    model = docs[0].model
    assert isinstance(model, models.ElasticQuotaTreeModel)
    root, _ = model.to_spec()
    child = root.children[0]
    assert dict(child.min) == {"cpu": 500, "memory": 3 * 2**29, "nvidia.com/gpu": 2}
    assert child.max is None
    assert child.path == "spec.root.children[0]"


# PropagationPolicy ---------------------------------------------------------------


def policy_model(**kw: Any) -> models.PropagationPolicyModel:
    docs, issues = documents.parse_documents(dump(make_policy(**kw)))
    assert issues == []
    model = docs[0].model
    assert isinstance(model, models.PropagationPolicyModel)
    return model


def test_policy_defaults() -> None:
    p = policy_model(gang=False)
    assert not p.gang
    assert p.application_failover.decision_conditions.toleration_seconds == 300
    assert p.application_failover.purge_mode == "Gracefully"
    assert p.spec.suspension is None
    assert p.spec.placement.replica_scheduling is not None
    assert p.spec.placement.replica_scheduling.replica_scheduling_type == "Divided"


@pytest.mark.parametrize(
    ("written", "read"),
    [("Immediately", "Directly"), ("Graciously", "Gracefully"), ("Never", "Never")],
)
def test_policy_purge_mode_accepts_old_spellings(written: str, read: str) -> None:
    p = policy_model(failover={"application": {"purgeMode": written}})
    assert p.application_failover.purge_mode == read


def test_karmada_policy_with_suspension_and_priority() -> None:
    p = policy_model(
        api_version="policy.karmada.io/v1alpha1",
        suspension={"dispatching": True, "scheduling": True},
        priority=5,
        propagateDeps=True,
    )
    assert p.gang
    assert p.spec.suspension is not None
    assert p.spec.suspension.dispatching and p.spec.suspension.scheduling
    assert p.spec.priority == 5 and p.spec.propagate_deps


@pytest.mark.parametrize(
    ("kw", "path", "message"),
    [
        pytest.param(
            {"failover": {"application": {"purgeMode": "Later"}}},
            "spec.failover.application.purgeMode",
            "must be 'Directly', 'Gracefully' or 'Never', not the string ",
            id="purge-mode",
        ),
        pytest.param(
            {"failover": {"application": {"purgeMode": "Directly", "gracePeriodSeconds": 5}}},
            "spec.failover.application",
            "gracePeriodSeconds only applies with purgeMode Gracefully",
            id="grace-without-graceful",
        ),
        pytest.param(
            {"failover": {"application": {"decisionConditions": {"tolerationSeconds": -1}}}},
            "spec.failover.application.decisionConditions.tolerationSeconds",
            "must be at least 0, not -1",
            id="negative-toleration",
        ),
        pytest.param(
            {"selectors": []},
            "spec.resourceSelectors",
            "must not be empty",
            id="no-selectors",
        ),
        pytest.param(
            {"selectors": [{"apiVersion": "kubeflow.org/v1"}]},
            "spec.resourceSelectors[0].kind",
            "required field is missing",
            id="selector-without-kind",
        ),
        pytest.param(
            {"affinity": {"labelSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}},
            "spec.placement.clusterAffinity.labelSelector.matchExpressions[0]",
            "operator In needs a non-empty values list",
            id="in-without-values",
        ),
        pytest.param(
            {"affinity": {"fieldSelector": {}}},
            "spec.placement.clusterAffinity.fieldSelector",
            "not supported: select clusters with clusterNames or labelSelector",
            id="unsupported-field",
        ),
        pytest.param(
            {"suspension": {"scheduling": "yes"}},
            "spec.suspension.scheduling",
            "expected true or false, not the string",
            id="suspension-not-bool",
        ),
    ],
)
def test_policy_errors(kw: dict[str, Any], path: str, message: str) -> None:
    issue = one_issue(make_policy(**kw))
    assert (issue.kind, issue.name, issue.path) == ("PropagationPolicy", "default/policy", path)
    assert issue.message.startswith(message)


def test_policy_rejects_unknown_scheduling_types() -> None:
    doc = make_policy()
    doc["spec"]["placement"]["replicaScheduling"] = {
        "replicaSchedulingType": "Split",
        "customSchedulingType": "Coscheduling",
    }
    paths = sorted(i.path for i in issues_of(dump(doc)))
    base = "spec.placement.replicaScheduling"
    assert paths == [f"{base}.customSchedulingType", f"{base}.replicaSchedulingType"]


# PyTorchJob ------------------------------------------------------------------------


def job_model(doc: dict[str, Any]) -> PyTorchJobModel:
    docs, issues = documents.parse_documents(dump(doc))
    assert issues == []
    model = docs[0].model
    assert isinstance(model, PyTorchJobModel)
    return model


W = "spec.pytorchReplicaSpecs.Worker"
WC = f"{W}.template.spec.containers[0]"
ANN = "metadata.annotations"


def with_worker_resources(**res: Any) -> dict[str, Any]:
    job = make_job(master=False)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "resources"
    ] = res
    return job


@pytest.mark.parametrize(
    ("doc", "path", "message"),
    [
        pytest.param(
            make_job(replica_specs={"Launcher": replica(1), "Worker": replica(1)}),
            "spec.pytorchReplicaSpecs.Launcher",
            "replica type 'Launcher' is not supported; Fleet runs Master and Worker",
            id="other-replica-type",
        ),
        pytest.param(
            make_job(replica_specs={}),
            "spec.pytorchReplicaSpecs",
            "needs a Master or a Worker replica spec",
            id="no-replicas",
        ),
        pytest.param(
            make_job(replica_specs={"Master": replica(2)}),
            "spec.pytorchReplicaSpecs.Master.replicas",
            "a PyTorchJob has exactly 1 Master",
            id="two-masters",
        ),
        pytest.param(
            make_job(replica_specs={"Worker": replica(1, containers=[])}),
            f"{W}.template.spec.containers",
            "must not be empty",
            id="no-containers",
        ),
        pytest.param(
            with_worker_resources(requests={"cpu": "2"}, limits={"cpu": "1"}),
            f"{WC}.resources.requests.cpu",
            "request must not exceed the limit",
            id="request-above-limit",
        ),
        pytest.param(
            with_worker_resources(requests={"nvidia.com/gpu": 1}, limits={"nvidia.com/gpu": 2}),
            f"{WC}.resources.requests.nvidia.com/gpu",
            "request must equal the limit for GPUs",
            id="gpu-request-not-limit",
        ),
        pytest.param(
            with_worker_resources(limits={"memory": "1Gb"}),
            f"{WC}.resources.limits.memory",
            "'1Gb' is not a Kubernetes quantity",
            id="bad-memory",
        ),
        pytest.param(
            make_job(workers=2, min_available=4),
            "spec.runPolicy.schedulingPolicy.minAvailable",
            "4 is more than the job's 3 replicas",
            id="min-available-too-big",
        ),
        pytest.param(
            make_job(min_available=0),
            "spec.runPolicy.schedulingPolicy.minAvailable",
            "must be at least 1, not 0",
            id="min-available-zero",
        ),
        pytest.param(
            make_job(master=False, workers=2, elastic={"minReplicas": 3, "maxReplicas": 2}),
            "spec.elasticPolicy.minReplicas",
            "3 is more than maxReplicas 2",
            id="elastic-min-above-max",
        ),
        pytest.param(
            make_job(master=False, workers=5, elastic={"minReplicas": 1, "maxReplicas": 4}),
            f"{W}.replicas",
            "5 is above elasticPolicy.maxReplicas 4",
            id="elastic-above-max",
        ),
        pytest.param(
            make_job(master=False, workers=1, elastic={"minReplicas": 2}),
            f"{W}.replicas",
            "1 is below elasticPolicy.minReplicas 2",
            id="elastic-below-min",
        ),
        pytest.param(
            make_job(workers=None, elastic={"minReplicas": 1}),
            "spec.elasticPolicy",
            "an elastic job needs a Worker replica spec",
            id="elastic-without-worker",
        ),
        pytest.param(
            make_job(annotations={"fleet.io/preemptible": "no"}),
            f"{ANN}.fleet.io/preemptible",
            'must be "true" or "false", not \'no\'',
            id="preemptible-not-bool",
        ),
        pytest.param(
            make_job(annotations={"fleet.io/simulated-duration": "5 minutes"}),
            f"{ANN}.fleet.io/simulated-duration",
            "'5 minutes' is not a duration",
            id="bad-duration",
        ),
        pytest.param(
            make_job(annotations={"fleet.io/simulated-duration": "0s"}),
            f"{ANN}.fleet.io/simulated-duration",
            "must be positive",
            id="zero-duration",
        ),
        pytest.param(
            make_job(annotations={"fleet.io/simulated-outcome": "Crashed"}),
            f"{ANN}.fleet.io/simulated-outcome",
            "must be Succeeded or Failed, not 'Crashed'",
            id="bad-outcome",
        ),
        pytest.param(
            make_job(
                master=False,
                annotations={"fleet.io/gpu-type": "A100"},
                replica_specs={
                    "Worker": replica(1, nodeSelector={"nvidia.com/gpu.product": "H100"})
                },
            ),
            f"{W}.template.spec.nodeSelector.nvidia.com/gpu.product",
            "GPU type 'H100' differs from 'A100' given at metadata.annotations.fleet.io/gpu-type",
            id="sku-conflict",
        ),
        pytest.param(
            make_job(name="Train"),
            "metadata.name",
            "'Train' is not a valid name",
            id="bad-name",
        ),
        pytest.param(
            make_job(labels={"team": 1}),  # type: ignore[dict-item]
            "metadata.labels.team",
            "expected a string, not the number 1",
            id="label-not-string",
        ),
    ],
)
def test_pytorchjob_errors(doc: dict[str, Any], path: str, message: str) -> None:
    issue = one_issue(doc)
    assert (issue.document, issue.kind, issue.path) == (0, "PyTorchJob", path)
    assert issue.message.startswith(message), issue.message


def test_pytorchjob_keeps_unknown_fields_and_defaults() -> None:
    doc = make_job(namespace=None, workers=None)
    doc["spec"]["runPolicy"] = {"cleanPodPolicy": "None"}
    doc["spec"]["pytorchReplicaSpecs"]["Master"].pop("replicas")
    doc["spec"]["nprocPerNode"] = "auto"
    job = job_model(doc)
    assert job.key == "default/train"
    assert job.spec.model_extra == {"nprocPerNode": "auto"}
    assert [(role, spec.replicas) for role, spec in job.replica_groups()] == [("Master", 1)]


def test_per_pod_requests_fall_back_to_limits_and_sum_containers() -> None:
    spec = replica(
        1,
        containers=[
            {
                "name": "a",
                "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": 1, "memory": "1Gi"}},
            },
            {"name": "b", "resources": {"limits": {"nvidia.com/gpu": 2, "example.com/rdma": 1}}},
        ],
        initContainers=[{"name": "init", "resources": {"requests": {"cpu": 4}}}],
    )
    job = job_model(make_job(replica_specs={"Worker": spec}))
    ((pod_set),) = job.pod_sets([])
    per_pod = pod_set.per_pod
    assert dict(per_pod) == {
        "cpu": 4000,  # the init container's 4 cores exceed 0.5 core
        "memory": 2**30,
        "nvidia.com/gpu": 2,
        "example.com/rdma": 1,
    }


@pytest.mark.parametrize(
    ("annotations", "selector", "sku"),
    [
        pytest.param({}, {}, None, id="none"),
        pytest.param({"fleet.io/gpu-type": "A100"}, {}, "A100", id="annotation"),
        pytest.param({}, {"nvidia.com/gpu.product": "H100"}, "H100", id="node-selector"),
        pytest.param(
            {"fleet.io/gpu-type": "H100"},
            {"nvidia.com/gpu.product": "H100"},
            "H100",
            id="both-agree",
        ),
    ],
)
def test_gpu_sku(annotations: dict[str, str], selector: dict[str, str], sku: str | None) -> None:
    doc = make_job(
        annotations=annotations, replica_specs={"Worker": replica(1, nodeSelector=selector)}
    )
    assert job_model(doc).gpu_sku([]) == sku


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90.0), ("5m", 300.0), ("1h", 3600.0), ("1h30m", 5400.0), ("500ms", 0.5)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert models.parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text",
    ["90s\n", " 90s", "90", "1h 30m", "١s", "", "s"],
    ids=["trailing newline", "leading space", "no unit", "space", "arabic-indic", "empty", "unit"],
)
def test_parse_duration_matches_the_whole_text(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        models.parse_duration(text)


def test_simulated_annotations_are_read() -> None:
    ann = {"fleet.io/simulated-duration": "2m", "fleet.io/simulated-outcome": "Failed"}
    job = job_model(make_job(annotations=ann))
    assert (job.simulated_duration, job.simulated_outcome) == (120.0, "Failed")


# MemberCluster ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "path", "message"),
    [
        pytest.param(
            make_cluster(kubeconfig={"path": "/k"}),
            "spec",
            "set exactly one of `simulated: true` and `kubeconfig`",
            id="both-backends",
        ),
        pytest.param(
            make_cluster(simulated=False),
            "spec",
            "set exactly one of `simulated: true` and `kubeconfig`",
            id="no-backend",
        ),
        pytest.param(
            make_cluster(simulated=False, kubeconfig={"context": "x"}),
            "spec.kubeconfig.path",
            "required field is missing",
            id="kubeconfig-without-path",
        ),
        pytest.param(
            make_cluster(cells=None),
            "spec.cells",
            "expected a mapping (key: value), not null",
            id="cells-not-mapping",
        ),
        pytest.param(
            make_cluster(cells={"virtualClusters": {}}),
            "spec.cells.physicalCluster",
            "",
            id="cells-without-physical-cluster",
        ),
        pytest.param(
            make_cluster(region="x"),
            "spec.region",
            "unknown field",
            id="unknown-field",
        ),
    ],
)
def test_member_cluster_errors(doc: dict[str, Any], path: str, message: str) -> None:
    issue = one_issue(doc)
    assert (issue.document, issue.kind, issue.name, issue.path) == (0, "MemberCluster", "c1", path)
    assert issue.message.startswith(message)


def test_member_cluster_with_kubeconfig() -> None:
    docs, issues = documents.parse_documents(
        dump(make_cluster(simulated=False, kubeconfig={"path": "/etc/k", "context": "prod"}))
    )
    assert issues == []
    model = docs[0].model
    assert isinstance(model, models.MemberClusterModel)
    assert model.spec.kubeconfig is not None and model.spec.kubeconfig.context == "prod"


def test_cell_config_errors_come_from_the_core_loader_with_paths() -> None:
    doc = make_cluster()
    doc["spec"]["cells"]["physicalCluster"]["physicalCells"][0]["cellType"] = "NOPE"
    issue = one_issue(doc)
    assert issue.path.startswith("spec.cells.physicalCluster.physicalCells[0]")
    assert "NOPE" in issue.message


def test_member_cluster_exposes_its_cell_config() -> None:
    docs, _ = documents.parse_documents(dump(make_cluster()))
    model = docs[0].model
    assert isinstance(model, models.MemberClusterModel)
    assert model.cell_config() is not None
