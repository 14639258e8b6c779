"""SQLAlchemy, Alembic and the database drivers are the store's alone.

Theory of operation: as in ``tests/test_layering.py``, each test copies the
project's ``fleet``, ``tools`` and ``pyproject.toml`` to a temporary
directory, plants one import, runs ``lint-imports`` there and expects the
contract that keeps the database libraries in :mod:`fleet.store` to be
reported broken, with the planted line.  The contract names the libraries,
not the modules that may not import them: a module that does not exist yet,
anywhere in ``fleet``, is refused without touching the contracts, and a new
module of the store is not.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_layering import _broken, _lint_imports, _plant

STORE = "Only the store imports SQLAlchemy, Alembic or a database driver"


PLANTED = [
    # (module, planted code, the library it imports)
    ("sim/forecast.py", "from sqlalchemy import select\n", "sqlalchemy"),
    ("service/wiring.py", "import sqlalchemy\n", "sqlalchemy"),
    ("service/failover.py", "from sqlalchemy.ext.asyncio import AsyncSession\n", "sqlalchemy"),
    ("service/leadership.py", "import asyncpg\n", "asyncpg"),
    ("cli/main.py", "from alembic import command\n", "alembic"),
    ("api/app.py", "import sqlite3\n", "sqlite3"),
    # A type hint counts too: the store's Session alias is what others name.
    (
        "service/loop.py",
        "from typing import TYPE_CHECKING\n\n"
        "if TYPE_CHECKING:\n    from sqlalchemy.ext.asyncio import AsyncSession\n",
        "sqlalchemy",
    ),
]


@pytest.mark.parametrize(
    ("module", "code", "imported"),
    PLANTED,
    ids=[f"{m}:{imported}" for m, _, imported in PLANTED],
)
def test_a_database_library_imported_outside_the_store_breaks_the_contract(
    project: Path, module: str, code: str, imported: str
) -> None:
    first = _plant(project / "fleet" / module, code)
    lines = code.splitlines()
    line = first + next(i for i, text in enumerate(lines) if imported in text)
    rc, report = _lint_imports(project)
    assert rc == 1, report
    assert STORE in _broken(report), report
    importer = "fleet." + module.removesuffix(".py").replace("/", ".")
    assert f"- {importer} -> {imported} (l.{line})" in report, report


@pytest.mark.parametrize(
    "created", ["reports.py", "sim/bulk.py", "yet_to_come/__init__.py"], ids=str
)
def test_a_fleet_module_yet_to_come_is_refused_without_touching_the_contracts(
    project: Path, created: str
) -> None:
    path = project / "fleet" / created
    path.parent.mkdir(exist_ok=True)
    path.write_text('"""A module the contracts do not name."""\n\nimport sqlalchemy\n')
    rc, report = _lint_imports(project)
    assert rc == 1, report
    assert STORE in _broken(report), report
    importer = "fleet." + created.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
    assert f"- {importer} -> sqlalchemy (l.3)" in report, report


def test_a_new_module_of_the_store_may_import_sqlalchemy(project: Path) -> None:
    (project / "fleet" / "store" / "reports.py").write_text(
        '"""Statements of a store module yet to come."""\n\n'
        "from sqlalchemy import select\n\nfrom fleet.store.models import JobRow\n\n"
        "EVERY_JOB = select(JobRow.id)\n"
    )
    rc, report = _lint_imports(project)
    assert rc == 0, report
