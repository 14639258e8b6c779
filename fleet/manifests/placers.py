"""From member cluster documents to the core's placers: one builder for every user.

Theory of operation: a member cluster's ``spec.cells`` is its validated cell
config (:meth:`~fleet.manifests.models.MemberClusterModel.cell_config`, loaded
once per model).  :func:`placers` builds one placer per member cluster from
it, of one of :data:`KINDS`:

* ``cells``: the HiveD-style cell allocator
  (:class:`~fleet.core.cells.placer.CellPlacer`), what the service schedules
  with;
* ``capacity``: the capacity-only baseline
  (:class:`~fleet.core.capacity.CapacityPlacer`) over the same nodes, each
  node of the SKU (leaf cell type) of its cells: no topology, no virtual
  clusters.

The service (:mod:`fleet.service.wiring`), ``fleet plan`` (``--placer``) and
the simulator's policies (:mod:`fleet.sim.policies`) all build their placers
here, so a cluster document means the same placer to each of them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final, Literal

from fleet.core.capacity import CapacityPlacer
from fleet.core.cells.placer import CellPlacer
from fleet.core.cells.spec import CellConfig, PhysicalCellSpec
from fleet.core.placement import Placer
from fleet.manifests.models import MemberClusterModel

Kind = Literal["cells", "capacity"]
KINDS: Final[tuple[Kind, ...]] = ("cells", "capacity")


def _leaf_nodes(cell: PhysicalCellSpec) -> Iterator[PhysicalCellSpec]:
    if not cell.children:
        yield cell
    for child in cell.children:
        yield from _leaf_nodes(child)


def capacity_placer(name: str, config: CellConfig) -> CapacityPlacer:
    """The capacity-only baseline over the same nodes as a cell config."""
    skus: dict[str, str] = {}
    for top in config.physical_cells:
        for leaf in _leaf_nodes(top):
            if leaf.node is not None:
                skus[leaf.node] = config.cell_types[leaf.cell_type].leaf_type
    return CapacityPlacer(name, config.nodes(), skus)


def placer(cluster: MemberClusterModel, kind: Kind = "cells") -> Placer:
    """The placer of one member cluster: the cell allocator, or the capacity baseline.

    Raises :class:`~fleet.core.cells.spec.CellConfigError` for cells that do
    not load, and ValueError for a kind not in :data:`KINDS`.
    """
    config = cluster.cell_config()
    if kind == "cells":
        return CellPlacer(cluster.name, config)
    if kind == "capacity":
        return capacity_placer(cluster.name, config)
    raise ValueError(f"unknown placer kind {kind!r}; known: {', '.join(KINDS)}")


def placers(clusters: Sequence[MemberClusterModel], kind: Kind = "cells") -> dict[str, Placer]:
    """One placer of ``kind`` per member cluster, by cluster name."""
    return {cluster.name: placer(cluster, kind) for cluster in clusters}
