"""Restoring the cell placer from recorded placements: exact, checked, order-independent.

The property test runs a random history of fits, binds (after the victims
left) and releases on one placer, records every held job as the service
will (job, mode, per pod node and GPU indices), restores the records into
fresh placers in two shuffled orders and compares: the same placements, the
invariants, the same state and the same answers to probe questions in both
restored placers — and the same as the original whenever the record
determines the state (no guaranteed job of a VC queue overflowed into the
shared pool, no VC with cells of several levels in a chain; see
``docs/decisions/0002-cell-allocator.md``, *Restoring after a restart*).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from fleet.core.cells.config import load_cell_config
from fleet.core.cells.placer import CellPlacer
from fleet.core.cells.spec import CellConfigError
from fleet.core.cells.state import KIND_OPP, KIND_SHARED, KIND_VC
from fleet.core.charges import charge_for
from fleet.core.jobs import Job, Mode, ReplicaGroup
from fleet.core.placement import Fit, Placer, PodPlacement, RestoreError, restore_order
from fleet.core.resources import Resources
from fleet.testing.cells import cell_placer, rack_config

Record = tuple[Job, Mode, tuple[PodPlacement, ...]]


def make_job(
    name: str, queue: str, priority: int = 10, pods: int = 1, gpus: int = 1, seq: int = 0
) -> Job:
    group = ReplicaGroup("Worker", pods, Resources({"nvidia.com/gpu": gpus}))
    return Job(f"t/{name}", queue, priority, seq, (group,))


def place(p: Placer, job: Job, mode: Mode, preempt: bool = False) -> Fit | None:
    fit = p.fit(job, job.pods, mode, preempt=preempt)
    if not isinstance(fit, Fit):
        return None
    for victim in fit.victims:
        p.release(victim)
    p.bind(job, charge_for(job, mode), fit)
    return fit


def records(p: CellPlacer, jobs: Mapping[str, tuple[Job, Mode]]) -> list[Record]:
    return [(*jobs[info.key], p.placement_of(info.key)) for info in p.running()]


def restored(config: Any, recs: list[Record], order: list[int]) -> CellPlacer:
    p = CellPlacer("c1", config)
    for i in order:
        job, mode, pods = recs[i]
        p.restore(job, charge_for(job, mode), pods)
    p.check_invariants()
    return p


def fingerprint(p: CellPlacer) -> dict[str, Any]:
    """Everything a later question can depend on, by cell address (no order)."""
    state = p.state
    alloc = state.alloc
    jobs = {
        key: (
            held.kind,
            held.vc,
            held.info,
            tuple(held.pods.values()),
            sorted(r.cell.address for r in held.shared),
        )
        for key, held in state.held.items()
    }
    bound = {
        vc: sorted(c.cell.address for c in cells.values()) for vc, cells in alloc.vc_bound.items()
    }
    free = {
        chain: [sorted(c.address for c in level.values()) for level in levels]
        for chain, levels in alloc.free.items()
    }
    return {
        "jobs": jobs,
        "bound": bound,
        "owed": alloc.vc_owed,
        "free": free,
        "pins": {pid: r.gused for pid, r in alloc.pins.items()},
        "demoted": p.demoted(),
        "totals": (p.capacity(), p.allocated(), p.free_leaves, p.whole_free_leaves),
    }


PROBES = [
    (queue, priority, borrowed, pods, gpus, preempt)
    for queue in ("a", "b", "c", "team")
    for priority, borrowed in ((10, False), (100, False), (10, True), (-1, False))
    for pods, gpus in ((1, 1), (1, 2), (2, 2), (1, 4))
    for preempt in (False, True)
]


def probes(p: CellPlacer) -> list[object]:
    out: list[object] = []
    for n, (queue, priority, borrowed, pods, gpus, preempt) in enumerate(PROBES):
        job = make_job(f"probe{n}", queue, priority, pods, gpus, seq=10_000 + n)
        mode = (
            Mode.OPPORTUNISTIC if priority < 0 else Mode.BORROWED if borrowed else Mode.GUARANTEED
        )
        out.append(p.fit(job, job.pods, mode, preempt=preempt))
    return out


def determined(p: CellPlacer) -> bool:
    """Whether the records determine ``p``'s state (see the module docstring)."""
    alloc = p.state.alloc
    for levels in alloc.configured.values():
        if any(sum(1 for n in per_level if n) > 1 for per_level in levels.values()):
            return False
    for held in p.state.held.values():
        configured = alloc.configured.get(held.info.queue)
        if held.kind == KIND_SHARED and configured is not None:
            chains = {leaf.chain for leaves in held.leaves.values() for leaf in leaves}
            if all(any(configured[chain]) for chain in chains):
                return False
    return True


@st.composite
def configs(draw: st.DrawFn) -> tuple[dict[str, Any], bool]:
    """Small racks of PAIR-structured nodes; VCs sized to fit (the config is valid)."""
    racks = draw(st.integers(1, 3))
    nodes = draw(st.integers(1, 3))
    gpus = draw(st.sampled_from([2, 4]))
    pinned = draw(st.booleans())
    left = racks * nodes - int(pinned)  # nodes not yet promised to a VC
    vcs: dict[str, list[tuple[str, int]]] = {}
    if racks >= 2 and draw(st.booleans()):
        # VC c: a whole rack and maybe a node: virtual cells of two levels in the chain.
        extra = draw(st.integers(0, min(1, left - nodes)))
        vcs["c"] = [("RACK", 1), ("RACK.NODE", extra)]
        left -= nodes + extra
    a = draw(st.integers(0, min(2, left)))
    if a:
        vcs["a"] = [("RACK.NODE", a)]
        left -= a
    b = draw(st.integers(0, min(3, left * (gpus // 2))))
    if b:
        vcs["b"] = [("RACK.NODE.PAIR", b)]
    pin = {"a": (racks - 1, nodes - 1)} if pinned else None
    return rack_config(racks, nodes, gpus, vcs, pairs=True, pinned=pin), pinned


steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("place"),
            st.sampled_from(["a", "b", "c", "team"]),
            st.sampled_from([-1, 10, 100]),
            st.booleans(),  # borrowed
            st.integers(1, 3),  # pods
            st.sampled_from([1, 1, 2, 4]),  # GPUs per pod
            st.booleans(),  # preempt
            st.booleans(),  # pinned (when the config pins a cell for VC a)
        ),
        st.tuples(st.just("release"), st.integers(0, 1000)),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(), history=steps, seeds=st.tuples(st.integers(), st.integers()))
def test_restore_rebuilds_the_same_placer_in_any_order(
    config: tuple[dict[str, Any], bool], history: list[tuple[Any, ...]], seeds: tuple[int, int]
) -> None:
    raw, has_pin = config
    try:
        loaded = load_cell_config(raw)
    except CellConfigError:
        assume(False)
        raise
    original = CellPlacer("c1", loaded)
    jobs: dict[str, tuple[Job, Mode]] = {}
    for n, step in enumerate(history):
        if step[0] == "release":
            keys = sorted(jobs)
            if keys:
                original.release(keys[step[1] % len(keys)])
            continue
        _, queue, priority, borrowed, pods, gpus, preempt, pin = step
        job = make_job(f"j{n}", queue, priority, pods, gpus, seq=n)
        if has_pin and pin and queue == "a":
            original.pin_job(job.key, "pin-a")
        mode = (
            Mode.OPPORTUNISTIC if priority < 0 else Mode.BORROWED if borrowed else Mode.GUARANTEED
        )
        if place(original, job, mode, preempt) is not None:
            jobs[job.key] = (job, mode)
    original.check_invariants()
    recs = records(original, jobs)
    orders = []
    for seed in seeds:
        order = list(range(len(recs)))
        random.Random(seed).shuffle(order)
        orders.append(order)
    pins = {k: v for k, v in original.state.pins.items() if original.holds(k)}

    def rebuilt(order: list[int]) -> CellPlacer:
        p = CellPlacer("c1", loaded)
        for key, pid in pins.items():
            p.pin_job(key, pid)
        for i in order:
            job, mode, pods = recs[i]
            p.restore(job, charge_for(job, mode), pods)
        p.check_invariants()
        return p

    first, second = rebuilt(orders[0]), rebuilt(orders[1])
    for p in (first, second):
        assert {i.key for i in p.running()} == {i.key for i in original.running()}
        for job, _, pods in recs:
            assert p.holds(job.key) and p.placement_of(job.key) == pods
        assert p.capacity() == original.capacity()
        assert p.allocated() == original.allocated()
    # Order-independent: the same state and the same answers, always.
    assert fingerprint(first) == fingerprint(second)
    assert probes(first) == probes(second)
    # The same as before the restart whenever the records determine it.
    if determined(original):
        event("records determine the state")
        assert fingerprint(first) == fingerprint(original)
        assert probes(first) == probes(original)
    else:
        if fingerprint(first) == fingerprint(original):
            event("records leave the state open; restored as before")
            assert probes(first) == probes(original)
        else:
            event("records leave the state open; restored differently")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs(), seed=st.integers(), count=st.integers(1, 14))
def test_restore_order_never_matters_even_for_records_that_conflict(
    config: tuple[dict[str, Any], bool], seed: int, count: int
) -> None:
    """Records no history produced (random free leaves, VCs over-subscribed, pinned jobs
    outside their cell): the kinds chosen, the demotions and the answers still do not
    depend on the restore order."""
    raw, has_pin = config
    try:
        loaded = load_cell_config(raw)
    except CellConfigError:
        assume(False)
        raise
    rng = random.Random(seed)
    nodes = CellPlacer("x", loaded).topo.nodes
    free = {node: list(range(len(cells[0].leaves))) for node, cells in nodes.items()}
    # Sometimes a node is bad before the restore: VCs may then be short of cells.
    bad = rng.choice(sorted(free)) if rng.random() < 0.3 else None
    if bad is not None:
        del free[bad]
    recs: list[Record] = []
    pinned: list[str] = []
    for n in range(count):
        queue = rng.choice(["a", "b", "c", "team"])
        priority = rng.choice([-1, 10, 10, 100])
        mode = rng.choice([Mode.GUARANTEED, Mode.GUARANTEED, Mode.BORROWED])
        if priority < 0:
            mode = Mode.OPPORTUNISTIC
        pods, gpus = rng.choice([(1, 1), (1, 2), (2, 1), (2, 2), (1, 4)])
        job = make_job(f"r{n}", queue, priority, pods, gpus, seq=rng.randrange(5))
        placed: list[PodPlacement] = []
        for i in range(pods):
            nodes = [node for node, idx in free.items() if len(idx) >= gpus]
            if not nodes:
                break
            node = rng.choice(sorted(nodes))
            gpu_ids = sorted(rng.sample(free[node], gpus))
            for g in gpu_ids:
                free[node].remove(g)
            placed.append(PodPlacement(f"Worker-{i}", node, tuple(gpu_ids)))
        if len(placed) < pods:  # does not fit: give its GPUs back, try the next one
            for pp in placed:
                free[pp.node].extend(pp.gpus)
            continue
        if has_pin and queue == "a" and rng.random() < 0.5:
            pinned.append(job.key)
        recs.append((job, mode, tuple(placed)))
    assume(recs)

    def rebuilt(order: list[int]) -> CellPlacer:
        p = CellPlacer("c1", loaded)
        if bad is not None:
            p.set_node_health(bad, False)
        for key in pinned:
            p.pin_job(key, "pin-a")
        for i in order:
            job, mode, pods = recs[i]
            p.restore(job, charge_for(job, mode), pods)
        p.check_invariants()
        return p

    ranked = sorted(range(len(recs)), key=lambda i: restore_order(recs[i][0]))
    shuffled = list(range(len(recs)))
    rng.shuffle(shuffled)
    placers = [rebuilt(ranked), rebuilt(shuffled), rebuilt(list(reversed(ranked)))]
    if placers[0].demoted():
        event("some records demoted")
    prints = [fingerprint(p) for p in placers]
    assert prints[0] == prints[1] == prints[2]
    answers = probes(placers[0])
    assert probes(placers[1]) == answers
    assert probes(placers[2]) == answers
    for job, _, pods in recs:
        assert all(p.placement_of(job.key) == pods for p in placers)


# -- exactness on small cases --------------------------------------------------------------


def test_a_vc_job_binds_the_cells_that_hold_its_leaves() -> None:
    p = cell_placer(racks=2, nodes=2, gpus=4, vcs={"a": [("RACK.NODE", 2)]})
    job = make_job("j", "a", pods=2, gpus=4)
    p.restore(
        job,
        charge_for(job, Mode.GUARANTEED),
        (
            PodPlacement("Worker-0", "r1n1", (0, 1, 2, 3)),
            PodPlacement("Worker-1", "r0n0", (0, 1, 2, 3)),
        ),
    )
    p.check_invariants()
    assert p._held[job.key].kind == KIND_VC
    bound = p.state.alloc.vc_bound["a"].values()
    assert sorted((r.cell.node, r.cell.is_node) for r in bound) == [("r0n0", True), ("r1n1", True)]
    assert not any(p.state.alloc.vc_owed["a"]["RACK"])
    assert sum(r.gused for r in bound) == 8  # all 8 leaves the VC is owed, in use


def test_vc_cells_are_bound_at_the_vc_level_and_shared_by_its_jobs() -> None:
    p = cell_placer(racks=1, nodes=2, gpus=4, vcs={"a": [("RACK.NODE", 1)]})
    one = make_job("one", "a", gpus=1)
    two = make_job("two", "a", gpus=2)
    p.restore(two, charge_for(two, Mode.GUARANTEED), (PodPlacement("Worker-0", "r0n1", (2, 3)),))
    p.restore(one, charge_for(one, Mode.GUARANTEED), (PodPlacement("Worker-0", "r0n1", (0,)),))
    p.check_invariants()
    (res,) = p.state.alloc.vc_bound["a"].values()
    assert res.cell.node == "r0n1" and res.cell.is_node and res.gused == 3
    # the other node is free for the shared pool, whole
    other = make_job("other", "team", gpus=4)
    fit = p.fit(other, other.pods, Mode.GUARANTEED)
    assert isinstance(fit, Fit) and fit.pods[0].node == "r0n0"


def test_restored_placer_answers_like_the_one_that_placed_the_jobs() -> None:
    config = rack_config(2, 3, 4, {"a": [("RACK.NODE", 2)], "b": [("RACK.NODE", 1)]})
    loaded = load_cell_config(config)
    original = CellPlacer("c1", loaded)
    jobs: dict[str, tuple[Job, Mode]] = {}
    for n, (queue, prio, gpus) in enumerate(
        [("a", 10, 2), ("b", 10, 4), ("team", 10, 1), ("a", -1, 2), ("team", 10, 2), ("a", 100, 1)]
    ):
        job = make_job(f"j{n}", queue, prio, gpus=gpus, seq=n)
        mode = Mode.OPPORTUNISTIC if prio < 0 else Mode.GUARANTEED
        assert place(original, job, mode) is not None
        jobs[job.key] = (job, mode)
    original.release("t/j1")
    recs = records(original, jobs)
    back = restored(loaded, recs, list(reversed(range(len(recs)))))
    assert fingerprint(back) == fingerprint(original)
    assert probes(back) == probes(original)


# -- the tolerant cases: overflow and demotion, order-independent --------------------------


def test_an_overflowing_vc_job_is_restored_in_the_shared_pool_whatever_the_order() -> None:
    # VC a owes one node; two guaranteed jobs of a were recorded on two nodes: the
    # one ranked first (earlier submission, whatever the priorities) gets the VC
    # cell, the other the shared pool.
    config = load_cell_config(rack_config(1, 3, 2, {"a": [("RACK.NODE", 1)]}))
    early = make_job("early", "a", priority=10, gpus=2, seq=1)
    late = make_job("late", "a", priority=100, gpus=2, seq=2)
    recs: list[Record] = [
        (late, Mode.GUARANTEED, (PodPlacement("Worker-0", "r0n0", (0, 1)),)),
        (early, Mode.GUARANTEED, (PodPlacement("Worker-0", "r0n1", (0, 1)),)),
    ]
    states = [fingerprint(restored(config, recs, order)) for order in ([0, 1], [1, 0])]
    assert states[0] == states[1]
    assert states[0]["jobs"]["t/early"][0] == KIND_VC
    assert states[0]["jobs"]["t/late"][0] == KIND_SHARED
    assert states[0]["demoted"] == {}


def test_a_job_no_kind_can_hold_is_demoted_and_marked() -> None:
    # VC a owes one node and another VC (b) one node of two: a's second job can
    # neither get a VC cell nor take shared leaves without breaking b's guarantee.
    config = load_cell_config(
        rack_config(1, 2, 2, {"a": [("RACK.NODE", 1)], "b": [("RACK.NODE", 1)]})
    )
    first = make_job("first", "a", priority=100, gpus=2, seq=1)
    second = make_job("second", "a", priority=10, gpus=1, seq=2)
    recs: list[Record] = [
        (second, Mode.GUARANTEED, (PodPlacement("Worker-0", "r0n1", (0,)),)),
        (first, Mode.GUARANTEED, (PodPlacement("Worker-0", "r0n0", (0, 1)),)),
    ]
    outcomes = []
    for order in ([0, 1], [1, 0]):
        p = restored(config, recs, order)
        outcomes.append(fingerprint(p))
        assert p._held["t/first"].kind == KIND_VC
        assert p._held["t/second"].kind == KIND_OPP
        assert p._held["t/second"].info.mode is Mode.OPPORTUNISTIC
        assert "t/second" in p.demoted()
        # b's guarantee holds: a guaranteed job of b may preempt the demoted job.
        job_b = make_job("b-job", "b", gpus=2)
        fit = p.fit(job_b, job_b.pods, Mode.GUARANTEED, preempt=True)
        assert isinstance(fit, Fit) and fit.victims == ("t/second",)
    assert outcomes[0] == outcomes[1]


def test_pinned_jobs_are_restored_in_their_pinned_cell() -> None:
    p = cell_placer(racks=1, nodes=2, gpus=2, pinned={"a": (0, 1)})
    job = make_job("pinned", "a", gpus=1)
    p.pin_job(job.key, "pin-a")
    p.restore(job, charge_for(job, Mode.GUARANTEED), (PodPlacement("Worker-0", "r0n1", (1,)),))
    p.check_invariants()
    assert p._held[job.key].kind == "pin"
    assert p.state.alloc.pins["pin-a"].gused == 1
    # a record outside the pinned cell is tolerated and marked
    outside = make_job("outside", "a", gpus=1)
    p.pin_job(outside.key, "pin-a")
    p.restore(
        outside, charge_for(outside, Mode.GUARANTEED), (PodPlacement("Worker-0", "r0n0", (0,)),)
    )
    p.check_invariants()
    assert "outside pinned cell" in p.demoted()[outside.key]


def test_borrowed_and_opportunistic_jobs_take_any_unowned_leaf() -> None:
    p = cell_placer(racks=1, nodes=2, gpus=2, vcs={"a": [("RACK.NODE", 2)]})
    borrowed = make_job("borrowed", "team", gpus=2)
    oppo = make_job("oppo", "a", priority=-1, gpus=1)
    p.restore(
        borrowed, charge_for(borrowed, Mode.BORROWED), (PodPlacement("Worker-0", "r0n0", (0, 1)),)
    )
    p.restore(oppo, charge_for(oppo, Mode.OPPORTUNISTIC), (PodPlacement("Worker-0", "r0n1", (1,)),))
    p.check_invariants()
    assert {p._held[k].kind for k in ("t/borrowed", "t/oppo")} == {KIND_OPP}
    assert p.demoted() == {}
    # VC a's guaranteed job preempts them
    job = make_job("owner", "a", gpus=2)
    fit = p.fit(job, job.pods, Mode.GUARANTEED, preempt=True)
    assert isinstance(fit, Fit) and fit.victims


def test_a_released_restored_job_leaves_no_record() -> None:
    p = cell_placer(racks=1, nodes=2, gpus=2, vcs={"a": [("RACK.NODE", 1)]})
    job = make_job("j", "a", gpus=1)
    p.restore(job, charge_for(job, Mode.GUARANTEED), (PodPlacement("Worker-0", "r0n0", (0,)),))
    p.release(job.key)
    p.check_invariants()
    assert not p.state.restored and not p.state.alloc.vc_bound["a"]
    p.restore(job, charge_for(job, Mode.GUARANTEED), (PodPlacement("Worker-0", "r0n1", (1,)),))
    p.check_invariants()


# -- errors: named, and nothing changes ----------------------------------------------------


def _state_of(p: CellPlacer) -> dict[str, Any]:
    return fingerprint(p) | {"records": dict(p.state.restored)}


@pytest.mark.parametrize(
    ("pods", "message"),
    [
        ((PodPlacement("Worker-0", "nowhere", (0,)),), "node nowhere, which is unknown"),
        ((PodPlacement("Worker-0", "r0n1", (7,)),), "node r0n1 has no GPU 7 (it has 2)"),
        ((PodPlacement("Worker-9", "r0n1", (0,)),), "it has no pod Worker-9"),
        (
            (PodPlacement("Worker-0", "r0n1", (0, 1)),),
            "needs 1 GPU(s) of type GPU, the record gives 2",
        ),
        ((), "places no pod"),
        (
            (PodPlacement("Worker-0", "r0n1", (0,)), PodPlacement("Worker-0", "r0n1", (1,))),
            "pod Worker-0 is recorded twice",
        ),
    ],
)
def test_a_placement_that_does_not_exist_is_refused(
    pods: tuple[PodPlacement, ...], message: str
) -> None:
    p = cell_placer(racks=1, nodes=2, gpus=2, vcs={"a": [("RACK.NODE", 1)]})
    p.restore(
        make_job("first", "a", gpus=1),
        charge_for(make_job("first", "a", gpus=1), Mode.GUARANTEED),
        (PodPlacement("Worker-0", "r0n0", (0,)),),
    )
    before = _state_of(p)
    with pytest.raises(RestoreError, match=message.replace("(", r"\(").replace(")", r"\)")):
        p.restore(
            make_job("second", "a", gpus=1),
            charge_for(make_job("second", "a", gpus=1), Mode.GUARANTEED),
            pods,
        )
    assert _state_of(p) == before
    p.check_invariants()


def test_a_gpu_held_by_another_job_names_both_jobs_and_changes_nothing() -> None:
    p = cell_placer(racks=1, nodes=2, gpus=2, vcs={"a": [("RACK.NODE", 1)]})
    p.restore(
        make_job("first", "a", gpus=2),
        charge_for(make_job("first", "a", gpus=2), Mode.GUARANTEED),
        (PodPlacement("Worker-0", "r0n0", (0, 1)),),
    )
    before = _state_of(p)
    second = make_job("second", "team", pods=2, gpus=1)
    pods = (PodPlacement("Worker-0", "r0n1", (0,)), PodPlacement("Worker-1", "r0n0", (1,)))
    with pytest.raises(RestoreError) as caught:
        p.restore(second, charge_for(second, Mode.GUARANTEED), pods)
    text = str(caught.value)
    assert "t/second" in text and "t/first" in text and "GPU 1 of node r0n0" in text
    assert _state_of(p) == before
    assert not p.holds(second.key)
    p.check_invariants()


def test_a_gpu_recorded_twice_in_one_job_is_refused() -> None:
    p = cell_placer(racks=1, nodes=1, gpus=2)
    job = make_job("j", "team", pods=2, gpus=1)
    pods = (PodPlacement("Worker-0", "r0n0", (1,)), PodPlacement("Worker-1", "r0n0", (1,)))
    with pytest.raises(RestoreError, match="recorded for pods Worker-0 and Worker-1"):
        p.restore(job, charge_for(job, Mode.GUARANTEED), pods)
    assert not p.holds(job.key) and not p.state.restored


def test_a_job_already_held_and_a_bad_node_are_refused() -> None:
    p = cell_placer(racks=1, nodes=2, gpus=2)
    job = make_job("j", "team", gpus=1)
    p.restore(job, charge_for(job, Mode.GUARANTEED), (PodPlacement("Worker-0", "r0n0", (0,)),))
    with pytest.raises(RestoreError, match="already held"):
        p.restore(job, charge_for(job, Mode.GUARANTEED), (PodPlacement("Worker-0", "r0n0", (1,)),))
    p.set_node_health("r0n1", False)
    other = make_job("other", "team", gpus=1)
    with pytest.raises(RestoreError, match="node r0n1 of pod Worker-0 is bad"):
        p.restore(
            other, charge_for(other, Mode.GUARANTEED), (PodPlacement("Worker-0", "r0n1", (0,)),)
        )
    p.check_invariants()
