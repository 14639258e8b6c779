"""A database connection lost under the API: a 503 problem, then service as usual."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.test_utils import TestClient
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from fleet.api import keys
from fleet.api.app import create_app
from fleet.clock import VirtualClock
from fleet.testing import running
from fleet.testing.documents import pytorchjob
from fleet.testing.running import settings
from tests.databases import fresh_postgres_database, open_engine

Client = TestClient[web.Request, web.Application]
YAML = {"Content-Type": "application/yaml"}


async def cut_connections(maintenance_url: str, database: str) -> int:
    """Terminate every server process of ``database`` (what a PostgreSQL restart does)."""
    async with (
        open_engine(maintenance_url, isolation_level="AUTOCOMMIT", poolclass=NullPool) as engine,
        engine.connect() as connection,
    ):
        cut = await connection.execute(
            text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = :name AND pid <> pg_backend_pid()"
            ),
            {"name": database},
        )
        return int(cut.scalar_one())


async def test_lost_connections_are_a_503_problem_and_the_next_request_is_served(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]], postgres_url: str
) -> None:
    async with fresh_postgres_database(postgres_url) as url:
        clock = VirtualClock(0.0)
        app = create_app(settings(url), clock=clock)
        client = await aiohttp_client(app)
        resp = await client.post(
            "/api/v1/submissions", data=pytorchjob("before", gpus=1), headers=YAML
        )
        assert resp.status == 201, await resp.text()
        await running.settle(app[keys.SERVICE].loop, clock)  # nothing uses the pool now
        assert await cut_connections(postgres_url, make_url(url).database or "") >= 1

        resp = await client.get("/api/v1/jobs")
        assert resp.status == 503, await resp.text()
        assert resp.content_type == "application/problem+json"
        assert resp.headers["Retry-After"] == "1"
        body = await resp.json()
        assert "database cannot be reached" in body["detail"]

        resp = await client.get("/api/v1/jobs")  # the pool has replaced its connections
        assert resp.status == 200, await resp.text()
        assert [j["name"] for j in (await resp.json())["items"]] == ["before"]
        await client.close()
