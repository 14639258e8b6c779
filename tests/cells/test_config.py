"""Cell config loading: every reference config loads; every rejection names its field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from fleet.core.cells.config import load_cell_config, load_hived_file_dict
from fleet.core.cells.placer import CellPlacer
from fleet.core.cells.spec import CellConfigError
from tests.cells.conftest import FIXTURES, REFERENCE, load_yaml

REFERENCE_CONFIGS = sorted(
    [
        *(REFERENCE / "v1-master" / "config").glob("*.yaml"),
        *(REFERENCE / "v1-master" / "feature-configs").glob("*.yaml"),
        *(REFERENCE / "v2-cell-as-sku" / "test" / "config").glob("*/setting.yaml"),
    ]
)


def test_reference_configs_are_present() -> None:
    assert len(REFERENCE_CONFIGS) == 2 + 9 + 3


@pytest.mark.parametrize("path", REFERENCE_CONFIGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_reference_config_loads(path: Path) -> None:
    config = load_hived_file_dict(load_yaml(path))
    assert config.nodes()
    CellPlacer("c", config).check_invariants()


@pytest.mark.parametrize("name", ["lab6-two-vcs.yaml", "lab6-one-vc.yaml"])
def test_lab6_configs_load(name: str) -> None:
    config = load_cell_config(load_yaml(FIXTURES / name))
    nodes = config.nodes()
    assert set(nodes) == {"hostname-carol", "hostname-dan"}
    assert nodes["hostname-carol"].to_quantities() == {
        "cpu": "2",
        "memory": "4Gi",
        "nvidia.com/gpu": "1",
    }


def test_lab6_vcs() -> None:
    assert load_cell_config(load_yaml(FIXTURES / "lab6-two-vcs.yaml")).virtual_clusters() == [
        "default",
        "vc1",
    ]


def test_design_config_addresses_and_shared_node_names() -> None:
    config = load_hived_file_dict(
        load_yaml(REFERENCE / "v1-master/config/design-hivedscheduler.yaml")
    )
    nodes = config.nodes()
    # 1.0.0.2 holds two leaf types: 2 CT1 (indices 8, 9) and 8 inferred DGX1-P100 GPUs.
    assert nodes["1.0.0.2"]["nvidia.com/gpu"] == 10
    assert nodes["0.0.3.0"]["nvidia.com/gpu"] == 16
    placer = CellPlacer("c", config)
    leaves = [leaf.address for leaf in placer.topo.nodes["1.0.0.0"][0].leaves]
    # Nested addresses are joined like HiveD's: top index / node / socket / switch / GPU.
    assert leaves[0] == "3/1.0.0.0/1/1/1"
    assert [leaf.leaf_index for leaf in placer.topo.nodes["1.0.0.2"][1].leaves] == list(range(8))


def test_raw_hived_file_keys_are_ignored() -> None:
    data = load_yaml(FIXTURES / "lab6-one-vc.yaml")
    data["kubeApiServerAddress"] = "http://10.0.0.1:8080"
    assert load_hived_file_dict(data).virtual_clusters() == ["default"]


def test_no_virtual_clusters_is_one_shared_pool() -> None:
    data = load_yaml(FIXTURES / "lab6-one-vc.yaml")
    del data["virtualClusters"]
    assert load_cell_config(data).virtual_clusters() == []


BASE: dict[str, Any] = {
    "physicalCluster": {
        "cellTypes": {
            "PAIR": {"childCellType": "GPU", "childCellNumber": 2},
            "NODE": {"childCellType": "PAIR", "childCellNumber": 2, "isNodeLevel": True},
            "RACK": {"childCellType": "NODE", "childCellNumber": 2},
        },
        "physicalCells": [
            {"cellType": "RACK", "cellChildren": [{"cellAddress": "n0"}, {"cellAddress": "n1"}]},
            {"cellType": "NODE", "cellAddress": "n2", "pinnedCellId": "P"},
        ],
    },
    "virtualClusters": {
        "a": {"virtualCells": [{"cellType": "RACK.NODE", "cellNumber": 1}]},
        "b": {"virtualCells": [{"cellType": "RACK.NODE.PAIR", "cellNumber": 2}]},
        "c": {"pinnedCells": [{"pinnedCellId": "P"}]},
    },
}


def mutate(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    keys = path.split(".")
    target: Any = data
    for key in keys[:-1]:
        target = target[int(key)] if isinstance(target, list) else target[key]
    last = keys[-1]
    if isinstance(target, list):
        target[int(last)] = value
    elif value is None:
        del target[last]
    else:
        target[last] = value
    return data


def test_base_config_loads() -> None:
    config = load_cell_config(BASE)
    assert sorted(config.nodes()) == ["n0", "n1", "n2"]


@pytest.mark.parametrize(
    "address",
    [
        pytest.param("²", id="superscript two"),
        pytest.param("١", id="arabic-indic one"),
        pytest.param("9" * 5_000, id="5000 digits"),
    ],
)
def test_a_leaf_address_of_other_than_ascii_digits_takes_its_place_as_index(address: str) -> None:
    """Only ASCII digits give a leaf its index (fleet.core.digits); other text is a name."""
    data = {
        "physicalCluster": {
            "cellTypes": {
                "NODE": {"childCellType": "GPU", "childCellNumber": 2, "isNodeLevel": True}
            },
            "physicalCells": [
                {
                    "cellType": "NODE",
                    "cellAddress": "n0",
                    "cellChildren": [{"cellAddress": address}, {"cellAddress": "1"}],
                }
            ],
        }
    }
    placer = CellPlacer("c", load_cell_config(data))
    assert [leaf.leaf_index for leaf in placer.topo.nodes["n0"][0].leaves] == [0, 1]


REJECTIONS = [
    pytest.param(
        mutate("physicalCluster.cellTypes.NODE.childCellType", "PARI"),
        "spec.cells.virtualClusters.b.virtualCells[0].cellType",
        "VC b: PAIR is not the child cell type of NODE in RACK.NODE.PAIR",
        id="unknown-child-type-is-a-leaf-type-without-skus",
    ),
    pytest.param(
        mutate("physicalCluster.physicalCells.1", {"cellType": "BLADE", "cellAddress": "x"}),
        "spec.cells.physicalCluster.physicalCells[1].cellType",
        "unknown cell type 'BLADE'",
        id="unknown-physical-cell-type",
    ),
    pytest.param(
        mutate("physicalCluster.cellTypes.PAIR.childCellType", "RACK"),
        "spec.cells.physicalCluster.cellTypes.NODE.childCellType",
        "cycle in cell types: PAIR -> RACK -> NODE -> PAIR",
        id="cycle",
    ),
    pytest.param(
        mutate("physicalCluster.physicalCells.1", {"cellType": "PAIR", "cellAddress": "x"}),
        "spec.cells.physicalCluster.physicalCells[1].cellType",
        "top-level cell of type PAIR is below node level",
        id="top-cell-below-node-level",
    ),
    pytest.param(
        mutate(
            "physicalCluster.physicalCells.0",
            {"cellType": "RACK", "cellChildren": [{"cellAddress": "n0"}]},
        ),
        "spec.cells.physicalCluster.physicalCells[0].cellChildren",
        "has 1 children, cell type says childCellNumber 2",
        id="wrong-child-count",
    ),
    pytest.param(
        mutate(
            "physicalCluster.physicalCells.0",
            {"cellType": "RACK", "cellChildren": [{"cellAddress": "n0"}, {"cellAddress": "n0"}]},
        ),
        "spec.cells.physicalCluster.physicalCells[0].cellChildren[1].cellAddress",
        "duplicate cell address 0/n0",
        id="duplicate-address",
    ),
    pytest.param(
        mutate("virtualClusters.c", {"pinnedCells": [{"pinnedCellId": "Q"}]}),
        "spec.cells.virtualClusters.c.pinnedCells[0].pinnedCellId",
        "VC c: unknown pinnedCellId 'Q'",
        id="unknown-pinned-id",
    ),
    pytest.param(
        mutate("virtualClusters.b", {"pinnedCells": [{"pinnedCellId": "P"}]}),
        "spec.cells.virtualClusters.c.pinnedCells[0].pinnedCellId",
        "already pinned by VC b",
        id="pinned-twice",
    ),
    pytest.param(
        mutate("virtualClusters.a", {"virtualCells": [{"cellType": "RACK.PAIR", "cellNumber": 1}]}),
        "spec.cells.virtualClusters.a.virtualCells[0].cellType",
        "VC a: PAIR is not the child cell type of RACK",
        id="vc-path-not-a-chain",
    ),
    pytest.param(
        mutate("virtualClusters.a", {"virtualCells": [{"cellType": "PAIR", "cellNumber": 1}]}),
        "spec.cells.virtualClusters.a.virtualCells[0].cellType",
        "VC a: no top-level physical cell has cell type PAIR",
        id="vc-unknown-chain",
    ),
    pytest.param(
        mutate("virtualClusters.a", {"virtualCells": [{"cellType": "RACK.NODE", "cellNumber": 3}]}),
        "spec.cells.virtualClusters.a.virtualCells[0]",
        "illegal initial VC assignment: insufficient physical cells: VC a is owed 1 more NODE",
        id="insufficient-node-cells",
    ),
    pytest.param(
        mutate("virtualClusters.a", {"virtualCells": [{"cellType": "RACK", "cellNumber": 1}]}),
        # The count serves higher levels first, so the shortage shows at VC b's pairs.
        "spec.cells.virtualClusters.b.virtualCells[0]",
        "VC b is owed 2 more PAIR cell(s) (level 2) in chain RACK",
        id="insufficient-at-a-higher-level",
    ),
    pytest.param(
        mutate("physicalCluster.skuTypes", {"H100": {"gpu": 1, "cpu": "8", "memory": "64Gi"}}),
        "spec.cells.physicalCluster.cellTypes.PAIR.childCellType",
        "unknown child cell type GPU (neither a cellType nor a skuType)",
        id="leaf-not-a-sku",
    ),
    pytest.param(
        mutate("physicalCluster.skuTypes", {"GPU": {"gpu": 1, "cpu": "lots"}}),
        "spec.cells.physicalCluster.skuTypes.GPU.cpu",
        "is not a Kubernetes quantity",
        id="bad-sku-quantity",
    ),
    pytest.param(
        mutate("physicalCluster.physicalCells.1", {"cellType": "NODE"}),
        "spec.cells.physicalCluster.physicalCells[1].cellAddress",
        "needs a cellAddress (its node name)",
        id="node-without-name",
    ),
    pytest.param(
        mutate("physicalCluster", None),
        "spec.cells.physicalCluster",
        "required",
        id="no-physical-cluster",
    ),
]


@pytest.mark.parametrize(("data", "path", "message"), REJECTIONS)
def test_rejections(data: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(CellConfigError) as info:
        load_cell_config(data)
    assert info.value.path == path, str(info.value)
    assert message in info.value.message


def test_two_node_levels_in_one_chain() -> None:
    rack = {"childCellType": "NODE", "childCellNumber": 2, "isNodeLevel": True}
    data = mutate("physicalCluster.cellTypes.RACK", rack)
    with pytest.raises(CellConfigError) as info:
        load_cell_config(data)
    assert info.value.path == "spec.cells.physicalCluster.cellTypes.RACK.isNodeLevel"


def test_hived_invalid_initial_assignment() -> None:
    # testInvalidInitialAssignment of HiveD's algorithm tests.
    data = load_yaml(REFERENCE / "v1-master/config/design-hivedscheduler.yaml")
    vc1 = data["virtualClusters"]["VC1"]["virtualCells"]
    vc1[0]["cellType"] = "CT1-NODE"
    vc1[1]["cellType"] = "CT1-NODE.CT1"
    vc1[1]["cellNumber"] = 2
    with pytest.raises(CellConfigError) as info:
        load_hived_file_dict(data)
    assert "illegal initial VC assignment: insufficient physical cells" in info.value.message
    assert info.value.path.startswith("virtualClusters.VC1.virtualCells[")
