"""A VC's guaranteed job its VC cannot hold: the shared pool (Fleet), or a wait (HiveD).

Fleet lets a queue's guaranteed jobs use cells no VC is owed (ADR 0002);
HiveD keeps a VC's jobs inside the VC.  ``CellPlacer(vc_spills=False)``
follows HiveD's rule, so that ``bench/bench_cells.py`` can count waits as
HiveD does.
"""

from __future__ import annotations

import pytest

from fleet.core.cells.config import load_cell_config
from fleet.core.cells.placer import CellPlacer
from fleet.core.charges import charge_for
from fleet.core.jobs import Job, Mode, ReplicaGroup
from fleet.core.placement import Fit, NoFit
from fleet.core.resources import GPU, Resources
from fleet.testing.cells import rack_config


def node_job(key: str) -> Job:
    return Job(key, "team-a", 10, 1, (ReplicaGroup("Worker", 1, Resources({GPU: 8})),))


@pytest.mark.parametrize(("spills", "second_fits"), [(True, True), (False, False)])
def test_a_full_vc_spills_into_the_shared_pool_only_under_fleets_rule(
    spills: bool, second_fits: bool
) -> None:
    # One rack of two 8-GPU nodes; team-a is owed one node, the other is shared.
    config = load_cell_config(rack_config(1, 2, 8, {"team-a": [("RACK.NODE", 1)]}))
    placer = CellPlacer("c1", config, vc_spills=spills)
    first = node_job("a/1")
    fit = placer.fit(first, first.pods, Mode.GUARANTEED)
    assert isinstance(fit, Fit)
    placer.bind(first, charge_for(first, Mode.GUARANTEED), fit)
    second = node_job("a/2")
    again = placer.fit(second, second.pods, Mode.GUARANTEED)
    assert isinstance(again, Fit if second_fits else NoFit)
    if isinstance(again, Fit):
        assert {p.node for p in again.pods}.isdisjoint({p.node for p in fit.pods})
    placer.check_invariants()
