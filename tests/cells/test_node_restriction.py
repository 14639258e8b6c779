"""The node restriction (HiveD's suggested nodes) is an explicit option of the placer.

Theory of operation: the scheduling cycle never restricts a placement to some
nodes; only the replay of HiveD's own tests does, through
``CellPlacer.suggest_nodes``.  A placer built without ``node_restriction=True``
refuses that call, so the restriction cannot leak into production use; one
built with it honours the nodes given, for guaranteed (VC) and opportunistic
(shared pool) jobs alike, until ``suggest_nodes(None)``.
"""

from __future__ import annotations

from typing import Any

import pytest

from fleet.core.cells.config import load_cell_config
from fleet.core.cells.placer import CellPlacer
from fleet.core.jobs import Job, Mode, ReplicaGroup
from fleet.core.placement import Fit, NoFit
from fleet.core.resources import GPU, Resources


def config() -> dict[str, Any]:
    """Two 4-GPU nodes in one rack; VC ``a`` is owed one node."""
    return {
        "physicalCluster": {
            "cellTypes": {
                "NODE": {"childCellType": "GPU", "childCellNumber": 4, "isNodeLevel": True},
                "RACK": {"childCellType": "NODE", "childCellNumber": 2},
            },
            "physicalCells": [
                {"cellType": "RACK", "cellChildren": [{"cellAddress": n} for n in ("n0", "n1")]}
            ],
        },
        "virtualClusters": {"a": {"virtualCells": [{"cellType": "RACK.NODE", "cellNumber": 1}]}},
    }


def job(key: str, gpus: int) -> Job:
    return Job(f"t/{key}", "a", 10, 0, (ReplicaGroup("Worker", 1, Resources({GPU: gpus})),))


def test_suggest_nodes_is_refused_without_the_option() -> None:
    placer = CellPlacer("c", load_cell_config(config()))
    with pytest.raises(RuntimeError, match="node_restriction=True"):
        placer.suggest_nodes(frozenset({"n1"}))
    assert placer.state.suggested is None


@pytest.mark.parametrize("mode", [Mode.GUARANTEED, Mode.OPPORTUNISTIC])
def test_placements_keep_to_the_suggested_nodes_until_lifted(mode: Mode) -> None:
    placer = CellPlacer("c", load_cell_config(config()), node_restriction=True)
    j = job("j", 2)
    free = placer.fit(j, j.pods, mode)
    assert isinstance(free, Fit) and free.pods[0].node == "n0"  # the first node by default
    placer.suggest_nodes(frozenset({"n1"}))
    held = placer.fit(j, j.pods, mode)
    assert isinstance(held, Fit) and held.pods[0].node == "n1"
    placer.suggest_nodes(frozenset())
    assert isinstance(placer.fit(j, j.pods, mode), NoFit)
    placer.suggest_nodes(None)
    lifted = placer.fit(j, j.pods, mode)
    assert isinstance(lifted, Fit) and lifted.pods[0].node == "n0"
    placer.check_invariants()
