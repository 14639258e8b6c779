"""The layering rules: what the pure core may import, thin package ``__init__`` files.

Theory of operation: the import contracts live in ``pyproject.toml``
(``[tool.importlinter]``, with the ``allowed_imports`` type from
``tools/import_contracts.py``) and ``make lint`` runs them.  These tests show
that they bite: each copies the project's ``fleet`` and ``tools`` and its
``pyproject.toml`` to a temporary directory, plants one import in a core
module, runs ``lint-imports`` there and expects exactly the contracts that
import breaks to be reported broken, with the planted line; the real tree keeps
every contract.

A package ``__init__`` that re-exports its modules makes importing any one of
them load them all (importing the CLI loaded the cell allocator).  So every
``fleet`` package's ``__init__.py`` holds a docstring and nothing else (the
top one also puts the compiled core in place, :mod:`fleet.compiled_core`), and
names are imported from their defining modules; the checks of what an import
loads run in a fresh interpreter so that this test session's own imports do
not count.
"""

from __future__ import annotations

import ast
import itertools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "fleet"

# The contracts, by a phrase of their names in pyproject.toml.
SHELLS = "imports no other fleet package"
STDLIB = "imports no clock, randomness"
LIBRARIES = "imports no I/O, YAML or model library"
ALLOWED = "imports only itself and pure standard-library modules"
LAYERS = "The packages import downward"

LINT_IMPORTS = (
    "import sys\n"
    "from importlinter.cli import lint_imports_command\n"
    "sys.exit(lint_imports_command())\n"
)


def _lint_imports(project: Path) -> tuple[int, str]:
    """Run the project's import contracts over the tree in ``project``: exit code, output."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["COLUMNS"] = "300"  # one line per contract name and per reported import
    # lint-imports analyses the ``fleet`` found first on sys.path: its working directory's.
    done = subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS, "--no-cache"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def _broken_contracts(report: str) -> set[str]:
    """The contract phrases whose contracts the report lists as broken."""
    _, _, broken = report.partition("Broken contracts")
    lines = broken.splitlines()
    names = {
        line.strip()
        for line, under in itertools.pairwise(lines)
        if under.strip() and set(under.strip()) == {"-"} and line.strip()
    }
    phrases = {SHELLS, STDLIB, LIBRARIES, ALLOWED, LAYERS}
    return {phrase for phrase in phrases if any(phrase in name for name in names)}


def _broken(report: str) -> str:
    return report.partition("Broken contracts")[2]


def _plant(module: Path, code: str) -> int:
    """Append ``code`` to ``module``; the line number of its first line."""
    text = module.read_text(encoding="utf-8")
    module.write_text(text + code, encoding="utf-8")
    return text.count("\n") + 1


def test_the_real_tree_keeps_every_import_contract() -> None:
    rc, report = _lint_imports(ROOT)
    assert rc == 0, report
    assert re.search(r"Contracts: [1-9][0-9]* kept, 0 broken", report), report


PLANTED = [
    # (core module, planted code, imported module, contracts it breaks)
    ("lifecycle.py", "import time\n", "time", {STDLIB, ALLOWED}),
    ("quota_rules.py", "import random\n", "random", {STDLIB, ALLOWED}),
    ("cells/spec.py", "import socket\n", "socket", {STDLIB, ALLOWED}),
    ("checks.py", "import logging\n", "logging", {STDLIB, ALLOWED}),
    ("lifecycle.py", "from pathlib import Path\n", "pathlib", {STDLIB, ALLOWED}),
    ("resources.py", "import yaml\n", "yaml", {LIBRARIES, ALLOWED}),
    ("jobs.py", "from pydantic import BaseModel\n", "pydantic", {LIBRARIES, ALLOWED}),
    ("lifecycle.py", "import aiohttp\n", "aiohttp", {LIBRARIES, ALLOWED}),
    # Named nowhere: only the allow list refuses them.
    ("lifecycle.py", "import inspect\n", "inspect", {ALLOWED}),
    ("lifecycle.py", "import boto3\n", "boto3", {ALLOWED}),
    # A lazy import counts.
    (
        "checks.py",
        "def _now() -> float:\n    import time\n\n    return 0.0\n",
        "time",
        {STDLIB, ALLOWED},
    ),
    # Other fleet packages, a type-only import included.
    (
        "lifecycle.py",
        "from fleet.manifests import errors\n",
        "fleet.manifests.errors",
        {SHELLS, ALLOWED, LAYERS},
    ),
    (
        "cells/state.py",
        "from typing import TYPE_CHECKING\n\n"
        "if TYPE_CHECKING:\n    from fleet.manifests.errors import Problem\n",
        "fleet.manifests.errors",
        {SHELLS, ALLOWED, LAYERS},
    ),
]


@pytest.mark.parametrize(
    ("module", "code", "imported", "broken"),
    PLANTED,
    ids=[f"{m}:{imported}" for m, _, imported, _ in PLANTED],
)
def test_a_planted_import_breaks_the_contracts(
    project: Path, module: str, code: str, imported: str, broken: set[str]
) -> None:
    path = project / "fleet" / "core" / module
    first = _plant(path, code)
    root = imported.split(".")[0]
    lines = code.splitlines()
    line = first + next(i for i, text in enumerate(lines) if "import" in text and root in text)
    rc, report = _lint_imports(project)
    assert rc == 1, report
    assert _broken_contracts(report) == broken, report
    importer = "fleet.core." + module.removesuffix(".py").replace("/", ".")
    assert f"{importer} is not allowed to import {imported} (l.{line})" in report, report


@pytest.mark.parametrize(
    ("module", "broken"),
    [
        ("manifests/convert.py", {LAYERS}),
        # The API imports aiohttp, pydantic and json: the core would, through it.
        ("core/jobs.py", {SHELLS, STDLIB, LIBRARIES, ALLOWED, LAYERS}),
    ],
)
def test_the_yaml_models_and_the_core_do_not_import_the_http_api(
    project: Path, module: str, broken: set[str]
) -> None:
    line = _plant(project / "fleet" / module, "from fleet.api import problems\n")
    rc, report = _lint_imports(project)
    assert rc == 1, report
    assert _broken_contracts(report) == broken, report
    importer = "fleet." + module.removesuffix(".py").replace("/", ".")
    assert f"{importer} -> fleet.api.problems (l.{line})" in report, report


def test_the_http_api_may_import_the_yaml_models_and_the_core(project: Path) -> None:
    # fleet.api.submissions already does; a new import of both keeps every contract.
    _plant(
        project / "fleet" / "api" / "schemas.py",
        "from fleet.core import resources\nfrom fleet.manifests import errors\n",
    )
    rc, report = _lint_imports(project)
    assert rc == 0, report


def test_a_fleet_package_yet_to_come_is_refused_without_touching_the_contracts(
    project: Path,
) -> None:
    later = project / "fleet" / "yet_to_come"
    later.mkdir()
    (later / "__init__.py").write_text('"""A shell package (not the core\'s business)."""\n')
    line = _plant(project / "fleet" / "core" / "quota.py", "import fleet.yet_to_come\n")
    rc, report = _lint_imports(project)
    assert rc == 1, report
    assert _broken_contracts(report) == {SHELLS, ALLOWED}, report
    assert f"fleet.core.quota -> fleet.yet_to_come (l.{line})" in report, report


def test_an_indirect_import_of_a_shell_is_named_with_its_chain(project: Path) -> None:
    # The core imports a module of its own that is fine, which imports the CLI.
    (project / "fleet" / "core" / "bridge.py").write_text(
        '"""A module that should not exist."""\n\nimport fleet.cli.main\n'
    )
    _plant(project / "fleet" / "core" / "checks.py", "from fleet.core import bridge\n")
    rc, report = _lint_imports(project)
    assert rc == 1, report
    assert {SHELLS, STDLIB, LIBRARIES, LAYERS} <= _broken_contracts(report), report
    assert "fleet.core.bridge -> fleet.cli.main (l.3)" in report, report
    assert "fleet.cli.main -> " in report, report  # the chain goes on from the CLI


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
    rest = body[1:]
    if init == PACKAGE / "__init__.py":
        # The one exception: the compiled core is put in place before anything imports it.
        assert [ast.unparse(node) for node in rest] == [
            "from fleet.compiled_core import install",
            "install()",
        ]
        return
    extra = [type(node).__name__ for node in rest]
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
