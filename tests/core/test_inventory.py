"""The members' inventory, the over-promise report, and a root of ``capacity: auto``."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from fleet.core import events, inventory
from fleet.core.cells.config import load_cell_config
from fleet.core.cells.placer import CellPlacer
from fleet.core.inventory import Inventory, Shortfall
from fleet.core.quota import QuotaError, QuotaNodeSpec, QuotaTree
from fleet.core.resources import Resources
from fleet.core.state import SchedulerState
from fleet.testing.cells import rack_config
from tests.core.quota_factories import node, res, with_paths

#: 2 racks of 2 nodes of 8 GPUs (32 GPUs), 2 cpu and 16Gi per GPU, of type GPU.
SKU = {"gpu": 1, "cpu": 2, "memory": "16Gi"}


def config(racks: int = 2) -> dict[str, Any]:
    return rack_config(racks, 2, 8, sku=SKU)


def test_a_node_holds_its_gpus_cpu_memory_and_its_gpus_by_type() -> None:
    nodes = inventory.node_capacities(load_cell_config(config()))
    assert sorted(nodes) == ["r0n0", "r0n1", "r1n0", "r1n1"]
    assert nodes["r0n0"] == res(
        {"nvidia.com/gpu": 8, "gpu.fleet.io/GPU": 8, "cpu": 16, "memory": "128Gi"}
    )


def test_the_inventory_leaves_out_bad_nodes_and_draining_clusters() -> None:
    configs = {"a": load_cell_config(config()), "b": load_cell_config(config(racks=1))}
    everything = inventory.inventory(configs)
    assert everything.held == res(
        {"nvidia.com/gpu": 48, "gpu.fleet.io/GPU": 48, "cpu": 96, "memory": "768Gi"}
    )
    assert everything.declared == {"nvidia.com/gpu", "gpu.fleet.io/GPU", "cpu", "memory"}
    healthy = inventory.inventory(configs, bad={"a": {"r0n0"}}, draining={"b"})
    assert healthy.held["nvidia.com/gpu"] == 24 and healthy.held["gpu.fleet.io/GPU"] == 24
    # What it counts does not depend on health: a resource held 0 is still counted.
    assert healthy.declared == everything.declared
    nothing = inventory.inventory(configs, draining={"a", "b"})
    assert nothing.limits() == Resources.limits(
        {"nvidia.com/gpu": 0, "gpu.fleet.io/GPU": 0, "cpu": 0, "memory": 0}
    )


def test_cpu_is_counted_only_when_a_member_declares_it() -> None:
    bare = inventory.inventory({"a": load_cell_config(rack_config(1, 1, 8))})
    assert bare.declared == {"nvidia.com/gpu", "gpu.fleet.io/GPU"}
    promised = res({"nvidia.com/gpu": 16, "cpu": 64, "gpu.fleet.io/H100": 1})
    assert inventory.overpromised(promised, bare) == (
        Shortfall("gpu.fleet.io/H100", 1, 0),
        Shortfall("nvidia.com/gpu", 16, 8),
    )


def test_guarantees_are_the_root_children_min_or_the_root_min_when_larger() -> None:
    root = with_paths(
        node(
            "root",
            node("a", min={"nvidia.com/gpu": 20, "cpu": 10}),
            node("b", min={"nvidia.com/gpu": 20}),
            min={"nvidia.com/gpu": 40, "cpu": 50},
            max={"nvidia.com/gpu": 40, "cpu": 50},
        )
    )
    assert inventory.spec_guarantees(root) == res({"nvidia.com/gpu": 40, "cpu": 50})
    auto = dataclasses.replace(root, auto=True)
    assert inventory.spec_guarantees(auto) == res({"nvidia.com/gpu": 40, "cpu": 10})
    assert inventory.tree_guarantees(QuotaTree.build(root)) == res(
        {"nvidia.com/gpu": 40, "cpu": 50}
    )
    have = Inventory(res({"nvidia.com/gpu": 32, "cpu": 64}), frozenset({"nvidia.com/gpu", "cpu"}))
    (short,) = inventory.overpromised(inventory.spec_guarantees(root), have)
    assert short.quantities() == {
        "resource": "nvidia.com/gpu",
        "promised": "40",
        "held": "32",
        "short": "8",
    }
    assert str(short) == "nvidia.com/gpu: the tree guarantees 40, the members hold 32 (8 short)"


def test_shortfalls_are_written_the_kubernetes_way() -> None:
    short = Shortfall("memory", 2 * 2**40, 1536 * 2**30)
    assert short.quantities()["short"] == "512Gi"
    assert Shortfall("cpu", 1500, 1000).quantities()["short"] == "500m"


def auto_root(**children_min: dict[str, str | int]) -> QuotaNodeSpec:
    kids = [node(name, min=m, namespaces=(name,)) for name, m in children_min.items()]
    return dataclasses.replace(with_paths(node("root", *kids)), auto=True)


def test_an_auto_root_is_not_held_to_its_children_and_takes_the_inventory() -> None:
    root = auto_root(a={"nvidia.com/gpu": 40}, b={"nvidia.com/gpu": 40})
    tree = QuotaTree.build(root)  # 80 promised of nothing yet: a report, not an error
    assert tree.auto and tree.warnings == []
    have = inventory.inventory({"a": load_cell_config(config())})
    filled = inventory.with_capacity(root, have)
    assert filled.min == have.held and filled.max == have.limits()
    assert QuotaTree.build(filled).to_spec().auto
    with pytest.raises(QuotaError, match="children's min"):  # written figures are held
        QuotaTree.build(dataclasses.replace(filled, auto=False))


def test_capacity_auto_below_the_root_is_an_error_with_its_path() -> None:
    child = dataclasses.replace(node("a", namespaces=("a",)), auto=True)
    with pytest.raises(QuotaError) as e:
        QuotaTree.build(with_paths(node("root", child)))
    assert e.value.path == "spec.root.children[0].capacity"


def test_an_auto_root_follows_clusters_and_node_health() -> None:
    root = auto_root(a={"nvidia.com/gpu": 24})
    state = SchedulerState(
        QuotaTree.build(root), {"c1": CellPlacer("c1", load_cell_config(config()))}
    )
    gpu = "nvidia.com/gpu"
    assert state.tree.min_of("root")[gpu] == 32 and state.tree.max_of("root") is not None
    assert state.inventory.held[gpu] == 32

    events.apply(state, events.ClusterAdded(CellPlacer("c2", load_cell_config(config(racks=1)))))
    assert state.tree.min_of("root")[gpu] == 48
    events.apply(state, events.NodeHealthChanged("c1", "r0n0", False, "broken"))
    assert state.tree.min_of("root")[gpu] == 40
    events.apply(state, events.NodeHealthChanged("c1", "r0n0", True))
    events.apply(state, events.ClusterDraining("c1"))
    limits = state.tree.max_of("root")
    assert state.tree.min_of("root")[gpu] == 16 and limits is not None and limits[gpu] == 16
    assert state.inventory.held["gpu.fleet.io/GPU"] == 16
    assert not state.cut_since  # the members' capacity moved; no quota cut starts
    # A tree replaced keeps its auto root, filled at once.
    events.apply(state, events.QuotaTreeReplaced(auto_root(a={gpu: 8}, b={gpu: 8})))
    assert state.tree.auto and state.tree.min_of("root")[gpu] == 16
    events.apply(state, events.ClusterRemoved("c1"))
    assert state.tree.min_of("root")[gpu] == 16


def test_an_explicit_root_keeps_its_figures() -> None:
    root = with_paths(
        node(
            "root",
            node("a", min={"nvidia.com/gpu": 8}, namespaces=("a",)),
            min={"nvidia.com/gpu": 64},
            max={"nvidia.com/gpu": 64},
        )
    )
    state = SchedulerState(
        QuotaTree.build(root), {"c1": CellPlacer("c1", load_cell_config(config()))}
    )
    events.apply(state, events.ClusterDraining("c1"))
    assert state.tree.min_of("root")["nvidia.com/gpu"] == 64
    assert state.inventory.held["nvidia.com/gpu"] == 0
