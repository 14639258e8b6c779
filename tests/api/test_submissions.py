"""parse_submission: every way a body can be wrong is one problem; a good one is ready to store."""

from __future__ import annotations

import functools
import json
import re
from typing import Any, Final

import pytest
import yaml

from fleet.api import submissions
from fleet.api.problems import ProblemError
from fleet.api.submissions import (
    Failover,
    Parsed,
    SubmissionLimits,
    Submitted,
    parse_submission,
    plain_data,
    read_submission,
    spec_hash,
    stored_models,
)
from fleet.core.quota import QuotaTree
from fleet.manifests import convert
from fleet.manifests.kinds import registry
from fleet.manifests.models import MemberClusterModel
from tests.manifests.factories import dump, make_cluster, make_job, make_policy, make_tree

LIMITS = SubmissionLimits()


@functools.cache
def tree() -> QuotaTree:
    return convert.load_quota(dump(make_tree()))[0]


def cells(nodes: int, gpus: int = 8, cpu: int | None = None) -> dict[str, Any]:
    """``nodes`` nodes of ``gpus`` GPUs; with ``cpu``, a skuType gives each GPU that much cpu."""
    physical: dict[str, Any] = {
        "cellTypes": {
            "NODE": {"childCellType": "GPU", "childCellNumber": gpus, "isNodeLevel": True}
        },
        "physicalCells": [{"cellType": "NODE", "cellAddress": f"n{i}"} for i in range(nodes)],
    }
    if cpu is not None:
        physical["skuTypes"] = {"GPU": {"gpu": 1, "cpu": cpu, "memory": "16Gi"}}
    return {"physicalCluster": physical}


@functools.cache
def clusters() -> tuple[MemberClusterModel, ...]:
    """big: 4 nodes of 8 GPUs; small: 1 node of 4 GPUs with 2 cpu per GPU."""
    return tuple(
        convert.load_clusters(
            dump(
                make_cluster("big", {"size": "big"}, cells=cells(4)),
                make_cluster("small", {"size": "small"}, cells=cells(1, gpus=4, cpu=2)),
            )
        )
    )


def parse(
    *docs: dict[str, Any] | str | bytes, limits: SubmissionLimits = LIMITS, **kw: Any
) -> list[Submitted]:
    if len(docs) == 1 and isinstance(docs[0], bytes):
        body = docs[0]
    elif len(docs) == 1 and isinstance(docs[0], str):
        body = docs[0].encode()
    else:
        body = dump(*docs).encode()  # type: ignore[arg-type]
    args: dict[str, Any] = {"tree": tree(), "clusters": clusters(), "first_seq": 1}
    args.update(kw)
    return parse_submission(body, limits=limits, **args)


def read(*docs: dict[str, Any], **kw: Any) -> Parsed:
    args: dict[str, Any] = {"tree": tree(), "clusters": clusters(), "first_seq": 1}
    args.update(kw)
    return read_submission(dump(*docs).encode(), limits=LIMITS, **args)


def problem(*docs: dict[str, Any] | str | bytes, **kw: Any) -> dict[str, Any]:
    """The problem a body is refused with, as the client sees it."""
    with pytest.raises(ProblemError) as info:
        parse(*docs, **kw)
    data: dict[str, Any] = json.loads(info.value.problem.to_json())
    return data


def only_error(*docs: dict[str, Any] | str | bytes, **kw: Any) -> dict[str, Any]:
    data = problem(*docs, **kw)
    assert data["status"] == 422, data
    (error,) = data["errors"]
    assert isinstance(error, dict)
    return error


# Accepted submissions -----------------------------------------------------------------


def test_a_submission_is_one_result_per_job_in_document_order() -> None:
    out = parse(make_policy(), make_job("one"), make_job("two", workers=1))
    assert [(s.namespace, s.name, s.index, s.policy_index) for s in out] == [
        ("default", "one", 1, 0),
        ("default", "two", 2, 0),
    ]
    assert [(s.job.key, s.job.seq, s.job.queue) for s in out] == [
        ("default/one", 1, "team-a"),
        ("default/two", 2, "team-a"),
    ]
    assert out[0].document == make_job("one")
    assert out[0].policy == make_policy()
    assert out[0].suspended is False
    assert out[0].failover == Failover(300, "Gracefully", None)
    assert re.fullmatch(r"[0-9a-f]{64}", out[0].spec_hash)
    assert out[0].spec_hash == spec_hash(make_job("one"), make_policy())
    assert out[0].spec_hash != out[1].spec_hash


def test_the_spec_hash_ignores_layout_comments_and_key_order() -> None:
    job, policy = make_job(), make_policy()
    reordered = dict(reversed(list(job.items())))
    flow = yaml.safe_dump(policy, default_flow_style=True)
    text = f"# a comment\n{flow}\n---\n{yaml.safe_dump(reordered, indent=4)}  # trailing\n"
    (a,) = parse(policy, job)
    (b,) = parse(text)
    assert a.spec_hash == b.spec_hash


@pytest.mark.parametrize(
    "change",
    [
        lambda job, policy: job["metadata"].update(labels={"x": "y"}),
        lambda job, policy: policy["spec"].update(priority=3),
        lambda job, policy: job["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas=3),
    ],
)
def test_the_spec_hash_changes_with_either_document(change: Any) -> None:
    job, policy = make_job(), make_policy()
    (before,) = parse(policy, job)
    change(job, policy)
    (after,) = parse(policy, job)
    assert before.spec_hash != after.spec_hash


@pytest.mark.parametrize(
    ("suspension", "api"),
    [
        ({"scheduling": True}, "policy.one.alibabacloud.com/v1alpha1"),
        ({"scheduling": False}, "policy.one.alibabacloud.com/v1alpha1"),
        ({"dispatching": False}, "policy.karmada.io/v1alpha1"),
        (None, "policy.karmada.io/v1alpha1"),
    ],
)
def test_suspension_scheduling_queues_the_job_as_every_job_is(
    suspension: dict[str, bool] | None, api: str
) -> None:
    extra = {"suspension": suspension} if suspension is not None else {}
    (out,) = parse(make_policy(api_version=api, **extra), make_job())
    assert out.suspended is False


@pytest.mark.parametrize(
    ("suspension", "field"),
    [
        ({"dispatching": True}, "dispatching"),
        ({"dispatching": True, "scheduling": True}, "dispatching"),
        ({"dispatchingOnClusters": {"clusterNames": ["c1"]}}, "dispatchingOnClusters"),
    ],
)
def test_a_policy_that_pauses_dispatching_is_refused_at_its_field(
    suspension: dict[str, Any], field: str
) -> None:
    policy = make_policy(api_version="policy.karmada.io/v1alpha1", suspension=suspension)
    with pytest.raises(ProblemError) as caught:
        parse(policy, make_job())
    (error,) = caught.value.problem.errors
    assert error.path == f"spec.suspension.{field}"
    assert error.kind == "PropagationPolicy"
    assert "pauses job" in error.message and "suspension.scheduling" in error.message


def test_failover_comes_from_the_policy() -> None:
    rule = {"decisionConditions": {"tolerationSeconds": 30}, "purgeMode": "Immediately"}
    (out,) = parse(make_policy(failover={"application": rule}), make_job())
    assert out.failover == Failover(30, "Directly", None)
    rule = {"purgeMode": "Gracefully", "gracePeriodSeconds": 60}
    (out,) = parse(make_policy(failover={"application": rule}), make_job())
    assert out.failover == Failover(300, "Gracefully", 60)


def test_the_policy_affinity_becomes_the_allowed_clusters() -> None:
    policy = make_policy(affinity={"labelSelector": {"matchLabels": {"size": "big"}}})
    (out,) = parse(policy, make_job())
    assert out.job.clusters == frozenset({"big"})


JOB_WITH_YAML_TYPES = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: train
  namespace: default
  # Kubernetes' to judge (Fleet keeps what it does not read in metadata)
  x-notes: {args: [2024-01-31, !!binary aGk=, 0x10], env: {2: two, true: yes, null: nothing}}
spec:
  pytorchReplicaSpecs:
    Worker:
      replicas: 1
      template:
        spec:
          containers:
            - name: pytorch
              image: img:1
              resources: {limits: {nvidia.com/gpu: 1}}
"""


def test_the_documents_are_plain_json_data() -> None:
    (out,) = parse(dump(make_policy()) + "---" + JOB_WITH_YAML_TYPES)
    notes = out.document["metadata"]["x-notes"]
    assert notes["args"] == ["2024-01-31", "aGk=", 16]
    assert notes["env"] == {"2": "two", "true": True, "null": "nothing"}
    json.dumps(out.document, allow_nan=False)


# Refused before reading ---------------------------------------------------------------


def test_a_body_over_the_size_limit_is_refused_before_it_is_parsed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: object, **kw: object) -> object:
        raise AssertionError("an oversized body was parsed")

    monkeypatch.setattr(convert, "load_submitted", refuse)
    body = b"\xff" + b"x" * 1000  # not even UTF-8: the size is checked first
    data = problem(body, limits=SubmissionLimits(max_bytes=1000))
    assert data["status"] == 413
    assert data["type"].endswith("/too-large")
    assert data["detail"] == (
        "the request body has 1,001 bytes, more than the limit of 1,000; it was not read"
    )
    assert data["errors"] == [
        {"document": None, "kind": None, "name": None, "path": "", "message": data["detail"]}
    ]


def test_a_body_at_the_size_limit_is_read() -> None:
    body = dump(make_policy(), make_job()).encode()
    assert parse(body, limits=SubmissionLimits(max_bytes=len(body)))


def test_a_body_that_is_not_utf8_is_a_bad_request() -> None:
    body = dump(make_policy(), make_job()).encode() + b"# caf\xe9\n"
    data = problem(body)
    assert data["status"] == 400
    assert data["detail"].startswith("the request body is not UTF-8 text (byte 0xe9 at offset ")
    assert data["errors"][0]["document"] is None


# Refused by reading: each a field error -----------------------------------------------


def test_too_many_documents_is_a_field_error_at_the_first_one_too_many() -> None:
    docs = [make_policy()] + [make_job(f"j{i}") for i in range(4)]
    assert len(parse(*docs, limits=SubmissionLimits(max_documents=5))) == 4
    error = only_error(*docs, limits=SubmissionLimits(max_documents=4))
    assert error["document"] == 4
    assert "more than 4 documents in one stream" in error["message"]


def test_a_job_with_more_pods_than_the_limit_is_a_field_error_at_its_replica_specs() -> None:
    job = make_job(workers=3, gpu=0)  # a master and three workers: four pods
    assert len(parse(make_policy(), job, limits=SubmissionLimits(max_replicas=4))) == 1
    error = only_error(make_policy(), job, limits=SubmissionLimits(max_replicas=3))
    assert (error["document"], error["path"]) == (1, "spec.pytorchReplicaSpecs")
    assert "has 4 pods, more than the 3 this service accepts in one job" in error["message"]


def test_a_string_longer_than_the_limit_is_a_field_error_at_its_path() -> None:
    job = make_job(annotations={"note": "x" * 101})
    assert len(parse(make_policy(), job, limits=SubmissionLimits(max_string=101))) == 1
    error = only_error(make_policy(), job, limits=SubmissionLimits(max_string=100))
    assert (error["document"], error["path"]) == (1, "metadata.annotations.note")
    assert "a string of 101 characters, more than the 100" in error["message"]
    long_key = make_job(labels={"k" * 120: "v"})
    error = only_error(make_policy(), long_key, limits=SubmissionLimits(max_string=100))
    assert (error["document"], error["path"]) == (1, "metadata.labels")


def billion_laughs() -> str:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 10)]
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_without_being_expanded() -> None:
    text = dump(make_policy(), make_job()) + "---\n" + billion_laughs()
    error = only_error(text)
    assert error["document"] == 2
    assert "aliases expand to more than 100,000 nodes" in error["message"]
    smaller = SubmissionLimits(max_alias_nodes=10)
    bomb = "---\na: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\nb: *a\n"  # *a stands for 11 nodes
    error = only_error(dump(make_policy(), make_job()) + bomb, limits=smaller)
    assert "aliases expand to more than 10 nodes" in error["message"]


def test_deep_nesting_is_refused() -> None:
    error = only_error("[" * 100_000 + "]" * 100_000)
    assert error["document"] == 0
    assert "nest more than 100 levels deep" in error["message"]


def test_malformed_yaml_is_a_field_error() -> None:
    text = dump(make_policy(), make_job()) + "---\nkey: [unclosed\n"
    error = only_error(text)
    assert error["document"] == 2
    assert error["message"].startswith("YAML syntax error at line ")


@pytest.mark.parametrize(
    ("doc", "path", "start"),
    [
        (
            {**make_job(), "apiVersion": "apps/v1", "kind": "Deployment"},
            "kind",
            "unknown kind 'Deployment'",
        ),
        ({**make_job(), "apiVersion": "kubeflow.org/v2"}, "apiVersion", "PyTorchJob must have"),
    ],
)
def test_unknown_kinds_and_api_versions_are_field_errors(
    doc: dict[str, Any], path: str, start: str
) -> None:
    data = problem(make_policy(), make_job(), doc)
    error = next(e for e in data["errors"] if e["document"] == 2)
    assert error["path"] == path and error["message"].startswith(start)


def test_a_policy_that_selects_nothing_is_stored_all_the_same() -> None:
    other = make_policy("other", selectors=[{"apiVersion": "kubeflow.org/v1", "kind": "TFJob"}])
    found = read(make_policy(), other, make_job())
    assert [(p.key, p.document) for p in found.policies] == [
        ("default/policy", make_policy()),
        ("default/other", other),
    ]
    (job,) = found.jobs
    assert (job.policy, job.policy_source) == (make_policy(), "submission")


def test_a_job_that_no_policy_selects_is_a_field_error() -> None:
    error = only_error(make_policy(), make_job(), make_job("other", namespace="b"))
    assert (error["document"], error["kind"], error["name"]) == (2, "PyTorchJob", "b/other")
    assert "no PropagationPolicy of the submission selects" in error["message"]


def _tfjob(name: str = "tf") -> dict[str, Any]:
    """A TFJob of one PS and two Workers of one GPU, in namespace default."""
    job = make_job(name)
    specs = job["spec"].pop("pytorchReplicaSpecs")
    job["kind"] = "TFJob"
    job["spec"]["tfReplicaSpecs"] = {"PS": specs["Master"], "Worker": specs["Worker"]}
    return job


TFJOBS: Final = [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob"}]


def test_a_policy_selects_by_apiversion_and_kind() -> None:
    (found,) = parse(make_policy(selectors=TFJOBS), _tfjob())
    assert found.document["kind"] == "TFJob"
    assert found.policy is not None and found.policy["spec"]["resourceSelectors"] == TFJOBS
    # The same policy does not select a PyTorchJob: the job is refused, naming what a
    # policy must name (the policy, which selects nothing now, would be stored).
    data = problem(make_policy(selectors=TFJOBS), make_job())
    by_document = {e["document"]: e for e in data["errors"]}
    assert set(by_document) == {1}
    job = by_document[1]
    assert (job["kind"], job["name"], job["path"]) == ("PyTorchJob", "default/train", "")
    assert job["message"] == (
        "no PropagationPolicy of the submission selects this PyTorchJob, and no policy stored "
        "in namespace 'default' does; add one to the submission, or store one with "
        "`fleet apply -f policy.yaml`, in namespace 'default' whose resourceSelectors name "
        "apiVersion kubeflow.org/v1, kind PyTorchJob"
    )


def test_a_policy_that_names_another_apiversion_of_the_kind_selects_nothing() -> None:
    other = [{"apiVersion": "kubeflow.org/v2beta1", "kind": "PyTorchJob"}]
    data = problem(make_policy(selectors=other), make_job())
    assert {e["document"] for e in data["errors"]} == {1}


def test_a_kind_fleet_does_not_run_is_a_field_error_listing_the_kinds_it_runs() -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"replicas": 1},
    }
    error = only_error(make_policy(), make_job(), deployment)
    assert (error["document"], error["path"]) == (2, "kind")
    assert error["message"].startswith("unknown kind 'Deployment'; Fleet reads jobs of the kinds")
    assert registry.names() in error["message"]
    for kind in registry.KINDS:
        assert f"{kind.kind} ({kind.api_version})" in error["message"]


def test_a_namespace_owned_by_no_queue_is_a_field_error() -> None:
    error = only_error(make_policy(namespace="nobody"), make_job(namespace="nobody"))
    assert error["path"] == "metadata.namespace"
    assert "no leaf of the quota tree lists namespace 'nobody'" in error["message"]


def test_a_gpu_type_no_cluster_has_is_a_field_error() -> None:
    job = make_job(annotations={"fleet.io/gpu-type": "H100"})
    error = only_error(make_policy(), job)
    assert error["path"] == "metadata.annotations.fleet.io/gpu-type"
    assert "GPU type 'H100' is not a leaf cell type" in error["message"]


@pytest.mark.parametrize(
    ("cpu", "message"),
    [("-1", "quantity '-1' is negative"), ("lots", "'lots' is not a Kubernetes quantity")],
)
def test_bad_quantities_are_field_errors(cpu: str, message: str) -> None:
    job = make_job()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"][
        "requests"
    ]["cpu"] = cpu
    data = problem(make_policy(), job)
    paths = {e["path"]: e["message"] for e in data["errors"]}
    path = "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.requests.cpu"
    assert message in paths[path]


def test_a_nan_in_a_document_is_a_field_error() -> None:
    job = make_job()
    job["metadata"]["x-notes"] = float("nan")
    error = only_error(dump(make_policy(), job))
    assert error["document"] == 1
    assert error["path"] == "metadata.x-notes"
    assert "not a number JSON can hold" in error["message"]


def test_a_nan_where_the_kinds_schema_wants_text_is_refused_by_the_schema() -> None:
    text = dump(make_policy(), make_job()).replace("image: img:1", "image: .nan", 1)
    error = only_error(text)
    assert error["path"] == "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].image"
    assert error["message"] == "expected a string, not the number nan"


# Refused because it could never run ---------------------------------------------------


def test_a_pod_larger_than_every_node_is_refused() -> None:
    data = problem(make_policy(), make_job(gpu=9))
    error = data["errors"][0]
    assert (error["document"], error["kind"], error["name"]) == (1, "PyTorchJob", "default/train")
    assert error["path"] == "spec.pytorchReplicaSpecs.Master"
    assert error["message"] == (
        "job default/train: a Master pod asks for nvidia.com/gpu 9, cpu 1, more than any node "
        "of the member clusters it may use (big, small) has; the largest node, n0 of big, "
        "has nvidia.com/gpu 8"
    )
    assert [e["path"] for e in data["errors"]] == [
        "spec.pytorchReplicaSpecs.Master",
        "spec.pytorchReplicaSpecs.Worker",
    ]


def test_only_the_clusters_the_job_may_use_count() -> None:
    small = make_policy(affinity={"clusterNames": ["small"]})
    assert parse(small, make_job(gpu=4, workers=None))
    error = only_error(small, make_job(gpu=5, workers=None))
    assert (
        "the largest node, n0 of small, has nvidia.com/gpu 4, cpu 8, memory 64Gi"
        in (error["message"])
    )


def test_a_node_limits_only_the_resources_it_names() -> None:
    huge_cpu = make_job(workers=None)
    huge_cpu["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0][
        "resources"
    ]["requests"]["cpu"] = "500"
    assert parse(make_policy(), huge_cpu)  # big's nodes name no cpu
    small = make_policy(affinity={"clusterNames": ["small"]})
    error = only_error(small, huge_cpu)
    assert "asks for nvidia.com/gpu 1, cpu 500, more than any node" in error["message"]


def test_a_gang_larger_than_every_cluster_is_refused() -> None:
    # 1 master + 40 workers of 1 GPU: big has 32 GPUs.
    error = only_error(make_policy(), make_job(workers=40))
    assert error["path"] == "spec.pytorchReplicaSpecs"
    assert error["message"] == (
        "job default/train: its 41 pods that must start together ask for nvidia.com/gpu 41, "
        "cpu 41, more than any member cluster it may use (big, small) has in all; the "
        "largest, big, has nvidia.com/gpu 32"
    )


def test_a_gang_minimum_that_fits_is_accepted_and_one_that_does_not_names_its_field() -> None:
    assert parse(make_policy(), make_job(workers=40, min_available=32))
    error = only_error(make_policy(), make_job(workers=40, min_available=33))
    assert error["path"] == "spec.runPolicy.schedulingPolicy.minAvailable"
    elastic = make_job(workers=40, elastic={"minReplicas": 35, "maxReplicas": 40})
    error = only_error(make_policy(), elastic)
    assert error["path"] == "spec.elasticPolicy.minReplicas"


def test_an_incremental_job_needs_only_its_pods_to_fit() -> None:
    assert parse(make_policy(gang=False), make_job(workers=40))


def test_a_resource_no_member_offers_is_a_field_error_at_its_request() -> None:
    job = make_job(workers=None)
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    container["resources"]["requests"]["example.com/fpga"] = 1
    error = only_error(make_policy(), job)
    assert error["path"] == (
        "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].resources.requests."
        "example.com/fpga"
    )
    assert error["message"] == (
        "resource 'example.com/fpga' is offered by no node of the member clusters the job "
        "may use (big, small); their nodes offer cpu, memory, nvidia.com/gpu"
    )
    # Kubernetes' own resources are on every node, whether the cell config names them or not.
    container["resources"]["requests"].pop("example.com/fpga")
    container["resources"]["requests"]["ephemeral-storage"] = "10Gi"
    container["resources"]["limits"]["hugepages-2Mi"] = "1Gi"
    container["resources"]["requests"]["hugepages-2Mi"] = "1Gi"
    assert parse(make_policy(), job)


def test_without_clusters_no_capacity_is_checked() -> None:
    assert parse(make_policy(), make_job(gpu=64), clusters=())


def test_a_job_whose_stored_policy_pauses_dispatching_is_refused_naming_the_policy() -> None:
    standing = make_policy("standing", suspension={"dispatching": True})
    with pytest.raises(ProblemError) as caught:
        parse(make_job(), policies={"default/standing": standing})
    (error,) = caught.value.problem.errors
    assert error.kind == "PyTorchJob" and error.path == "metadata.name"
    assert error.message.startswith("its stored PropagationPolicy default/standing: ")


# Plain data -----------------------------------------------------------------------------


def test_plain_data_names_what_json_cannot_hold() -> None:
    data, problems = plain_data({"a": [1.5, float("inf")], "b": {1, 2}, 3: {"c": b"\x00"}})
    assert data == {"a": [1.5, None], "b": None, "3": {"c": "AA=="}}
    assert [p for p, _ in problems] == ["a[1]", "b"]
    data, problems = plain_data({1: "x", "1": "y"})
    assert data == {"1": "x"} and problems[0][0] == "1"


# Stored policies ----------------------------------------------------------------------


def test_a_job_governed_by_a_stored_policy_is_hashed_alone() -> None:
    rule = {"decisionConditions": {"tolerationSeconds": 30}}
    standing = make_policy("standing", failover={"application": rule})
    (out,) = parse(make_job(), policies={"default/standing": standing})
    assert (out.policy, out.policy_source, out.policy_index) == (standing, "stored", None)
    assert out.failover.toleration_seconds == 30  # the stored policy's settings apply
    assert out.spec_hash == spec_hash(make_job(), None)
    # An edit of the stored policy leaves the job the same job.
    edited = make_policy("standing", priority=7)
    (again,) = parse(make_job(), policies={"default/standing": edited})
    assert again.spec_hash == out.spec_hash and again.policy == edited
    # The submission's own policy is hashed with the job, as before.
    (own,) = parse(make_policy(), make_job(), policies={"default/standing": standing})
    assert own.policy_source == "submission"
    assert own.spec_hash == spec_hash(make_job(), make_policy())


def test_the_stored_policies_are_read_once_per_mapping() -> None:
    policies = {"default/standing": make_policy("standing")}
    first = stored_models(policies)
    assert stored_models(policies) is first
    assert stored_models(dict(policies)) is not first


def test_a_new_mapping_reads_only_the_policies_it_does_not_share_with_the_last(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read: list[str] = []
    reader = convert.policy_models

    def counting(documents: Any) -> Any:
        documents = list(documents)
        read.extend(d["metadata"]["name"] for d in documents)
        return reader(documents)

    monkeypatch.setattr(convert, "policy_models", counting)
    policies = {f"default/p{i}": make_policy(f"p{i}") for i in range(3)}
    first = stored_models(policies)
    assert sorted(read) == ["p0", "p1", "p2"]
    read.clear()
    edited = make_policy("p1", priority=4)
    grown = {**policies, "default/p1": edited, "default/p3": make_policy("p3")}
    second = stored_models(grown)
    assert sorted(read) == ["p1", "p3"]  # the edited one and the new one
    assert second[0] is first[0] and second[2] is first[2]
    assert second[1].spec.priority == 4
    read.clear()
    # Read again from the database (equal documents, other objects): nothing to read.
    assert [m.key for m in stored_models(json.loads(json.dumps(grown)))] == [m.key for m in second]
    assert read == []


def test_the_stored_policies_are_read_only_for_a_job_that_brings_no_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read: list[int] = []
    reader = stored_models

    def counting(policies: Any) -> Any:
        read.append(len(policies))
        return reader(policies)

    monkeypatch.setattr(submissions, "stored_models", counting)
    stored = {"default/standing": make_policy("standing")}
    (own,) = parse(make_policy(), make_job(), policies=stored)
    assert own.policy_source == "submission" and read == []
    (alone,) = parse(make_job(), policies=stored)
    assert alone.policy_source == "stored" and read == [1]
