"""Validated, normalized HiveD cell configuration values (no parsing here).

Theory of operation: :mod:`fleet.core.cells.config` turns the plain dict a user
wrote into these frozen values once; everything downstream (topology,
allocator, placer) reads only these.  Physical cells are already expanded:
every cell has its full list of children, its full address (HiveD style,
parent address + ``/`` + own address), the node name it belongs to (for node
level and below) and, for leaves, the GPU index on that node.
"""

from __future__ import annotations

from dataclasses import dataclass


class CellConfigError(ValueError):
    """A cell config that cannot be honoured; ``path`` is the dotted field path."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


@dataclass(frozen=True, slots=True)
class SkuType:
    """Resources of one leaf cell of this type (``gpu`` count, cpu milli, memory bytes)."""

    name: str
    gpu: int
    cpu: int
    memory: int


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
    own_address: str
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
