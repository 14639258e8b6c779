"""Per-token limits: event streams and quota-tree simulations held at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientResponse, web

from fleet.api import keys, live
from fleet.api.app import create_app
from fleet.api.limits import RETRY_AFTER, Slots
from fleet.api.tokens import Caller
from fleet.clock import VirtualClock
from fleet.service.settings import POLICIES
from fleet.sim import forecast
from fleet.testing import running
from fleet.testing.tokens import bearer, write_tokens_file
from tests.admin.conftest import YAML, Client
from tests.databases import sqlite_url

TREE = (POLICIES / "quota" / "team-tree.yaml").read_text(encoding="utf-8")
SIMULATE = "/api/v1/quota-tree?dryRun=Simulate&horizon=3600"
STREAM = {"Accept": "text/event-stream"}


@pytest.fixture
async def client(
    aiohttp_client: Callable[[web.Application], Awaitable[Client]], tmp_path: Path
) -> Client:
    settings = running.settings(
        sqlite_url(tmp_path),
        tokens_file=write_tokens_file(tmp_path / "tokens.yaml"),
        max_streams_per_token=2,
        max_simulations_per_token=1,
        estimate_interval=0,
    )
    return await aiohttp_client(create_app(settings, clock=VirtualClock(1_000.0)))


async def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


async def refused(resp: ClientResponse, setting: str) -> None:
    assert resp.status == 429, await resp.text()
    assert resp.content_type == "application/problem+json"
    assert resp.headers["Retry-After"] == str(RETRY_AFTER)
    assert setting in (await resp.json())["detail"]


async def test_a_token_holds_at_most_its_streams_and_gets_one_back_when_one_closes(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live, "HEARTBEAT", 0.05)  # a closed stream is noticed at once
    slots = client.app[keys.STREAM_SLOTS]
    team_a = Caller("ci-a", "team", frozenset({"team-a"}))
    first = await client.get("/api/v1/events", headers={**STREAM, **bearer("team-a")})
    second = await client.get("/api/v1/events", headers={**STREAM, **bearer("team-a")})
    assert (first.status, second.status) == (200, 200)
    assert slots.held(team_a) == 2
    await refused(
        await client.get("/api/v1/events", headers={**STREAM, **bearer("team-a")}),
        "max_streams_per_token",
    )
    # Another token is counted on its own; a one-off JSON answer takes no slot.
    other = await client.get("/api/v1/events", headers={**STREAM, **bearer("team-b")})
    assert other.status == 200
    once = await client.get("/api/v1/events", headers=bearer("team-a"))
    assert once.status == 200 and once.content_type == "application/json"
    # The client goes away: its slot comes back, and a new stream is accepted.
    first.close()
    await until(lambda: slots.held(team_a) == 1, "the closed stream's slot was not given back")
    again = await client.get("/api/v1/events", headers={**STREAM, **bearer("team-a")})
    assert again.status == 200
    for resp in (second, other, again):
        resp.close()


async def test_a_token_runs_at_most_its_simulations_at_once(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = asyncio.Event()
    real = forecast.compare

    async def slow(*args: Any, **kw: Any) -> forecast.QuotaChange:
        await gate.wait()
        return await real(*args, **kw)

    monkeypatch.setattr(forecast, "compare", slow)
    slots: Slots = client.app[keys.SIMULATION_SLOTS]
    admin = Caller("ops", "admin")

    async def simulate(who: str) -> ClientResponse:
        return await client.post(SIMULATE, data=TREE, headers={**YAML, **bearer(who)})

    running = asyncio.create_task(simulate("admin"))
    await until(lambda: slots.held(admin) == 1, "the first simulation did not start")
    await refused(await simulate("admin"), "max_simulations_per_token")
    # Another token's simulation runs meanwhile.
    other = asyncio.create_task(simulate("team-a"))
    await until(lambda: slots.held(Caller("ci-a", "team")) == 1, "team-a's was refused")
    gate.set()
    assert (await running).status == 200
    assert (await other).status == 200
    assert slots.held(admin) == 0
    assert (await simulate("admin")).status == 200  # the slot came back


def test_a_slot_is_given_back_however_the_block_ends() -> None:
    slots = Slots("things", 1, "max_things")
    who = Caller("ops", "admin")
    with pytest.raises(asyncio.CancelledError), slots.take(who):
        raise asyncio.CancelledError
    assert slots.held(who) == 0
    with slots.take(who):
        assert slots.held(who) == 1
