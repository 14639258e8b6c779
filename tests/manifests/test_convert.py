"""PyTorchJob -> core Job: routing, priority, gang size, SKU, affinity; all-or-nothing loads."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.core.quota import QuotaTree
from fleet.manifests import convert, documents, models
from fleet.manifests.errors import SpecError
from tests.manifests.factories import dump, make_cluster, make_job, make_policy, make_tree, node


@pytest.fixture
def tree() -> QuotaTree:
    return convert.load_quota(dump(make_tree()))[0]


def model_of(doc: dict[str, Any]) -> Any:
    docs, issues = documents.parse_documents(dump(doc))
    assert issues == []
    return docs[0].model


def clusters() -> list[models.MemberClusterModel]:
    return convert.load_clusters(
        dump(
            make_cluster("east", {"tier": "prod", "gpu": "a100"}),
            make_cluster("west", {"tier": "prod", "gpu": "h100"}),
            make_cluster("lab", {"tier": "dev"}),
        )
    )


def convert_one(
    tree: QuotaTree, doc: dict[str, Any], policy: dict[str, Any] | None = None, **kw: Any
) -> Any:
    return convert.to_job(
        model_of(doc), policy=model_of(policy) if policy else None, tree=tree, seq=7, **kw
    )


def error_of(tree: QuotaTree, doc: dict[str, Any], **kw: Any) -> tuple[str, str]:
    with pytest.raises(SpecError) as e:
        convert_one(tree, doc, **kw)
    (issue,) = e.value.issues
    return issue.path, issue.message


# Queues ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("doc", "queue"),
    [
        pytest.param(make_job(namespace="b", queue="team-b"), "team-b", id="named-own-leaf"),
        pytest.param(make_job(namespace="b"), "team-b", id="namespace-owner"),
        pytest.param(make_job(namespace=None), "team-a", id="default-namespace"),
    ],
)
def test_queue_routing(tree: QuotaTree, doc: dict[str, Any], queue: str) -> None:
    assert convert_one(tree, doc).queue == queue


QUEUE = "spec.runPolicy.schedulingPolicy.queue"


@pytest.mark.parametrize(
    ("doc", "path", "message"),
    [
        pytest.param(
            make_job(namespace="b", queue="team-a"),
            QUEUE,
            "queue 'team-a' does not list namespace 'b'; namespace 'b' belongs to queue "
            f"'team-b': name 'team-b' or leave {QUEUE} out",
            id="another-teams-leaf",
        ),
        pytest.param(
            make_job(queue="research"),
            QUEUE,
            "queue 'research' is not a leaf of the quota tree; namespace 'default' belongs to "
            f"queue 'team-a': name 'team-a' or leave {QUEUE} out",
            id="inner-node",
        ),
        pytest.param(
            make_job(queue="nope"),
            QUEUE,
            "no queue 'nope' in the quota tree; namespace 'default' belongs to queue 'team-a': "
            f"name 'team-a' or leave {QUEUE} out",
            id="unknown",
        ),
        pytest.param(
            make_job(namespace="orphan"),
            "metadata.namespace",
            "no leaf of the quota tree lists namespace 'orphan'; jobs run only in namespaces "
            "a leaf queue lists (ask an administrator to add it to a leaf)",
            id="no-owner",
        ),
        pytest.param(
            make_job(namespace="kube-system", queue="team-a"),
            "metadata.namespace",
            "no leaf of the quota tree lists namespace 'kube-system'; jobs run only in "
            "namespaces a leaf queue lists (ask an administrator to add it to a leaf)",
            id="no-owner-with-a-queue",
        ),
    ],
)
def test_queue_routing_errors(
    tree: QuotaTree, doc: dict[str, Any], path: str, message: str
) -> None:
    """A namespace belongs to one leaf: a job cannot name its way into another queue."""
    assert error_of(tree, doc) == (path, message)


# Priority and preemption ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("pclass", "annotation", "priority", "preemptible"),
    [
        pytest.param(None, None, 10, True, id="default-test"),
        pytest.param("prod", None, 100, True, id="prod"),
        pytest.param("crit", None, 120, False, id="crit-non-preemptible"),
        pytest.param("crit", "true", 120, True, id="crit-made-preemptible"),
        pytest.param("prod", "false", 100, False, id="prod-made-non-preemptible"),
        pytest.param("oppo", None, -1, True, id="oppo"),
    ],
)
def test_priority_and_preemptible(
    tree: QuotaTree, pclass: str | None, annotation: str | None, priority: int, preemptible: bool
) -> None:
    ann = {"fleet.io/preemptible": annotation} if annotation else None
    job = convert_one(tree, make_job(priority_class=pclass, annotations=ann))
    assert (job.priority, job.preemptible, job.priority_class) == (
        priority,
        preemptible,
        pclass or "test",
    )


def test_unknown_priority_class_lists_known_ones(tree: QuotaTree) -> None:
    assert error_of(tree, make_job(priority_class="urgent")) == (
        "spec.runPolicy.schedulingPolicy.priorityClass",
        "unknown priority class 'urgent'; known: crit (120), prod (100), test (10), oppo (-1)",
    )


def test_custom_priority_classes(tree: QuotaTree) -> None:
    job = convert_one(tree, make_job(priority_class="urgent"), priority_classes={"urgent": 500})
    assert job.priority == 500


def test_opportunistic_job_cannot_be_non_preemptible(tree: QuotaTree) -> None:
    doc = make_job(priority_class="oppo", annotations={"fleet.io/preemptible": "false"})
    assert error_of(tree, doc) == (
        "metadata.annotations.fleet.io/preemptible",
        "an opportunistic job (class oppo) is always preemptible",
    )


# Groups, gang size, SKU -----------------------------------------------------------------


def test_groups_master_then_worker_with_per_pod_requests(tree: QuotaTree) -> None:
    job = convert_one(tree, make_job(workers=3, gpu=4))
    assert job.key == "default/train" and job.seq == 7
    assert [(g.role, g.count, dict(g.per_pod)) for g in job.groups] == [
        ("Master", 1, {"cpu": 1000, "nvidia.com/gpu": 4}),
        ("Worker", 3, {"cpu": 1000, "nvidia.com/gpu": 4}),
    ]
    assert job.size == 4 and job.request["nvidia.com/gpu"] == 16


@pytest.mark.parametrize(
    ("doc", "min_members", "gang_size"),
    [
        pytest.param(make_job(workers=3), 0, 4, id="all"),
        pytest.param(make_job(workers=3, min_available=2), 2, 2, id="min-available"),
        pytest.param(
            make_job(workers=3, elastic={"minReplicas": 1, "maxReplicas": 4}), 2, 2, id="elastic"
        ),
        pytest.param(
            make_job(master=False, workers=3, elastic={"minReplicas": 2}),
            2,
            2,
            id="elastic-no-master",
        ),
        pytest.param(
            make_job(workers=3, min_available=3, elastic={"minReplicas": 1}),
            3,
            3,
            id="min-available-wins",
        ),
    ],
)
def test_min_members(
    tree: QuotaTree, doc: dict[str, Any], min_members: int, gang_size: int
) -> None:
    job = convert_one(tree, doc)
    assert (job.min_members, job.gang_size) == (min_members, gang_size)


@pytest.mark.parametrize(
    ("policy", "gang"),
    [
        pytest.param(None, True, id="no-policy"),
        pytest.param(make_policy(gang=True), True, id="gang-policy"),
        pytest.param(make_policy(gang=False), False, id="policy-without-gang"),
    ],
)
def test_gang(tree: QuotaTree, policy: dict[str, Any] | None, gang: bool) -> None:
    assert convert_one(tree, make_job(), policy).gang is gang


def test_gpu_sku_and_typed_request(tree: QuotaTree) -> None:
    job = convert_one(tree, make_job(workers=1, annotations={"fleet.io/gpu-type": "A100"}))
    assert job.gpu_sku == "A100"
    assert job.request["gpu.fleet.io/A100"] == 2


# Policies and cluster affinity ------------------------------------------------------------


def policies(*docs: dict[str, Any]) -> list[models.PropagationPolicyModel]:
    return [model_of(d) for d in docs]


def test_match_policy_prefers_name_then_labels_then_kind() -> None:
    job = model_of(make_job(labels={"app": "llm"}))
    by_kind = make_policy("a-kind")
    by_label = make_policy(
        "b-label",
        selectors=[
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "labelSelector": {"matchLabels": {"app": "llm"}},
            }
        ],
    )
    by_name = make_policy(
        "c-name",
        selectors=[{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "train"}],
    )
    chosen = convert.match_policy(job, policies(by_kind, by_label, by_name))
    assert chosen is not None and chosen.metadata.name == "c-name"
    chosen = convert.match_policy(job, policies(by_kind, by_label))
    assert chosen is not None and chosen.metadata.name == "b-label"


def test_match_policy_explicit_priority_then_name() -> None:
    job = model_of(make_job())
    high = make_policy("z-high", priority=10)
    chosen = convert.match_policy(job, policies(make_policy("a"), high))
    assert chosen is not None and chosen.metadata.name == "z-high"
    chosen = convert.match_policy(job, policies(make_policy("b"), make_policy("a")))
    assert chosen is not None and chosen.metadata.name == "a"


@pytest.mark.parametrize(
    "selector",
    [
        pytest.param({"apiVersion": "kubeflow.org/v1", "kind": "TFJob"}, id="other-kind"),
        pytest.param({"apiVersion": "kubeflow.org/v2", "kind": "PyTorchJob"}, id="other-version"),
        pytest.param(
            {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "x"}, id="other-name"
        ),
        pytest.param(
            {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "namespace": "b"}, id="other-ns"
        ),
        pytest.param(
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
            },
            id="labels-miss",
        ),
    ],
)
def test_match_policy_misses(selector: dict[str, Any]) -> None:
    job = model_of(make_job())
    assert convert.match_policy(job, policies(make_policy(selectors=[selector]))) is None


def test_policy_only_matches_its_own_namespace() -> None:
    job = model_of(make_job(namespace="b"))
    assert convert.match_policy(job, policies(make_policy(namespace="default"))) is None


@pytest.mark.parametrize(
    ("affinity", "allowed"),
    [
        pytest.param(None, None, id="no-affinity"),
        pytest.param({"clusterNames": ["east", "lab"]}, {"east", "lab"}, id="names"),
        pytest.param(
            {"labelSelector": {"matchLabels": {"tier": "prod"}}}, {"east", "west"}, id="labels"
        ),
        pytest.param(
            {"clusterNames": ["east", "lab"], "labelSelector": {"matchLabels": {"tier": "prod"}}},
            {"east"},
            id="names-and-labels",
        ),
        pytest.param({"exclude": ["lab"]}, {"east", "west"}, id="exclude"),
        pytest.param(
            {
                "labelSelector": {
                    "matchExpressions": [{"key": "gpu", "operator": "NotIn", "values": ["h100"]}]
                },
                "exclude": ["east"],
            },
            {"lab"},
            id="not-in-and-exclude",
        ),
    ],
)
def test_cluster_affinity(
    tree: QuotaTree, affinity: dict[str, Any] | None, allowed: set[str] | None
) -> None:
    job = convert_one(tree, make_job(), make_policy(affinity=affinity), clusters=clusters())
    assert job.clusters == (None if allowed is None else frozenset(allowed))


def test_cluster_affinity_without_known_clusters_uses_names() -> None:
    policy = model_of(make_policy(affinity={"clusterNames": ["a", "b"], "exclude": ["b"]}))
    assert convert.resolve_clusters(policy, ()) == frozenset({"a"})
    policy = model_of(make_policy(affinity={"labelSelector": {"matchLabels": {"x": "y"}}}))
    assert convert.resolve_clusters(policy, ()) is None


def test_cluster_affinity_matching_nothing_is_an_error(tree: QuotaTree) -> None:
    path, message = error_of(
        tree,
        make_job(),
        policy=make_policy(affinity={"clusterNames": ["mars"]}),
        clusters=clusters(),
    )
    assert path == ""
    assert message == (
        "PropagationPolicy default/policy: spec.placement.clusterAffinity allows no member "
        "cluster (known: east, lab, west)"
    )


# Whole submissions -----------------------------------------------------------------------


def test_load_submission_numbers_jobs_and_applies_policies(tree: QuotaTree) -> None:
    text = dump(
        make_job("first", namespace="b"),
        make_policy(namespace="b", gang=False),
        make_job("second", namespace="b"),
        make_job("third"),
    )
    jobs = convert.load_submission(text, tree, clusters(), first_seq=100)
    assert [(j.key, j.seq, j.gang, j.queue) for j in jobs] == [
        ("b/first", 100, False, "team-b"),
        ("b/second", 101, False, "team-b"),
        ("default/third", 102, True, "team-a"),
    ]


def test_load_submission_is_all_or_nothing(tree: QuotaTree) -> None:
    bad_replicas = make_job("bad")
    bad_replicas["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = -1
    text = dump(
        make_job("good"),
        bad_replicas,
        make_job("lost", namespace="orphan"),
        make_job("good"),
        make_cluster(),
    )
    with pytest.raises(SpecError) as e:
        convert.load_submission(text, tree)
    assert [(i.document, i.path) for i in e.value.issues] == [
        (1, "spec.pytorchReplicaSpecs.Worker.replicas"),
        (2, "metadata.namespace"),
        (3, "metadata.name"),
        (4, "kind"),
    ]
    assert "duplicate PyTorchJob default/good (first in document 0)" in str(e.value)


def test_check_submission_without_tree_skips_routing() -> None:
    n_jobs, n_policies, issues = convert.check_submission(
        dump(make_policy(), make_job(namespace="orphan"), make_job("x", priority_class="nope"))
    )
    assert (n_jobs, n_policies) == (1, 1)
    assert [(i.document, i.path) for i in issues] == [
        (2, "spec.runPolicy.schedulingPolicy.priorityClass")
    ]


# Quota and clusters --------------------------------------------------------------------


def test_load_quota_maps_tree_rule_errors_to_paths() -> None:
    root = node(
        "root",
        max={"cpu": 8},
        children=[node("a", max={"cpu": 4}), node("b", max={"cpu": 16}, namespaces=["x"])],
    )
    with pytest.raises(SpecError) as e:
        convert.load_quota(dump(make_tree(root)))
    (issue,) = e.value.issues
    assert (issue.document, issue.kind, issue.name, issue.path) == (
        0,
        "ElasticQuotaTree",
        "tree",
        "spec.root.children[1].max",
    )
    assert "'b'" in issue.message and not issue.message.endswith(")")


def test_load_quota_needs_exactly_one_tree() -> None:
    with pytest.raises(SpecError, match="exactly one ElasticQuotaTree, found 2"):
        convert.load_quota(dump(make_tree(), make_tree()))
    with pytest.raises(SpecError, match="found 0"):
        convert.load_quota("")


def test_load_quota_warns_about_root_min_below_max() -> None:
    tree, warnings = convert.load_quota(
        dump(make_tree(node("root", max={"cpu": 2}, namespaces=["a"])))
    )
    assert tree.is_leaf("root")
    assert len(warnings) == 1 and "root" in warnings[0]


def test_load_clusters_rejects_duplicate_names() -> None:
    with pytest.raises(SpecError) as e:
        convert.load_clusters(dump(make_cluster("a"), make_cluster("b"), make_cluster("a")))
    (issue,) = e.value.issues
    assert (issue.document, issue.path) == (2, "metadata.name")
    assert issue.message == "duplicate MemberCluster name (first in document 0)"


# Elastic growth, routing by namespace, pinned cells ---------------------------------------


def test_elastic_job_starts_at_its_replicas_and_may_grow_to_max_replicas(tree: QuotaTree) -> None:
    doc = make_job(workers=2, elastic={"minReplicas": 1, "maxReplicas": 4})
    job = convert_one(tree, doc)
    assert (job.size, job.start_size, job.gang_size) == (5, 3, 2)  # 1 master + workers


def test_elastic_job_without_max_replicas_does_not_grow(tree: QuotaTree) -> None:
    job = convert_one(tree, make_job(workers=2, elastic={"minReplicas": 1}))
    assert (job.size, job.start_size) == (3, 3)


def test_a_queue_follows_the_namespace_even_when_named(tree: QuotaTree) -> None:
    """A named queue is the namespace's leaf, so the job follows its namespace when
    the tree changes, as a job without one does."""
    assert convert_one(tree, make_job(namespace="b")).queue_from_namespace is True
    assert convert_one(tree, make_job(namespace="b", queue="team-b")).queue_from_namespace


def pinned_cluster() -> list[models.MemberClusterModel]:
    cluster = make_cluster("east")
    cells = cluster["spec"]["cells"]
    cells["physicalCluster"]["physicalCells"][0]["pinnedCellId"] = "pin-1"
    cells["virtualClusters"] = {"team-a": {"pinnedCells": [{"pinnedCellId": "pin-1"}]}}
    return convert.load_clusters(dump(cluster))


def test_a_pinned_cell_annotation_pins_the_job(tree: QuotaTree) -> None:
    doc = make_job(queue="team-a", annotations={"fleet.io/pinned-cell-id": "pin-1"})
    assert convert_one(tree, doc, clusters=pinned_cluster()).pinned_cell_id == "pin-1"


def test_a_pinned_cell_of_another_queue_is_refused(tree: QuotaTree) -> None:
    doc = make_job(namespace="b", queue="team-b", annotations={"fleet.io/pinned-cell-id": "pin-1"})
    path, message = error_of(tree, doc, clusters=pinned_cluster())
    assert path == "metadata.annotations.fleet.io/pinned-cell-id"
    assert "not pinned to virtual cluster 'team-b'" in message
