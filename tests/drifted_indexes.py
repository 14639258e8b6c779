"""Schedulers and placers with one internal counter corrupted on purpose.

Each ``drifted_*`` function builds a small, valid object through the usual
factories, gives it some work, then breaks exactly one index or counter the
way a bookkeeping bug would.  ``check_invariants()`` must raise
:class:`~fleet.core.checks.InvariantError` for each, also under ``python -O``:
``python -O -m tests.drifted_indexes`` prints, as JSON, what each check raised.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from fleet.core.capacity import CapacityPlacer
from fleet.core.cells.config import load_cell_config
from fleet.core.cells.placer import CellPlacer
from fleet.core.charges import Charge, charge_for
from fleet.core.checks import InvariantError
from fleet.core.jobs import Mode
from fleet.core.placement import Fit, Placer
from fleet.core.quota import QuotaTree
from fleet.core.resources import Resources
from fleet.core.state import SchedulerState
from fleet.testing.cells import rack_config
from tests.core.factories import make_job, make_nodes, make_state, make_tree, submit

TREE: dict[str, Any] = {
    "name": "root",
    "min": {"cpu": 20},
    "max": {"cpu": 100},
    "children": [
        {"name": "team-a", "min": {"cpu": 10}, "namespaces": ["default"]},
        {"name": "team-b", "min": {"cpu": 10}},
    ],
}

CELLS: dict[str, Any] = rack_config(2, 2, 8, {"team-a": [("RACK", 1)]}, pairs=True)


def _place(placer: Placer, name: str, gpus: int) -> None:
    job = make_job(name, gpus=gpus)
    fit = placer.fit(job, job.pods, Mode.GUARANTEED)
    if not isinstance(fit, Fit):
        raise RuntimeError(f"{name} does not fit: {fit}")
    placer.bind(job, charge_for(job, Mode.GUARANTEED), fit)


def drifted_quota_tree() -> QuotaTree:
    """The root's used cpu is one millicore above the sum of the admitted jobs."""
    tree = make_tree(TREE)
    cpu = Resources.parse({"cpu": 5})
    tree.admit(Charge("default/a", "default/a", "team-a", 10, 1, True, Mode.GUARANTEED, cpu))
    tree._used[0]["cpu"] += 1
    return tree


def drifted_scheduler_state() -> SchedulerState:
    """A queued job is missing from the pending index."""
    state = make_state(TREE, {"c1": make_nodes(2, gpus=8)})
    submit(state, make_job("a", gpus=2))
    submit(state, make_job("b", gpus=2))
    del state._pending_keys["default/b"]
    return state


def drifted_capacity_placer() -> CapacityPlacer:
    """The GPUs counted for guaranteed jobs are one more than the held pods have."""
    placer = CapacityPlacer("c1", make_nodes(2, gpus=8))
    _place(placer, "a", 4)
    placer._units.mode_gpus[Mode.GUARANTEED] += 1
    return placer


def drifted_cell_placer() -> CellPlacer:
    """The count of free healthy leaves is one more than the cells say."""
    placer = CellPlacer("c1", load_cell_config(CELLS))
    _place(placer, "a", 4)
    placer.state.free_leaves += 1
    return placer


#: What each check must say: the name of the drifted thing, kept and recounted values.
DRIFTS: dict[str, tuple[Callable[[], Any], str]] = {
    "quota tree": (drifted_quota_tree, "root: used drifted: kept {'cpu': 5001"),
    "scheduler state": (
        drifted_scheduler_state,
        "pending index differs from the queues: not indexed ['default/b']",
    ),
    "capacity placer": (
        drifted_capacity_placer,
        "GPUs per mode drifted: kept {'guaranteed': 5,",
    ),
    "cell placer": (drifted_cell_placer, "c1: free leaves drifted: kept 29, recount 28"),
}


def outcome(build: Callable[[], Any]) -> str:
    """What ``check_invariants()`` of the drifted object raised, as ``Type: message``."""
    obj = build()
    try:
        obj.check_invariants()
    except InvariantError as e:
        return f"{type(e).__name__}: {e}"
    return "nothing raised"


def main() -> None:
    assertions_on = True
    try:
        assert False  # noqa: B011 - stripped under python -O
    except AssertionError:
        pass
    else:
        assertions_on = False
    report = {
        "optimize": sys.flags.optimize,
        "assert statements run": assertions_on,
        "outcomes": {name: outcome(build) for name, (build, _) in DRIFTS.items()},
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
