"""The package layout rules: thin package ``__init__`` files, lazy heavy imports.

Theory of operation: a package ``__init__`` that re-exports its modules makes
importing any one of them load them all (importing the CLI loaded the cell
allocator).  So every ``fleet`` package's ``__init__.py`` holds a docstring and
nothing else, and names are imported from their defining modules; the import
checks run in a fresh interpreter so that this test session's own imports do
not count.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fleet"


def _modules_loaded_by(statement: str) -> set[str]:
    """The ``fleet`` modules a fresh interpreter has loaded after ``statement``."""
    code = (
        f"{statement}\n"
        "import sys\n"
        "print('\\n'.join(m for m in sys.modules if m == 'fleet' or m.startswith('fleet.')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return set(out.stdout.split())


@pytest.mark.parametrize(
    "init", sorted(PACKAGE.rglob("__init__.py")), ids=lambda p: str(p.relative_to(ROOT))
)
def test_package_init_is_a_docstring_only(init: Path) -> None:
    body = ast.parse(init.read_text(encoding="utf-8")).body
    assert body, f"{init.relative_to(ROOT)} has no docstring"
    first = body[0]
    assert isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    assert isinstance(first.value.value, str), f"{init.relative_to(ROOT)} has no docstring"
    extra = [type(node).__name__ for node in body[1:]]
    assert not extra, f"{init.relative_to(ROOT)} holds more than its docstring: {extra}"


def test_importing_the_cli_loads_neither_the_allocator_nor_the_planner() -> None:
    loaded = _modules_loaded_by("import fleet.cli.main")
    assert "fleet.cli.main" in loaded
    heavy = {
        "fleet.cli.plan",
        "fleet.core.cycle",
        "fleet.core.cells.allocator",
        "fleet.core.cells.topology",
        "fleet.core.cells.placer",
    }
    assert not loaded & heavy, sorted(loaded & heavy)


def test_importing_the_cell_config_loader_loads_no_allocator() -> None:
    loaded = _modules_loaded_by("import fleet.core.cells.config")
    assert "fleet.core.cells.allocator" not in loaded
    assert "fleet.core.cells.placer" not in loaded


def test_loading_a_cell_config_still_checks_the_assignment_with_the_allocator() -> None:
    loaded = _modules_loaded_by(
        "from fleet.core.cells.config import load_cell_config\n"
        "load_cell_config({'physicalCluster': {'cellTypes': {'N': {'childCellType': 'G', "
        "'childCellNumber': 2, 'isNodeLevel': True}}, 'physicalCells': "
        "[{'cellType': 'N', 'cellAddress': 'n1'}]}})"
    )
    assert "fleet.core.cells.allocator" in loaded
