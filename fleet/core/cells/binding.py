"""Committing a fit: re-validate the plan, bind VC cells, reserve and own the leaves.

Theory of operation: ``bind`` gets back the :class:`CellFit` that ``fit``
answered, possibly after other jobs were bound or released, so nothing in it
is trusted.  Its victims must be gone; every VC cell in ``bindings`` must
still be owed to the job's VC, still be free and keep every other VC safe when
bound; every GPU must exist, be on a healthy node, be unowned and be reserved
for the job's kind (its VC's cells, its pinned cell, unreserved for the shared
pool, not bad for opportunistic work).  A shared-pool pod reserves its leaves
as its maximal wholly chosen cells (:func:`take_shared`), and the VC safety of
those takes is checked once per chain after all pods, which gives the same
answer as a check after every leaf.  Any failure raises (``BindError`` for a
stale plan, ``ValueError`` for a wrong GPU); the caller's journal transaction
then rolls everything back, so nothing is half bound (the job's own list of
shared reservations included: it is replaced through the journal).  ``fit``
runs the same :func:`commit` inside its own journal when victims or released
jobs leave, so that it never answers a plan this refuses.
"""

from __future__ import annotations

from fleet.core.cells import allocator, ownership
from fleet.core.cells.state import (
    GUARANTEED_KINDS,
    KIND_PIN,
    KIND_SHARED,
    KIND_VC,
    CellFit,
    Held,
    PlacerState,
)
from fleet.core.cells.topology import Cell, Reservation
from fleet.core.charges import Charge
from fleet.core.jobs import Job
from fleet.core.placement import BindError


def commit(state: PlacerState, job: Job, charge: Charge, fit: CellFit) -> None:
    """Bind ``fit`` for unit ``charge`` (in a journal transaction the caller rolls back)."""
    if charge.key != job.key:
        raise BindError(f"{job.key}: bound as unit {charge.key} of another key")
    j = state.j
    alloc = state.alloc
    kind, bindings = fit.kind, fit.bindings
    for victim in fit.victims:
        if victim in state.held:
            raise BindError(f"{job.key}: victim {victim} has not been released")
    held = state.held.get(job.key)
    vc = job.queue if kind in GUARANTEED_KINDS else None
    if held is not None and job.key in state.restored:
        state.forget_restored(job.key)  # the record no longer says everything it holds
    if held is None:
        held = Held(charge, kind, vc)
        j.setitem(state.held, job.key, held)
        state.index_unit(charge, 1)
    for cid in bindings:
        cell = state.topo.cells[cid]
        chain = cell.chain
        before = alloc.shortage(chain)
        if vc is None or alloc.vc_owed[vc][chain][cell.level] <= 0:
            raise BindError(f"{job.key}: VC {vc} is owed no {cell.ctype.name} cell")
        if alloc.free_root_of(cell) is None:
            raise BindError(f"{job.key}: cell {cell.address} is no longer free")
        alloc.bind_vc(vc, cell)
        if not alloc.no_worse(chain, before):
            raise BindError(f"{job.key}: binding {cell.address} would break a VC guarantee")
    by_pod = {p.name: p for p in job.pods}
    guaranteed = held.kind in GUARANTEED_KINDS
    # Shared pool: shortage per chain before the takes (checked once, after them).
    shared_before: dict[str, list[int]] = {}
    # Other kinds take no cells: their pods' leaves are owned at once, after every check.
    batch: list[Cell] = []
    claimed: set[Cell] = set()
    for placement in fit.pods:
        pod = by_pod.get(placement.pod)
        if pod is None:
            raise BindError(f"{job.key}: unknown pod {placement.pod}")
        if placement.pod in held.pods:
            raise BindError(f"{job.key}: pod {placement.pod} is already placed")
        leaves: list[Cell] = []
        seen: set[Cell] = set()
        on_node = state.topo.node_leaf.get(placement.node, {})
        # check_leaf's verdict depends on the node's health, the owner and the tag:
        # an unowned leaf of a healthy node under the tag last found right passes.
        passed: object = _UNSEEN
        for index in placement.gpus:
            leaf = on_node.get(index)
            if leaf is None:
                raise ValueError(f"{job.key}: no GPU {index} on node {placement.node}")
            node = leaf.node_cell
            tag = leaf.tag
            if tag is not passed or leaf.owner is not None or node is None or not node.healthy:
                check_leaf(job, held, leaf)
                passed = tag
            if leaf in seen:
                raise BindError(
                    f"{job.key}: GPU {leaf.leaf_index} of {leaf.node} is held by {job.key}"
                )
            if leaf in claimed:  # by an earlier pod (owned by now, one pod at a time)
                raise ValueError(
                    f"{job.key}: GPU {leaf.leaf_index} of {leaf.node} is held by {job.key}"
                )
            seen.add(leaf)
            leaves.append(leaf)
        if kind == KIND_SHARED:
            if leaves:
                take_shared(state, job.key, held, leaves, shared_before)
                ownership.own_many(state, leaves, job.key, guaranteed)
        else:
            batch.extend(leaves)
            if len(fit.pods) > 1:
                claimed.update(leaves)
        j.setitem(held.pods, placement.pod, placement)
        j.setitem(held.leaves, placement.pod, leaves)
        j.setitem(held.requests, placement.pod, pod.request)
        j.set(state, "allocated", state.allocated + pod.request)
    if batch:
        ownership.own_many(state, batch, job.key, guaranteed)
    for chain, before in shared_before.items():
        if not alloc.no_worse(chain, before):
            raise BindError(f"{job.key}: shared cells in chain {chain} are owed to a VC")


def take_shared(
    state: PlacerState, key: str, held: Held, leaves: list[Cell], before: dict[str, list[int]]
) -> None:
    """Reserve one pod's (unreserved) leaves for ``key``, whole cells at a time.

    The leaves are covered by their maximal wholly chosen cells, taken in the
    order of their first leaf: the free lists end up exactly as with one take per
    leaf (same free roots, pushed in the same order).  The caller compares the
    shortage after all takes with ``before``; that is the same answer as checking
    after every take, because one take changes the shortage vector only by raising
    the highest level it changes (so "no level grew at any step" holds iff the
    vector is unchanged at the end, iff no level grew overall).
    """
    alloc = state.alloc
    chain = leaves[0].chain
    if chain not in before:
        before[chain] = alloc.shortage(chain)
    chosen = {leaf.id for leaf in leaves}
    covered: set[int] = set()
    taken: list[Reservation] = []
    for leaf in leaves:
        if leaf.id in covered:
            continue
        cell = leaf
        parent = cell.parent
        while parent is not None and all(c.id in chosen for c in parent.leaves):
            cell = parent
            parent = cell.parent
        res = Reservation(allocator.SHARED, cell, job=key)
        alloc.take(cell, res)
        taken.append(res)
        covered.update(c.id for c in cell.leaves)
    # A new list through the journal: a rolled back bind (or fit) of a job already
    # held must not leave reservations behind in its list.
    state.j.set(held, "shared", held.shared + taken)


#: No tag has passed :func:`check_leaf` yet.
_UNSEEN = object()


def check_leaf(job: Job, held: Held, leaf: Cell) -> None:
    """Raise ValueError unless ``leaf`` is healthy, unowned and reserved for ``held``'s kind."""
    node = leaf.node_cell
    assert node is not None
    if not node.healthy:
        raise ValueError(f"{job.key}: node {leaf.node} is bad")
    if leaf.owner is not None:
        raise ValueError(f"{job.key}: GPU {leaf.leaf_index} of {leaf.node} is held by {leaf.owner}")
    tag = leaf.tag
    if held.kind == KIND_VC:
        ok = tag is not None and tag.kind == allocator.VC and tag.vc == held.vc
    elif held.kind == KIND_PIN:
        ok = tag is not None and tag.kind == allocator.PIN and tag.vc == held.vc
    elif held.kind == KIND_SHARED:
        ok = tag is None
    else:
        ok = tag is None or tag.kind != allocator.BAD
    if not ok:
        raise ValueError(f"{job.key}: GPU {leaf.leaf_index} of {leaf.node} is reserved for {tag}")
