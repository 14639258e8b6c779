"""GPUs chosen by their attributes: node selector and node affinity terms on GPU labels.

The requirements are evaluated as Kubernetes evaluates them (terms ORed,
expressions ANDed; ``In``, ``NotIn``, ``Exists``, ``DoesNotExist``, ``Gt``,
``Lt`` with integer parsing) against the labels of the member clusters' GPU
types; a job gets the types it accepts, and one that no type meets is refused
at the field that excluded the last.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from fleet.core.cells.config import load_cell_config
from fleet.core.cells.spec import CellConfigError
from fleet.core.quota import QuotaTree
from fleet.manifests import convert, gpu_terms
from fleet.manifests.errors import SpecError
from fleet.manifests.gpu_terms import Requirement
from tests.manifests.factories import dump, make_cluster, make_job, make_tree
from tests.manifests.test_convert import model_of

PRODUCT = "nvidia.com/gpu.product"
MEMORY = "nvidia.com/gpu.memory"
FAMILY = "nvidia.com/gpu.family"
A40 = {PRODUCT: "NVIDIA-A100-SXM4-40GB", MEMORY: 40960, FAMILY: "ampere"}
A80 = {PRODUCT: "NVIDIA-A100-SXM4-80GB", MEMORY: "81920", FAMILY: "ampere"}
H100 = {PRODUCT: "NVIDIA-H100-80GB-HBM3", MEMORY: "81559", FAMILY: "hopper"}
T4 = {MEMORY: "n-a"}  # its product is its name; a memory that is not a number
WORKER = "spec.pytorchReplicaSpecs.Worker.template"
TERMS = f"{WORKER}.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def cells(types: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "physicalCluster": {
            "skuTypes": {name: {"gpu": 1, "labels": labels} for name, labels in types.items()},
            "cellTypes": {
                f"{name}-NODE": {"childCellType": name, "childCellNumber": 8, "isNodeLevel": True}
                for name in types
            },
            "physicalCells": [
                {"cellType": f"{name}-NODE", "cellAddress": f"{name.lower()}-0"} for name in types
            ],
        }
    }


def clusters() -> list[Any]:
    return convert.load_clusters(
        dump(
            make_cluster("a", cells=cells({"A100-40GB": A40, "A100-80GB": A80})),
            make_cluster("b", cells=cells({"H100": H100, "T4": T4})),
        )
    )


@pytest.fixture
def tree() -> QuotaTree:
    return convert.load_quota(dump(make_tree()))[0]


def job_with(
    *expressions: list[dict[str, Any]],
    selector: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A job whose Worker template has these terms (one list of expressions each)."""
    doc = make_job(master=False, workers=2, annotations=annotations)
    spec = doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    if expressions:
        terms = [{"matchExpressions": exprs} for exprs in expressions]
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
            }
        }
    if selector:
        spec["nodeSelector"] = selector
    return doc


def convert_job(tree: QuotaTree, doc: dict[str, Any]) -> Any:
    return convert.to_job(model_of(doc), policy=None, tree=tree, seq=1, clusters=clusters())


def refusal(tree: QuotaTree, doc: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as e:
        convert_job(tree, doc)
    return [(i.path, i.message) for i in e.value.issues]


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "operator": op}
    if values:
        out["values"] = list(values)
    return out


# Evaluation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "values", "labels", "expected"),
    [
        ("In", ("a", "b"), {"k": "b"}, True),
        ("In", ("a",), {}, False),
        ("NotIn", ("a",), {"k": "b"}, True),
        ("NotIn", ("a",), {}, True),  # a node without the label meets NotIn
        ("NotIn", ("a",), {"k": "a"}, False),
        ("Exists", (), {"k": ""}, True),
        ("Exists", (), {}, False),
        ("DoesNotExist", (), {}, True),
        ("DoesNotExist", (), {"k": "x"}, False),
        ("Gt", ("40000",), {"k": "40960"}, True),
        ("Gt", ("40960",), {"k": "40960"}, False),
        ("Gt", ("40000",), {"k": "lots"}, False),  # not an integer: no match
        ("Gt", ("40000",), {}, False),
        ("Lt", ("50000",), {"k": "40960"}, True),
        ("Lt", ("50000",), {"k": "+40960"}, True),  # as Go's ParseInt reads it
        ("Lt", ("50000",), {"k": "4e4"}, False),
        ("Gt", ("-1",), {"k": "0"}, True),
    ],
)
def test_requirements_are_evaluated_as_kubernetes_does(
    op: str, values: tuple[str, ...], labels: dict[str, str], expected: bool
) -> None:
    assert gpu_terms.matches(Requirement("", "k", op, values), labels) is expected


@pytest.mark.parametrize(
    ("doc", "skus", "sku"),
    [
        pytest.param(job_with([expr(MEMORY, "Gt", "81600")]), (), "A100-80GB", id="gt-one-type"),
        pytest.param(
            job_with([expr(MEMORY, "Gt", "40960")], [expr(FAMILY, "In", "hopper")]),
            ("A100-80GB", "H100"),
            None,
            id="terms-ored",
        ),
        pytest.param(
            job_with(
                [expr(PRODUCT, "NotIn", "NVIDIA-A100-SXM4-40GB"), expr(MEMORY, "Lt", "90000")]
            ),
            ("A100-80GB", "H100"),
            None,
            id="notin-and-lt-anded",
        ),
        pytest.param(
            job_with([expr(FAMILY, "Exists")]),
            ("A100-40GB", "A100-80GB", "H100"),
            None,
            id="exists",
        ),
        pytest.param(job_with([expr(FAMILY, "DoesNotExist")]), (), "T4", id="does-not-exist"),
        pytest.param(
            job_with([expr("topology.kubernetes.io/zone", "In", "z1")]),
            (),
            None,
            id="other-keys-left-to-the-member",
        ),
        pytest.param(
            job_with(selector={PRODUCT: "NVIDIA-H100-80GB-HBM3"}), (), "H100", id="product-selector"
        ),
        pytest.param(
            job_with(selector={FAMILY: "ampere"}), ("A100-40GB", "A100-80GB"), None, id="selector"
        ),
        pytest.param(
            job_with([expr(MEMORY, "Gt", "40960")], annotations={"fleet.io/gpu-type": "H100"}),
            (),
            "H100",
            id="annotation-and-terms-agree",
        ),
    ],
)
def test_a_job_gets_the_types_its_terms_accept(
    tree: QuotaTree, doc: dict[str, Any], skus: tuple[str, ...], sku: str | None
) -> None:
    job = convert_job(tree, doc)
    assert (job.gpu_skus, job.gpu_sku) == (skus, sku)


def test_the_terms_are_what_the_reason_names(tree: QuotaTree) -> None:
    doc = job_with([expr(MEMORY, "Gt", "40960")], [expr(FAMILY, "In", "hopper")])
    job = convert_job(tree, doc)
    assert job.gpu_terms == "(GPU memory > 40960) or (GPU family = hopper)"
    assert job.gpu_ask == "A100-80GB or H100 ((GPU memory > 40960) or (GPU family = hopper))"
    # an exact type alone, as always: no terms
    assert convert_job(tree, job_with(selector={PRODUCT: "T4"})).gpu_terms == ""


def test_a_cpu_only_template_asks_nothing_of_the_gpus(tree: QuotaTree) -> None:
    doc = job_with([expr(MEMORY, "Gt", "999999")])
    cpu = {"cpu": "1"}
    worker = doc["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["resources"] = {"requests": cpu, "limits": cpu}
    job = convert_job(tree, doc)
    assert (job.gpu_sku, job.gpu_skus, job.gpu_terms) == (None, (), "")


# Refusals ------------------------------------------------------------------------------


def test_a_term_no_type_meets_is_refused_at_its_expression(tree: QuotaTree) -> None:
    doc = job_with([expr(FAMILY, "In", "ampere"), expr(MEMORY, "Gt", "90000")])
    ((path, message),) = refusal(tree, doc)
    assert path == f"{TERMS}.nodeSelectorTerms[0].matchExpressions[1]"
    assert message == (
        "no GPU type of the member clusters the job may use meets GPU memory > 90000 together "
        "with the GPU requirements before it (the members have nvidia.com/gpu.memory: "
        "a: A100-40GB 40960, A100-80GB 81920; b: H100 81559, T4 n-a)"
    )


def test_every_failing_term_is_named(tree: QuotaTree) -> None:
    doc = job_with([expr(MEMORY, "Gt", "90000")], [expr(PRODUCT, "In", "B200")])
    paths = [p for p, _ in refusal(tree, doc)]
    assert paths == [
        f"{TERMS}.nodeSelectorTerms[0].matchExpressions[0]",
        f"{TERMS}.nodeSelectorTerms[1].matchExpressions[0]",
    ]


def test_an_annotation_the_terms_exclude_is_refused_at_the_term(tree: QuotaTree) -> None:
    doc = job_with([expr(MEMORY, "Lt", "50000")], annotations={"fleet.io/gpu-type": "H100"})
    ((path, message),) = refusal(tree, doc)
    assert path == f"{TERMS}.nodeSelectorTerms[0].matchExpressions[0]"
    assert "meets GPU memory < 50000 together with the GPU requirements before it" in message


def test_a_selector_no_type_meets_is_refused_at_its_entry(tree: QuotaTree) -> None:
    ((path, message),) = refusal(tree, job_with(selector={FAMILY: "blackwell"}))
    assert path == f"{WORKER}.spec.nodeSelector.{FAMILY}"
    assert "(the members have nvidia.com/gpu.family: a: A100-40GB ampere" in message


def test_an_exact_type_no_member_has_is_refused_as_always(tree: QuotaTree) -> None:
    ((path, message),) = refusal(tree, job_with(annotations={"fleet.io/gpu-type": "B200"}))
    assert path == "metadata.annotations.fleet.io/gpu-type"
    assert message == (
        "GPU type 'B200' is not a leaf cell type of any member cluster the job may use "
        "(a: A100-40GB, A100-80GB; b: H100, T4)"
    )


@pytest.mark.parametrize(
    ("expression", "field", "message"),
    [
        (expr(MEMORY, "Gt", "40000", "50000"), "values", "Gt needs exactly one value"),
        (expr(MEMORY, "Lt", "forty"), "values", "Lt needs exactly one value, a decimal integer"),
        (expr(MEMORY, "Gt"), "values", "Gt needs exactly one value"),
        (expr(FAMILY, "In"), "values", "In needs at least one value"),
        (expr(FAMILY, "Exists", "x"), "values", "Exists takes no values"),
        (expr(FAMILY, "Like", "amp"), "operator", "'Like' is not an operator"),
    ],
)
def test_an_invalid_requirement_is_refused_at_its_field(
    tree: QuotaTree, expression: dict[str, Any], field: str, message: str
) -> None:
    ((path, text),) = refusal(tree, job_with([copy.deepcopy(expression)]))
    assert path == f"{TERMS}.nodeSelectorTerms[0].matchExpressions[0].{field}"
    assert text.startswith(message)


def test_invalid_requirements_on_other_keys_are_left_to_the_member(tree: QuotaTree) -> None:
    job = convert_job(tree, job_with([expr("example.com/rack", "Gt", "a", "b")]))
    assert (job.gpu_sku, job.gpu_skus) == (None, ())


def test_a_name_is_accepted_only_where_every_member_having_it_agrees(tree: QuotaTree) -> None:
    """``A100`` of member ``x`` has 80 GB, that of ``y`` 40 GB: a job asking more than
    40 GiB may not take the name (it would be placed on ``y`` too)."""
    members = convert.load_clusters(
        dump(
            make_cluster("x", cells=cells({"A100": {MEMORY: "81920"}, "H100": H100})),
            make_cluster("y", cells=cells({"A100": {MEMORY: "40960"}})),
        )
    )
    doc = job_with([expr(MEMORY, "Gt", "40960")])
    job = convert.to_job(model_of(doc), policy=None, tree=tree, seq=1, clusters=members)
    assert (job.gpu_sku, job.gpu_skus) == ("H100", ())


# A GPU type's attributes ----------------------------------------------------------------


def test_sku_type_labels_are_parsed_and_default_to_the_product() -> None:
    config = load_cell_config(cells({"A100-80GB": A80, "T4": {}}))
    assert config.labels_of("A100-80GB") == {**A80, MEMORY: "81920"}
    assert config.sku_types["A100-80GB"].labels == tuple(
        sorted(config.labels_of("A100-80GB").items())
    )
    assert config.labels_of("T4") == {PRODUCT: "T4"}
    plain = load_cell_config(
        {
            "physicalCluster": {
                "cellTypes": {
                    "NODE": {"childCellType": "GPU", "childCellNumber": 2, "isNodeLevel": True}
                },
                "physicalCells": [{"cellType": "NODE", "cellAddress": "n-0"}],
            }
        }
    )
    assert plain.labels_of("GPU") == {PRODUCT: "GPU"}


@pytest.mark.parametrize(
    ("labels", "path"),
    [
        ({"nvidia.com/gpu memory": "1"}, "nvidia.com/gpu memory"),
        ({MEMORY: "not a value"}, MEMORY),
        ({MEMORY: True}, MEMORY),
        ({MEMORY: ["1"]}, MEMORY),
    ],
)
def test_bad_sku_type_labels_are_refused_with_their_path(labels: dict[str, Any], path: str) -> None:
    with pytest.raises(CellConfigError) as e:
        load_cell_config(cells({"A": labels}))
    assert e.value.path == f"spec.cells.physicalCluster.skuTypes.A.labels.{path}"
