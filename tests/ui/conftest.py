"""The API with bearer tokens (an admin, a team-a and a team-b token), for the dashboard's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web

from fleet.api.app import create_app
from fleet.clock import VirtualClock
from fleet.testing import running
from fleet.testing.tokens import write_tokens_file
from tests.admin.conftest import Api, Client


@pytest.fixture
async def api(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]],
    database_url: str,
    tmp_path: Path,
) -> AsyncIterator[Api]:
    clock = VirtualClock(1_000.0)
    settings = running.settings(database_url, tokens_file=write_tokens_file(tmp_path / "t.yaml"))
    app = create_app(settings, clock=clock)
    client = await aiohttp_client(app)
    yield Api(client, clock)
