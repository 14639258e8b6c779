"""Host names without tokens (DNS rebinding), writes from foreign origins, TLS behind a proxy."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from fleet.api.app import create_app
from fleet.clock import VirtualClock
from fleet.testing import running
from fleet.testing.documents import pytorchjob
from fleet.testing.tokens import bearer, write_tokens_file
from tests.admin.conftest import YAML, Client
from tests.databases import sqlite_url

Start = Callable[..., Awaitable[Client]]


@pytest.fixture
def start(aiohttp_client: Callable[[web.Application], Awaitable[Client]], tmp_path: Path) -> Start:
    async def started(*, tokens: bool = False, **kw: Any) -> Client:
        if tokens:
            kw["tokens_file"] = write_tokens_file(tmp_path / "tokens.yaml")
        settings = running.settings(sqlite_url(tmp_path), **kw)
        return await aiohttp_client(create_app(settings, clock=VirtualClock(1_000.0)))

    return started


def own_origin(client: Client) -> str:
    url = client.make_url("/")
    return f"{url.scheme}://{url.host}:{url.port}"


@pytest.mark.parametrize(
    ("host", "status"),
    [
        pytest.param("evil.example", 421, id="foreign-name"),
        pytest.param("evil.example:8080", 421, id="foreign-name-with-port"),
        pytest.param("localhost.evil.example", 421, id="localhost-prefix"),
        pytest.param("127.0.0.1.evil.example", 421, id="loopback-prefix"),
        pytest.param("localhost@evil.example", 421, id="userinfo"),
        pytest.param("10.0.0.7:8080", 421, id="another-address"),
        pytest.param("[::1", 421, id="malformed"),
        pytest.param("", 421, id="empty"),
        pytest.param("127.0.0.1:8080", 200, id="ipv4-loopback"),
        pytest.param("[::1]:8080", 200, id="ipv6-loopback"),
        pytest.param("localhost", 200, id="localhost"),
        pytest.param("LocalHost:9999", 200, id="localhost-another-port"),
        pytest.param("127.0.0.2", 200, id="another-loopback-address"),
    ],
)
async def test_without_tokens_only_loopback_host_names_are_answered(
    start: Start, host: str, status: int
) -> None:
    client = await start()
    for path in ("/api/v1/queues", "/ui/", "/healthz"):
        resp = await client.get(path, headers={"Host": host}, allow_redirects=False)
        assert resp.status == status, (path, await resp.text())
        if status == 421:
            assert resp.content_type == "application/problem+json"
            assert "not a loopback name" in (await resp.json())["detail"]


async def test_with_tokens_any_host_name_is_answered(start: Start) -> None:
    client = await start(tokens=True)
    for host in ("evil.example", "fleet.example.com:443", "10.0.0.7:8080"):
        resp = await client.get("/api/v1/queues", headers={"Host": host, **bearer("admin")})
        assert resp.status == 200, await resp.text()


WRITES = [
    pytest.param("POST", "/api/v1/submissions", 201, id="submit"),
    pytest.param("DELETE", "/api/v1/jobs/team-a/nobody", 404, id="cancel"),
    pytest.param("PUT", "/api/v1/clusters/west/nodes/west-node-0/health", 200, id="node-health"),
]


def _body(method: str, path: str) -> dict[str, Any]:
    if method == "POST":
        return {"data": pytorchjob("from-somewhere"), "headers": YAML}
    if method == "PUT":
        return {"json": {"healthy": False, "reason": "x"}}
    return {}


@pytest.mark.parametrize("tokens", [False, True], ids=["no-tokens", "tokens"])
@pytest.mark.parametrize(("method", "path", "allowed"), WRITES)
@pytest.mark.parametrize(
    "origin",
    [
        pytest.param("https://evil.example", id="foreign"),
        pytest.param("null", id="null"),
        pytest.param("http://127.0.0.1:1", id="another-port"),
        pytest.param("https://127.0.0.1", id="another-scheme"),
    ],
)
async def test_a_write_from_a_foreign_origin_is_refused_and_changes_nothing(
    start: Start, tokens: bool, method: str, path: str, allowed: int, origin: str
) -> None:
    client = await start(tokens=tokens)
    kw = _body(method, path)
    headers = {**kw.pop("headers", {}), **bearer("admin"), "Origin": origin}
    resp = await client.request(method, path, headers=headers, **kw)
    assert resp.status == 403, await resp.text()
    problem = await resp.json()
    assert "writes are accepted from this server's own origin" in problem["detail"]
    jobs = await client.get("/api/v1/jobs", headers=bearer("admin"))
    assert (await jobs.json())["items"] == []


@pytest.mark.parametrize("tokens", [False, True], ids=["no-tokens", "tokens"])
@pytest.mark.parametrize(("method", "path", "allowed"), WRITES)
@pytest.mark.parametrize("with_origin", [False, True], ids=["no-origin", "own-origin"])
async def test_a_write_without_origin_or_from_the_servers_own_is_served(
    start: Start, tokens: bool, method: str, path: str, allowed: int, with_origin: bool
) -> None:
    client = await start(tokens=tokens)
    kw = _body(method, path)
    headers = {**kw.pop("headers", {}), **bearer("admin")}
    if with_origin:
        headers["Origin"] = own_origin(client)
    resp = await client.request(method, path, headers=headers, **kw)
    assert resp.status == allowed, await resp.text()


@pytest.mark.parametrize(
    ("settings", "headers", "status"),
    [
        pytest.param(
            {"public_url": "https://fleet.example.com"},
            {"Origin": "https://fleet.example.com"},
            201,
            id="public-url",
        ),
        pytest.param(
            {"public_url": "https://fleet.example.com:8443"},
            {"Origin": "https://fleet.example.com"},
            403,
            id="public-url-another-port",
        ),
        pytest.param(
            {}, {"Origin": "https://fleet.example.com"}, 403, id="public-url-not-configured"
        ),
        pytest.param(
            {"trust_forwarded_proto": True},
            {"Origin": "https://{host}", "X-Forwarded-Proto": "https"},
            201,
            id="trusted-forwarded-proto",
        ),
        pytest.param(
            {},
            {"Origin": "https://{host}", "X-Forwarded-Proto": "https"},
            403,
            id="untrusted-forwarded-proto",
        ),
    ],
)
async def test_the_public_url_and_a_trusted_proxys_scheme_are_the_servers_own_origin(
    start: Start, settings: dict[str, Any], headers: dict[str, str], status: int
) -> None:
    client = await start(tokens=True, **settings)
    url = client.make_url("/")
    given = {k: v.format(host=f"{url.host}:{url.port}") for k, v in headers.items()}
    resp = await client.post(
        "/api/v1/submissions",
        data=pytorchjob("via-proxy"),
        headers={**YAML, **bearer("admin"), **given},
    )
    assert resp.status == status, await resp.text()
