"""A follower forwards a signed caller identity, never the caller's token (PostgreSQL replicas).

In process, on a real PostgreSQL: a follower whose lease row names a
recording server (as anyone who can write that row could make it), and a
leader that verifies identities signed with the replicas' secret.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from sqlalchemy import text

from fleet.api import keys, replicas
from fleet.api.app import create_app
from fleet.api.tokens import Caller
from fleet.clock import VirtualClock
from fleet.store import leases
from fleet.store.database import open_database
from fleet.testing import running, servers
from fleet.testing.tokens import TOKENS, bearer, write_tokens_file
from tests.admin.conftest import Client
from tests.databases import fresh_postgres_database

pytestmark = pytest.mark.postgresql

SECRET = "0123456789abcdef0123456789abcdef"
ADMIN = Caller("ops", "admin")
TEAM_A = Caller("ci-a", "team", frozenset({"team-a"}))
HEALTH = "/api/v1/clusters/west/nodes/west-node-0/health"


@pytest.fixture
async def database(postgres_url: str) -> AsyncIterator[str]:
    async with fresh_postgres_database(postgres_url) as url:
        yield url


class Recorder:
    """A stand-in for whatever the lease row names: it records what it is sent."""

    def __init__(self) -> None:
        self.requests: list[dict[str, str]] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(dict(request.headers))
        return web.json_response([])


@pytest.fixture
async def recorder() -> AsyncIterator[tuple[Recorder, str]]:
    found = Recorder()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", found.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield found, str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


async def lease_held_by(database: str, address: str) -> None:
    """The lease row as someone who may write it leaves it: held, for an hour, at ``address``."""
    db = await open_database(database)
    try:
        async with db.write() as session:
            await leases.ensure(session)
            await session.execute(
                text(
                    "UPDATE leases SET holder = 'elsewhere', term = 7, address = :address, "
                    "expires_at = extract(epoch from clock_timestamp()) + 3600"
                ),
                {"address": address},
            )
    finally:
        await db.close()


async def start(
    aiohttp_client: Callable[..., Awaitable[Client]],
    database: str,
    tmp_path: Path,
    name: str,
    **kw: Any,
) -> Client:
    port = servers.free_port()
    settings = running.settings(
        database,
        tokens_file=write_tokens_file(tmp_path / f"{name}-tokens.yaml"),
        advertise_url=f"http://127.0.0.1:{port}",
        **kw,
    )
    app = create_app(settings, clock=VirtualClock(1_000.0))
    return await aiohttp_client(app, server_kwargs={"port": port})


@pytest.mark.parametrize("secret", [None, SECRET], ids=["no-secret", "secret"])
async def test_a_forged_lease_address_never_receives_a_bearer_token(
    aiohttp_client: Callable[..., Awaitable[Client]],
    database: str,
    tmp_path: Path,
    recorder: tuple[Recorder, str],
    secret: str | None,
) -> None:
    found, address = recorder
    await lease_held_by(database, address)
    follower = await start(aiohttp_client, database, tmp_path, "f", replica_secret=secret)
    leadership = follower.app[keys.SERVICE].leadership
    assert leadership is not None and leadership.leader_address() == address
    resp = await follower.get("/api/v1/queues", headers=bearer("admin"))
    if secret is None:  # nothing forwarded: the client is told where the leader is
        assert resp.status == 421, await resp.text()
        assert resp.content_type == "application/problem+json"
        assert address in (await resp.json())["detail"]
        assert found.requests == []
    else:
        assert resp.status == 200, await resp.text()
        (sent,) = found.requests
        assert "Authorization" not in sent
        assert not any(TOKENS["admin"] in value for value in sent.values())
        assert replicas.HEADER in sent
    # A caller the follower cannot authenticate gets its 401 there, forwarded nowhere.
    before = len(found.requests)
    refused = await follower.get("/api/v1/queues", headers={"Authorization": "Bearer nope"})
    assert refused.status == 401
    assert len(found.requests) == before


async def test_the_leader_takes_the_callers_role_from_a_follower_and_no_more(
    aiohttp_client: Callable[..., Awaitable[Client]], database: str, tmp_path: Path
) -> None:
    leader = await start(aiohttp_client, database, tmp_path, "l", replica_secret=SECRET)
    assert leader.app[keys.SERVICE].scheduling
    follower = await start(aiohttp_client, database, tmp_path, "f", replica_secret=SECRET)
    assert not follower.app[keys.SERVICE].scheduling
    queues = await follower.get("/api/v1/queues/team-a", headers=bearer("team-a"))
    assert queues.status == 200, await queues.text()
    change = {"healthy": False, "reason": "through the follower"}
    # A team token stays a team caller at the leader: no administrative change.
    refused = await follower.put(HEALTH, json=change, headers=bearer("team-a"))
    assert refused.status == 403, await refused.text()
    assert "ci-a" in (await refused.json())["detail"]
    done = await follower.put(HEALTH, json=change, headers=bearer("admin"))
    assert done.status == 200, await done.text()
    audit = await leader.get("/api/v1/audit?kind=node-health", headers=bearer("admin"))
    records = (await audit.json())["items"]
    assert sorted((r["actor"], r["status"]) for r in records) == [("ci-a", 403), ("ops", 200)]


def _tampered(value: str) -> str:
    payload, signature = value.split(".")
    statement = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    statement["role"] = "admin"
    forged = base64.urlsafe_b64encode(json.dumps(statement).encode()).rstrip(b"=").decode()
    return f"{forged}.{signature}"


def _signed(
    leader: Client,
    caller: Caller,
    method: str,
    target: str,
    *,
    body: bytes = b"",
    secret: str = SECRET,
    now: float | None = None,
    term: int | None = None,
) -> dict[str, str]:
    leadership = leader.app[keys.SERVICE].leadership
    assert leadership is not None
    value = replicas.sign(
        secret.encode(),
        caller,
        method=method,
        target=target,
        body=body,
        term=leadership.term if term is None else term,
        to=leadership.address,
        now=now,
    )
    return {replicas.HEADER: value}


async def test_the_leader_refuses_forged_expired_and_replayed_identities(
    aiohttp_client: Callable[..., Awaitable[Client]], database: str, tmp_path: Path
) -> None:
    leader = await start(aiohttp_client, database, tmp_path, "l", replica_secret=SECRET)
    good = _signed(leader, TEAM_A, "GET", "/api/v1/queues")
    resp = await leader.get("/api/v1/queues", headers=good)
    assert resp.status == 200, await resp.text()
    body = json.dumps({"healthy": False, "reason": "x"}).encode()
    cases: list[tuple[str, str, str, dict[str, str], bytes, int, str]] = [
        ("replayed", "GET", "/api/v1/queues", good, b"", 401, "used already"),
        (
            "another-path",
            "GET",
            "/api/v1/clusters",
            _signed(leader, TEAM_A, "GET", "/api/v1/queues"),
            b"",
            401,
            "not this request",
        ),
        (
            "another-method",
            "PUT",
            HEALTH,
            _signed(leader, ADMIN, "GET", HEALTH),
            body,
            401,
            "not this request",
        ),
        (
            "another-body",
            "PUT",
            HEALTH,
            _signed(leader, ADMIN, "PUT", HEALTH, body=b'{"healthy": true}'),
            body,
            401,
            "another request body",
        ),
        (
            "tampered-role",
            "PUT",
            HEALTH,
            {
                replicas.HEADER: _tampered(
                    _signed(leader, TEAM_A, "PUT", HEALTH, body=body)[replicas.HEADER]
                )
            },
            body,
            401,
            "signature is not valid",
        ),
        (
            "other-secret",
            "GET",
            "/api/v1/queues",
            _signed(leader, ADMIN, "GET", "/api/v1/queues", secret="x" * 32),
            b"",
            401,
            "signature is not valid",
        ),
        (
            "expired",
            "GET",
            "/api/v1/queues",
            _signed(leader, ADMIN, "GET", "/api/v1/queues", now=time.time() - 60),
            b"",
            401,
            "expired",
        ),
        (
            "far-ahead",
            "GET",
            "/api/v1/queues",
            _signed(leader, ADMIN, "GET", "/api/v1/queues", now=time.time() + 3600),
            b"",
            401,
            "too far ahead",
        ),
        (
            "not-a-leader-route",
            "GET",
            "/api/v1/jobs",
            _signed(leader, ADMIN, "GET", "/api/v1/jobs"),
            b"",
            401,
            "only the leader",
        ),
        (
            "with-a-token-too",
            "GET",
            "/api/v1/queues",
            {**_signed(leader, ADMIN, "GET", "/api/v1/queues"), **bearer("team-a")},
            b"",
            401,
            "not both",
        ),
        ("malformed", "GET", "/api/v1/queues", {replicas.HEADER: "x.y.z"}, b"", 401, "malformed"),
        (
            "another-term",
            "GET",
            "/api/v1/queues",
            _signed(leader, ADMIN, "GET", "/api/v1/queues", term=99),
            b"",
            503,
            "term 99",
        ),
    ]
    for name, method, path, headers, sent, status, detail in cases:
        extra = {"Content-Type": "application/json"} if sent else {}
        resp = await leader.request(method, path, headers={**headers, **extra}, data=sent)
        assert resp.status == status, (name, await resp.text())
        assert detail in (await resp.json())["detail"], name
    # Nothing of those changed the node's health.
    health = await leader.get("/api/v1/clusters/west", headers=bearer("admin"))
    assert "through" not in await health.text()


async def test_without_replicas_no_signed_identity_is_taken(
    aiohttp_client: Callable[..., Awaitable[Client]], tmp_path: Path
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/fleet.db"
    single = await start(aiohttp_client, url, tmp_path, "s", replica_secret=SECRET)
    value = replicas.sign(
        SECRET.encode(), ADMIN, method="GET", target="/api/v1/queues", body=b"", term=0, to=""
    )
    resp = await single.get("/api/v1/queues", headers={replicas.HEADER: value})
    assert resp.status == 401
    assert "only the leader" in (await resp.json())["detail"]
