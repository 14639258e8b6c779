"""check_invariants() catches drift under ``python -O``, and every test runs it at teardown."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fleet.cli.plan import plan
from fleet.core.capacity import CapacityPlacer
from fleet.core.cells import ownership
from fleet.core.cells.allocator import SHARED, Journal, Reservation
from fleet.core.cells.config import load_cell_config
from fleet.core.cells.demands import leaf_cells_needed
from fleet.core.cells.placer import CellPlacer
from fleet.core.charges import Charge, charge_for
from fleet.core.checks import InvariantError
from fleet.core.cycle import cycle
from fleet.core.jobs import Mode
from fleet.core.lifecycle import JobState
from fleet.core.placement import Fit
from fleet.core.quota import QuotaTree
from fleet.core.resources import GPU, Resources
from fleet.core.state import SchedulerState
from fleet.manifests.convert import load_clusters, load_quota
from fleet.manifests.placers import placers as build_placers
from tests.cells.test_lab_experiments_placer import placer as lab_placer
from tests.conftest import Built, Checkable
from tests.core.factories import cancel, make_job, make_nodes, make_state, make_tree, submit
from tests.drifted_indexes import CELLS, DRIFTS, TREE

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def optimized() -> dict[str, Any]:
    """What each drifted object's check raised in a ``python -O`` interpreter."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    done = subprocess.run(
        [sys.executable, "-O", "-m", "tests.drifted_indexes"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_the_subprocess_really_runs_without_assert_statements(optimized: dict[str, Any]) -> None:
    assert optimized["optimize"] == 1
    assert optimized["assert statements run"] is False


@pytest.mark.parametrize("name", sorted(DRIFTS))
def test_a_drifted_index_is_detected_under_python_O(optimized: dict[str, Any], name: str) -> None:
    expected = DRIFTS[name][1]
    assert optimized["outcomes"][name].startswith(f"InvariantError: {expected}")


@pytest.mark.corrupts_state
@pytest.mark.parametrize("name", sorted(DRIFTS))
def test_a_drifted_index_is_detected(name: str) -> None:
    build, expected = DRIFTS[name]
    with pytest.raises(InvariantError, match=f"^{re.escape(expected)}"):
        build().check_invariants()


# -- the teardown check ----------------------------------------------------------------------


def test_objects_built_directly_and_through_factories_are_recorded(
    checked_objects: Built,
) -> None:
    state = make_state(TREE, {"c1": make_nodes(2, gpus=8)})
    tree = make_tree(TREE)
    trial = tree.copy()
    direct = CapacityPlacer("direct", make_nodes(1, gpus=4))
    cells = CellPlacer("cells", load_cell_config(CELLS))
    lab = lab_placer("lab6-one-vc.yaml")
    for obj in (state, state.tree, state.placers["c1"], tree, trial, direct, cells, lab):
        assert obj in checked_objects
    assert len(checked_objects.objects) == 8


def test_the_trees_placers_and_states_of_the_cli_are_recorded(checked_objects: Built) -> None:
    tree, _ = load_quota((ROOT / "policies" / "quota" / "team-tree.yaml").read_text())
    clusters = load_clusters((ROOT / "policies" / "clusters" / "example.yaml").read_text())
    assert tree in checked_objects
    for kind in ("cells", "capacity"):
        placers = build_placers(clusters, kind)
        assert placers
        assert all(placer in checked_objects for placer in placers.values())
        plan(tree, placers, [])
        assert any(
            isinstance(obj, SchedulerState) and obj.placers == placers
            for obj in checked_objects.objects
        )


#: The generated test file for the pytester run below: broken objects with and
#: without the opt-out, through factories and directly, and a test that fails.
GENERATED = """
import pytest

from fleet.core.jobs import Mode
from tests.cells.test_lab_experiments_placer import placer as lab_placer
from tests.core.factories import make_nodes, make_state
from tests.drifted_indexes import (
    TREE,
    drifted_capacity_placer,
    drifted_cell_placer,
    drifted_quota_tree,
    drifted_scheduler_state,
)


def test_broken_capacity_placer():
    drifted_capacity_placer()


@pytest.mark.corrupts_state
def test_broken_capacity_placer_opted_out():
    drifted_capacity_placer()


def test_broken_cell_placer():
    drifted_cell_placer()


def test_broken_quota_tree_copy():
    drifted_quota_tree().copy()


def test_broken_placer_inside_a_factory_state():
    state = make_state(TREE, {"c1": make_nodes(1, gpus=8)})
    state.placers["c1"]._free.nodes["node-0"].free_gpus.pop()


def test_broken_scheduler_state():
    drifted_scheduler_state()


def test_healthy_state():
    make_state(TREE, {"c1": make_nodes(1, gpus=8)}).check_invariants()


def test_that_fails_is_not_checked_again():
    drifted_capacity_placer()
    assert False, "the test's own failure"
"""


@pytest.mark.corrupts_state  # the generated tests run in this process and break objects
def test_a_broken_object_without_the_opt_out_fails_at_teardown(pytester: pytest.Pytester) -> None:
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makeini("[pytest]\nmarkers =\n    corrupts_state: breaks an invariant on purpose\n")
    pytester.makepyfile(test_generated=GENERATED)
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-p", "no:aiohttp", "-p", "no:asyncio", "-rA"
    )
    result.assert_outcomes(passed=7, failed=1, errors=5)
    errors = {
        "test_broken_capacity_placer": "CapacityPlacer of cluster c1: InvariantError: "
        "GPUs per mode drifted",
        "test_broken_cell_placer": "CellPlacer of cluster c1: InvariantError: "
        "c1: free leaves drifted",
        "test_broken_quota_tree_copy": "QuotaTree rooted at root: InvariantError: "
        "root: used drifted",
        "test_broken_placer_inside_a_factory_state": "SchedulerState over clusters ['c1']: "
        "InvariantError: node-0: ",
        "test_broken_scheduler_state": "SchedulerState over clusters ['c1']: InvariantError: "
        "pending index differs",
    }
    out = result.stdout.str()
    for test, message in errors.items():
        result.stdout.fnmatch_lines([f"*ERROR at teardown of {test} *"])
        assert message in out, test
    assert "check_invariants() failed at teardown" in out
    for passed in (
        "test_broken_capacity_placer_opted_out",
        "test_healthy_state",
    ):
        assert f"ERROR at teardown of {passed}" not in out
    result.stdout.fnmatch_lines(["FAILED *test_that_fails_is_not_checked_again*"])
    assert "ERROR at teardown of test_that_fails_is_not_checked_again" not in out


# -- each check names what drifted ---------------------------------------------------------


def _tree_with_jobs() -> QuotaTree:
    tree = make_tree(TREE)
    for seq, (key, queue, mode) in enumerate(
        [
            ("default/a", "team-a", Mode.GUARANTEED),
            ("default/b", "team-b", Mode.BORROWED),
            ("default/c", "team-b", Mode.BORROWED),
        ]
    ):
        cpu = Resources.parse({"cpu": 1})
        tree.admit(Charge(key, key, queue, 10, seq, True, mode, cpu))
    return tree


def _unindexed_job() -> tuple[Checkable, str]:
    tree = _tree_with_jobs()
    del tree._admitted.leaf_jobs[tree._index["team-a"]]["default/a"]
    return tree, "job default/a is missing from the job index of team-a"


def _stale_job() -> tuple[Checkable, str]:
    tree = _tree_with_jobs()
    tree._admitted.leaf_jobs[tree._index["team-a"]]["default/gone"] = tree._admitted.jobs[
        "default/a"
    ]
    return tree, "stale job index: ['default/gone'] indexed by leaf but not admitted"


def _stale_reclaim_order() -> tuple[Checkable, str]:
    tree = _tree_with_jobs()
    leaf = tree._index["team-b"]
    tree._admitted.borrowed_order[leaf] = list(
        tree._admitted.leaf_borrowed[leaf].values()
    )  # newest is cheaper
    return tree, "team-b: stale reclaim order: kept ['default/b', 'default/c'], recount"


def _misfiled_namespace() -> tuple[Checkable, str]:
    tree = _tree_with_jobs()
    tree._ns_map["default"] = tree._index["team-b"]
    return tree, "namespace default is indexed to team-b, which does not list it"


def _capacity_with_jobs() -> CapacityPlacer:
    placer = CapacityPlacer("c1", make_nodes(2, gpus=8))
    for name, gpus in (("a", 4), ("b", 2)):
        job = make_job(name, gpus=gpus)
        fit = placer.fit(job, job.pods, Mode.GUARANTEED)
        assert isinstance(fit, Fit)
        placer.bind(job, charge_for(job, Mode.GUARANTEED), fit)
    return placer


def _unindexed_guaranteed_job() -> tuple[Checkable, str]:
    placer = _capacity_with_jobs()
    del placer._units.guaranteed_by_queue["team-a"]["default/b"]
    return placer, "guaranteed-job index drifted: stale [], missing [('team-a', 'default/b')]"


def _wrong_bucket() -> tuple[Checkable, str]:
    placer = _capacity_with_jobs()
    node = placer._free.nodes["node-0"]
    rank = node.rank
    placer._free.buckets[len(node.free_gpus)].remove(rank)
    placer._free.buckets.setdefault(8, []).insert(0, rank)
    return placer, "node-0: not in the bucket of nodes with 2 free GPUs"


def _lost_gpu() -> tuple[Checkable, str]:
    placer = _capacity_with_jobs()
    placer._free.nodes["node-0"].free_gpus.remove(7)
    placer._free.nodes["node-0"].free[GPU] -= 1
    return placer, "node-0: free nvidia.com/gpu drifted: kept 1, recount 2 (8 minus 6 held)"


def _out_of_order() -> tuple[Checkable, str]:
    state = make_state(TREE, {"c1": make_nodes(1, gpus=8)})
    submit(state, make_job("a", priority=5))
    submit(state, make_job("b", priority=9))
    state.queues["team-a"].pending.reverse()
    return state, "queue team-a is out of order: default/a before default/b"


def _running_but_not_held() -> tuple[Checkable, str]:
    state = make_state(TREE, {"c1": make_nodes(1, gpus=8)})
    job = make_job("a")
    submit(state, job)
    cancel(state, job.key)
    state.phase[job.key] = JobState.RUNNING
    run = state.start(job, "c1")
    state.hold(run, charge_for(job, Mode.GUARANTEED), ())
    return state, "running job default/a is not held by its cluster c1"


def _miscounted_guaranteed_gpus() -> tuple[Checkable, str]:
    state = make_state(TREE, {"c1": make_nodes(1, gpus=8)})
    submit(state, make_job("a", gpus=2))
    cycle(state, 0.0)
    state.guaranteed_gpus[("c1", "team-a")] += 1
    return state, (
        "guaranteed GPUs per cluster and queue drifted: kept [(('c1', 'team-a'), 3)], "
        "recount [(('c1', 'team-a'), 2)]"
    )


def _cells_with_job() -> CellPlacer:
    placer = CellPlacer("c1", load_cell_config(CELLS))
    job = make_job("a", gpus=4)
    fit = placer.fit(job, job.pods, Mode.GUARANTEED)
    assert isinstance(fit, Fit)
    placer.bind(job, charge_for(job, Mode.GUARANTEED), fit)
    return placer


def _open_transaction() -> tuple[Checkable, str]:
    placer = _cells_with_job()
    placer.state.j.begin()
    return placer, "c1: a journal transaction is still open"


def _stray_owner() -> tuple[Checkable, str]:
    placer = _cells_with_job()
    leaf = placer.state.topo.leaf_at[("r1n1", 7)]
    leaf.owner = "default/ghost"
    return placer, "Cell(GPU@1/r1n1/3/7) has owner default/ghost, which does not hold it"


def _shfree() -> tuple[Checkable, str]:
    placer = _cells_with_job()
    placer.state.topo.nodes["r1n1"][0].shfree -= 1
    return placer, "Cell(NODE@1/r1n1) shfree drifted: kept 7, recount 8"


def _free_mask() -> tuple[Checkable, str]:
    placer = _cells_with_job()
    placer.state.topo.nodes["r1n1"][0].freemask &= ~1
    return placer, "Cell(NODE@1/r1n1) masks drifted: kept free 11111110 tagged 0, recount"


def _free_histogram() -> tuple[Checkable, str]:
    placer = _cells_with_job()
    placer.state.free_hist["RACK"][8] -= 1
    return placer, "c1: free histogram of RACK drifted: kept [0, 0, 0, 0, 1, 0, 0, 0, 2]"


def _units_by_job() -> tuple[Checkable, str]:
    placer = _cells_with_job()
    placer.state.units["default/a"] = {"default/a#2": None}
    return placer, "c1: the units by job differ from the held units"


def _closed_vc_cell() -> tuple[Checkable, str]:
    placer = _cells_with_job()
    opened = placer.state.alloc.vc_open["team-a"]
    chain = next(chain for chain, cells in opened.items() if cells)
    opened[chain].clear()
    return placer, f"c1: open cells of VC team-a in {chain} drifted: kept [], recount ["


def _bad_reservations() -> tuple[Checkable, str]:
    placer = _cells_with_job()
    placer.state.alloc.bad_roots = 1
    return placer, "bad reservations drifted: kept 1, recount 0"


@pytest.mark.corrupts_state
@pytest.mark.parametrize(
    "corrupt",
    [
        _unindexed_job,
        _stale_job,
        _stale_reclaim_order,
        _misfiled_namespace,
        _unindexed_guaranteed_job,
        _wrong_bucket,
        _lost_gpu,
        _out_of_order,
        _running_but_not_held,
        _miscounted_guaranteed_gpus,
        _open_transaction,
        _stray_owner,
        _shfree,
        _free_mask,
        _free_histogram,
        _units_by_job,
        _closed_vc_cell,
        _bad_reservations,
    ],
    ids=lambda f: f.__name__.strip("_"),
)
def test_the_message_names_what_drifted(corrupt: Callable[[], tuple[Checkable, str]]) -> None:
    obj, message = corrupt()
    with pytest.raises(InvariantError, match=f"^{re.escape(message)}"):
        obj.check_invariants()


# -- runtime guards that are real errors, not assert statements ------------------------------


def test_journal_misuse_raises() -> None:
    journal = Journal()
    for misuse in (journal.rollback, journal.mark, lambda: journal.undo_to(0)):
        with pytest.raises(InvariantError, match="outside a transaction"):
            misuse()
    journal.begin()
    with pytest.raises(InvariantError, match="transactions do not nest"):
        journal.begin()
    with pytest.raises(InvariantError, match="undo to mark 1, past the log's end 0"):
        journal.undo_to(1)
    journal.commit()


def test_reserving_or_freeing_the_wrong_cell_raises() -> None:
    placer = _cells_with_job()
    alloc, topo = placer.state.alloc, placer.state.topo
    held = placer.state.held["default/a"]
    taken = next(iter(held.leaves.values()))[0]
    free = topo.leaf_at[("r1n1", 7)]
    with pytest.raises(InvariantError, match=r"cannot reserve Cell\(GPU@.*\): it is not wholly"):
        alloc.take(taken, Reservation(SHARED, taken, job="default/x"))
    with pytest.raises(InvariantError, match=r"cannot release Cell\(GPU@1/r1n1/3/7\)"):
        alloc.untake(free)
    with pytest.raises(InvariantError, match="not a VC binding"):
        alloc.unbind_vc(Reservation(SHARED, free, job="default/x"))
    with pytest.raises(
        InvariantError, match=r"cannot free Cell\(GPU@1/r1n1/3/7\): it has no owner"
    ):
        ownership.unown(placer.state, free)


def test_leaf_cells_needed_rejects_a_sku_of_the_wrong_type() -> None:
    with pytest.raises(TypeError, match="sku must be a SkuType or None, not dict"):
        leaf_cells_needed(Resources({GPU: 1}), {"gpu": 1})
