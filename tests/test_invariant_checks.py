"""check_invariants() catches drift under ``python -O``, and every test runs it at teardown."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fleet.cli.plan import build_placers, plan
from fleet.core.capacity import CapacityPlacer
from fleet.core.cells import CellPlacer, load_cell_config
from fleet.core.checks import InvariantError
from fleet.core.state import SchedulerState
from fleet.manifests.convert import load_clusters, load_quota
from tests.cells.test_lab_experiments_placer import placer as lab_placer
from tests.conftest import Built
from tests.core.factories import make_nodes, make_state, make_tree
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
    state.placers["c1"]._nodes["node-0"].free_gpus.pop()


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
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:asyncio", "-rA")
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
