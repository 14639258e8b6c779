"""The compiled core: used only when current, chosen by ``FLEET_CORE``, same decisions.

Theory of operation: the loader's rules are checked on small source trees of
a temporary directory (a stamp that does not match is never used, whichever
file of the core changed); the core this session runs on is checked against
what ``FLEET_CORE`` asked for; and a scheduling workload (both placers,
cycles with finishes and arrivals) runs in two fresh interpreters, one on
the compiled core and one on the sources, which must print the same digest
of every decision.
"""

from __future__ import annotations

import importlib.machinery
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleet import compiled_core
from fleet.compiled_core import BUILD, CompiledCoreError, current_build, install, stamp
from tests.databases import in_ci

ROOT = Path(__file__).resolve().parent.parent
SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def _tree(tmp_path: Path) -> Path:
    core = tmp_path / "fleet" / "core"
    (core / "cells").mkdir(parents=True)
    (core / "__init__.py").write_text('"""core"""\n')
    (core / "cycle.py").write_text("X = 1\n")
    (core / "cells" / "placer.py").write_text("Y = 2\n")
    (tmp_path / "fleet" / "cli.py").write_text("Z = 3\n")
    return tmp_path


def _build(root: Path) -> None:
    build = root / BUILD
    (build / "fleet" / "core" / "cells").mkdir(parents=True)
    (build / "fleet" / "core" / f"cycle{SUFFIX}").write_bytes(b"")
    (build / "fleet" / "core" / "cells" / f"placer{SUFFIX}").write_bytes(b"")
    (build / f"fleet_core__mypyc{SUFFIX}").write_bytes(b"")
    (build / "STAMP").write_text(stamp(root) + "\n")


def test_a_current_build_maps_each_compiled_module_by_its_name(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    _build(root)
    modules = current_build(root)
    assert modules is not None
    assert sorted(modules) == ["fleet.core.cells.placer", "fleet.core.cycle", "fleet_core__mypyc"]
    finder = compiled_core._Finder(modules)
    spec = finder.find_spec("fleet.core.cycle", None)
    assert spec is not None and isinstance(spec.loader, importlib.machinery.ExtensionFileLoader)
    assert finder.find_spec("fleet.core.quota", None) is None  # not built: from its source


@pytest.mark.parametrize("changed", ["fleet/core/cycle.py", "fleet/core/cells/placer.py"])
def test_an_edited_core_source_makes_the_build_stale(tmp_path: Path, changed: str) -> None:
    root = _tree(tmp_path)
    _build(root)
    (root / changed).write_text("X = 'edited'\n")
    assert current_build(root) is None
    assert install(root, "auto") is False  # the sources run
    with pytest.raises(CompiledCoreError, match="missing or was built from other sources"):
        install(root, "compiled")


def test_a_source_outside_the_core_leaves_the_build_current(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    _build(root)
    (root / "fleet" / "cli.py").write_text("Z = 'edited'\n")
    assert current_build(root) is not None


def test_no_build_and_unknown_choices(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    assert current_build(root) is None
    assert install(root, "interpreted") is False
    with pytest.raises(CompiledCoreError, match="missing"):
        install(root, "compiled")
    with pytest.raises(CompiledCoreError, match="expected one of auto, interpreted, compiled"):
        install(root, "fast")


def test_the_core_in_use_is_the_one_fleet_core_asked_for() -> None:
    import fleet.core.cycle
    import fleet.core.unknown_job

    choice = os.environ.get(compiled_core.ENV, "auto")
    compiled = not (fleet.core.cycle.__file__ or "").endswith(".py")
    assert compiled == compiled_core.active()
    if choice == "compiled":
        assert compiled
    elif choice == "interpreted":
        assert not compiled
    else:
        assert compiled == (current_build(ROOT) is not None)
    assert (fleet.core.unknown_job.__file__ or "").endswith(".py")  # left interpreted


WORKLOAD = """
import hashlib, random
from fleet import compiled_core
from fleet.core import events
from fleet.core.capacity import CapacityPlacer
from fleet.core.cells.config import load_cell_config
from fleet.core.cells.placer import CellPlacer
from fleet.core.cycle import cycle
from fleet.core.jobs import Job, ReplicaGroup
from fleet.core.quota import QuotaNodeSpec, QuotaTree
from fleet.core.resources import Resources
from fleet.core.state import SchedulerState

GPU = "nvidia.com/gpu"
leaves = [f"team-{g}-{i}" for g in range(3) for i in range(6)]
def node(name, lo, hi, **kw):
    return QuotaNodeSpec(name=name, min=Resources({GPU: lo}), max=Resources({GPU: hi}), **kw)
tree = QuotaTree.build(node("root", 320, 320, children=tuple(
    node(f"g{g}", 96, 160, children=tuple(
        node(f"team-{g}-{i}", 16, 64, namespaces=(f"ns-{g}-{i}",)) for i in range(6)))
    for g in range(3))))
def cells(c):
    return CellPlacer(f"c{c}", load_cell_config({
        "physicalCluster": {
            "cellTypes": {
                "PAIR": {"childCellType": "GPU", "childCellNumber": 2},
                "NODE": {"childCellType": "PAIR", "childCellNumber": 4, "isNodeLevel": True},
                "RACK": {"childCellType": "NODE", "childCellNumber": 5}},
            "physicalCells": [{"cellType": "RACK", "cellChildren": [
                {"cellAddress": f"c{c}-r{r}-n{n}"} for n in range(5)]} for r in range(4)]},
        "virtualClusters": {leaf: {"virtualCells": [{"cellType": "RACK.NODE", "cellNumber": 2}]}
                            for leaf in leaves[c::2]}}))
out = []
for kind in ("capacity", "cells"):
    placers = {f"c{c}": cells(c) if kind == "cells" else CapacityPlacer(
        f"c{c}", {f"c{c}-n{n}": Resources({GPU: 8}) for n in range(20)}) for c in range(2)}
    state = SchedulerState(tree.copy(), placers)
    rng = random.Random(7)
    seq = 0
    digest = hashlib.sha256()
    def arrive(n):
        global seq
        for _ in range(n):
            pods, gpus = rng.choice([(1, 1), (1, 4), (2, 8), (1, 8), (4, 8), (2, 2)])
            priority = rng.choice([10, 10, 100, -1, 120])
            events.apply(state, events.Submitted(Job(
                key=f"ns/j{seq}", queue=rng.choice(leaves), priority=priority, seq=seq,
                groups=(ReplicaGroup("Worker", pods, Resources({GPU: gpus})),),
                preemptible=priority != 120)))
            seq += 1
    arrive(1500)
    for r in range(6):
        digest.update(repr(cycle(state, float(r))).encode())
        running = sorted(state.running)
        for key in rng.sample(running, len(running) // 5):
            events.apply(state, events.Dispatched(key))
            events.apply(state, events.Finished(key))
        arrive(150)
    state.check_invariants()
    out.append(f"{kind}:{len(state.running)}:{digest.hexdigest()[:16]}")
print(compiled_core.active(), " ".join(out))
"""


def _run(choice: str) -> tuple[str, str]:
    env = {**os.environ, compiled_core.ENV: choice, "PYTHONHASHSEED": "random"}
    done = subprocess.run(
        [sys.executable, "-c", WORKLOAD], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    active, digests = done.stdout.split(" ", 1)
    return active, digests.strip()


def test_the_compiled_core_makes_the_decisions_of_the_sources() -> None:
    if current_build(ROOT) is None:
        if in_ci():
            pytest.fail(
                "the compiled core is missing or stale under CI=true: run scripts/compile-core"
            )
        pytest.skip("no current compiled core (scripts/compile-core builds it)")
    compiled, interpreted = _run("compiled"), _run("interpreted")
    assert compiled[0] == "True" and interpreted[0] == "False"
    assert compiled[1] == interpreted[1]


PICKLING = """
import pickle
from fleet import compiled_core
from fleet.core.jobs import Job, ReplicaGroup
from fleet.core.quota import QuotaNodeSpec
from fleet.core.resources import Resources
spec = QuotaNodeSpec(name="a", min=Resources({"cpu": 2}), namespaces=("x",))
job = Job(key="ns/j", queue="a", priority=1, seq=1,
          groups=(ReplicaGroup("Worker", 2, Resources({"nvidia.com/gpu": 4})),))
try:
    pickle.loads(pickle.dumps(spec))
    before = "ok"
except Exception as e:
    before = type(e).__name__
compiled_core.picklable()
print(before, pickle.loads(pickle.dumps(spec)) == spec, pickle.loads(pickle.dumps(job)) == job)
"""


def test_the_compiled_cores_frozen_values_pickle_once_made_picklable() -> None:
    """The service pickles the tree and parsed jobs for its worker processes."""
    if current_build(ROOT) is None:
        if in_ci():
            pytest.fail(
                "the compiled core is missing or stale under CI=true: run scripts/compile-core"
            )
        pytest.skip("no current compiled core (scripts/compile-core builds it)")
    env = {**os.environ, compiled_core.ENV: "compiled"}
    done = subprocess.run(
        [sys.executable, "-c", PICKLING], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # A compiled frozen class refuses its own unpickling; made picklable, both round-trip.
    assert done.stdout.split() == ["FrozenInstanceError", "True", "True"]
