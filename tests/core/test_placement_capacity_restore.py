"""Restoring the capacity placer from recorded placements: exact, checked, order-independent.

The property test runs a random history of fits, binds (after the victims
left) and releases, records every held job (job, mode, per pod node and GPU
indices), restores the records into fresh placers in shuffled orders and
checks that they hold the same placements, pass the invariants and answer
every probe question exactly as the original does.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.core.capacity import CapacityPlacer
from fleet.core.charges import charge_for
from fleet.core.jobs import Job, Mode
from fleet.core.placement import Fit, PodPlacement, RestoreError
from fleet.core.resources import Resources
from tests.core.factories import make_job, make_nodes

Record = tuple[Job, Mode, tuple[PodPlacement, ...]]


def nodes(sizes: list[int]) -> dict[str, Resources]:
    """Nodes with the given GPU counts, 4 cpu per GPU."""
    return {
        f"node-{i}": Resources.parse({"nvidia.com/gpu": g, "cpu": str(4 * g)})
        for i, g in enumerate(sizes)
    }


def mode_of(priority: int, borrowed: bool) -> Mode:
    return Mode.OPPORTUNISTIC if priority < 0 else Mode.BORROWED if borrowed else Mode.GUARANTEED


PROBES = [
    (queue, priority, borrowed, pods, gpus, preempt)
    for queue in ("a", "b")
    for priority, borrowed in ((10, False), (100, False), (10, True), (-1, False))
    for pods, gpus in ((1, 1), (1, 3), (2, 2), (1, 8))
    for preempt in (False, True)
]


def probes(p: CapacityPlacer, released: frozenset[str]) -> list[object]:
    out: list[object] = []
    for n, (queue, priority, borrowed, pods, gpus, preempt) in enumerate(PROBES):
        job = make_job(f"probe{n}", queue=queue, priority=priority, pods=pods, gpus=gpus, seq=n)
        mode = mode_of(priority, borrowed)
        out.append(p.fit(job, job.pods, mode, preempt=preempt, released=released))
    return out


def state_of(p: CapacityPlacer) -> dict[str, Any]:
    return {
        "running": sorted((i.key, i.mode, p.placement_of(i.key)) for i in p.running()),
        "allocated": p.allocated(),
        "free": p.free_gpus(),
    }


steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("place"),
            st.sampled_from(["a", "b"]),
            st.sampled_from([-1, 10, 100]),
            st.booleans(),  # borrowed
            st.integers(1, 3),  # pods
            st.sampled_from([0, 1, 2, 3, 4]),  # GPUs per pod
            st.booleans(),  # preempt
        ),
        st.tuples(st.just("release"), st.integers(0, 1000)),
    ),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.sampled_from([2, 4, 8]), min_size=1, max_size=5),
    history=steps,
    seeds=st.tuples(st.integers(), st.integers()),
    release_probe=st.integers(0, 1000),
)
def test_restore_rebuilds_the_same_placer_in_any_order(
    sizes: list[int], history: list[tuple[Any, ...]], seeds: tuple[int, int], release_probe: int
) -> None:
    original = CapacityPlacer("c1", nodes(sizes))
    jobs: dict[str, tuple[Job, Mode]] = {}
    for n, step in enumerate(history):
        if step[0] == "release":
            keys = sorted(jobs)
            if keys:
                original.release(keys[step[1] % len(keys)])
            continue
        _, queue, priority, borrowed, pods, gpus, preempt = step
        job = make_job(
            f"j{n}", queue=queue, priority=priority, pods=pods, gpus=gpus, cpu="2", seq=n
        )
        mode = mode_of(priority, borrowed)
        fit = original.fit(job, job.pods, mode, preempt=preempt)
        if isinstance(fit, Fit):
            for victim in fit.victims:
                original.release(victim)
            original.bind(job, charge_for(job, mode), fit)
            jobs[job.key] = (job, mode)
    original.check_invariants()
    recs: list[Record] = [(*jobs[i.key], original.placement_of(i.key)) for i in original.running()]
    held = sorted(i.key for i in original.running())
    released = frozenset(held[release_probe % len(held) :][:2]) if held else frozenset()
    expected = probes(original, released)
    for seed in seeds:
        order = list(recs)
        random.Random(seed).shuffle(order)
        restored = CapacityPlacer("c1", nodes(sizes))
        for job, mode, pods in order:
            restored.restore(job, charge_for(job, mode), pods)
        restored.check_invariants()
        assert state_of(restored) == state_of(original)
        for job, _, pods in recs:
            assert restored.placement_of(job.key) == pods
        assert probes(restored, released) == expected


# -- errors: named, and nothing changes ----------------------------------------------------


def restored_placer() -> CapacityPlacer:
    p = CapacityPlacer("c1", make_nodes(2, gpus=4, cpu="8"))
    first = make_job("first", gpus=2, cpu="2")
    p.restore(
        first, charge_for(first, Mode.GUARANTEED), (PodPlacement("Worker-0", "node-0", (1, 3)),)
    )
    return p


@pytest.mark.parametrize(
    ("pods", "message"),
    [
        ((PodPlacement("Worker-0", "node-9", (0,)),), "node node-9, which is unknown"),
        ((PodPlacement("Worker-0", "node-1", (4,)),), "node node-1 has no GPU 4 (it has 4)"),
        ((PodPlacement("Worker-0", "node-1", (-1,)),), "node node-1 has no GPU -1"),
        ((PodPlacement("Worker-3", "node-1", (0,)),), "it has no pod Worker-3"),
        ((PodPlacement("Worker-0", "node-1", (0, 1)),), "asks 1 GPU(s), the record gives 2"),
        ((), "places no pod"),
        (
            (PodPlacement("Worker-0", "node-1", (0,)), PodPlacement("Worker-0", "node-1", (1,))),
            "pod Worker-0 is recorded twice",
        ),
        (
            (PodPlacement("Worker-0", "node-1", (2,)), PodPlacement("Worker-1", "node-1", (2,))),
            "GPU 2 of node node-1 is recorded for pods Worker-0 and Worker-1",
        ),
    ],
)
def test_a_placement_that_does_not_exist_is_refused(
    pods: tuple[PodPlacement, ...], message: str
) -> None:
    p = restored_placer()
    before = state_of(p)
    second = make_job("second", pods=2, gpus=1, cpu="2")
    with pytest.raises(RestoreError) as caught:
        p.restore(second, charge_for(second, Mode.GUARANTEED), pods)
    assert message in str(caught.value)
    assert "default/second" in str(caught.value)
    assert state_of(p) == before and not p.holds(second.key)
    p.check_invariants()


def test_a_gpu_held_by_another_job_names_both_jobs_and_changes_nothing() -> None:
    p = restored_placer()
    before = state_of(p)
    second = make_job("second", pods=2, gpus=1)
    pods = (PodPlacement("Worker-0", "node-1", (0,)), PodPlacement("Worker-1", "node-0", (3,)))
    with pytest.raises(RestoreError) as caught:
        p.restore(second, charge_for(second, Mode.GUARANTEED), pods)
    text = str(caught.value)
    assert "default/second" in text and "default/first" in text and "GPU 3 of node node-0" in text
    assert state_of(p) == before and not p.holds(second.key)
    p.check_invariants()


def test_cpu_over_capacity_and_a_job_already_held_are_refused() -> None:
    p = restored_placer()
    fat = make_job("fat", gpus=1, cpu="7")
    with pytest.raises(RestoreError, match="does not fit on node node-0"):
        p.restore(
            fat, charge_for(fat, Mode.GUARANTEED), (PodPlacement("Worker-0", "node-0", (0,)),)
        )
    again = make_job("first", gpus=2, cpu="2")
    with pytest.raises(RestoreError, match="already held"):
        p.restore(
            again, charge_for(again, Mode.GUARANTEED), (PodPlacement("Worker-0", "node-1", (0, 1)),)
        )
    p.check_invariants()


def test_restored_jobs_are_victims_by_their_recorded_mode() -> None:
    p = CapacityPlacer("c1", make_nodes(1, gpus=4))
    oppo = make_job("oppo", queue="a", priority=-1, gpus=4)
    p.restore(
        oppo,
        charge_for(oppo, Mode.OPPORTUNISTIC),
        (PodPlacement("Worker-0", "node-0", (0, 1, 2, 3)),),
    )
    job = make_job("owner", queue="b", gpus=2)
    fit = p.fit(job, job.pods, Mode.GUARANTEED, preempt=True)
    assert isinstance(fit, Fit) and fit.victims == ("default/oppo",)
