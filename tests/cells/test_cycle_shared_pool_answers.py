"""The cycle's "no" of a cluster's shared pool is shared by queues without a VC there.

A guaranteed job of a queue that has no VC (and no pinned cell) in a cluster
is asked of that cluster's shared pool only, so the cycle keeps one answer for
the gang shape whatever the queue (``Placer.blind_to_queue``).  A queue that
has a VC there is asked of its VC: the shared pool's "no" must not answer for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from fleet.core.cells.config import load_cell_config
from fleet.core.cells.placer import CellPlacer
from fleet.core.cycle import Admit, Wait, cycle
from fleet.core.jobs import Job, Mode, Pod
from fleet.core.placement import Fit, NoFit, Placer
from fleet.core.quota import QuotaTree
from fleet.core.state import SchedulerState
from fleet.testing.cells import rack_config
from tests.core.factories import make_job, make_node, submit


def state_with_vcs(vcs: dict[str, list[tuple[str, int]]]) -> SchedulerState:
    leaf = {"min": {"nvidia.com/gpu": 8}, "max": {"nvidia.com/gpu": 16}}
    tree = make_node(
        {
            "name": "root",
            "min": {"nvidia.com/gpu": 24},
            "max": {"nvidia.com/gpu": 24},
            "children": [{"name": q, **leaf} for q in ("a", "b", "c")],
        }
    )
    placers: dict[str, Placer] = {
        "c1": CellPlacer("c1", load_cell_config(rack_config(1, 2, 8, vcs)))
    }
    return SchedulerState(QuotaTree.build(tree), placers)


def test_a_queue_with_a_vc_is_not_answered_by_the_shared_pools_no() -> None:
    # Both nodes are owed to VC b: no shared pool. Queue a (asked first) has no VC.
    state = state_with_vcs({"b": [("RACK.NODE", 2)]})
    a = make_job("a1", queue="a", gpus=8, seq=1)
    b = make_job("b1", queue="b", gpus=8, seq=2)
    submit(state, a, b)
    decisions = cycle(state, 0.0)
    admitted = {d.job: d.mode for d in decisions if isinstance(d, Admit)}
    assert admitted == {"default/b1": Mode.GUARANTEED}
    (waits,) = [d for d in decisions if isinstance(d, Wait)]
    assert waits.job == "default/a1" and "shared pool of c1" in waits.reason


@pytest.mark.interpreted_core
def test_queues_without_a_vc_share_the_answer_and_its_words() -> None:
    # Queues a and c have no VC; both are told the same reason (asked once).
    state = state_with_vcs({"b": [("RACK.NODE", 2)]})
    a = make_job("a1", queue="a", gpus=8, seq=1)
    c = make_job("c1", queue="c", gpus=8, seq=2)
    submit(state, a, c)
    placer = state.placers["c1"]
    assert placer.blind_to_queue(a, Mode.GUARANTEED) and placer.blind_to_queue(c, Mode.GUARANTEED)
    assert not placer.blind_to_queue(make_job("b2", queue="b", gpus=8), Mode.GUARANTEED)
    asked: list[str] = []
    fit = placer.fit

    def counted(job: Job, pods: Sequence[Pod], mode: Mode, **kw: Any) -> Fit | NoFit:
        if mode is Mode.GUARANTEED and not kw.get("preempt") and not kw.get("released"):
            asked.append(job.key)
        return fit(job, pods, mode, **kw)

    placer.fit = counted  # type: ignore[method-assign]
    reasons = {d.job: d.reason for d in cycle(state, 0.0) if isinstance(d, Wait)}
    assert asked == ["default/a1"]  # c1's question was answered by a1's
    assert reasons["default/a1"] == reasons["default/c1"]
    assert "shared pool of c1 cannot hold 1 pod with 8 GPUs" in reasons["default/a1"]
