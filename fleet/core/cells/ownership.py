"""Who uses which leaf: owning and freeing leaves, releasing a job.

Theory of operation: on top of the allocator's reservations every leaf cell
has at most one owner job (``Cell.owner``).  Owning or freeing a leaf keeps
four counters in step, all through the journal so a query can roll them back:
``used`` on the leaf and every ancestor, the node's ``shfree`` (leaves neither
reserved nor owned), the reservation's ``gused`` when a guaranteed (VC or
pinned) job uses a leaf of it, and the state's fragmentation counters
(``free_leaves``, ``whole_free_leaves``, healthy nodes only).
:func:`own_many` does this for a pod's leaves at once, updating each ancestor's
counter once per node instead of once per leaf.  Releasing a job frees its
leaves, returns its shared-pool reservations, and unbinds every VC cell that no
guaranteed pod of the VC uses any more (a VC's virtual cell is bound only while
it is used), re-reserving the freed parts of bad nodes; a released job's
restore record goes with it.
"""

from __future__ import annotations

from fleet.core.cells import allocator, health
from fleet.core.cells.state import GUARANTEED_KINDS, KIND_VC, PlacerState
from fleet.core.cells.topology import Cell, Reservation
from fleet.core.checks import InvariantError


def own_many(state: PlacerState, leaves: list[Cell], key: str, guaranteed: bool) -> None:
    """Make ``key`` the owner of unowned ``leaves``, each ancestor's counter updated once.

    Cells below a node are counted per leaf; the node and the cells above it once
    per node.  ``guaranteed``: the leaves count as their reservations' ``gused``.
    """
    j = state.j
    log = j.log
    record = log.extend if log is not None else _ignore
    below: dict[Cell, int] = {}
    per_node: dict[Cell, int] = {}
    gused: dict[Reservation, int] = {}
    unreserved: dict[Cell, int] = {}  # node -> leaves with no tag
    free = whole = 0
    for leaf in leaves:
        node = leaf.node_cell
        assert node is not None
        if node.healthy:
            free += 1
            if node.used == 0 and node not in per_node:
                whole += node.size
        record((leaf, "owner", leaf.owner, setattr))
        leaf.owner = key
        if node is leaf:
            per_node[leaf] = 1
        else:
            c = leaf
            while c is not node:
                below[c] = below.get(c, 0) + 1
                parent = c.parent
                assert parent is not None
                c = parent
            per_node[node] = per_node.get(node, 0) + 1
        tag = leaf.tag
        if tag is None:
            unreserved[node] = unreserved.get(node, 0) + 1
        elif guaranteed:
            gused[tag] = gused.get(tag, 0) + 1
    for node, n in unreserved.items():
        j.add(node, "shfree", -n)
    if free:
        j.add(state, "free_leaves", -free)
    if whole:
        j.add(state, "whole_free_leaves", -whole)
    for cell, n in below.items():
        record((cell, "used", cell.used, setattr))
        cell.used += n
    for node, n in per_node.items():
        up: Cell | None = node
        while up is not None:
            record((up, "used", up.used, setattr))
            up.used += n
            up = up.parent
    for res, n in gused.items():
        j.add(res, "gused", n)


def unown(state: PlacerState, leaf: Cell) -> None:
    """Free one owned leaf (the inverse of owning it)."""
    j = state.j
    node = leaf.node_cell
    assert node is not None
    key = leaf.owner
    if key is None:
        raise InvariantError(f"cannot free {leaf}: it has no owner")
    held = state.held.get(key)
    if held is not None and held.kind in GUARANTEED_KINDS and leaf.tag is not None:
        j.add(leaf.tag, "gused", -1)
    j.set(leaf, "owner", None)
    if leaf.tag is None:
        j.add(node, "shfree", 1)
    c: Cell | None = leaf
    while c is not None:
        j.add(c, "used", -1)
        c = c.parent
    if node.healthy:
        j.add(state, "free_leaves", 1)
        if node.used == 0:
            j.add(state, "whole_free_leaves", node.size)


def release(state: PlacerState, key: str) -> None:
    """Free everything job ``key`` holds (it must be held); unbind VC cells left unused."""
    j = state.j
    held = state.held[key]
    touched: dict[int, Reservation] = {}
    for request in held.requests.values():
        j.set(state, "allocated", state.allocated - request)
    for leaves in held.leaves.values():
        for leaf in leaves:
            if held.kind == KIND_VC and leaf.tag is not None:
                touched[leaf.tag.cell.id] = leaf.tag
            unown(state, leaf)
    for res in held.shared:
        state.alloc.untake(res.cell)
        health.reserve_bad_again(state, res.cell)
    for res in touched.values():
        if res.gused == 0 and res.kind == allocator.VC:
            state.alloc.unbind_vc(res)
            health.reserve_bad_again(state, res.cell)
    j.delitem(state.held, key)
    state.index_victim(held.info, -1)
    if key in state.restored:
        state.forget_restored(key)
    if key in state.demoted:
        j.delitem(state.demoted, key)


def _ignore(_entry: tuple[object, ...]) -> None:
    """Stands in for the journal's ``log.extend`` outside a transaction."""
