"""The shared pool's ceiling: a question the VCs' owed cells leave no room for.

A guaranteed job of a queue with no VC in a cluster may use only the shared
pool there, and the shared pool can never hold more than the cluster's leaves
minus the cells the VCs are configured with (``Allocator.shared_ceiling``).
Such a question is answered from that count, without a search and without
listing victims; the answer must be the one the search gives.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.core.cells import allocator
from fleet.core.cells.config import load_cell_config
from fleet.core.cells.placer import CellPlacer
from fleet.core.charges import charge_for
from fleet.core.jobs import Job, Mode, ReplicaGroup
from fleet.core.placement import Fit, NoFit
from fleet.core.resources import GPU, Resources
from fleet.testing.cells import rack_config

QUEUES = ("team-a", "team-b", "other")
MODES = {"team-a": Mode.GUARANTEED, "team-b": Mode.GUARANTEED}


def job(key: str, queue: str, pods: int, gpus: int, priority: int = 10) -> Job:
    return Job(
        key,
        queue,
        priority,
        int(key.rsplit("/", 1)[1]),
        (ReplicaGroup("Worker", pods, Resources({GPU: gpus})),),
    )


def placer(owed_a: int, owed_b: int) -> CellPlacer:
    vcs = {"team-a": [("RACK.NODE", owed_a)], "team-b": [("RACK.NODE", owed_b)]}
    return CellPlacer("c1", load_cell_config(rack_config(1, 4, 8, vcs)))


def test_every_node_owed_leaves_the_shared_pool_nothing_even_with_preemption() -> None:
    cells = placer(2, 2)
    borrowed = job("x/1", "team-a", 1, 8)
    fit = cells.fit(borrowed, borrowed.pods, Mode.BORROWED)
    assert isinstance(fit, Fit)
    cells.bind(borrowed, charge_for(borrowed, Mode.BORROWED), fit)
    outsider = job("x/2", "other", 1, 8, priority=100)
    answer = cells.fit(outsider, outsider.pods, Mode.GUARANTEED, preempt=True)
    assert isinstance(answer, NoFit)
    assert "shared pool of c1 cannot hold 1 pod with 8 GPUs" in answer.reason


def test_one_node_no_vc_is_owed_is_the_shared_pool() -> None:
    cells = placer(2, 1)
    outsider = job("x/1", "other", 1, 8)
    fit = cells.fit(outsider, outsider.pods, Mode.GUARANTEED)
    assert isinstance(fit, Fit)
    two = job("x/2", "other", 2, 8)
    assert isinstance(cells.fit(two, two.pods, Mode.GUARANTEED, preempt=True), NoFit)


def answers(
    owed: tuple[int, int], running: list[tuple[str, int, int, int]], asked: tuple[str, int, int]
) -> list[Any]:
    """Bind ``running`` (queue, pods, GPUs, priority) as they fit, then ask ``asked``
    with and without preemption; the fits' placements and victims, or the reasons."""
    cells = placer(*owed)
    for i, (queue, pods, gpus, priority) in enumerate(running):
        one = job(f"r/{i + 1}", queue, pods, gpus, priority)
        mode = Mode.OPPORTUNISTIC if priority < 0 else MODES.get(queue, Mode.BORROWED)
        fit = cells.fit(one, one.pods, mode)
        if isinstance(fit, Fit):
            cells.bind(one, charge_for(one, mode), fit)
    queue, pods, gpus = asked
    new = job("q/100", queue, pods, gpus, priority=100)
    out: list[Any] = []
    for preempt in (False, True):
        got = cells.fit(new, new.pods, Mode.GUARANTEED, preempt=preempt)
        out.append(got.reason if isinstance(got, NoFit) else (got.pods, got.victims))
    cells.check_invariants()
    return out


running_job = st.tuples(
    st.sampled_from(QUEUES),
    st.integers(1, 2),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([-1, 10]),
)


@settings(max_examples=150, deadline=None)
@given(
    owed=st.tuples(st.integers(0, 2), st.integers(0, 2)),
    running=st.lists(running_job, max_size=8),
    asked=st.tuples(st.sampled_from(QUEUES), st.integers(1, 3), st.sampled_from([1, 2, 4, 8])),
)
def test_the_ceiling_gives_the_searchs_answer(
    owed: tuple[int, int],
    running: list[tuple[str, int, int, int]],
    asked: tuple[str, int, int],
) -> None:
    with_ceiling = answers(owed, running, asked)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(allocator.Allocator, "shared_hopeless", lambda self, chain, need: False)
        searched = answers(owed, running, asked)
    assert with_ceiling == searched
