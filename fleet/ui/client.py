"""The dashboard's way to the service: the public HTTP API, over the loopback, with the
caller's own bearer token.

Theory of operation: a page handler asks :class:`Api` for what it shows, and
:class:`Api` sends an ordinary HTTP request to the very server that received
the page request (the local address of its connection), with the token kept
in the browser's session cookie.  So the dashboard can do exactly what the
token can do through the API (no private back door), every write it makes is
checked and audited by the API, and an API problem comes back as
:class:`ApiProblem` with the API's status and problem details.  One
``aiohttp.ClientSession`` per application is opened on first use and closed
with the application.  What only the server knows of a request (whether an
``Origin`` is its own, whether the client used TLS) it tells the dashboard
at setup (:class:`Site`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote

import aiohttp
from aiohttp import web

#: Seconds an API call may take before the page says so.
TIMEOUT: Final = 30.0
#: The session cookie that holds the bearer token (HttpOnly, SameSite=Strict).
COOKIE: Final = "fleet_token"


class Sessions:
    """The application's one client session, opened on first use (in the running loop)."""

    def __init__(self) -> None:
        self.session: aiohttp.ClientSession | None = None

    def get(self) -> aiohttp.ClientSession:
        if self.session is None or self.session.closed:
            self.session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=TIMEOUT, sock_read=TIMEOUT)
            )
        return self.session

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()


SESSIONS: Final = web.AppKey("ui-client", Sessions)


@dataclass(frozen=True, slots=True)
class Site:
    """What the server the dashboard is mounted on says of a request (given at setup)."""

    #: whether an ``Origin`` header names the server's own origin
    same_origin: Callable[[web.Request, str], bool]
    #: whether the client reached the server over TLS (the cookie is then ``Secure``)
    secure: Callable[[web.Request], bool]


SITE: Final = web.AppKey("ui-site", Site)


@dataclass(frozen=True, slots=True)
class ApiProblem(Exception):
    """The API refused: its status and problem details (``detail``, ``errors``...)."""

    status: int
    problem: Mapping[str, Any] = field(default_factory=dict)

    @property
    def detail(self) -> str:
        detail = self.problem.get("detail") or self.problem.get("title") or ""
        return str(detail) or f"the API answered {self.status}"

    @property
    def errors(self) -> list[Mapping[str, Any]]:
        found = self.problem.get("errors")
        return list(found) if isinstance(found, list) else []

    def __str__(self) -> str:
        return f"{self.status}: {self.detail}"


def path(*parts: str) -> str:
    """URL path segments, each quoted (``/`` inside a segment too)."""
    return "/".join(quote(p, safe="") for p in parts)


def base_url(request: web.Request) -> str:
    """The URL of the server that answers ``request`` (the local end of its connection)."""
    transport = request.transport
    sockname = transport.get_extra_info("sockname") if transport is not None else None
    if not sockname or not isinstance(sockname, tuple):
        raise ApiProblem(503, {"detail": "the dashboard cannot find its own server address"})
    host, port = str(sockname[0]), int(sockname[1])
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def token_of(request: web.Request) -> str | None:
    token = request.cookies.get(COOKIE)
    return token or None


async def _session(app: web.Application) -> aiohttp.ClientSession:
    return app[SESSIONS].get()


async def close(app: web.Application) -> None:
    await app[SESSIONS].close()


class Api:
    """The public API on behalf of the caller of ``request``."""

    def __init__(self, request: web.Request, token: str | None = None) -> None:
        self.request = request
        self.base = base_url(request)
        self.token = token if token is not None else token_of(request)

    def headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        headers = dict(extra or {})
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    async def call(
        self,
        method: str,
        url: str,
        *,
        params: Mapping[str, str] | None = None,
        body: bytes | None = None,
        content_type: str | None = None,
        accept: str | None = None,
    ) -> tuple[int, str, bytes]:
        """``(status, content type, body)``; :class:`ApiProblem` for any 4xx/5xx answer."""
        session = await _session(self.request.app)
        extra = {"Content-Type": content_type} if content_type else {}
        if accept:
            extra["Accept"] = accept
        try:
            async with session.request(
                method,
                self.base + url,
                params=params,
                data=body,
                headers=self.headers(extra),
                timeout=aiohttp.ClientTimeout(total=TIMEOUT),
            ) as resp:
                data = await resp.read()
                kind = resp.content_type
                status = resp.status
        except (TimeoutError, aiohttp.ClientError) as e:
            raise ApiProblem(503, {"detail": f"the API did not answer ({type(e).__name__})"}) from e
        if status >= 400:
            try:
                problem = json.loads(data) if kind.endswith("json") else {}
            except ValueError:
                problem = {}
            raise ApiProblem(status, problem if isinstance(problem, dict) else {})
        return status, kind, data

    async def json(self, url: str, params: Mapping[str, str] | None = None) -> Any:
        _, _, data = await self.call("GET", url, params=params, accept="application/json")
        return json.loads(data)

    async def text(self, url: str) -> str:
        _, _, data = await self.call("GET", url)
        return data.decode("utf-8", "replace")

    async def send_json(
        self,
        method: str,
        url: str,
        value: Any,
        *,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        body = json.dumps(value).encode("utf-8")
        _, kind, data = await self.call(
            method, url, params=params, body=body, content_type=content_type
        )
        return json.loads(data) if kind.endswith("json") and data else None

    async def delete(self, url: str) -> Any:
        _, kind, data = await self.call("DELETE", url)
        return json.loads(data) if kind.endswith("json") and data else None

    async def stream(self, url: str, last_event: str | None) -> aiohttp.ClientResponse:
        """An open ``text/event-stream`` answer (the caller releases it)."""
        session = await _session(self.request.app)
        extra = {"Accept": "text/event-stream"}
        if last_event:
            extra["Last-Event-ID"] = last_event
        resp = await session.get(
            self.base + url,
            headers=self.headers(extra),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=TIMEOUT, sock_read=None),
        )
        if resp.status >= 400:
            resp.release()
            raise ApiProblem(resp.status, {})
        return resp
