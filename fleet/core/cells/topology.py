"""The physical cell forest of one cluster: chains, levels and per-cell state slots.

Theory of operation: a :class:`Topology` turns the config's expanded physical
cells into linked :class:`Cell` objects once.  A *chain* is the cell type of a
top-level physical cell (HiveD's ``CellChain``): every cell below it has a
level (leaf = 1) and one cell type per level, so buddy arithmetic inside a
chain is uniform.  Cells carry the mutable slots that the allocator and the
placer maintain (free/split/reserved flags, owners, usage counters) so that the
hot paths are attribute reads, not dictionary lookups.  A :class:`Reservation`
(what holds a reserved cell) is defined here beside :class:`Cell`, since each
refers to the other; the allocator creates and removes them.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum

from fleet.core.cells.spec import CellConfig, CellType, PhysicalCellSpec


class Cell:
    """One physical cell (a GPU, a PCIe switch, a node, a rack, ...)."""

    __slots__ = (
        "address",
        "bits",
        "chain",
        "children",
        "ctype",
        "free_root",
        "freemask",
        "healthy",
        "id",
        "index",
        "is_node",
        "leaf_index",
        "leaves",
        "level",
        "mids",
        "node",
        "node_cell",
        "node_cells",
        "owner",
        "parent",
        "pinned_id",
        "res",
        "shfree",
        "size",
        "split",
        "tag",
        "tagmask",
        "top",
        "unres",
        "used",
    )

    def __init__(self, cid: int, spec: PhysicalCellSpec, ctype: CellType, chain: str) -> None:
        self.id = cid
        self.ctype = ctype
        self.level = ctype.level
        self.chain = chain
        self.address = spec.address
        self.node = spec.node
        self.leaf_index = spec.leaf_index
        self.pinned_id = spec.pinned_id
        self.is_node = ctype.is_node_level
        self.parent: Cell | None = None
        self.children: list[Cell] = []
        self.top: Cell = self
        self.index = 0  # position among its siblings
        self.node_cell: Cell | None = None
        self.leaves: list[Cell] = []
        self.node_cells: list[Cell] = []
        self.size = 0
        # Allocator state (see allocator.py).
        self.free_root = False
        self.split = False
        self.res: Reservation | None = None
        # Leaves only: the reservation covering the leaf, and the job using it.
        self.tag: Reservation | None = None
        self.owner: str | None = None
        # Node cells only.
        self.healthy = True
        # Node cells only: leaves neither reserved nor owned (what the shared pool may
        # take without victims), kept by the allocator (tags) and the placer (owners).
        self.shfree = 0
        # Node cells only: bit masks over the node's leaves (bit i = ``leaves[i]``) of
        # the unowned leaves (kept by the placer) and of the reserved ones (kept by
        # the allocator), so a node's usable leaves are a few integer operations.
        self.freemask = 0
        self.tagmask = 0
        # Cells at or below node level: the bits of this cell's leaves in its node's masks.
        self.bits = 0
        # Node cells only: the cells strictly between the node and its leaves.
        self.mids: list[Cell] = []
        # Leaves used by any job in the subtree.
        self.used = 0
        # Unreserved leaves (``tag`` None) in the subtree, kept by the allocator for
        # every cell not strictly inside a reserved root (inside one it stays ``size``).
        self.unres = 0

    def __repr__(self) -> str:
        return f"Cell({self.ctype.name}@{self.address})"


class ReservationKind(StrEnum):
    """Why a root cell is reserved."""

    VC = "vc"  # bound to a virtual cluster's virtual cell
    PIN = "pin"  # a VC's pinned cell
    SHARED = "shared"  # taken from the shared pool by one job
    BAD = "bad"  # on a bad node, out of allocation


class Reservation:
    """One reserved root: who holds ``cell`` and why.

    ``kind`` is one of the allocator's kinds (``vc``, ``pin``, ``shared``, ``bad``).
    """

    __slots__ = ("cell", "gused", "job", "kind", "vc")

    def __init__(
        self, kind: ReservationKind, cell: Cell, vc: str | None = None, job: str | None = None
    ):
        self.kind = kind
        self.cell = cell
        self.vc = vc
        self.job = job
        self.gused = 0  # leaves used by guaranteed jobs of ``vc`` inside ``cell``

    def __repr__(self) -> str:
        who = self.vc or self.job or ""
        return f"Reservation({self.kind}:{who}@{self.cell.address})"


def _below(cell: Cell) -> Iterator[Cell]:
    """Every cell strictly below ``cell``."""
    for child in cell.children:
        yield child
        yield from _below(child)


def descendants_at(cell: Cell, level: int) -> Iterator[Cell]:
    """The cells of ``level`` in ``cell``'s subtree (``cell`` itself at its own level)."""
    if cell.level == level:
        yield cell
        return
    for child in cell.children:
        yield from descendants_at(child, level)


def lowest_common(cells: list[Cell]) -> Cell | None:
    """The lowest cell containing every cell given (None if they span top cells)."""
    if not cells:
        return None
    common = cells[0]
    node = common.node_cell
    for cell in cells[1:]:
        if cell.top is not common.top:
            return None
        # Same node as the previous cell and ``common`` already holds that node.
        if node is not None and cell.node_cell is node and common.level >= node.level:
            continue
        node = cell.node_cell
        a, b = common, cell
        while a.level < b.level:
            assert a.parent is not None
            a = a.parent
        while b.level < a.level:
            assert b.parent is not None
            b = b.parent
        while a is not b:
            assert a.parent is not None and b.parent is not None
            a, b = a.parent, b.parent
        common = a
    return common


class Topology:
    """All physical cells of a cluster, indexed for the allocator and the placer."""

    def __init__(self, config: CellConfig) -> None:
        self.config = config
        self.cells: list[Cell] = []
        self.tops: list[Cell] = []
        self.chain_types: dict[str, list[CellType]] = {
            chain: config.chain_levels(chain) for chain in config.chains
        }
        self.chain_tops: dict[str, list[Cell]] = {chain: [] for chain in config.chains}
        self.nodes: dict[str, list[Cell]] = {}
        self.leaf_at: dict[tuple[str, int], Cell] = {}
        #: node name -> GPU index -> leaf (``leaf_at`` per node)
        self.node_leaf: dict[str, dict[int, Cell]] = {}
        self.pinned: dict[str, Cell] = {}
        for spec in config.physical_cells:
            top = self._build(spec, spec.cell_type, None, None)
            self.tops.append(top)
            self.chain_tops[spec.cell_type].append(top)
        # Chains per leaf type, in order of first use.
        self.leaf_chains: dict[str, list[str]] = {}
        for leaf in config.leaf_types:
            self.leaf_chains[leaf] = [
                c for c in config.chains if self.chain_types[c][0].name == leaf
            ]
        self.node_level: dict[str, int] = {
            chain: next(ct.level for ct in types if ct.is_node_level)
            for chain, types in self.chain_types.items()
        }

    def _build(
        self, spec: PhysicalCellSpec, chain: str, parent: Cell | None, node_cell: Cell | None
    ) -> Cell:
        ctype = self.config.cell_types[spec.cell_type]
        cell = Cell(len(self.cells), spec, ctype, chain)
        self.cells.append(cell)
        cell.parent = parent
        cell.top = parent.top if parent is not None else cell
        if cell.is_node:
            node_cell = cell
            assert cell.node is not None
            self.nodes.setdefault(cell.node, []).append(cell)
        cell.node_cell = node_cell
        if spec.pinned_id is not None:
            self.pinned[spec.pinned_id] = cell
        for i, child_spec in enumerate(spec.children):
            child = self._build(child_spec, chain, cell, node_cell)
            child.index = i
            cell.children.append(child)
        if not cell.children:
            assert cell.node is not None and cell.leaf_index is not None
            cell.leaves = [cell]
            self.leaf_at[(cell.node, cell.leaf_index)] = cell
            self.node_leaf.setdefault(cell.node, {})[cell.leaf_index] = cell
        else:
            for child in cell.children:
                cell.leaves.extend(child.leaves)
                cell.node_cells.extend(child.node_cells)
        if cell.is_node:
            cell.node_cells = [cell]
        cell.size = len(cell.leaves)
        cell.unres = cell.size
        if cell.is_node:
            cell.shfree = cell.size
            cell.freemask = (1 << cell.size) - 1
            for i, leaf in enumerate(cell.leaves):
                leaf.bits = 1 << i
            for sub in _below(cell):
                if sub.children:
                    sub.bits = sum(leaf.bits for leaf in sub.leaves)
                    cell.mids.append(sub)
            cell.bits = cell.freemask
        return cell
