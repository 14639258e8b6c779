"""Opening the database: engines, SQLite settings, migrations at start-up.

Theory of operation: :func:`open_database` creates the async engines for a
URL, brings the schema to the newest migration, and returns a
:class:`Database` whose :meth:`~Database.write` and :meth:`~Database.read`
open sessions.  Writes on SQLite start with ``BEGIN IMMEDIATE`` (the write
lock is taken at the start, so two writers never deadlock on a lock upgrade)
on their own engine; reads use a second engine with plain deferred
transactions, so that readers never wait for the writer (WAL).  Every SQLite
connection turns on WAL, foreign keys and a busy timeout.  On PostgreSQL the
migrations run under an advisory lock, so several replicas may start at once.
Sessions never expire their objects on commit, and are closed directly (an
``AsyncSession`` used as a context manager closes itself in a task of its
own: three turns of the event loop per transaction; here the transaction has
ended and given its connection back before the close).  A
:meth:`Database.fenced` copy shares the engines and runs a fencing statement
first in every write transaction (the scheduler's leader,
:mod:`fleet.service.leadership`); the plain database runs none.  A URL is shown
(logs, errors, answers) only through :func:`redact_url`, which hides its
password; a database that cannot be reached at start is a
:class:`DatabaseError` naming the URL so redacted.

SQLAlchemy (and its drivers, and Alembic) is this package's business only:
an import contract (``pyproject.toml``) refuses it to every other ``fleet``
module, type-only imports included.  The rest of the service holds a
session as a :data:`Session` (the name under which the store hands out
SQLAlchemy's ``AsyncSession``) and passes it to the store's functions;
outside the store a session is used for no more than ``add``, ``add_all``
and ``flush`` of rows (:mod:`fleet.store.models`).  Every statement is
written in this package.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Any, Final, TypeAlias

from alembic import command
from alembic.config import Config
from sqlalchemy import event, exc, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)

from fleet.store import inline_sqlite, json_text

#: A session of :meth:`Database.write` or :meth:`Database.read`: what the rest of the
#: service calls one (in type hints), without importing SQLAlchemy itself.
Session: TypeAlias = AsyncSession

#: Any constant shared by every Fleet replica: the key of the migration lock.
MIGRATION_LOCK: Final = 0x466C656574  # "Fleet"
#: How long a SQLite connection waits for a lock before failing (milliseconds).
SQLITE_BUSY_TIMEOUT_MS: Final = 10_000
#: Connections kept open to PostgreSQL (as many again may be opened under load).
POSTGRES_POOL_SIZE: Final = 32


class Durability(enum.Enum):
    """How hard SQLite works to keep commits across a power loss (PostgreSQL: always)."""

    #: WAL with ``synchronous=NORMAL``: the service's setting.
    SAFE = "safe"
    #: WAL without waiting for the disk (``synchronous=OFF``): for a throwaway
    #: file, such as a simulator's replay; a crash of the process loses nothing,
    #: a crash of the machine may.
    FAST = "fast"


class DatabaseError(Exception):
    """The database cannot be opened or migrated (the message shows its URL redacted)."""


#: What stands for a password in a URL that is shown.
HIDDEN: Final = "***"
_USERINFO_PASSWORD: Final = re.compile(r"(://[^/?#@:]*:)[^/?#]*@")
_QUERY_PASSWORD: Final = re.compile(r"([?&](?:password|passwd|pwd)=)[^&#]*", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` fit to be shown: its password (``user:PASSWORD@`` or ``?password=``) as ``***``.

    The one helper for every URL that is logged, printed, answered or put in
    an error: a database URL, or a replica's advertised address.  A URL
    SQLAlchemy cannot parse is masked by pattern instead.
    """
    try:
        shown = make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy reads (an http address parses too)
        shown = url
    # What SQLAlchemy took for the host may hold the rest of a password with an "@".
    shown = _USERINFO_PASSWORD.sub(rf"\g<1>{HIDDEN}@", shown)
    return _QUERY_PASSWORD.sub(rf"\g<1>{HIDDEN}", shown)


def reachable_from_another_process(url: str) -> bool:
    """Whether another process opening ``url`` sees the same database (not SQLite in memory)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return True
    database = parsed.database or ""
    return database not in ("", ":memory:") and "mode=memory" not in str(parsed.query)


class Fenced(Exception):
    """A write of a scheduler term that is over: refused, and rolled back (decision 0021)."""


def alembic_config(connection: Connection | None = None) -> Config:
    """The Alembic configuration of the migration tree shipped in this package."""
    config = Config()
    location = resources.files("fleet.store") / "migrations"
    config.set_main_option("script_location", str(location))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


#: JSON columns are written and read with orjson (:mod:`fleet.store.json_text`).
_JSON_CODEC: Final = {"json_serializer": json_text.dumps, "json_deserializer": json_text.loads}


def _sqlite_engine(
    url: str, *, immediate: bool, durability: Durability, inline: bool = False
) -> AsyncEngine:
    if inline:
        path = make_url(url).database
        if not path or path == ":memory:":  # the reader and the writer would not share it
            raise DatabaseError(f"an inline SQLite database must be a file: {redact_url(url)!r}")
        engine = create_async_engine(url, async_creator=inline_sqlite.creator(path), **_JSON_CODEC)
    else:
        engine = create_async_engine(url, **_JSON_CODEC)

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, decide when transactions begin.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        sync = "OFF" if durability is Durability.FAST else "NORMAL"
        cursor.execute(f"PRAGMA synchronous={sync}")
        cursor.close()

    begin = "BEGIN IMMEDIATE" if immediate else "BEGIN"

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Connection) -> None:
        # On the driver's cursor: through the Connection, BEGIN would cost what a
        # statement does (events, a result object), about 20 µs a transaction.
        cursor = connection.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.execute(begin)
        finally:
            cursor.close()

    return engine


@dataclass(slots=True)
class Database:
    """The open database: a writer engine and a reader engine (the same on PostgreSQL)."""

    url: str = field(repr=False)  # its password too: show it through redact_url
    writer: AsyncEngine
    reader: AsyncEngine
    _write_sessions: async_sessionmaker[AsyncSession]
    _read_sessions: async_sessionmaker[AsyncSession]
    #: SQLite takes one writer at a time: writers of this process queue here
    #: instead of in SQLite's busy handler, which sleeps between retries.
    _write_turn: asyncio.Lock | None = None
    #: run first in every write transaction (it raises to refuse the write); None: nothing
    fence: Callable[[AsyncSession], Awaitable[None]] | None = None

    def fenced(self, fence: Callable[[AsyncSession], Awaitable[None]]) -> Database:
        """The same database whose write transactions first run ``fence(session)``."""
        return replace(self, fence=fence)

    @property
    def dialect(self) -> str:
        return self.writer.dialect.name

    @contextlib.asynccontextmanager
    async def write(self) -> AsyncIterator[AsyncSession]:
        """A session in one write transaction: committed on success, rolled back on error."""
        turn = self._write_turn if self._write_turn is not None else contextlib.nullcontext()
        async with turn:
            session = self._write_sessions()
            try:
                async with session.begin():
                    if self.fence is not None:
                        await self.fence(session)
                    yield session
            finally:
                await session.close()

    @contextlib.asynccontextmanager
    async def read(self) -> AsyncIterator[AsyncSession]:
        """A session for reading (one transaction, nothing is committed)."""
        session = self._read_sessions()
        try:
            async with session.begin():
                yield session
        finally:
            await session.close()

    async def ping(self) -> None:
        """Raise if the database cannot answer a trivial query."""
        async with self.reader.connect() as conn:
            await conn.execute(text("SELECT 1"))

    async def close(self) -> None:
        await self.writer.dispose()
        if self.reader is not self.writer:
            await self.reader.dispose()


def unavailable(error: BaseException) -> bool:
    """Whether ``error`` says the database cannot be used right now (a retry later may work)."""
    if isinstance(error, exc.DBAPIError) and error.connection_invalidated:
        return True
    if isinstance(error, Fenced):  # another replica leads now: a retry reaches it
        return True
    return isinstance(error, exc.OperationalError | exc.InterfaceError | exc.TimeoutError | OSError)


async def open_database(
    url: str,
    *,
    migrate: bool = True,
    durability: Durability = Durability.SAFE,
    inline: bool = False,
) -> Database:
    """Open ``url`` (``sqlite+aiosqlite:///...`` or ``postgresql+asyncpg://...``) and migrate it.

    ``inline`` (SQLite only) runs SQLite on the event loop's thread instead of
    aiosqlite's (:mod:`fleet.store.inline_sqlite`): for a replay, whose event
    loop serves nothing else while it writes.
    """
    try:
        backend = make_url(url).get_backend_name()
    except Exception as e:  # sqlalchemy raises ArgumentError for a malformed URL
        raise DatabaseError(
            f"not a database URL: {redact_url(url)!r} ({type(e).__name__})"
        ) from None
    if backend == "sqlite":
        writer = _sqlite_engine(url, immediate=True, durability=durability, inline=inline)
        reader = _sqlite_engine(url, immediate=False, durability=durability, inline=inline)
    elif backend == "postgresql":
        # Enough connections for the API's concurrent requests and the loop.  No
        # ping before each use (it costs three round trips per transaction): a
        # connection found dead fails its transaction, which is answered 503 or
        # retried by the loop, and the pool then replaces every older connection.
        writer = reader = create_async_engine(
            url, pool_size=POSTGRES_POOL_SIZE, max_overflow=POSTGRES_POOL_SIZE, **_JSON_CODEC
        )
    else:
        raise DatabaseError(
            f"unsupported database {backend!r}: use sqlite+aiosqlite or postgresql+asyncpg"
        )
    db = Database(
        url,
        writer,
        reader,
        async_sessionmaker(writer, expire_on_commit=False),
        async_sessionmaker(reader, expire_on_commit=False),
        asyncio.Lock() if backend == "sqlite" else None,
    )
    if migrate:
        try:
            await upgrade(db)
        except BaseException as e:
            await db.close()
            if isinstance(e, Exception) and unavailable(e):
                raise DatabaseError(
                    f"cannot reach the database {redact_url(url)}: {type(e).__name__}: {e}"
                ) from e
            raise
    return db


async def upgrade(db: Database, revision: str = "head") -> None:
    """Run the migrations up to ``revision`` (under an advisory lock on PostgreSQL)."""
    async with db.writer.connect() as conn:
        if db.dialect == "postgresql":
            await conn.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK})
            await conn.commit()
        try:
            await conn.run_sync(lambda sync: command.upgrade(alembic_config(sync), revision))
            await conn.commit()
        finally:
            if db.dialect == "postgresql":
                await conn.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK})
                await conn.commit()


async def downgrade(db: Database, revision: str) -> None:
    """Run the migrations down to ``revision`` (``base`` empties the schema)."""
    async with db.writer.connect() as conn:
        await conn.run_sync(lambda sync: command.downgrade(alembic_config(sync), revision))
        await conn.commit()
