"""Bad nodes: taking them out of the cells, putting them back, and doomed VC cells.

Theory of operation: a node that goes bad keeps its owners (the caller is told
which jobs had pods there and decides what to do with them) but every free
part of it is reserved as ``bad`` in the allocator, so nothing new lands there
and the buddy free lists no longer count it.  When a reservation covering a
bad node is released later (a job leaves, a VC cell is unbound), the freed
parts of the bad node are reserved as bad again (:func:`reserve_bad_again`).
A node that comes back has its bad reservations released.  The fragmentation
counters, the chain's histogram of healthy nodes by unowned leaves and the
capacity total follow the node's health.  Bad nodes may leave
the VCs' owed cells with too few free cells to bind to: the allocator's
shortage count says how many, attributed to VCs in name order
(:func:`doomed_cells`) — no other VC's guarantee is ever broken for it.
"""

from __future__ import annotations

from fleet.core.cells.state import PlacerState
from fleet.core.cells.topology import Cell


def set_node_health(state: PlacerState, node: str, healthy: bool) -> list[str]:
    """Mark ``node`` bad or healthy; returns keys of jobs with pods on a node gone bad."""
    cells = state.topo.nodes.get(node)
    if cells is None:
        raise KeyError(f"no node {node} in cluster {state.cluster}")
    j = state.j
    affected: set[str] = set()
    j.begin()
    for cell in cells:
        if cell.healthy == healthy:
            continue
        unowned = cell.size - cell.used
        sign = 1 if healthy else -1
        j.add(state, "free_leaves", sign * unowned)
        j.listitem(state.free_hist[cell.chain], unowned, sign)
        if cell.used == 0:
            j.add(state, "whole_free_leaves", sign * cell.size)
        j.set(cell, "healthy", healthy)
        if healthy:
            state.alloc.release_bad(cell)
        else:
            state.alloc.reserve_bad(cell)
            affected.update(leaf.owner for leaf in cell.leaves if leaf.owner is not None)
    j.commit()
    cap = state.node_caps.get(node)
    if healthy:
        if node in state.bad and cap is not None:
            state.capacity = state.capacity + cap
        state.bad.discard(node)
    else:
        if node not in state.bad and cap is not None:
            state.capacity = state.capacity - cap
        state.bad.add(node)
    return sorted(affected)


def reserve_bad_again(state: PlacerState, cell: Cell) -> None:
    """Reserve as bad the freed parts of bad nodes in ``cell`` (after an untake)."""
    nodes = cell.node_cells or ([cell.node_cell] if cell.node_cell else [])
    for node in nodes:
        if not node.healthy:
            state.alloc.reserve_bad(node)


def doomed_cells(state: PlacerState) -> dict[str, int]:
    """VC -> number of its virtual cells that bad nodes leave no physical cell for."""
    return {vc: sum(levels.values()) for vc, levels in state.alloc.doomed_by_chain_level().items()}
