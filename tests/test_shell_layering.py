"""The clock and the member backends stay below the service that drives them.

Theory of operation: as in ``tests/test_layering.py``, each test copies the
project's ``fleet``, ``tools`` and ``pyproject.toml`` to a temporary
directory, plants one import, runs ``lint-imports`` there and expects the
contract it breaks to be reported with the planted line.  Packages that do
not exist yet (``fleet.loop``, ``fleet.api``) are created in the copy first:
the contracts name them without requiring them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_layering import _broken, _lint_imports, _plant

CLOCK = "The clock imports no other fleet module"
SHELLS = "The member backends and the clock import no API, store, CLI or service loop"
CORE = "The pure core imports no other fleet package"


@pytest.mark.parametrize(
    ("module", "code", "imported", "contract"),
    [
        ("clusters/sim.py", "import fleet.store.jobs\n", "fleet.store.jobs", SHELLS),
        ("clusters/base.py", "from fleet.cli import main\n", "fleet.cli.main", SHELLS),
        ("clock.py", "import fleet.store.database\n", "fleet.store.database", SHELLS),
        ("clock.py", "from fleet.core import lifecycle\n", "fleet.core.lifecycle", CLOCK),
        ("clock.py", "import fleet.clusters.base\n", "fleet.clusters.base", CLOCK),
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


@pytest.mark.parametrize(
    ("created", "imported"),
    [("loop.py", "fleet.loop"), ("service.py", "fleet.service"), ("api", "fleet.api")],
)
def test_a_member_backend_importing_a_service_module_is_refused(
    project: Path, created: str, imported: str
) -> None:
    rc, report = _lint_imports(project)
    assert rc == 0, report
    path = project / "fleet" / created
    if not path.exists():  # named in the contracts before it exists
        if path.suffix:
            path.write_text('"""The service loop."""\n')
        else:
            path.mkdir()
            (path / "__init__.py").write_text('"""The HTTP API."""\n')
    line = _plant(project / "fleet" / "clusters" / "sim.py", f"import {imported}\n")
    rc, report = _lint_imports(project)
    assert rc == 1, report
    assert SHELLS in _broken(report), report
    assert f"fleet.clusters.sim -> {imported} (l.{line})" in report, report


@pytest.mark.parametrize("imported", ["fleet.clock", "fleet.clusters.sim"])
def test_the_core_imports_neither_the_clock_nor_a_member_backend(
    project: Path, imported: str
) -> None:
    line = _plant(project / "fleet" / "core" / "lifecycle.py", f"import {imported}\n")
    rc, report = _lint_imports(project)
    assert rc == 1, report
    assert CORE in _broken(report), report
    assert f"fleet.core.lifecycle -> {imported} (l.{line})" in report, report
