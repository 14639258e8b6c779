"""Cells built from Node labels, and virtual clusters as requests (fleet.manifests.topology)."""

from __future__ import annotations

from typing import Any

import pytest

from fleet.core.cells.placer import CellPlacer
from fleet.manifests import documents, topology
from fleet.manifests.models import MemberClusterModel
from tests.manifests.factories import dump

ZONE = "topology.kubernetes.io/zone"
RACK = "fleet.io/rack"
GROUP = "fleet.io/nvlink-group"
H100 = "NVIDIA-H100-80GB-HBM3"
A100_40 = "NVIDIA-A100-SXM4-40GB"
A100_80 = "NVIDIA-A100-SXM4-80GB"
MEMORY = {H100: "81559", A100_40: "40960", A100_80: "81920"}


def gpu_node(name: str, product: str, gpus: int = 8, **labels: str) -> dict[str, Any]:
    return {
        "name": name,
        "labels": {
            "nvidia.com/gpu.product": product,
            "nvidia.com/gpu.memory": MEMORY[product],
            **{k.replace("__", "/").replace("_", "."): v for k, v in labels.items()},
        },
        "capacity": {"nvidia.com/gpu": gpus, "cpu": 12 * gpus, "memory": f"{128 * gpus}Gi"},
    }


def racked(name: str, product: str, zone: str, rack: str, gpus: int = 8) -> dict[str, Any]:
    node = gpu_node(name, product, gpus)
    node["labels"] |= {ZONE: zone, RACK: rack}
    return node


def member(
    nodes: list[dict[str, Any]],
    vcs: dict[str, list[dict[str, Any]]] | None = None,
    **topo: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "simulated": True,
        "topology": {"levels": [ZONE, RACK], **topo},
        "nodes": nodes,
    }
    if vcs is not None:
        spec["virtualClusters"] = {vc: {"requests": asks} for vc, asks in vcs.items()}
    return {
        "apiVersion": "fleet.io/v1alpha1",
        "kind": "MemberCluster",
        "metadata": {"name": "m1"},
        "spec": spec,
    }


def model(doc: dict[str, Any]) -> MemberClusterModel:
    return MemberClusterModel.model_validate(doc)


def problems(doc: dict[str, Any]) -> list[tuple[str, str]]:
    _, issues = documents.parse_documents(dump(doc))
    return [(i.path, i.message) for i in issues]


def two_racks() -> list[dict[str, Any]]:
    return [racked(f"h-{i}", H100, "z1", "r1" if i < 4 else "r2") for i in range(8)]


def test_racks_of_nodes_become_cells_of_their_levels() -> None:
    config = model(member(two_racks())).cell_config()
    assert config.leaf_types == (H100,)
    (top,) = config.physical_cells
    assert top.address == "z1"
    assert [c.address for c in top.children] == ["z1/r1", "z1/r2"]
    racks = top.children
    assert [[n.node for n in r.children] for r in racks] == [
        ["h-0", "h-1", "h-2", "h-3"],
        ["h-4", "h-5", "h-6", "h-7"],
    ]
    rack_type = config.cell_types[racks[0].cell_type]
    assert (rack_type.child_number, config.cell_types[rack_type.child or ""].is_node_level) == (
        4,
        True,
    )
    assert racks[0].cell_type == f"{H100}-rack32"
    # GPU indices 0..7 on every node; the skuType holds a GPU's share of cpu and memory.
    assert sorted(leaf.leaf_index for leaf in racks[0].children[0].children) == list(range(8))
    sku = config.sku_types[H100]
    assert (sku.gpu, sku.cpu, sku.memory) == (1, 12_000, 128 * 2**30)
    assert config.nodes()["h-0"]["nvidia.com/gpu"] == 8


def test_racks_of_different_shapes_are_cells_of_their_own_types() -> None:
    nodes = two_racks()[:7]  # r2 has 3 nodes
    config = model(member(nodes)).cell_config()
    assert len(config.physical_cells) == 2
    shapes = sorted(config.cell_types[t].child_number for t in config.chains)
    assert shapes == [1, 1]  # one zone cell per rack shape
    racks = [top.children[0] for top in config.physical_cells]
    assert sorted(config.cell_types[r.cell_type].child_number for r in racks) == [3, 4]


def test_products_are_leaf_types_with_their_gpu_labels() -> None:
    nodes = [racked("a", A100_40, "z1", "r1", 4), racked("b", A100_80, "z1", "r1")]
    built = topology.physical_cluster(model(member(nodes)).topology_spec(), node_list(nodes))
    skus = built.physical["skuTypes"]
    assert skus[A100_40]["labels"] == {
        "nvidia.com/gpu.memory": "40960",
        "nvidia.com/gpu.product": A100_40,
    }
    assert skus[A100_80]["labels"]["nvidia.com/gpu.memory"] == "81920"
    config = model(member(nodes)).cell_config()
    assert set(config.leaf_types) == {A100_40, A100_80}
    # One zone value, two products: two top cells, addresses kept unique.
    assert sorted(top.address for top in config.physical_cells) == ["z1", "z1~2"]


def node_list(nodes: list[dict[str, Any]]) -> list[topology.Node]:
    doc = model(member(nodes))
    return doc.topology_nodes([])


def test_gpu_groups_are_a_level_inside_the_node() -> None:
    nodes = [racked("h-0", H100, "z1", "r1")]
    nodes[0]["labels"][GROUP] = "4"
    config = model(member(nodes, gpuGroup=GROUP)).cell_config()
    node_cell = config.physical_cells[0].children[0].children[0]
    assert node_cell.node == "h-0"
    assert [len(g.children) for g in node_cell.children] == [4, 4]
    assert [leaf.leaf_index for leaf in node_cell.children[1].children] == [4, 5, 6, 7]


def test_a_group_size_that_does_not_divide_the_gpus_is_refused_at_its_label() -> None:
    nodes = [racked("h-0", H100, "z1", "r1")]
    nodes[0]["labels"][GROUP] = "3"
    [(path, message)] = problems(member(nodes, gpuGroup=GROUP))
    assert path == f"spec.nodes[0].labels.{GROUP}"
    assert "dividing its 8" in message


def test_node_selector_picks_the_nodes_and_cpu_only_nodes_count_when_selected() -> None:
    cpu = {"name": "cpu-0", "labels": {"pool": "train"}, "capacity": {"cpu": 64, "memory": "256Gi"}}
    gpu = racked("h-0", H100, "z1", "r1")
    gpu["labels"]["pool"] = "train"
    other = racked("h-1", H100, "z1", "r1")
    plain = model(member([cpu, gpu, other])).cell_config()
    assert sorted(plain.nodes()) == ["h-0", "h-1"]  # GPU nodes only
    chosen = model(
        member([cpu, gpu, other], nodeSelector={"matchLabels": {"pool": "train"}})
    ).cell_config()
    assert sorted(chosen.cell_nodes()) == ["h-0"]
    assert sorted(chosen.cpu_nodes()) == ["cpu-0"]


def test_nodes_with_two_products_give_each_its_own_cell_type() -> None:
    mixed = {
        "name": "mix-0",
        "labels": {ZONE: "z1", RACK: "r1"},
        "capacity": {"gpu.fleet.io/A10": 2, "gpu.fleet.io/T4": 4, "cpu": 24, "memory": "96Gi"},
    }
    config = model(member([mixed])).cell_config()
    assert set(config.leaf_types) == {"A10", "T4"}
    leaves = {
        config.cell_types[t.cell_type].leaf_type: sorted(leaf.leaf_index for leaf in _leaves(t))
        for t in config.physical_cells
    }
    assert leaves == {"A10": [0, 1], "T4": [2, 3, 4, 5]}
    assert config.nodes()["mix-0"]["nvidia.com/gpu"] == 6


def _leaves(cell: Any) -> list[Any]:
    return [cell] if not cell.children else [x for c in cell.children for x in _leaves(c)]


def test_requests_become_virtual_cells_of_the_matching_chain() -> None:
    nodes = two_racks() + [racked(f"a-{i}", A100_80, "z2", "r3") for i in range(2)]
    vcs = {
        "team-a": [
            {
                "nodes": 4,
                "within": RACK,
                "nodeSelector": {"matchLabels": {"nvidia.com/gpu.product": H100}},
            }
        ],
        "team-b": [
            {"gpus": 12, "nodeSelector": {"matchLabels": {"nvidia.com/gpu.product": A100_80}}}
        ],
        "team-c": [{"nodes": 2}],
    }
    doc = model(member(nodes, vcs))
    assert doc.problems() == []
    config = doc.cell_config()
    owned = {vc: [(c.cell_type, c.number) for c in spec.cells] for vc, spec in config.vcs.items()}
    assert owned == {
        "team-a": [(f"{H100}-rack32", 1)],
        "team-b": [(A100_80, 12)],
        # the A100 nodes are split by team-b's GPUs: team-c's nodes are H100s
        "team-c": [(f"{H100}-node8", 2)],
    }
    # The placer takes it: team-a's rack is guaranteed.
    placer = CellPlacer("m1", config)
    assert placer is not None


def test_a_request_the_member_cannot_hold_is_refused_with_its_reason() -> None:
    vcs = {"team-a": [{"nodes": 3, "within": RACK}]}
    [(path, message)] = problems(member(two_racks(), vcs))
    assert path == "spec.virtualClusters.team-a.requests[0]"
    assert "3 node(s) within one rack" in message
    assert "holds 4 nodes" in message
    too_many = {"team-a": [{"gpus": 65}]}
    [(path, message)] = problems(member(two_racks(), too_many))
    assert "has 64 more free" in message


def test_requests_share_the_cells_by_buddy_count() -> None:
    # Two VCs each asking one whole rack take both; a third asking a node is refused.
    vcs = {
        "a": [{"nodes": 4, "within": RACK}],
        "b": [{"nodes": 4, "within": RACK}],
        "c": [{"nodes": 1}],
    }
    [(path, message)] = problems(member(two_racks(), vcs))
    assert path == "spec.virtualClusters.c.requests[0]"
    assert "0 more free" in message


def test_within_must_name_a_level() -> None:
    vcs = {"a": [{"nodes": 4, "within": "fleet.io/block"}]}
    [(path, message)] = problems(member(two_racks(), vcs))
    assert path == "spec.virtualClusters.a.requests[0].within"
    assert "not a level" in message


@pytest.mark.parametrize(
    ("spec", "path", "text"),
    [
        ({"nodes": [], "kubeconfig": {"path": "x"}, "simulated": False}, "spec", "simulated"),
        ({"topology": None}, "spec.topology", "not null"),
    ],
)
def test_model_errors(spec: dict[str, Any], path: str, text: str) -> None:
    doc = member(two_racks())
    doc["spec"].update(spec)
    found = problems(doc)
    assert found and found[0][0] == path and text in found[0][1], found


def test_a_real_member_without_nodes_yet_has_no_cells_and_owes_its_requests() -> None:
    doc = member([], {"a": [{"nodes": 1}]})
    doc["spec"] = {
        "kubeconfig": {"path": "m1.kubeconfig"},
        "topology": doc["spec"]["topology"],
        "virtualClusters": doc["spec"]["virtualClusters"],
    }
    m = model(doc)
    assert m.problems() == []
    config = m.cell_config()
    assert config.physical_cells == () and list(config.vcs) == ["a"]
    [short] = m.shortfalls()
    assert (short.vc, short.held) == ("a", 0)
    doc["status"] = {"nodes": two_racks()}
    m = model(doc)
    assert m.shortfalls() == [] and len(m.cell_config().nodes()) == 8


def test_node_keys_say_which_nodes_moved() -> None:
    nodes = two_racks()
    spec = model(member(nodes)).topology_spec()
    moved = two_racks()
    moved[0]["labels"][RACK] = "r9"
    del moved[7]
    old = topology.node_keys(spec, node_list(nodes))
    new = topology.node_keys(spec, node_list(moved))
    assert sorted(n for n in old if old[n] != new.get(n)) == ["h-0", "h-7"]


def test_the_build_is_the_same_whatever_the_node_order() -> None:
    nodes = two_racks()
    a = model(member(nodes)).cell_config()
    b = model(member(list(reversed(nodes)))).cell_config()
    assert a.physical_cells == b.physical_cells and a.cell_types == b.cell_types


def test_a_node_label_kubernetes_would_refuse_is_refused_at_its_path() -> None:
    nodes = [racked("h-0", H100, "z1", "r1")]
    nodes[0]["labels"]["nvidia.com/gpu.product"] = "H100 80GB"
    [(path, message)] = problems(member(nodes))
    assert path == "spec.nodes[0].labels.nvidia.com/gpu.product"
    assert message == "'H100 80GB' is not a label value"


def test_two_products_whose_names_read_alike_stay_two_types() -> None:
    dotted = racked("a", H100, "z1", "r1")
    dashed = racked("b", H100, "z1", "r2")
    dotted["labels"]["nvidia.com/gpu.product"] = "X.1"
    dashed["labels"]["nvidia.com/gpu.product"] = "X-1"
    config = model(member([dotted, dashed])).cell_config()
    assert sorted(config.leaf_types) == ["X-1", "X-1-2"]
    products = {config.labels_of(t)["nvidia.com/gpu.product"] for t in config.leaf_types}
    assert products == {"X.1", "X-1"}
