"""The packages import downward: one layering contract over every package of fleet.

Theory of operation: as in ``tests/test_layering.py``, each test copies the
project's ``fleet``, ``tools`` and ``pyproject.toml`` to a temporary
directory, plants one import, runs ``lint-imports`` there and expects the
contract it breaks to be reported with the planted line.  The contract names
packages, not modules, so a module added to a package is under it at once;
and a top-level module or package of ``fleet`` that the contract does not
name is refused by :func:`test_every_part_of_fleet_lies_in_a_layer`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.test_layering import PACKAGE, ROOT, _broken, _lint_imports, _plant

LAYERS = "The packages import downward"
CLOCK = "The clock imports no other fleet module"
CORE = "The pure core imports no other fleet package"
TESTING = "Production code never imports the test builders"


def _layers() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (layered,) = [c for c in contracts if c["name"].startswith(LAYERS)]
    return [name.strip() for layer in layered["layers"] for name in layer.split("|")]


def test_every_part_of_fleet_lies_in_a_layer() -> None:
    parts = {
        f"fleet.{path.stem}"
        for path in PACKAGE.iterdir()
        if (path.suffix == ".py" and path.name != "__init__.py")
        or (path.is_dir() and (path / "__init__.py").exists())
    }
    assert parts == set(_layers())


@pytest.mark.parametrize(
    ("module", "code", "imported", "contract"),
    [
        # Member backends sit below the service, the store beside them.
        ("clusters/sim.py", "import fleet.store.jobs\n", "fleet.store.jobs", LAYERS),
        ("clusters/base.py", "from fleet.cli import main\n", "fleet.cli.main", LAYERS),
        ("clusters/sim.py", "import fleet.service.loop\n", "fleet.service.loop", LAYERS),
        # The store knows nothing of the service, the API or the members.
        ("store/jobs.py", "import fleet.service.failover\n", "fleet.service.failover", LAYERS),
        ("store/jobs.py", "import fleet.clusters.base\n", "fleet.clusters.base", LAYERS),
        # The service knows nothing of the API, the simulator or the CLI.
        ("service/loop.py", "import fleet.api.routes\n", "fleet.api.routes", LAYERS),
        ("service/admin.py", "import fleet.sim.engine\n", "fleet.sim.engine", LAYERS),
        # The simulator serves no HTTP API.
        ("sim/engine.py", "import fleet.api.app\n", "fleet.api.app", LAYERS),
        # The clock is below everything but the core, and imports nothing of fleet.
        ("clock.py", "import fleet.store.database\n", "fleet.store.database", LAYERS),
        ("clock.py", "from fleet.core import lifecycle\n", "fleet.core.lifecycle", CLOCK),
        ("clock.py", "import fleet.clusters.base\n", "fleet.clusters.base", CLOCK),
        # The builders of the tests and benchmarks are no part of production code,
        # not even of the CLI beside them.
        ("cli/plan.py", "import fleet.testing.documents\n", "fleet.testing.documents", TESTING),
        ("service/wiring.py", "import fleet.testing.running\n", "fleet.testing.running", TESTING),
        ("manifests/placers.py", "import fleet.testing.cells\n", "fleet.testing.cells", TESTING),
    ],
)
def test_a_planted_import_of_what_is_above_breaks_a_contract(
    project: Path, module: str, code: str, imported: str, contract: str
) -> None:
    line = _plant(project / "fleet" / module, code)
    rc, report = _lint_imports(project)
    assert rc == 1, report
    assert contract in _broken(report), report
    importer = "fleet." + module.removesuffix(".py").replace("/", ".")
    assert f"{importer} -> {imported} (l.{line})" in report, report


def test_a_new_module_of_a_package_is_under_the_contract_at_once(project: Path) -> None:
    (project / "fleet" / "clusters" / "later.py").write_text(
        '"""A member backend yet to come."""\n\nimport fleet.service.intake\n'
    )
    rc, report = _lint_imports(project)
    assert rc == 1, report
    assert LAYERS in _broken(report), report
    assert "fleet.clusters.later -> fleet.service.intake (l.3)" in report, report


def test_an_upper_package_may_import_a_lower_one(project: Path) -> None:
    _plant(project / "fleet" / "sim" / "report.py", "import fleet.service.settings\n")
    _plant(project / "fleet" / "service" / "intake.py", "import fleet.clusters.base\n")
    rc, report = _lint_imports(project)
    assert rc == 0, report


@pytest.mark.parametrize("imported", ["fleet.clock", "fleet.clusters.sim"])
def test_the_core_imports_neither_the_clock_nor_a_member_backend(
    project: Path, imported: str
) -> None:
    line = _plant(project / "fleet" / "core" / "lifecycle.py", f"import {imported}\n")
    rc, report = _lint_imports(project)
    assert rc == 1, report
    assert CORE in _broken(report), report
    assert f"fleet.core.lifecycle -> {imported} (l.{line})" in report, report
