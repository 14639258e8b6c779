"""The placer's invariants as code: every index and counter equals a recount.

Theory of operation: :func:`check` recounts from scratch what the placer keeps
incrementally and asserts they agree — the allocator's own state
(``Allocator.check``: flags, free lists, unreserved leaves, owed counters),
the capacity of the healthy nodes, the sum of the placed pods' requests, one
owner per leaf that is exactly the job holding it, each leaf reserved as its
job's kind requires, ``used`` per cell, ``shfree`` per node, the fragmentation
counters, ``gused`` per VC and pinned reservation (a bound VC cell is always
in use), while no node is bad, every VC's guarantee, and that restore records
describe their jobs and are indexed by their chains, and demoted jobs are held
as opportunistic ones.  It is slow
(linear in the cluster) and meant for tests and state machines.
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
from fleet.core.jobs import Mode
from fleet.core.resources import Resources


def check(state: PlacerState) -> None:
    """Raise AssertionError when an index or counter disagrees with a recount."""
    alloc = state.alloc
    alloc.check()
    capacity = Resources()
    for name, cap in state.node_caps.items():
        if name not in state.bad:
            capacity = capacity + cap
    assert state.capacity == capacity, (state.capacity, capacity)
    allocated = Resources()
    for held in state.held.values():
        for request in held.requests.values():
            allocated = allocated + request
    assert state.allocated == allocated, (state.allocated, allocated)
    owners: dict[int, str] = {}
    for key, held in state.held.items():
        assert held.info.key == key
        assert set(held.pods) == set(held.leaves) == set(held.requests)
        for leaves in held.leaves.values():
            for leaf in leaves:
                assert leaf.id not in owners, f"{leaf} owned twice"
                owners[leaf.id] = key
                assert leaf.owner == key, f"{leaf} owner {leaf.owner} != {key}"
                tag = leaf.tag
                if held.kind == KIND_VC:
                    assert tag is not None and tag.kind == allocator.VC and tag.vc == held.vc
                elif held.kind == KIND_PIN:
                    assert tag is not None and tag.kind == allocator.PIN and tag.vc == held.vc
                elif held.kind == KIND_SHARED:
                    assert tag is not None and tag.kind == allocator.SHARED and tag.job == key
    gused: dict[int, int] = {}
    free = whole = 0
    for cell in reversed(state.topo.cells):
        if not cell.children:
            assert (cell.owner is not None) == (cell.id in owners), f"{cell} stray owner"
            assert cell.used == (1 if cell.owner else 0)
            owner, tag = cell.owner, cell.tag
            if owner is not None and tag is not None and state.held[owner].kind in GUARANTEED_KINDS:
                gused[id(tag)] = gused.get(id(tag), 0) + 1
        else:
            assert cell.used == sum(c.used for c in cell.children), f"{cell} used count"
        if cell.is_node:
            shfree = sum(1 for x in cell.leaves if x.tag is None and x.owner is None)
            assert cell.shfree == shfree, f"{cell} shfree {cell.shfree} != {shfree}"
        if cell.is_node and cell.healthy:
            free += cell.size - cell.used
            if cell.used == 0:
                whole += cell.size
    assert free == state.free_leaves, (free, state.free_leaves)
    assert whole == state.whole_free_leaves, (whole, state.whole_free_leaves)
    for bound in alloc.vc_bound.values():
        for res in bound.values():
            assert res.gused == gused.get(id(res), 0), f"{res} gused"
            assert res.gused > 0, f"{res} bound but unused"
    for res in alloc.pins.values():
        assert res.gused == gused.get(id(res), 0), f"{res} gused"
    if not state.bad:
        for chain in state.topo.chain_types:
            assert alloc.deficit(chain) == 0, f"VC guarantee broken in chain {chain}"
    for key, rec in state.restored.items():
        held = state.held[key]
        assert tuple(held.pods.values()) == rec.pods, f"{key} differs from its record"
        for chain in state.topo.chain_types:
            indexed = key in state.restored_in[chain]
            assert indexed == (rec.contested and chain in rec.chains), f"{key} index"
            assert (key in state.fallbacks[chain]) == (indexed and not rec.preferred), key
    for chain in state.topo.chain_types:
        assert set(state.restored_in[chain]) <= set(state.restored), chain
        ranks = [state.restored[key].rank for key in state.restored_in[chain]]
        if ranks:
            assert max(ranks) <= state.rank_bound[chain], f"rank bound of {chain}"
    for key in state.demoted:
        held = state.held[key]
        assert held.kind == KIND_OPP and held.info.mode is Mode.OPPORTUNISTIC, key
