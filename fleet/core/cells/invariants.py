"""The placer's invariants as code: every index and counter equals a recount.

Theory of operation: :func:`check` recounts from scratch what the placer keeps
incrementally and raises :class:`~fleet.core.checks.InvariantError` (which
``python -O`` does not strip) naming the first cell, job or counter that
disagrees — no journal transaction or undo scope left open, the allocator's
own state (``Allocator.check``: flags, free lists, unreserved leaves, owed
counters), the capacity of the healthy nodes, the sum of the placed pods'
requests, one owner per leaf that is exactly the job holding it, each leaf
reserved as its job's kind requires, ``used`` per cell, ``shfree`` and the
free and reserved leaf masks per node, the chains' histograms of healthy
nodes by unowned leaves, the held growth units by job,
the fragmentation counters, ``gused`` per VC and pinned reservation (a bound
VC cell is always in use), while no node is bad, every VC's guarantee, that
restore records describe their jobs and are indexed by their chains, and that
demoted jobs are held as opportunistic ones.
It is slow (linear in the cluster) and meant for tests and state machines.
"""

from __future__ import annotations

from fleet.core.cells import allocator
from fleet.core.cells.state import (
    GUARANTEED_KINDS,
    KIND_OPP,
    KIND_PIN,
    KIND_SHARED,
    KIND_VC,
    PlacerState,
)
from fleet.core.cells.topology import Reservation
from fleet.core.checks import InvariantError
from fleet.core.jobs import Mode
from fleet.core.resources import Resources


def check(state: PlacerState) -> None:
    """Raise :class:`InvariantError` when an index or counter disagrees with a recount."""
    if state.j.log is not None:
        raise InvariantError(f"{state.cluster}: a journal transaction is still open")
    if state.marks:
        raise InvariantError(f"{state.cluster}: {len(state.marks)} undo scope(s) still open")
    alloc = state.alloc
    alloc.check()
    capacity = Resources()
    for name, cap in state.node_caps.items():
        if name not in state.bad:
            capacity = capacity + cap
    if state.capacity != capacity:
        raise InvariantError(
            f"{state.cluster}: capacity drifted: kept {state.capacity}, recount {capacity}"
        )
    allocated = Resources()
    for held in state.held.values():
        for request in held.requests.values():
            allocated = allocated + request
    if state.allocated != allocated:
        raise InvariantError(
            f"{state.cluster}: allocated drifted: kept {state.allocated}, recount {allocated}"
        )
    by_mode: dict[Mode, set[str]] = {Mode.OPPORTUNISTIC: set(), Mode.BORROWED: set()}
    by_queue: dict[str, set[str]] = {}
    for key, held in state.held.items():
        info = held.info
        if info.preemptible:
            if info.mode is Mode.GUARANTEED:
                by_queue.setdefault(info.queue, set()).add(key)
            else:
                by_mode[info.mode].add(key)
    kept_queues = {q: set(keys) for q, keys in state.victims_by_queue.items() if keys}
    if {m: set(keys) for m, keys in state.victims_by_mode.items()} != by_mode or (
        kept_queues != by_queue
    ):
        raise InvariantError(f"{state.cluster}: the victim indexes differ from the held units")
    owners: dict[int, str] = {}
    for key, held in state.held.items():
        if held.info.key != key:
            raise InvariantError(f"job {held.info.key} is held under the key {key}")
        if not set(held.pods) == set(held.leaves) == set(held.requests):
            raise InvariantError(
                f"job {key}: pods {sorted(held.pods)}, leaves of {sorted(held.leaves)} and "
                f"requests of {sorted(held.requests)} differ"
            )
        for leaves in held.leaves.values():
            for leaf in leaves:
                other = owners.get(leaf.id)
                if other is not None:
                    raise InvariantError(f"{leaf} is held by {other} and by {key}")
                owners[leaf.id] = key
                if leaf.owner != key:
                    raise InvariantError(f"{leaf} held by {key} has owner {leaf.owner}")
                tag = leaf.tag
                if held.kind == KIND_VC:
                    ok = tag is not None and tag.kind == allocator.VC and tag.vc == held.vc
                elif held.kind == KIND_PIN:
                    ok = tag is not None and tag.kind == allocator.PIN and tag.vc == held.vc
                elif held.kind == KIND_SHARED:
                    ok = tag is not None and tag.kind == allocator.SHARED and tag.job == key
                else:
                    ok = True
                if not ok:
                    raise InvariantError(
                        f"{leaf} of {held.kind} job {key} (VC {held.vc}) is reserved for {tag}"
                    )
    gused: dict[int, int] = {}
    free = whole = 0
    hists: dict[str, list[int]] = {}
    for cell in reversed(state.topo.cells):
        if not cell.children:
            if (cell.owner is not None) != (cell.id in owners):
                if cell.owner is not None:
                    raise InvariantError(f"{cell} has owner {cell.owner}, which does not hold it")
                raise InvariantError(f"{cell} held by {owners[cell.id]} has no owner")
            if cell.used != (1 if cell.owner else 0):
                raise InvariantError(f"{cell} with owner {cell.owner} has used {cell.used}")
            owner, tag = cell.owner, cell.tag
            if owner is not None and tag is not None and state.held[owner].kind in GUARANTEED_KINDS:
                gused[id(tag)] = gused.get(id(tag), 0) + 1
        else:
            used = sum(c.used for c in cell.children)
            if cell.used != used:
                raise InvariantError(f"{cell} used drifted: kept {cell.used}, recount {used}")
        if cell.is_node:
            shfree = sum(1 for x in cell.leaves if x.tag is None and x.owner is None)
            if cell.shfree != shfree:
                raise InvariantError(f"{cell} shfree drifted: kept {cell.shfree}, recount {shfree}")
            freemask = sum(1 << i for i, x in enumerate(cell.leaves) if x.owner is None)
            tagmask = sum(1 << i for i, x in enumerate(cell.leaves) if x.tag is not None)
            if cell.freemask != freemask or cell.tagmask != tagmask:
                raise InvariantError(
                    f"{cell} masks drifted: kept free {cell.freemask:b} tagged {cell.tagmask:b}, "
                    f"recount {freemask:b} {tagmask:b}"
                )
        if cell.is_node and cell.healthy:
            free += cell.size - cell.used
            hist = hists.setdefault(cell.chain, [0] * len(state.free_hist[cell.chain]))
            hist[cell.size - cell.used] += 1
            if cell.used == 0:
                whole += cell.size
    for chain, kept in state.free_hist.items():
        recount = hists.get(chain, [0] * len(kept))
        if kept != recount:
            raise InvariantError(
                f"{state.cluster}: free histogram of {chain} drifted: kept {kept}, "
                f"recount {recount}"
            )
    units: dict[str, set[str]] = {}
    for key, held in state.held.items():
        if held.info.is_growth:
            units.setdefault(held.info.job, set()).add(key)
    if {job: set(keys) for job, keys in state.units.items()} != units:
        raise InvariantError(f"{state.cluster}: the units by job differ from the held units")
    if free != state.free_leaves:
        raise InvariantError(
            f"{state.cluster}: free leaves drifted: kept {state.free_leaves}, recount {free}"
        )
    if whole != state.whole_free_leaves:
        raise InvariantError(
            f"{state.cluster}: leaves of wholly free nodes drifted: "
            f"kept {state.whole_free_leaves}, recount {whole}"
        )
    for vc, bound in alloc.vc_bound.items():
        for res in bound.values():
            _check_gused(res, gused)
            if res.gused <= 0:
                raise InvariantError(f"{res} is bound but no guaranteed job uses it")
        for chain, opened in alloc.vc_open[vc].items():
            open_recount = {
                cid: res
                for cid, res in bound.items()
                if res.cell.chain == chain and res.cell.used < res.cell.size
            }
            if opened != open_recount:
                raise InvariantError(
                    f"{state.cluster}: open cells of VC {vc} in {chain} drifted: kept "
                    f"{sorted(opened)}, recount {sorted(open_recount)}"
                )
    for res in alloc.pins.values():
        _check_gused(res, gused)
    if not state.bad:
        for chain in state.topo.chain_types:
            deficit = alloc.deficit(chain)
            if deficit:
                raise InvariantError(
                    f"{state.cluster}: VC guarantee broken in chain {chain}: {deficit} owed "
                    f"leaves cannot be bound ({alloc.doomed_by_chain_level()})"
                )
    _check_restored(state)


def _check_restored(state: PlacerState) -> None:
    """Restore records describe their jobs and are indexed by their chains."""
    cluster = state.cluster
    for key, rec in state.restored.items():
        held = state.held.get(key)
        if held is None or tuple(held.pods.values()) != rec.pods:
            raise InvariantError(f"{cluster}: {key} is not held where its restore record says")
        for chain in state.topo.chain_types:
            indexed = key in state.restored_in[chain]
            if indexed != (rec.contested and chain in rec.chains):
                raise InvariantError(
                    f"{cluster}: {key} is {'' if indexed else 'not '}indexed as "
                    f"contested in chain {chain}, its record says otherwise"
                )
            if (key in state.fallbacks[chain]) != (indexed and not rec.preferred):
                raise InvariantError(f"{cluster}: {key}: fallback index of chain {chain} drifted")
    for chain in state.topo.chain_types:
        stale = sorted(set(state.restored_in[chain]) - set(state.restored))
        if stale:
            raise InvariantError(f"{cluster}: chain {chain} indexes no-longer-restored {stale}")
        ranks = [state.restored[key].rank for key in state.restored_in[chain]]
        if ranks and max(ranks) > state.rank_bound[chain]:
            raise InvariantError(f"{cluster}: the rank bound of chain {chain} is too low")
    for key in state.demoted:
        held = state.held.get(key)
        if held is None or held.kind != KIND_OPP or held.info.mode is not Mode.OPPORTUNISTIC:
            raise InvariantError(f"{cluster}: demoted {key} is not held as opportunistic")


def _check_gused(res: Reservation, gused: dict[int, int]) -> None:
    recount = gused.get(id(res), 0)
    if res.gused != recount:
        raise InvariantError(f"{res} gused drifted: kept {res.gused}, recount {recount}")
