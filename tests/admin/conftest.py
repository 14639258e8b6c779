"""An API with bearer tokens: an admin, a team-a token and a team-b token (fleet.testing.tokens)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from fleet.api import keys
from fleet.api.app import create_app
from fleet.clock import VirtualClock
from fleet.testing import running
from fleet.testing.tokens import bearer, write_tokens_file

Client = TestClient[web.Request, web.Application]
YAML = {"Content-Type": "application/yaml"}


@dataclass
class Api:
    client: Client
    clock: VirtualClock

    async def settle(self, seconds: float = 0.0) -> None:
        await running.settle(self.client.app[keys.SERVICE].loop, self.clock, seconds)

    async def call(
        self, method: str, path: str, who: str = "admin", *, status: int, **kw: Any
    ) -> Any:
        headers = dict(kw.pop("headers", {}))
        headers.update(bearer(who))
        resp = await self.client.request(method, path, headers=headers, **kw)
        text = await resp.text()
        assert resp.status == status, text
        if resp.content_type.endswith("json"):
            return await resp.json()
        return text


@pytest.fixture
def kubeconfigs(tmp_path: Path) -> Path:
    """The API's kubeconfig directory (``--kubeconfig-dir``), empty."""
    directory = tmp_path / "kubeconfigs"
    directory.mkdir()
    return directory


@pytest.fixture
def api_with(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]],
    database_url: str,
    tmp_path: Path,
    kubeconfigs: Path,
) -> Callable[..., Awaitable[Api]]:
    """Start an API on the test's database with these settings besides the tokens."""

    async def make(**kw: Any) -> Api:
        clock = VirtualClock(1_000.0)
        settings = running.settings(
            database_url,
            tokens_file=write_tokens_file(tmp_path / "t.yaml"),
            kubeconfig_dir=kubeconfigs,
            **kw,
        )
        client = await aiohttp_client(create_app(settings, clock=clock))
        return Api(client, clock)

    return make


@pytest.fixture
async def api(api_with: Callable[..., Awaitable[Api]]) -> AsyncIterator[Api]:
    yield await api_with()
