"""Validated, normalized HiveD cell configuration values (no parsing here).

Theory of operation: :mod:`fleet.core.cells.config` turns the plain dict a user
wrote into these frozen values once (a :class:`CellConfig` holding the specs
below); everything downstream (topology, allocator, placer) reads only these.
This module imports no other cells module, so the loader may build on the
allocator while the allocator reads the config.  Physical cells are already expanded:
every cell has its full list of children, its full address (HiveD style,
parent address + ``/`` + own address), the node name it belongs to (for node
level and below) and, for leaves, the GPU index on that node.

CPU-only node pools: a leaf cell type whose skuType declares no GPU (``gpu``
absent or 0) is a *CPU leaf type*, and the physical cells of its chains are
the cluster's CPU-only nodes (:attr:`CellConfig.cpu_cells`).  They are not
cells the allocator hands out: their nodes' cpu and memory (the skuType's
amounts times the node's leaves) take the pods that ask for no GPU, placed by
cpu and memory (:meth:`CellConfig.cpu_nodes`).  Everything else
(``physical_cells``, ``leaf_types``, ``chains``) is the GPU cells alone.

A GPU leaf type's *attributes* are node labels (:attr:`SkuType.labels`,
:meth:`CellConfig.labels_of`): ``nvidia.com/gpu.product`` (the type's name
unless its skuType says otherwise), ``nvidia.com/gpu.memory`` (MiB) and any
other label the skuType gives.  Jobs choose GPU types by them
(:mod:`fleet.manifests.gpu_terms`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fleet.core import resources
from fleet.core.resources import Resources


class CellConfigError(ValueError):
    """A cell config that cannot be honoured; ``path`` is the dotted field path."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


#: The node label that names a GPU's product (NVIDIA GPU feature discovery's).
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


@dataclass(frozen=True, slots=True)
class SkuType:
    """Resources of one leaf cell of this type (``gpu`` count, cpu milli, memory bytes)
    and the GPU's attributes, as node labels (sorted ``(key, value)`` pairs; a GPU
    type's always name its product, by default the type's name)."""

    name: str
    gpu: int
    cpu: int
    memory: int
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class CellType:
    """One cell type; leaf types have ``child`` None and level 1."""

    name: str
    child: str | None
    child_number: int
    is_node_level: bool
    level: int
    leaf_type: str


@dataclass(frozen=True, slots=True)
class PhysicalCellSpec:
    """One physical cell, fully expanded."""

    cell_type: str
    address: str  # full address, "/"-joined like HiveD
    node: str | None  # node name for node-level cells and below
    leaf_index: int | None  # GPU index on the node, leaves only
    pinned_id: str | None
    children: tuple[PhysicalCellSpec, ...]
    path: str  # config field path, for error messages


@dataclass(frozen=True, slots=True)
class VirtualCellSpec:
    """``cellNumber`` virtual cells of type ``cell_type`` in chain ``chain``."""

    chain: str
    cell_type: str
    number: int
    path: str


@dataclass(frozen=True, slots=True)
class VirtualClusterSpec:
    name: str
    cells: tuple[VirtualCellSpec, ...]
    pinned: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CellConfig:
    """A validated cell config.  Build it with :func:`fleet.core.cells.config.load_cell_config`."""

    sku_types: Mapping[str, SkuType]
    cell_types: Mapping[str, CellType]  # includes leaf types
    physical_cells: tuple[PhysicalCellSpec, ...]
    vcs: Mapping[str, VirtualClusterSpec]
    leaf_types: tuple[str, ...]  # GPU leaf types, in order of first appearance in cellTypes
    chains: tuple[str, ...]  # top-level GPU cell types, in order of first use
    #: the CPU-only node pools: top-level cells of CPU leaf types, fully expanded
    cpu_cells: tuple[PhysicalCellSpec, ...] = ()
    #: leaf types whose skuType has no GPU, in order of first appearance in cellTypes
    cpu_leaf_types: tuple[str, ...] = ()
    _nodes: dict[str, Resources] = field(default_factory=dict, compare=False, repr=False)
    _cpu_nodes: dict[str, Resources] = field(default_factory=dict, compare=False, repr=False)

    def virtual_clusters(self) -> list[str]:
        """Names of the configured virtual clusters (queues with a guarantee here)."""
        return list(self.vcs)

    def nodes(self) -> dict[str, Resources]:
        """Node name -> capacity of every node, the GPU cells' and then the CPU-only ones'."""
        return {**self.cell_nodes(), **self.cpu_nodes()}

    def cell_nodes(self) -> dict[str, Resources]:
        """The GPU cells' nodes -> capacity (``nvidia.com/gpu`` per leaf, cpu/memory
        from skuTypes)."""
        if not self._nodes:
            self._nodes.update(self._capacities(self.physical_cells))
        return dict(self._nodes)

    def cpu_nodes(self) -> dict[str, Resources]:
        """The CPU-only nodes -> capacity (their leaves' skuType cpu and memory)."""
        if not self._cpu_nodes and self.cpu_cells:
            self._cpu_nodes.update(self._capacities(self.cpu_cells))
        return dict(self._cpu_nodes)

    def _capacities(self, tops: tuple[PhysicalCellSpec, ...]) -> dict[str, Resources]:
        out: dict[str, Resources] = {}
        for top in tops:
            for leaf in _leaves(top):
                assert leaf.node is not None
                sku = self.sku_types.get(self.cell_types[leaf.cell_type].leaf_type)
                if sku is None:
                    add = Resources({resources.GPU: 1})
                else:
                    add = Resources(
                        {
                            resources.GPU: sku.gpu,
                            resources.CPU: sku.cpu,
                            resources.MEMORY: sku.memory,
                        }
                    )
                out[leaf.node] = out.get(leaf.node, Resources()) + add
        return out

    def labels_of(self, leaf_type: str) -> dict[str, str]:
        """The attributes of a GPU leaf type, as node labels: its skuType's, else
        (no skuTypes) its product alone, named as the type."""
        sku = self.sku_types.get(leaf_type)
        if sku is not None and sku.labels:
            return dict(sku.labels)
        return {GPU_PRODUCT_LABEL: leaf_type}

    def chain_levels(self, chain: str) -> list[CellType]:
        """The cell types of ``chain`` from the leaf (index 0, level 1) to the top."""
        out: list[CellType] = []
        ct: CellType | None = self.cell_types[chain]
        while ct is not None:
            out.append(ct)
            ct = self.cell_types[ct.child] if ct.child is not None else None
        out.reverse()
        return out


def _leaves(cell: PhysicalCellSpec) -> list[PhysicalCellSpec]:
    if not cell.children:
        return [cell]
    out: list[PhysicalCellSpec] = []
    for child in cell.children:
        out.extend(_leaves(child))
    return out
