"""The capacity placer's slot counts: a gang is refused from the free-GPU buckets only
when placing it pod by pod would fail too.

The property test builds random clusters (nodes of 2-8 GPUs, some with cpu,
some of a GPU type, some bad), binds and releases random jobs, and then asks
random gangs of mixed sizes.  ``may_fit`` must never say no to a gang that
the pod-by-pod placement takes, and for gangs of GPUs only without a GPU type
on nodes that limit only GPUs it must say exactly what the placement says.
"""

from __future__ import annotations

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from fleet.core.capacity import CapacityPlacer
from fleet.core.charges import charge_for
from fleet.core.jobs import Job, Mode, ReplicaGroup
from fleet.core.placement import Fit, NoFit
from fleet.core.resources import Resources
from tests.core.factories import make_job

GPU = "nvidia.com/gpu"


def gang(name: str, sizes: list[int], cpu: int = 0, sku: str | None = None) -> Job:
    groups = tuple(
        ReplicaGroup(f"R{i}", 1, Resources({GPU: g, **({"cpu": cpu * 1000} if cpu else {})}))
        for i, g in enumerate(sizes)
    )
    return Job(key=f"ns/{name}", queue="a", priority=10, seq=0, groups=groups, gpu_sku=sku)


def by_pods(p: CapacityPlacer, job: Job) -> bool:
    """The reference: the placement pod by pod on the placer's own nodes."""
    return p._try(job, job.pods, ()) is not None


@st.composite
def clusters(draw: st.DrawFn) -> tuple[CapacityPlacer, bool]:
    count = draw(st.integers(1, 6))
    sizes = draw(st.lists(st.sampled_from([2, 4, 8]), min_size=count, max_size=count))
    limited = draw(st.booleans())  # some nodes also limit cpu
    nodes = {
        f"n{i}": Resources({GPU: g, **({"cpu": 2000 * g} if limited and i % 2 else {})})
        for i, g in enumerate(sizes)
    }
    typed = draw(st.booleans())
    skus = {f"n{i}": "H100" for i in range(0, count, 2)} if typed else None
    p = CapacityPlacer("c1", nodes, skus=skus)
    held: list[str] = []
    for n, want in enumerate(draw(st.lists(st.integers(1, 8), max_size=12))):
        job = make_job(f"held{n}", gpus=want, seq=n)
        fit = p.fit(job, job.pods, Mode.GUARANTEED)
        if isinstance(fit, Fit):
            p.bind(job, charge_for(job, Mode.GUARANTEED), fit)
            held.append(job.key)
    for key in draw(st.lists(st.sampled_from(held), unique=True)) if held else []:
        p.release(key)
    # Some nodes bad, never all of them.
    for i in draw(st.lists(st.integers(0, count - 1), unique=True, max_size=min(2, count - 1))):
        p.set_node_health(f"n{i}", False)
    p.check_invariants()
    return p, limited or typed


@settings(max_examples=300, deadline=None)
@given(
    clusters(),
    st.lists(st.sampled_from([1, 2, 3, 4, 6, 8]), min_size=1, max_size=6),
    st.integers(0, 3),
    st.sampled_from([None, "H100"]),
)
def test_slots_refuse_only_what_the_placement_refuses(
    cluster: tuple[CapacityPlacer, bool], sizes: list[int], cpu: int, sku: str | None
) -> None:
    p, constrained = cluster
    job = gang("g", sizes, cpu=cpu, sku=sku)
    placed = by_pods(p, job)
    if placed:
        assert p.may_fit(job.pods), (sizes, p.running())
    if not constrained and not cpu and sku is None and len(set(sizes)) == 1:
        assert p.may_fit(job.pods) == placed, sizes
    fit = p.fit(job, job.pods, Mode.GUARANTEED)
    assert isinstance(fit, Fit) == placed


def test_slots_count_whole_pods_per_node() -> None:
    p = CapacityPlacer("c1", {"n0": Resources({GPU: 8}), "n1": Resources({GPU: 8})})
    three = make_job("three", gpus=3)
    fit = p.fit(three, three.pods, Mode.GUARANTEED)
    assert isinstance(fit, Fit)
    p.bind(three, charge_for(three, Mode.GUARANTEED), fit)
    # n0 has 5 free, n1 has 8: two 4-GPU pods fit on n1, one on n0.
    assert [p.slots(g) for g in (1, 2, 4, 8)] == [13, 6, 3, 1]
    assert p.may_fit(gang("four", [4, 4, 4]).pods)
    assert not p.may_fit(gang("four", [4, 4, 4, 4]).pods)
    assert not p.may_fit(gang("eights", [8, 8, 1]).pods)  # one node has 8 free
    mixed = gang("mixed", [8, 4, 4])
    # Only necessary for mixed sizes: the counts allow it, the placement does not
    # (the 8 takes n1 whole, n0 holds one 4).
    assert p.may_fit(mixed.pods)
    assert isinstance(p.fit(mixed, mixed.pods, Mode.GUARANTEED), NoFit)
    refused = p.fit(gang("x", [4] * 4), gang("x", [4] * 4).pods, Mode.GUARANTEED)
    assert isinstance(refused, NoFit)
    assert (
        refused.reason == "4 pods with 16 GPUs in all do not fit on its nodes (13 GPUs free in all)"
    )


@st.composite
def full_clusters(
    draw: st.DrawFn,
) -> tuple[CapacityPlacer, dict[str, list[tuple[Mode, str, int, int]]]]:
    """Nodes of 8 GPUs filled with one-pod jobs of every mode (distinct submission
    numbers, so every victim order is distinct); per node, what runs there."""
    nodes = {f"n{i}": Resources({GPU: 8}) for i in range(draw(st.integers(1, 6)))}
    p = CapacityPlacer("c1", nodes)
    held: dict[str, list[tuple[Mode, str, int, int]]] = {n: [] for n in nodes}
    seqs = iter(draw(st.permutations(range(60))))
    for _ in range(draw(st.integers(1, 30))):
        mode = draw(st.sampled_from([Mode.OPPORTUNISTIC, Mode.BORROWED, Mode.GUARANTEED]))
        queue = draw(st.sampled_from(["a", "b"]))
        priority = -1 if mode is Mode.OPPORTUNISTIC else draw(st.sampled_from([5, 10, 50]))
        seq = next(seqs)
        job = make_job(
            f"h{seq}", queue=queue, gpus=draw(st.integers(1, 8)), priority=priority, seq=seq
        )
        fit = p.fit(job, job.pods, mode)
        if isinstance(fit, Fit):
            p.bind(job, charge_for(job, mode), fit)
            held[fit.pods[0].node].append((mode, job.key, job.pods[0].gpus, seq))
    return p, held


RANK = {Mode.OPPORTUNISTIC: 0, Mode.BORROWED: 1, Mode.GUARANTEED: 2}


@settings(max_examples=300, deadline=None)
@given(full_clusters(), st.integers(1, 8), st.sampled_from([10, 60]))
def test_a_pod_that_needs_victims_takes_the_fewest_then_cheapest_on_one_node(
    cluster: tuple[CapacityPlacer, dict[str, list[tuple[Mode, str, int, int]]]],
    gpus: int,
    priority: int,
) -> None:
    """The node that frees the pod's GPUs by the fewest victims, then the cheapest
    most expensive one (opportunistic, borrowed, then lower guaranteed of its queue;
    low priority; newest), worked out here node by node."""
    p, held = cluster
    job = make_job("new", queue="a", gpus=gpus, priority=priority, seq=99)
    if isinstance(p.fit(job, job.pods, Mode.GUARANTEED), Fit):
        return  # it fits without victims
    best: tuple[tuple[int, tuple[int, int, int]], list[str]] | None = None
    priorities = {c.key: c.priority for c in p.running()}
    queues = {c.key: c.queue for c in p.running()}
    for jobs in held.values():
        free = 8 - sum(g for _, _, g, _ in jobs)
        allowed = [
            (RANK[mode], priorities[key], -seq, key, g)
            for mode, key, g, seq in jobs
            if mode is not Mode.GUARANTEED or (queues[key] == "a" and priorities[key] < priority)
        ]
        taken: list[str] = []
        worst = (0, 0, 0)
        for rank, prio, neg_seq, key, g in sorted(allowed):
            if free >= gpus:
                break
            taken.append(key)
            worst = (rank, prio, neg_seq)
            free += g
        if taken and free >= gpus and (best is None or (len(taken), worst) < best[0]):
            best = ((len(taken), worst), taken)
    fit = p.fit(job, job.pods, Mode.GUARANTEED, preempt=True)
    if best is None:
        assert isinstance(fit, NoFit)
    else:
        assert isinstance(fit, Fit), fit
        assert list(fit.victims) == best[1]


@st.composite
def mixed_clusters(draw: st.DrawFn) -> CapacityPlacer:
    """Nodes of 4 or 8 GPUs holding gangs of every mode, of two queues, some bad."""
    sizes = draw(st.lists(st.sampled_from([4, 8]), min_size=1, max_size=6))
    p = CapacityPlacer("c1", {f"n{i}": Resources({GPU: g}) for i, g in enumerate(sizes)})
    for n in range(draw(st.integers(0, 16))):
        mode = draw(st.sampled_from([Mode.OPPORTUNISTIC, Mode.BORROWED, Mode.GUARANTEED]))
        priority = -1 if mode is Mode.OPPORTUNISTIC else draw(st.sampled_from([5, 10, 50]))
        job = make_job(
            f"h{n}",
            queue=draw(st.sampled_from(["a", "b"])),
            pods=draw(st.integers(1, 3)),
            gpus=draw(st.sampled_from([1, 2, 4, 8])),
            priority=priority,
            preemptible=draw(st.booleans()) or mode is not Mode.GUARANTEED,
            seq=n,
        )
        fit = p.fit(job, job.pods, mode)
        if isinstance(fit, Fit):
            p.bind(job, charge_for(job, mode), fit)
    for i in draw(st.lists(st.integers(0, len(sizes) - 1), unique=True, max_size=len(sizes) - 1)):
        p.set_node_health(f"n{i}", False)
    p.check_invariants()
    return p


@pytest.mark.interpreted_core
@settings(max_examples=300, deadline=None)
@given(
    mixed_clusters(),
    st.integers(1, 4),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([10, 60]),
    st.data(),
)
def test_the_guaranteed_gpu_count_refuses_only_what_preemption_cannot_place(
    p: CapacityPlacer, pods: int, gpus: int, priority: int, data: st.DataObject
) -> None:
    """A guaranteed gang refused from the nodes' guaranteed GPUs (``HeldUnits.may_free``) is
    one the search with preemption refuses too, with the same reason; with the
    count left out, every answer is the same."""
    job = make_job("new", queue="a", pods=pods, gpus=gpus, priority=priority, seq=99)
    keys = [c.key for c in p.running()]
    released = (
        frozenset(data.draw(st.lists(st.sampled_from(keys), unique=True))) if keys else frozenset()
    )
    counted = p.fit(job, job.pods, Mode.GUARANTEED, preempt=True, released=released)
    event(f"refused by the count: {not p._units.may_free(job, job.pods, sorted(released))}")
    p._units.may_free = lambda *_: True  # the search alone
    searched = p.fit(job, job.pods, Mode.GUARANTEED, preempt=True, released=released)
    assert counted == searched
