"""The test databases are real: a SQLite file and a PostgreSQL server of the run's own.

``database_url`` gives every test a fresh empty database on each kind; the
PostgreSQL one is served by ``scripts/postgres-test-server``, which listens on
127.0.0.1 only and leaves nothing behind when stopped.
"""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, inspect, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection

from tests.databases import SERVER_SCRIPT, in_ci, open_engine, postgres_url_from_env

metadata = MetaData()
notes = Table(
    "notes",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("body", String(200), nullable=False),
)


async def table_names(connection: AsyncConnection) -> list[str]:
    return await connection.run_sync(lambda sync: inspect(sync).get_table_names())


async def test_a_fresh_database_takes_a_table_and_a_row(database_url: str) -> None:
    async with open_engine(database_url) as engine:
        async with engine.begin() as connection:
            assert await table_names(connection) == []
            await connection.run_sync(metadata.create_all)
            await connection.execute(notes.insert().values(id=1, body="gang of 8 admitted"))
        async with engine.connect() as connection:
            rows = (await connection.execute(select(notes.c.id, notes.c.body))).all()
            assert [tuple(row) for row in rows] == [(1, "gang of 8 admitted")]
            assert await table_names(connection) == ["notes"]


async def test_the_databases_are_of_the_kind_named(database_url: str) -> None:
    async with open_engine(database_url) as engine, engine.connect() as connection:
        if engine.dialect.name == "sqlite":
            assert make_url(database_url).drivername == "sqlite+aiosqlite"
            assert (await connection.execute(text("SELECT sqlite_version()"))).scalar_one()
            return
        assert engine.dialect.name == "postgresql"
        version = (await connection.execute(text("SELECT version()"))).scalar_one()
        assert version.startswith("PostgreSQL ")
        database = (await connection.execute(text("SELECT current_database()"))).scalar_one()
        assert database == make_url(database_url).database
        assert database.startswith("fleet_t_")


async def test_the_run_server_listens_on_loopback_only(postgres_url: str) -> None:
    """The server scripts/run-tests started: 127.0.0.1 only (a preset one is the user's)."""
    if os.environ.get("FLEET_TEST_POSTGRES_DIR") is None:
        pytest.skip("FLEET_TEST_POSTGRES_URL was preset: its server's addresses are its own")
    await assert_serves_loopback_only(postgres_url, Path(os.environ["FLEET_TEST_POSTGRES_DIR"]))


# --- scripts/postgres-test-server itself -----------------------------------------------


def run_script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # Tests never install PostgreSQL: the test run has found or installed it already.
    return subprocess.run(
        [str(SERVER_SCRIPT), *args],
        env={**os.environ, "FLEET_PG_INSTALL": "no", **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def server_dir() -> Iterator[Path]:
    """A directory for a server of the test's own, under the system's temporary directory.

    Not ``tmp_path``: as root the server runs as an unprivileged user, who must be
    able to reach the directory, and pytest's base temporary directory is private.
    """
    if run_script("bindir").returncode != 0:
        message = "no PostgreSQL binaries (initdb, pg_ctl): run the suite with `make test`"
        if in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    directory = Path(tempfile.mkdtemp(prefix="fleet-pg-test-"))
    try:
        yield directory
    finally:
        if directory.exists():
            run_script("stop", str(directory))


def start(directory: Path, env: dict[str, str] | None = None) -> str:
    result = run_script("start", str(directory), env=env)
    assert result.returncode == 0, result.stderr
    url = result.stdout.strip()
    assert url.startswith("postgresql+asyncpg://"), result.stdout
    assert url.endswith("/fleet_test")
    return url


def port_of(url: str) -> int:
    port = make_url(url).port
    assert port is not None
    return port


def refuses(host: str, port: int) -> bool:
    """Whether nothing accepts TCP connections at host:port."""
    try:
        with socket.create_connection((host, port), timeout=2):
            return False
    except OSError:
        return True


async def assert_serves_loopback_only(url: str, directory: Path) -> None:
    assert make_url(url).host == "127.0.0.1"
    async with open_engine(url) as engine, engine.connect() as connection:

        async def show(setting: str) -> str:
            value: str = (await connection.execute(text(f"SHOW {setting}"))).scalar_one()
            return value

        version = (await connection.execute(text("SELECT version()"))).scalar_one()
        assert version.startswith("PostgreSQL ")
        assert await show("listen_addresses") == "127.0.0.1"
        assert await show("unix_socket_directories") == str(directory.resolve() / "socket")
        assert await show("fsync") == "off"
        address = (await connection.execute(text("SELECT host(inet_server_addr())"))).scalar_one()
        assert address == "127.0.0.1"
    # Another loopback address reaches the port only if the server listens on all of them.
    assert refuses("127.0.0.2", port_of(url))


@pytest.mark.slow
async def test_start_serves_loopback_and_stop_removes_the_directory(server_dir: Path) -> None:
    # A port someone else holds is skipped over.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        taken_port = taken.getsockname()[1]
        url = start(server_dir, env={"FLEET_PG_PORT": str(taken_port)})
    assert port_of(url) != taken_port
    await assert_serves_loopback_only(url, server_dir)

    result = run_script("stop", str(server_dir))
    assert result.returncode == 0, result.stderr
    assert not server_dir.exists()
    assert refuses("127.0.0.1", port_of(url))


@pytest.mark.slow
async def test_start_over_a_stale_directory_replaces_its_server(server_dir: Path) -> None:
    first = start(server_dir)
    second = start(server_dir)
    assert refuses("127.0.0.1", port_of(first))
    async with open_engine(second) as engine, engine.connect() as connection:
        assert (await connection.execute(text("SELECT 1"))).scalar_one() == 1
    assert run_script("stop", str(server_dir)).returncode == 0
    assert not server_dir.exists()


@pytest.mark.slow
def test_a_server_that_does_not_start_fails_with_its_log(server_dir: Path) -> None:
    result = run_script("start", str(server_dir), env={"FLEET_PG_PORT": "99999"})
    assert result.returncode != 0
    assert result.stdout == ""
    assert "outside the valid range" in result.stderr  # the server's own log line
    assert "the server did not start" in result.stderr


def test_directories_it_did_not_make_are_left_alone(tmp_path: Path) -> None:
    keep = tmp_path / "keep.txt"
    keep.write_text("not the server's")
    started = run_script("start", str(tmp_path))
    assert started.returncode != 0
    assert "refusing" in started.stderr
    stopped = run_script("stop", str(tmp_path))
    assert stopped.returncode != 0
    assert keep.read_text() == "not the server's"
    assert run_script("stop", str(tmp_path / "missing")).returncode == 0


def test_postgres_url_comes_from_the_environment(postgres_url: str) -> None:
    assert postgres_url == postgres_url_from_env()
    assert make_url(postgres_url).get_backend_name() == "postgresql"
