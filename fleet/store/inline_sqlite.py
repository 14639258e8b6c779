"""SQLite for SQLAlchemy's ``aiosqlite`` dialect, run on the event loop's own thread.

aiosqlite gives every connection a thread and hands each call to it through
a queue, so every statement is two thread hand-offs and a wake-up of the
event loop.  That keeps a service's event loop free while SQLite works (or
waits for the disk), and it is what the service uses.  A replay
(``fleet simulate``, forecasts) has nothing else to serve while its loop
writes, and writes a throwaway file without waiting for the disk: there the
hand-offs are most of the time a statement takes.  This module provides
connections with aiosqlite's interface whose coroutines call :mod:`sqlite3`
directly and return at once, for ``create_async_engine(url,
async_creator=...)``.  The dialect, the statements and the schema are the
same; only where SQLite runs changes.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from typing import Any


class InlineCursor:
    """aiosqlite's cursor interface over a :class:`sqlite3.Cursor`."""

    __slots__ = ("_cursor",)

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor

    async def __aenter__(self) -> InlineCursor:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self._cursor.close()

    @property
    def description(self) -> Any:
        return self._cursor.description

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    @property
    def lastrowid(self) -> int | None:
        return self._cursor.lastrowid

    @property
    def arraysize(self) -> int:
        return self._cursor.arraysize

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        self._cursor.arraysize = value

    async def execute(self, sql: str, parameters: Sequence[Any] | None = None) -> InlineCursor:
        if parameters is None:
            self._cursor.execute(sql)
        else:
            self._cursor.execute(sql, parameters)
        return self

    async def executemany(self, sql: str, parameters: Iterable[Sequence[Any]]) -> InlineCursor:
        self._cursor.executemany(sql, parameters)
        return self

    async def fetchone(self) -> Any:
        return self._cursor.fetchone()

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        if size is None:
            return self._cursor.fetchmany()
        return self._cursor.fetchmany(size)

    async def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    async def close(self) -> None:
        self._cursor.close()


class _Now:
    """Stands for aiosqlite's request queue: runs a request at once and settles its future."""

    __slots__ = ()

    def put_nowait(self, request: tuple[asyncio.Future[Any], Callable[[], Any]]) -> None:
        future, function = request
        try:
            result = function()
        except BaseException as e:  # handed to the waiter, as aiosqlite's thread does
            future.set_exception(e)
        else:
            future.set_result(result)


class InlineConnection:
    """aiosqlite's connection interface over a :class:`sqlite3.Connection`, no thread."""

    __slots__ = ("_conn", "_tx")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn: sqlite3.Connection | None = conn
        self._tx = _Now()

    @property
    def _connection(self) -> sqlite3.Connection | None:  # what the dialect checks
        return self._conn

    def _open(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ValueError("Connection closed")
        return self._conn

    @property
    def isolation_level(self) -> str | None:
        return self._open().isolation_level

    def cursor(self) -> InlineCursor:
        return InlineCursor(self._open().cursor())

    async def execute(self, sql: str, parameters: Sequence[Any] | None = None) -> InlineCursor:
        return await self.cursor().execute(sql, parameters)

    async def commit(self) -> None:
        self._open().commit()

    async def rollback(self) -> None:
        self._open().rollback()

    async def create_function(self, *args: Any, **kw: Any) -> None:
        self._open().create_function(*args, **kw)

    async def close(self) -> None:
        self.stop()

    def stop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def creator(path: str) -> Callable[[], Any]:
    """An ``async_creator`` for ``create_async_engine``: inline connections to ``path``."""

    async def connect() -> InlineConnection:
        # The connection is used by one thread only (the event loop's), but
        # SQLAlchemy's pool may close it from the thread that disposes the engine.
        return InlineConnection(sqlite3.connect(path, check_same_thread=False))

    return connect
