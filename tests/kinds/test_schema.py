"""Strict validation against the kinds' CRD schemas (fleet.manifests.kinds.schema).

Upstream examples of every kind validate clean; the typos users make are
refused with their field paths and the field they meant; the Kubernetes
semantics the transformation adds (closed objects, open preserve-unknown-fields
subtrees, int-or-string, pruned nulls, list-map keys) hold; and the speed
mechanism (one validator per schema node, leaves checked by type) finds what
jsonschema's own descent finds.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from fleet.manifests.kinds import schema
from tests import paths
from tools import import_crds

PYTORCH = ("kubeflow.org/v1", "PyTorchJob")
VOLCANO = ("batch.volcano.sh/v1alpha1", "Job")
JOBSET = ("jobset.x-k8s.io/v1alpha2", "JobSet")
BATCH = ("batch/v1", "Job")

CRDS = paths.ROOT / "fleet" / "manifests" / "kinds" / "crds"
EXAMPLES = sorted(paths.KIND_EXAMPLES.glob("*.yaml")) + sorted(paths.KUBEFLOW.glob("*.yaml"))


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def problems(doc: dict[str, Any]) -> list[tuple[str, str]]:
    return schema.problems(doc["apiVersion"], doc["kind"], doc)


def pytorchjob() -> dict[str, Any]:
    """A two-role PyTorchJob (Master 1, Worker 2) with resources."""

    def role(replicas: int) -> dict[str, Any]:
        container = {
            "name": "pytorch",
            "image": "example/train:1",
            "resources": {"limits": {"nvidia.com/gpu": 8, "cpu": "8", "memory": "64Gi"}},
        }
        return {
            "replicas": replicas,
            "restartPolicy": "OnFailure",
            "template": {"spec": {"containers": [container]}},
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "train", "namespace": "team-a"},
        "spec": {
            "runPolicy": {"schedulingPolicy": {"queue": "team-a", "priorityClass": "prod"}},
            "pytorchReplicaSpecs": {"Master": role(1), "Worker": role(2)},
        },
    }


def batch_job() -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "pi"},
        "spec": {
            "completions": 4,
            "parallelism": 2,
            "completionMode": "Indexed",
            "backoffLimitPerIndex": 1,
            "maxFailedIndexes": 2,
            "podFailurePolicy": {
                "rules": [{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}}]
            },
            "successPolicy": {"rules": [{"succeededIndexes": "0-1", "succeededCount": 1}]},
            "podReplacementPolicy": "Failed",
            "ttlSecondsAfterFinished": 60,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "pi", "image": "perl:5", "command": ["perl"]}],
                }
            },
        },
    }


def trainjob() -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "mnist"},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 4}}},
        },
    }


# -- what is valid -----------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_upstream_example_validates_clean(path: Path) -> None:
    docs = documents(path)
    assert docs
    for doc in docs:
        assert schema.known(doc["apiVersion"], doc["kind"]), (doc["apiVersion"], doc["kind"])
        assert problems(doc) == []


def test_every_kind_has_a_schema_and_fleet_written_documents_validate_clean() -> None:
    assert len(schema.SCHEMAS) == 10
    for doc in (pytorchjob(), batch_job(), trainjob()):
        assert problems(doc) == [], doc["kind"]


def test_every_transformed_schema_is_a_valid_draft_4_schema() -> None:
    for name in schema.SCHEMAS.values():
        raw = json.loads((CRDS / name).read_text(encoding="utf-8"))
        jsonschema.Draft4Validator.check_schema(schema.structural(raw))


def test_metadata_and_status_are_not_validated_here() -> None:
    doc = pytorchjob()
    doc["metadata"]["labelz"] = {"a": "b"}
    doc["status"] = {"anything": [1, 2, {"goes": True}]}
    assert problems(doc) == []


# -- the typos users make --------------------------------------------------------------------


def test_a_replica_typo_inside_the_replica_spec_map_is_refused_with_a_suggestion() -> None:
    doc = pytorchjob()
    worker = doc["spec"]["pytorchReplicaSpecs"]["Worker"]
    worker["replcas"] = worker.pop("replicas")
    assert problems(doc) == [
        (
            "spec.pytorchReplicaSpecs.Worker.replcas",
            "unknown field 'replcas' (did you mean 'replicas'?)",
        )
    ]


def test_resource_instead_of_resources_in_a_container_is_refused() -> None:
    doc = pytorchjob()
    container = doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["resource"] = container.pop("resources")
    assert problems(doc) == [
        (
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resource",
            "unknown field 'resource' (did you mean 'resources'?)",
        )
    ]


def test_a_scheduling_policy_typo_is_refused() -> None:
    doc = pytorchjob()
    policy = doc["spec"]["runPolicy"]["schedulingPolicy"]
    policy["priorityClas"] = policy.pop("priorityClass")
    assert problems(doc) == [
        (
            "spec.runPolicy.schedulingPolicy.priorityClas",
            "unknown field 'priorityClas' (did you mean 'priorityClass'?)",
        )
    ]


def test_a_volcano_task_typo_is_refused() -> None:
    (doc,) = documents(paths.KIND_EXAMPLES / "volcano-job.yaml")
    doc["spec"]["tasks"][0]["minAvalable"] = 1
    assert problems(doc) == [
        ("spec.tasks[0].minAvalable", "unknown field 'minAvalable' (did you mean 'minAvailable'?)")
    ]


def test_a_jobset_typo_inside_its_job_template_is_refused() -> None:
    (doc,) = documents(paths.KIND_EXAMPLES / "jobset-paralleljobs.yaml")
    job_spec = doc["spec"]["replicatedJobs"][1]["template"]["spec"]
    job_spec["parallelizm"] = job_spec.pop("parallelism")
    assert problems(doc) == [
        (
            "spec.replicatedJobs[1].template.spec.parallelizm",
            "unknown field 'parallelizm' (did you mean 'parallelism'?)",
        )
    ]


def test_a_field_nothing_resembles_gets_no_suggestion() -> None:
    doc = pytorchjob()
    doc["spec"]["xyzzy"] = 1
    assert problems(doc) == [("spec.xyzzy", "unknown field 'xyzzy'")]


def test_a_wrong_type_names_what_was_expected_and_what_was_found() -> None:
    doc = pytorchjob()
    doc["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "two"
    doc["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = "1"
    doc["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"] = {"a": 1}
    assert problems(doc) == [
        (
            "spec.pytorchReplicaSpecs.Master.replicas",
            "expected an integer, not the string '1' (remove the quotes)",
        ),
        (
            "spec.pytorchReplicaSpecs.Master.template.spec.containers",
            "expected a list, not a mapping",
        ),
        ("spec.pytorchReplicaSpecs.Worker.replicas", "expected an integer, not the string 'two'"),
    ]


def test_an_enum_names_the_allowed_values_and_a_bound_its_limit() -> None:
    doc = batch_job()
    doc["spec"]["completionMode"] = "Indexd"
    doc["spec"]["parallelism"] = -1
    assert problems(doc) == [
        ("spec.parallelism", "must be at least 0, not -1"),
        ("spec.completionMode", "must be 'NonIndexed' or 'Indexed', not the string 'Indexd'"),
    ]


def test_an_unknown_kind_is_not_known_and_has_no_problems_to_ask_for() -> None:
    assert schema.known(*PYTORCH)
    assert not schema.known("kubeflow.org/v1", "PyTorchJobs")
    assert not schema.known("kubeflow.org/v2", "PyTorchJob")
    with pytest.raises(KeyError):
        schema.problems("kubeflow.org/v1", "PyTorchJobs", {})


def test_every_problem_is_reported_in_document_order() -> None:
    doc = pytorchjob()
    spec = doc["spec"]
    master, worker = spec["pytorchReplicaSpecs"]["Master"], spec["pytorchReplicaSpecs"]["Worker"]
    worker["replcas"] = worker.pop("replicas")
    master["restartPolicy"] = 3
    spec["runPolicy"]["schedulingPolicy"]["priorityClas"] = "x"
    master["template"]["spec"]["containers"][0]["imag"] = "x"
    found = problems(doc)
    assert [path for path, _ in found] == [
        "spec.runPolicy.schedulingPolicy.priorityClas",
        "spec.pytorchReplicaSpecs.Master.restartPolicy",
        "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].imag",
        "spec.pytorchReplicaSpecs.Worker.replcas",
    ]
    assert problems(copy.deepcopy(doc)) == found


# -- the Kubernetes semantics ----------------------------------------------------------------


def _open_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "open": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {"known": {"type": "string"}},
            },
            "closed": {"type": "object", "properties": {"known": {"type": "string"}}},
            "empty": {"type": "object"},
            "embedded": {
                "type": "object",
                "x-kubernetes-embedded-resource": True,
                "properties": {"spec": {"type": "object", "properties": {}}},
            },
        },
    }


def _paths_of(raw: dict[str, Any], instance: dict[str, Any]) -> list[str]:
    checker = schema.validator_class()(schema.structural(raw))
    return sorted(".".join(map(str, e.absolute_path)) for e in checker.iter_errors(instance))


def test_the_transformation_keeps_preserve_unknown_fields_subtrees_open() -> None:
    transformed = schema.structural(_open_schema())
    assert "additionalProperties" not in transformed["properties"]["open"]
    assert transformed["properties"]["closed"]["additionalProperties"] is False
    assert transformed["properties"]["empty"]["additionalProperties"] is False
    instance = {
        "open": {"known": "a", "unknown": {"deep": [{"deeper": 1}]}},
        "closed": {"known": "a", "unknown": 1},
        "empty": {"anything": 1},
        "embedded": {"apiVersion": "v1", "kind": "Pod", "metadata": {"x": 1}, "spex": {}},
    }
    assert _paths_of(_open_schema(), instance) == [
        "closed.unknown",
        "embedded.spex",
        "empty.anything",
    ]
    # The known fields of an open object are still checked.
    assert _paths_of(_open_schema(), {"open": {"known": 1}}) == ["open.known"]


def test_int_or_string_takes_an_integer_or_a_string_and_refuses_a_float() -> None:
    doc = pytorchjob()
    limits = doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0][
        "resources"
    ]["limits"]
    limits.update({"cpu": "500m", "nvidia.com/gpu": 8, "memory": "not a quantity"})
    assert problems(doc) == []  # the quantity's syntax is Fleet's check, not the schema's
    limits["cpu"] = 0.5
    limits["memory"] = True
    path = "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].resources.limits"
    assert problems(doc) == [
        (f"{path}.cpu", "expected an integer or a string, not the number 0.5 (quote it: '0.5')"),
        (f"{path}.memory", "expected an integer or a string, not the boolean true"),
    ]


def test_a_null_field_counts_as_absent_as_the_api_server_prunes_it() -> None:
    doc = pytorchjob()
    doc["spec"]["runPolicy"] = None
    container = doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["env"] = None
    assert problems(doc) == []
    container["name"] = None
    assert problems(doc) == [
        (
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].name",
            "required field is missing",
        )
    ]


def test_a_list_map_refuses_two_items_with_the_same_keys_a_default_counting() -> None:
    doc = pytorchjob()
    container = doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    container["ports"] = [
        {"containerPort": 23456},
        {"containerPort": 23457},
        {"containerPort": 23456, "protocol": "TCP"},
    ]
    assert problems(doc) == [
        (
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].ports[2]",
            "duplicate entry: containerPort 23456, protocol 'TCP' (also at [0])",
        )
    ]


def test_nothing_is_loaded_before_a_kind_is_first_validated() -> None:
    code = (
        "import sys\n"
        "from fleet.manifests.kinds import schema\n"
        "assert schema.known('kubeflow.org/v1', 'PyTorchJob')\n"
        "print(schema.validator.cache_info().currsize, 'jsonschema' in sys.modules)\n"
        "schema.problems('batch/v1', 'Job', {'spec': {'template': {}}})\n"
        "print(schema.validator.cache_info().currsize, 'jsonschema' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=paths.ROOT
    )
    assert done.stdout.split() == ["0", "False", "1", "True"]


# -- the speed mechanism ---------------------------------------------------------------------


def _mutations(doc: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """(path, replacement) pairs: every mapping gets a stray field, every value a wrong type."""
    if isinstance(doc, dict):
        yield path, {**doc, "strayField": 1}
        for key, value in doc.items():
            yield from _mutations(value, (*path, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            yield from _mutations(value, (*path, i))
    yield path, [] if not isinstance(doc, list) else "a string"
    yield path, 1.5


def _replaced(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    if not path:
        return value if isinstance(value, dict) else doc
    out = copy.deepcopy(doc)
    node: Any = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return out


def _jsonschema_descend(validator: Any, instance: Any, node: Any, path: str | int) -> Iterator[Any]:
    """The reference: jsonschema's own descent, a fresh validator per node every time."""
    yield from validator.descend(instance, node, path=path)


def test_the_cached_descent_finds_what_jsonschemas_own_descent_finds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    corpus = [pytorchjob(), batch_job(), *documents(paths.KIND_EXAMPLES / "volcano-mpi.yaml")]
    cases = [
        _replaced(doc, path, value)
        for doc in corpus
        for path, value in _mutations(doc["spec"], ("spec",))
    ]
    fast = [problems(doc) for doc in cases]
    assert sum(1 for found in fast if found) > len(cases) // 2
    monkeypatch.setattr(schema, "_descend", _jsonschema_descend)
    assert [problems(doc) for doc in cases] == fast


def test_a_schema_node_gets_its_validator_once(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = pytorchjob()
    assert problems(doc) == []
    cls = type(schema.validator(*PYTORCH))
    built = []
    evolve = cls.evolve

    def counting(self: Any, **changes: Any) -> Any:
        built.append(1)
        return evolve(self, **changes)

    monkeypatch.setattr(cls, "evolve", counting)
    assert problems(doc) == []
    assert built == []


# -- the data's provenance -------------------------------------------------------------------


def test_the_import_tool_reproduces_the_pytorchjob_schema_from_the_members_crd() -> None:
    member_crd = paths.ROOT / "deploy" / "member" / "crds" / "kubeflow.org_pytorchjobs.yaml"
    crd = yaml.load(member_crd.read_text(encoding="utf-8"), Loader=yaml.CSafeLoader)
    ((name, written),) = import_crds.schemas(crd).items()
    assert name == schema.SCHEMAS[PYTORCH]
    assert written == json.loads((CRDS / name).read_text(encoding="utf-8"))


def test_the_import_tool_drops_description_keywords_but_keeps_fields_named_so() -> None:
    crd = {
        "type": "object",
        "description": "prose",
        "properties": {
            "description": {"type": "string", "description": "a field named description"},
            "items": {"type": "array", "items": {"type": "object", "description": "x"}},
        },
    }
    assert import_crds.strip_descriptions(crd) == {
        "type": "object",
        "properties": {
            "description": {"type": "string"},
            "items": {"type": "array", "items": {"type": "object"}},
        },
    }


def test_a_key_of_a_keyed_list_may_be_any_yaml_value() -> None:
    # A container's name is the key of the containers list: a YAML set or date there
    # is a type problem, not a crash while looking for duplicates.
    doc = pytorchjob()
    containers = doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    containers.append({**containers[0], "name": {"a", "b"}})
    containers.append({**containers[0], "name": {"a", "b"}})
    found = problems(doc)
    path = "spec.pytorchReplicaSpecs.Worker.template.spec.containers"
    assert (f"{path}[1].name", "expected a string, not a set") in found or any(
        p.startswith(f"{path}[1]") for p, _ in found
    )
