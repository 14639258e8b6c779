"""Real databases for the tests: a SQLite file and a PostgreSQL server.

The PostgreSQL server is named by ``FLEET_TEST_POSTGRES_URL`` (an SQLAlchemy URL
such as ``postgresql+asyncpg://postgres@127.0.0.1:PORT/fleet_test``).
``scripts/run-tests`` (``make test``) starts a throwaway server with
``scripts/postgres-test-server`` and sets it; a preset value is used as it is.
The database it names serves as the maintenance database: each test that asks
for PostgreSQL gets a database of its own, created from ``template0`` and dropped
at teardown (see :func:`fresh_postgres_database`), so tests never see each
other's tables.

The fixtures built on these helpers live in ``tests/conftest.py``:
``postgres_url`` and ``database_url``.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from tests.paths import ROOT

#: The environment variable naming the PostgreSQL server of the test run.
POSTGRES_URL_VARIABLE = "FLEET_TEST_POSTGRES_URL"
#: The script that starts and stops a throwaway server.
SERVER_SCRIPT = ROOT / "scripts" / "postgres-test-server"
#: The kinds of database every ``database_url`` test runs against.
KINDS = ("sqlite", "postgresql")
#: Prefix of the per-test databases; their names are ``fleet_t_<pid>_<n>``.
DATABASE_PREFIX = "fleet_t_"

_numbers = itertools.count(1)
_SAFE_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def in_ci() -> bool:
    """Whether this is a CI run (``CI=true``): there, missing PostgreSQL is a failure."""
    return os.environ.get("CI", "").lower() == "true"


def postgres_url_from_env() -> str | None:
    return os.environ.get(POSTGRES_URL_VARIABLE) or None


def missing_postgres_message() -> str:
    return (
        f"{POSTGRES_URL_VARIABLE} is not set, so there is no PostgreSQL server to test "
        "against: run the suite with `make test` (scripts/run-tests starts a throwaway "
        f"server), or set {POSTGRES_URL_VARIABLE} to a server's SQLAlchemy URL "
        "(postgresql+asyncpg://USER@HOST:PORT/DATABASE; the user must be allowed to "
        "create databases)"
    )


def sqlite_url(directory: Path) -> str:
    """The URL of a SQLite file (not yet created) in ``directory``."""
    return f"sqlite+aiosqlite:///{directory}/fleet.db"


def new_database_name() -> str:
    """A database name unique to this process: ``fleet_t_<pid>_<n>``."""
    return f"{DATABASE_PREFIX}{os.getpid()}_{next(_numbers)}"


def with_database(url: str, name: str) -> str:
    """``url`` with its database replaced by ``name``."""
    return make_url(url).set(database=name).render_as_string(hide_password=False)


@asynccontextmanager
async def open_engine(url: str, **kwargs: Any) -> AsyncIterator[AsyncEngine]:
    """An async engine on ``url``, disposed on exit (no connection is left open)."""
    engine = create_async_engine(url, **kwargs)
    try:
        yield engine
    finally:
        await engine.dispose()


async def _execute_autocommit(maintenance_url: str, statement: str) -> None:
    async with (
        open_engine(maintenance_url, isolation_level="AUTOCOMMIT", poolclass=NullPool) as engine,
        engine.connect() as connection,
    ):
        await connection.execute(text(statement))


async def create_database(maintenance_url: str, name: str) -> str:
    """Create the empty database ``name`` on the server of ``maintenance_url``; its URL."""
    if _SAFE_NAME.fullmatch(name) is None:
        raise ValueError(f"not a plain database name: {name!r}")
    await _execute_autocommit(maintenance_url, f'CREATE DATABASE "{name}" TEMPLATE template0')
    return with_database(maintenance_url, name)


async def drop_database(maintenance_url: str, name: str) -> None:
    """Drop ``name``, closing whatever connections to it are still open."""
    if _SAFE_NAME.fullmatch(name) is None:
        raise ValueError(f"not a plain database name: {name!r}")
    await _execute_autocommit(maintenance_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@asynccontextmanager
async def fresh_postgres_database(maintenance_url: str) -> AsyncIterator[str]:
    """A new empty database on the server of ``maintenance_url``, dropped on exit; its URL."""
    name = new_database_name()
    url = await create_database(maintenance_url, name)
    try:
        yield url
    finally:
        await drop_database(maintenance_url, name)


#: A statement that writes, and the table it writes.
_WRITE = re.compile(r"\s*(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+\"?(\w+)", re.IGNORECASE)
_WRITTEN = "fleet_tests_written"


class WriteTransactions:
    """The tables each transaction committed on ``engine`` wrote, in commit order
    (transactions that wrote nothing are not listed), through SQLAlchemy's events."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.committed: list[set[str]] = []
        self._engine = engine.sync_engine
        event.listen(self._engine, "before_cursor_execute", self._statement)
        event.listen(self._engine, "commit", self._commit)
        event.listen(self._engine, "rollback", self._rollback)

    def _statement(self, conn: Connection, _cursor: Any, statement: str, *_: Any) -> None:
        found = _WRITE.match(statement)
        if found is not None:
            conn.info.setdefault(_WRITTEN, set()).add(found.group(1).lower())

    def _commit(self, conn: Connection) -> None:
        written = conn.info.pop(_WRITTEN, None)
        if written:
            self.committed.append(written)

    def _rollback(self, conn: Connection) -> None:
        conn.info.pop(_WRITTEN, None)

    def writing(self, table: str) -> list[set[str]]:
        """The committed transactions that wrote ``table``."""
        return [t for t in self.committed if table in t]

    def close(self) -> None:
        event.remove(self._engine, "before_cursor_execute", self._statement)
        event.remove(self._engine, "commit", self._commit)
        event.remove(self._engine, "rollback", self._rollback)
