"""Who uses which leaf: owning and freeing leaves, releasing a job.

Theory of operation: on top of the allocator's reservations every leaf cell
has at most one owner job (``Cell.owner``).  Owning or freeing a leaf keeps
four counters in step, all through the journal so a query can roll them back:
``used`` on the leaf and every ancestor, the node's ``shfree`` (leaves neither
reserved nor owned), the reservation's ``gused`` when a guaranteed (VC or
pinned) job uses a leaf of it, and the state's fragmentation counters
(``free_leaves``, ``whole_free_leaves``, healthy nodes only).
:func:`own_many` and :func:`disown_many` do this for a pod's leaves at once,
updating each ancestor's counter once per node instead of once per leaf, and
keep the nodes' ``freemask`` (unowned leaves as bits) and the chain's
histogram of healthy nodes by unowned leaves (``PlacerState.free_hist``).  Releasing a job frees its
leaves, returns its shared-pool reservations, and unbinds every VC cell that no
guaranteed pod of the VC uses any more (a VC's virtual cell is bound only while
it is used), re-reserving the freed parts of bad nodes; a released job's
restore record goes with it.
"""

from __future__ import annotations

from fleet.core.cells import allocator, health
from fleet.core.cells.state import GUARANTEED_KINDS, KIND_VC, PlacerState
from fleet.core.cells.topology import Cell, Reservation, ReservationKind
from fleet.core.checks import InvariantError


def own_many(state: PlacerState, leaves: list[Cell], key: str, guaranteed: bool) -> None:
    """Make ``key`` the owner of unowned ``leaves``, each ancestor's counter updated once.

    Cells below a node are counted per leaf; the node and the cells above it once
    per node.  ``guaranteed``: the leaves count as their reservations' ``gused``.
    """
    for leaf in leaves:
        if leaf.owner is not None:
            raise InvariantError(f"cannot give {leaf} to {key}: {leaf.owner} owns it")
    _change_owners(state, leaves, None, key, guaranteed)


def disown_many(state: PlacerState, leaves: list[Cell], guaranteed: bool) -> None:
    """Free ``leaves`` of one owner (the inverse of :func:`own_many`), counters updated
    once per node.

    ``guaranteed``: their owner is a VC or pinned job, whose leaves count as their
    reservations' ``gused``.
    """
    old = leaves[0].owner if leaves else None
    for leaf in leaves:
        if leaf.owner is None:
            raise InvariantError(f"cannot free {leaf}: it has no owner")
        if leaf.owner != old:
            raise InvariantError(f"cannot free {leaf} with {old}'s: {leaf.owner} owns it")
    _change_owners(state, leaves, old, None, guaranteed)


def unown(state: PlacerState, leaf: Cell) -> None:
    """Free one owned leaf (the inverse of owning it)."""
    key = leaf.owner
    held = state.held.get(key) if key is not None else None
    disown_many(state, [leaf], held is not None and held.kind in GUARANTEED_KINDS)


def _undo_owners(leaves: list[Cell], sign: int, old: str | None) -> None:
    """Journal undo of :func:`_change_owners`' per-leaf changes (owner and ``used``)."""
    for leaf in leaves:
        leaf.owner = old
        if leaf.node_cell is not leaf:
            leaf.used -= sign


def _change_owners(
    state: PlacerState, leaves: list[Cell], old: str | None, key: str | None, guaranteed: bool
) -> None:
    """Give ``leaves``, all owned by ``old``, to ``key`` (None: free them) and keep
    every counter: ``used`` up the tree, the nodes' ``shfree`` and ``freemask``, the
    chains' free histograms, the fragmentation counters and the reservations' ``gused``.

    Leaves are grouped by node as bit masks; a node's cells between it and its
    leaves count their changed leaves by masking (``Cell.mids``).  The leaves'
    own changes are one journal entry (they all had the same owner).  A node
    met again after another one is simply counted again: every update below is
    relative to the node's counters of that moment."""
    j = state.j
    log = j.log
    record = log.extend if log is not None else _ignore
    sign = -1 if key is None else 1
    record((leaves, sign, old, _undo_owners))
    # Runs of leaves in one node, as (node, bits); a node may come back in a later
    # run: every count below is added per run, so that is the same as one run.
    runs: list[tuple[Cell, int]] = []
    gused: dict[Reservation, int] = {}
    node: Cell | None = None
    mask = 0
    run_tag: Reservation | None = None  # guaranteed leaves: a run of one reservation
    run = 0
    # VC bindings the leaves are in (their open state may change), in order.
    bindings: dict[Reservation, None] = {}
    last_tag: Reservation | None = None
    for leaf in leaves:
        at = leaf.node_cell
        assert at is not None
        if at is not node:
            if node is not None:
                runs.append((node, mask))
            node, mask = at, 0
        mask |= leaf.bits
        leaf.owner = key
        if at is not leaf:
            leaf.used += sign
        tag = leaf.tag
        if tag is not last_tag:
            last_tag = tag
            if tag is not None and tag.kind is ReservationKind.VC:
                bindings[tag] = None
        if guaranteed:
            if tag is run_tag:
                run += 1
            else:
                if run_tag is not None:
                    gused[run_tag] = gused.get(run_tag, 0) + run
                run_tag, run = tag, 1
    if node is not None:
        runs.append((node, mask))
    if run_tag is not None:
        gused[run_tag] = gused.get(run_tag, 0) + run
    free = whole = 0
    for cell, bits in runs:
        n = bits.bit_count()
        unreserved = (bits & ~cell.tagmask).bit_count()
        if unreserved:
            record((cell, "shfree", cell.shfree, setattr))
            cell.shfree -= sign * unreserved
        for mid in cell.mids:
            k = (mid.bits & bits).bit_count()
            if k:
                record((mid, "used", mid.used, setattr))
                mid.used += sign * k
        record((cell, "freemask", cell.freemask, setattr))
        if key is None:
            cell.freemask |= bits
        else:
            cell.freemask &= ~bits
        if cell.healthy:
            hist = state.free_hist[cell.chain]
            unowned = cell.size - cell.used
            j.listitem(hist, unowned, -1)
            j.listitem(hist, unowned - sign * n, 1)
            free += n
            if key is None:
                if cell.used == n:
                    whole += cell.size
            elif cell.used == 0:
                whole += cell.size
        up: Cell | None = cell
        while up is not None:
            record((up, "used", up.used, setattr))
            up.used += sign * n
            up = up.parent
    if free:
        j.add(state, "free_leaves", -sign * free)
    if whole:
        j.add(state, "whole_free_leaves", -sign * whole)
    for res, count in gused.items():
        j.add(res, "gused", sign * count)
    for res in bindings:
        state.alloc.reopen(res)


def release(state: PlacerState, key: str) -> None:
    """Free everything job ``key`` holds (it must be held); unbind VC cells left unused."""
    j = state.j
    held = state.held[key]
    touched: dict[int, Reservation] = {}
    for request in held.requests.values():
        j.set(state, "allocated", state.allocated - request)
    mine = [leaf for leaves in held.leaves.values() for leaf in leaves]
    if held.kind == KIND_VC:
        last: Reservation | None = None
        for leaf in mine:
            tag = leaf.tag
            if tag is not None and tag is not last:
                touched[tag.cell.id] = last = tag
    if mine:
        disown_many(state, mine, held.kind in GUARANTEED_KINDS)
    for res in held.shared:
        state.alloc.untake(res.cell)
        health.reserve_bad_again(state, res.cell)
    for res in touched.values():
        if res.gused == 0 and res.kind == allocator.VC:
            state.alloc.unbind_vc(res)
            health.reserve_bad_again(state, res.cell)
    j.delitem(state.held, key)
    state.index_unit(held.info, -1)
    if key in state.restored:
        state.forget_restored(key)
    if key in state.demoted:
        j.delitem(state.demoted, key)


def _ignore(_entry: tuple[object, ...]) -> None:
    """Stands in for the journal's ``log.extend`` outside a transaction."""
