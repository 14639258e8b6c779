"""The one builder of placers: what the service, ``fleet plan`` and the simulator run on."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import pytest

from fleet.core.capacity import CapacityPlacer
from fleet.core.cells.placer import CellPlacer
from fleet.manifests import convert, placers
from fleet.sim import policies

POLICIES = Path(__file__).resolve().parents[2] / "policies"


def _clusters() -> list[Any]:
    return convert.load_clusters((POLICIES / "clusters" / "example.yaml").read_text())


def test_one_cell_placer_per_member_cluster_over_its_cells() -> None:
    clusters = _clusters()
    built = placers.placers(clusters)
    assert list(built) == [c.name for c in clusters]
    for cluster in clusters:
        placer = built[cluster.name]
        assert isinstance(placer, CellPlacer)
        assert placer.cluster == cluster.name
        assert placer.config is cluster.cell_config()  # loaded once per model


def test_the_capacity_baseline_has_the_same_nodes_each_of_its_cells_sku() -> None:
    for cluster in _clusters():
        cells = placers.placer(cluster, "cells")
        capacity = placers.placer(cluster, "capacity")
        assert isinstance(capacity, CapacityPlacer)
        assert capacity.cluster == cluster.name
        assert capacity.capacity() == cells.capacity()
        config = cluster.cell_config()
        nodes = config.nodes()
        assert sorted(capacity._free.nodes) == sorted(nodes)
        skus = {node.sku for node in capacity._free.nodes.values()}
        assert skus <= {t.leaf_type for t in config.cell_types.values()}
        assert None not in skus


def test_an_unknown_kind_is_refused() -> None:
    (cluster, *_) = _clusters()
    with pytest.raises(ValueError, match="unknown placer kind 'gpus'; known: cells, capacity"):
        placers.placer(cluster, cast(placers.Kind, "gpus"))


def test_the_simulators_policies_choose_the_kind() -> None:
    clusters = _clusters()
    for policy, kind in (("fleet", CellPlacer), ("private", CellPlacer), ("capacity", None)):
        built = policies.placers(policy, clusters)
        expected = CapacityPlacer if kind is None else kind
        assert all(type(p) is expected for p in built.values()), policy
