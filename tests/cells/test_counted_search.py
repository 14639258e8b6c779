"""The counted searches answer exactly as the leaf-by-leaf ones (ADR 0027).

``packing.pack`` without victims or released jobs reads the nodes' leaf masks
and a memoized in-node choice, and a fresh VC binding's safety is counted
without binding, and a search with victims or released jobs skips the
containers whose unowned, victims' and released leaves are too few
(``packing.leaving_leaves``).  The leaf-by-leaf searches are the oracle in
``tests/cells/oracle.py``.  A state machine over random small clusters
(several node sizes, VCs of node and pair cells, a shared pool, skuTypes, bad
nodes) asks every question of production and of the oracle on the same state
and asks for identical answers: every ``fit`` (placement,
level, fragmentation, victims, kind, bindings, or the same reason), and
``pack`` under random cells for every kind of leaf filter, with leaves already
picked by other pods of the gang.  The placer's invariants (leaf masks, free
histograms, units by job) are recounted after every step.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from fleet.core.cells import packing
from fleet.core.cells.config import load_cell_config
from fleet.core.cells.placer import CellPlacer
from fleet.core.cells.victims import Question
from fleet.core.charges import charge_for
from fleet.core.jobs import Job, Mode, ReplicaGroup
from fleet.core.placement import Fit, NoFit, PodPlacement
from fleet.core.resources import GPU, Resources

from . import oracle
from .test_state_machine import make_config

#: Gangs (leaf cells per pod) asked under every cell.
GANGS = [
    (1,),
    (2,),
    (3,),
    (4,),
    (8,),
    (1, 1),
    (2, 1),
    (2, 2),
    (4, 4),
    (2, 2, 2),
    (8, 8),
    (0, 2),
    (4, 4, 4, 4),
    (8, 8, 8),
]


def choice_view(choice: packing.Choice | None) -> object:
    if choice is None:
        return None
    leaves = {idx: [leaf.id for leaf in ls] for idx, ls in sorted(choice.leaves.items())}
    return leaves, choice.level, choice.key, sorted(choice.victims)


class CountedMachine(RuleBasedStateMachine):
    jobs = Bundle("jobs")

    def __init__(self) -> None:
        super().__init__()
        self.placer: CellPlacer | None = None
        self.n = 0
        self.nodes: list[str] = []
        self.compared = 0

    @initialize(
        leaves=st.integers(1, 4),
        nodes=st.integers(1, 4),
        racks=st.integers(1, 3),
        owed_a=st.integers(0, 3),
        owed_b=st.integers(0, 2),
        sku=st.booleans(),
        spills=st.booleans(),
    )
    def setup(
        self, leaves: int, nodes: int, racks: int, owed_a: int, owed_b: int, sku: bool, spills: bool
    ) -> None:
        config = load_cell_config(make_config(leaves, nodes, racks, owed_a, owed_b, sku))
        self.placer = CellPlacer("counted", config, vc_spills=spills)
        self.nodes = sorted(config.nodes())

    def new_job(
        self, queue: str, priority: int, borrowed: bool, pods: int, gpus: int
    ) -> tuple[Job, Mode]:
        self.n += 1
        group = ReplicaGroup("Worker", pods, Resources({"nvidia.com/gpu": gpus}))
        job = Job(f"ns/j{self.n}", queue, priority, self.n, (group,))
        mode = (
            Mode.OPPORTUNISTIC if priority < 0 else Mode.BORROWED if borrowed else Mode.GUARANTEED
        )
        return job, mode

    def both(
        self, job: Job, mode: Mode, preempt: bool, released: frozenset[str] = frozenset()
    ) -> Fit | NoFit:
        assert self.placer is not None
        fit = self.placer.fit(job, job.pods, mode, preempt=preempt, released=released)
        reference = oracle.fit(self.placer, job, job.pods, mode, preempt=preempt, released=released)
        assert fit == reference
        self.compared += 1
        return fit

    @rule(
        target=jobs,
        queue=st.sampled_from(["a", "a", "b", "team"]),
        priority=st.sampled_from([-1, 10, 10, 100]),
        borrowed=st.sampled_from([False, False, True]),
        pods=st.integers(1, 4),
        gpus=st.sampled_from([1, 1, 1, 2, 2, 3, 4, 8]),
        preempt=st.booleans(),
    )
    def place(
        self, queue: str, priority: int, borrowed: bool, pods: int, gpus: int, preempt: bool
    ) -> str:
        assert self.placer is not None
        job, mode = self.new_job(queue, priority, borrowed, pods, gpus)
        fit = self.both(job, mode, preempt)
        if isinstance(fit, Fit):
            for key in fit.victims:
                self.placer.release(key)
            self.placer.bind(job, charge_for(job, mode), fit)
        return job.key

    @rule(
        queue=st.sampled_from(["a", "b", "team"]),
        priority=st.sampled_from([10, 100, 120]),
        pods=st.integers(1, 3),
        gpus=st.integers(1, 8),
        released=st.lists(jobs, max_size=2, unique=True),
    )
    def ask_with_released(
        self, queue: str, priority: int, pods: int, gpus: int, released: list[str]
    ) -> None:
        job, mode = self.new_job(queue, priority, False, pods, gpus)
        self.both(job, mode, True, frozenset(released))

    @rule(picked=st.integers(0, 6), opportunistic=st.booleans())
    def pack_under_every_cell(self, picked: int, opportunistic: bool) -> None:
        """``pack`` under every cell, for every leaf filter and several gangs, with
        some leaves already picked by other pods of the gang."""
        assert self.placer is not None
        state = self.placer.state
        for root in state.topo.cells:
            wants: list[object] = [packing.ANY, None]
            if root.res is not None:
                wants.append(root.res)
            unowned = [c.id for c in root.leaves if c.owner is None]
            for want in wants:
                for ks in GANGS:
                    needs = sorted(enumerate(ks), key=lambda d: -d[1])
                    question = Question("ns/probe", frozenset(), frozenset())
                    question.taken.update(unowned[:picked])
                    counted = packing.pack(state, root, want, needs, question, opportunistic)
                    reference = oracle.pack(state, root, want, needs, question, opportunistic)
                    assert choice_view(counted) == choice_view(reference), (root, want, ks)
                    self.compared += 1

    @rule(picked=st.integers(0, 6), opportunistic=st.booleans())
    def spread_over_the_tops(self, picked: int, opportunistic: bool) -> None:
        """Gangs spread pod by pod over every top (any leaf, unreserved leaves)."""
        assert self.placer is not None
        state = self.placer.state
        for chain, tops in state.topo.chain_tops.items():
            unowned = [c.id for top in tops for c in top.leaves if c.owner is None]
            for want in (packing.ANY, None):
                containers = [(top, want) for top in tops]
                for ks in GANGS:
                    needs = sorted(enumerate(ks), key=lambda d: -d[1])
                    question = Question("ns/probe", frozenset(), frozenset())
                    question.taken.update(unowned[:picked])
                    assert packing.countable(state, containers, question), chain
                    counted = packing.spread_counted(
                        state, containers, needs, question, opportunistic
                    )
                    reference = oracle.spread(state, containers, needs, question, opportunistic)
                    assert choice_view(counted) == choice_view(reference), (chain, want, ks)
                    bounded = packing.spread(state, containers, needs, question, opportunistic)
                    assert choice_view(bounded) == choice_view(reference), (chain, want, ks)
                    over = packing.best_over(state, containers, needs, question, opportunistic)
                    again = oracle.best_over(state, containers, needs, question, opportunistic)
                    assert choice_view(over) == choice_view(again), (chain, want, ks)
                    self.compared += 1

    @rule(key=jobs)
    def release(self, key: str) -> None:
        assert self.placer is not None
        self.placer.release(key)

    @rule(index=st.integers(0, 20), healthy=st.booleans())
    def health(self, index: int, healthy: bool) -> None:
        assert self.placer is not None
        node = self.nodes[index % len(self.nodes)]
        for key in self.placer.set_node_health(node, healthy):
            self.placer.release(key)

    @invariant()
    def consistent(self) -> None:
        if self.placer is not None:
            self.placer.check_invariants()


CountedMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
TestCountedMachine = CountedMachine.TestCase


def test_the_in_node_memo_is_per_shape_and_matches_the_leaf_by_leaf_choice() -> None:
    """Every mask of a node type gives the choice ``in_node`` makes on a node's leaves."""
    config = load_cell_config(make_config(4, 2, 1, 0, 0))
    placer = CellPlacer("memo", config)
    state = placer.state
    node = state.topo.nodes[sorted(state.topo.nodes)[1]][0]
    for mask in range(1, 1 << node.size):
        free = [leaf for leaf in node.leaves if leaf.bits & mask]
        for ks in [(1,), (2,), (2, 1), (4,), (3, 2), (2, 2, 2)]:
            if sum(ks) > len(free):
                continue
            positions, level = packing.in_node_by_mask(state, node, mask, ks)
            placed = packing.in_node(state, node, list(enumerate(ks)), free, [])
            assert placed is not None
            assert [[node.leaves[p] for p in ps] for ps in positions] == [
                placed[0][i] for i in range(len(ks))
            ]
            assert level == placed[1]


def test_across_nodes_the_shared_pool_ranks_nodes_by_fit_not_by_reservations() -> None:
    """A gang spread over nodes takes the tightest node first; only opportunistic
    gangs prefer nodes with fewer reserved leaves (the counted path like the other)."""
    config = load_cell_config(make_config(4, 2, 1, 0, 1))
    placer = CellPlacer("across", config)
    state = placer.state
    vc_job = Job("ns/vc", "b", 10, 1, (ReplicaGroup("Worker", 1, Resources({GPU: 1})),))
    idle = Job("ns/idle", "team", -1, 2, (ReplicaGroup("Worker", 1, Resources({GPU: 1})),))
    for job, mode in ((vc_job, Mode.GUARANTEED), (idle, Mode.OPPORTUNISTIC)):
        fit = placer.fit(job, job.pods, mode)
        assert isinstance(fit, Fit)
        placer.bind(job, charge_for(job, mode), fit)
    node0, node1 = (state.topo.nodes[name][0] for name in sorted(state.topo.nodes))
    # node0: a pair bound to VC b (one GPU used), six unreserved free; node1: seven free.
    assert (node0.tagmask.bit_count(), (node0.freemask & ~node0.tagmask).bit_count()) == (2, 6)
    assert (node1.tagmask, node1.freemask.bit_count()) == (0, 7)
    rack = node0.parent
    assert rack is not None
    for opportunistic, first in ((False, node0), (True, node1)):
        question = Question("ns/gang", frozenset(), frozenset())
        choice = packing.pack(state, rack, None, [(0, 4), (1, 4)], question, opportunistic)
        reference = oracle.pack(state, rack, None, [(0, 4), (1, 4)], question, opportunistic)
        assert choice_view(choice) == choice_view(reference)
        assert choice is not None and choice.leaves[0][0].node_cell is first


def test_spreading_ranks_each_containers_best_node_by_fit_not_by_level() -> None:
    """Pod by pod, every container offers its best node (lowest level first) and
    the tightest offer wins, whatever its level (the counted path like the other)."""
    config = load_cell_config(make_config(2, 1, 2, 0, 0))
    placer = CellPlacer("spread", config)
    state = placer.state
    node0, node1 = (state.topo.nodes[name][0] for name in sorted(state.topo.nodes))
    for n, (node, used) in enumerate(((node0, (0, 2)), (node1, (0,)))):
        group = ReplicaGroup("Worker", 1, Resources({GPU: len(used)}))
        job = Job(f"ns/idle{n}", "team", -1, n, (group,))
        gpus = tuple(node.leaves[i].leaf_index or 0 for i in used)
        pod = PodPlacement(job.pods[0].name, str(node.node), gpus)
        placer.restore(job, charge_for(job, Mode.OPPORTUNISTIC), [pod])
    # node0: two free GPUs in two pairs (a pod of 2 takes the node: level 3, none spare);
    # node1: a free pair and one more GPU (level 2, one spare).
    tops = [(top, packing.ANY) for top in state.topo.tops]
    question = Question("ns/gang", frozenset(), frozenset())
    needs = [(0, 2), (1, 2)]
    counted = packing.spread_counted(state, tops, needs, question, False)
    reference = oracle.spread(state, tops, needs, question, False)
    assert choice_view(counted) == choice_view(reference)
    assert choice_view(packing.spread(state, tops, needs, question, False)) == choice_view(
        reference
    )
    assert counted is not None
    assert [counted.leaves[i][0].node_cell for i in (0, 1)] == [node0, node1]


@settings(max_examples=150, deadline=None)
@given(
    owed=st.integers(2, 6),
    placed=st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(1, 3), st.integers(1, 8)),
        min_size=2,
        max_size=14,
    ),
    leave=st.sets(st.integers(0, 13)),
)
def test_a_vc_with_several_bound_cells_answers_as_the_search_of_every_cell(
    owed: int, placed: list[tuple[str, int, int]], leave: set[int]
) -> None:
    """A VC's bound cells are looked at in id order and skipped when their lower
    bound cannot beat the best found: every gang gets the answer of the search
    that packs every bound cell."""
    config = load_cell_config(make_config(4, 4, 2, owed, 1))
    placer = CellPlacer("bound", config)
    for n, (queue, pods, gpus) in enumerate(placed):
        group = ReplicaGroup("Worker", pods, Resources({GPU: gpus}))
        job = Job(f"ns/p{n}", queue, 10, n, (group,))
        fit = placer.fit(job, job.pods, Mode.GUARANTEED)
        if isinstance(fit, Fit):
            placer.bind(job, charge_for(job, Mode.GUARANTEED), fit)
    for n in sorted(leave):
        placer.release(f"ns/p{n}")
    placer.check_invariants()
    for queue in ("a", "b"):
        for ks in GANGS:
            if not any(ks):
                continue
            groups = tuple(
                ReplicaGroup(f"W{i}", 1, Resources({GPU: k})) for i, k in enumerate(ks) if k
            )
            job = Job("ns/probe", queue, 10, 99, groups)
            fit = placer.fit(job, job.pods, Mode.GUARANTEED)
            reference = oracle.fit(placer, job, job.pods, Mode.GUARANTEED)
            assert fit == reference, (queue, ks)


def test_a_chain_short_of_owed_cells_still_lends_what_keeps_it_no_shorter() -> None:
    """The shared pool's counter answer (every cell owed to a VC: no room) holds
    only while no chain is short; with a bad node the VC is short of a rack, and
    a GPU beside the bad node keeps it no shorter, so the job fits there."""
    raw = make_config(4, 2, 2, 0, 0)
    raw["virtualClusters"] = {"a": {"virtualCells": [{"cellType": "RACK", "cellNumber": 2}]}}
    config = load_cell_config(raw)  # VC a is owed both racks
    placer = CellPlacer("short", config)
    first = sorted(config.nodes())[0]
    assert placer.set_node_health(first, False) == []
    assert placer.doomed_cells() == {"a": 1}
    job = Job("ns/s", "team", 10, 1, (ReplicaGroup("Worker", 1, Resources({GPU: 1})),))
    fit = placer.fit(job, job.pods, Mode.GUARANTEED)
    reference = oracle.fit(placer, job, job.pods, Mode.GUARANTEED)
    assert fit == reference
    assert isinstance(fit, Fit)
    assert fit.pods[0].node == sorted(config.nodes())[1]  # beside the bad node
